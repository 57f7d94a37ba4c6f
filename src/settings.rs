//! What a command needs from the config file and the global options, checked once.

use std::path::PathBuf;

use crate::cli::GlobalOptions;
use crate::config::{self, BackendChoice, Config};
use crate::diagnostic::{self, Diagnostic};
use crate::load;
use crate::source::Sources;
use crate::validate;

/// Everything a command needs from the config file and the global options.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The checked config.
    pub config: Config,
    /// Where `--config` pointed (or the default).
    pub config_path: PathBuf,
    /// The backend chosen by `--backend` or the config.
    pub backend: BackendChoice,
    /// Runtime state directory.
    pub state_dir: PathBuf,
    /// How policy files are read.
    pub load: load::LoadOptions,
}

impl Settings {
    /// Reads and checks the config file and applies the global options over it, with the
    /// warnings found (a config file others may write); errors come back with the sources they
    /// point into.
    pub fn from_options(
        global: &GlobalOptions,
    ) -> Result<(Settings, Vec<Diagnostic>), (Sources, Vec<Diagnostic>)> {
        let config_path = global
            .config
            .clone()
            .unwrap_or_else(|| PathBuf::from(config::DEFAULT_CONFIG_PATH));
        let mut sources = Sources::new();
        let (mut config, diagnostics) = config::load(&config_path, &mut sources);
        if diagnostic::has_errors(&diagnostics) {
            return Err((sources, diagnostics));
        }
        if let Some(dir) = &global.policies {
            config.policies_dir = dir.clone();
        }
        if let Some(name) = &global.node_name {
            if !validate::is_subdomain(name) {
                return Err((
                    Sources::new(),
                    vec![Diagnostic::global_error(format!(
                        "`--node-name` `{name}` is not a valid node name (lowercase letters, digits, `-` and `.`)"
                    ))],
                ));
            }
            config.node_name = Some(name.clone());
        }
        // The config file can change the failsafe ports and the mark bits: it deserves the same
        // scrutiny as the policy files.
        let mut warnings = Vec::new();
        let config_problem = std::fs::metadata(&config_path)
            .ok()
            .filter(std::fs::Metadata::is_file)
            .and_then(|metadata| load::permission_problem(&metadata));
        if let Some(problem) = config_problem {
            let message = format!(
                "the config file `{}` {problem}: whoever can write it can open the firewall",
                config_path.display()
            );
            if global.strict_permissions {
                return Err((sources, vec![Diagnostic::global_error(message)]));
            }
            warnings.push(Diagnostic::global_warning(message));
        }
        let backend = global.backend.unwrap_or(config.backend);
        let settings = Settings {
            config,
            config_path,
            backend,
            state_dir: global.state_dir.clone(),
            load: load::LoadOptions {
                strict_permissions: global.strict_permissions,
            },
        };
        Ok((settings, warnings))
    }
}
