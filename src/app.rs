//! The commands: glue between the command line, the pure pipeline and the dataplane.
//!
//! Data goes to stdout, everything else (diagnostics, warnings, questions, logs) to stderr.
//! Errors in input are printed as `path:line:column: error: message` with a code frame;
//! unexpected failures as `error: …` with their causes. Nothing panics at a user.

use std::io::{IsTerminal as _, Write as _};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context as _, Result};

use crate::cli::{Cli, Command, GenerateWhat, LogFormat};
use crate::compile::{self, Compiled};
use crate::config::{self, BackendChoice, Config};
use crate::diagnostic::{self, Diagnostic};
use crate::load;
use crate::model::Model;
use crate::source::Sources;
use crate::system;
use crate::validate;

/// The outcome of loading and validating a policy directory.
#[derive(Debug)]
pub struct PolicySet {
    /// The files read.
    pub sources: Sources,
    /// The model (meaningful only when `diagnostics` hold no error).
    pub model: Model,
    /// Every problem found, sorted by file and position.
    pub diagnostics: Vec<Diagnostic>,
    /// A hash of every file's path and content: equal fingerprints mean equal input.
    pub fingerprint: String,
}

impl PolicySet {
    /// Whether the set is valid.
    pub fn is_valid(&self) -> bool {
        !diagnostic::has_errors(&self.diagnostics)
    }
}

/// Reads and validates policy files and directories.
pub fn load_policies(paths: &[PathBuf]) -> PolicySet {
    load_policies_with(paths, load::LoadOptions::default())
}

/// [`load_policies`] with options.
pub fn load_policies_with(paths: &[PathBuf], options: load::LoadOptions) -> PolicySet {
    policy_set(load::load_paths_with(paths, options))
}

/// [`load_policies_with`], parsing only the files whose text changed since the read that
/// filled `cache` (the daemon's reloads).
pub fn load_policies_cached(
    paths: &[PathBuf],
    options: load::LoadOptions,
    cache: &mut load::ParseCache,
) -> PolicySet {
    policy_set(load::load_paths_cached(paths, options, cache))
}

/// Validates what was read into a policy set.
fn policy_set(loaded: load::Loaded) -> PolicySet {
    let (model, mut diagnostics) = validate::validate(&loaded.sources, &loaded.resources);
    diagnostics.extend(loaded.diagnostics);
    diagnostic::sort(&mut diagnostics);
    let mut fingerprint_input = String::new();
    for (_, file) in loaded.sources.iter() {
        fingerprint_input.push_str(&file.path.display().to_string());
        fingerprint_input.push('\0');
        fingerprint_input.push_str(&file.text);
        fingerprint_input.push('\0');
    }
    PolicySet {
        sources: loaded.sources,
        model,
        diagnostics,
        fingerprint: compile::names::hash(&fingerprint_input),
    }
}

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

fn settings(cli: &Cli) -> Result<Settings, (Sources, Vec<Diagnostic>)> {
    let config_path = cli
        .global
        .config
        .clone()
        .unwrap_or_else(|| PathBuf::from(config::DEFAULT_CONFIG_PATH));
    let mut sources = Sources::new();
    let (mut config, diagnostics) = config::load(&config_path, &mut sources);
    if diagnostic::has_errors(&diagnostics) {
        return Err((sources, diagnostics));
    }
    if let Some(dir) = &cli.global.policies {
        config.policies_dir = dir.clone();
    }
    if let Some(name) = &cli.global.node_name {
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
    let config_problem = std::fs::metadata(&config_path)
        .ok()
        .filter(std::fs::Metadata::is_file)
        .and_then(|metadata| load::permission_problem(&metadata));
    if let Some(problem) = config_problem {
        let message = format!(
            "the config file `{}` {problem}: whoever can write it can open the firewall",
            config_path.display()
        );
        if cli.global.strict_permissions {
            return Err((sources, vec![Diagnostic::global_error(message)]));
        }
        print_diagnostics(&[Diagnostic::global_warning(message)], &sources);
    }
    let backend = cli.global.backend.map_or(config.backend, Into::into);
    Ok(Settings {
        config,
        config_path,
        backend,
        state_dir: cli.global.state_dir.clone(),
        load: load::LoadOptions {
            strict_permissions: cli.global.strict_permissions,
        },
    })
}

/// Prints diagnostics to stderr.
pub fn print_diagnostics(diagnostics: &[Diagnostic], sources: &Sources) {
    if diagnostics.is_empty() {
        return;
    }
    let mut stderr = std::io::stderr().lock();
    let _ = write!(stderr, "{}", diagnostic::render_all(diagnostics, sources));
}

fn init_logging(cli: &Cli) {
    let default_level = match (cli.global.verbose, &cli.command) {
        (0, Command::Run) => "info",
        (0, _) => "warn",
        (1, _) => "info",
        (2, _) => "debug",
        _ => "trace",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| {
        tracing_subscriber::EnvFilter::new(format!("nodeport_guard={default_level}"))
    });
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false);
    let _ = match cli.global.log_format {
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
        LogFormat::Text => builder
            .with_ansi(std::io::stderr().is_terminal())
            .try_init(),
    };
}

/// Runs a parsed command line. Panics become a one-line internal error and exit 1.
pub fn main(cli: Cli) -> ExitCode {
    init_logging(&cli);
    std::panic::set_hook(Box::new(|info| {
        eprintln!("error: internal error (this is a bug in nodeport-guard): {info}");
    }));
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run(&cli))) {
        Ok(Ok(code)) => code,
        Ok(Err(error)) => {
            eprintln!("error: {error:#}");
            ExitCode::from(1)
        }
        Err(_) => ExitCode::from(1),
    }
}

fn run(cli: &Cli) -> Result<ExitCode> {
    match &cli.command {
        Command::Schema { config_schema } => {
            print!(
                "{}",
                if *config_schema {
                    crate::schema::config_schema()
                } else {
                    crate::schema::policy_schema()
                }
            );
            return Ok(ExitCode::SUCCESS);
        }
        Command::Generate { what, out_dir } => return generate(*what, out_dir),
        // The watcher needs nothing but the state directory: a config file broken since the
        // apply must not stop a rollback.
        Command::RollbackWatch { id } => {
            return crate::ops::rollback_watch(&cli.global.state_dir, id);
        }
        _ => {}
    }
    let settings = match settings(cli) {
        Ok(settings) => settings,
        Err((sources, diagnostics)) => {
            print_diagnostics(&diagnostics, &sources);
            return Ok(ExitCode::from(1));
        }
    };
    match &cli.command {
        Command::Validate { paths } => Ok(validate_command(&settings, paths)),
        Command::Render => render_command(&settings),
        Command::Plan {
            detailed_exitcode,
            json,
            out,
        } => crate::ops::plan_command(&settings, *detailed_exitcode, *json, out.as_deref()),
        Command::Apply {
            yes,
            confirm_timeout,
            plan_file,
        } => crate::ops::apply_command(&settings, *yes, *confirm_timeout, plan_file.as_deref()),
        Command::Confirm => crate::ops::confirm_command(&settings),
        Command::Cleanup { yes } => crate::ops::cleanup_command(&settings, *yes),
        Command::Status { json } => crate::ops::status_command(&settings, *json),
        Command::Run => crate::daemon::run(settings),
        Command::Schema { .. } | Command::Generate { .. } | Command::RollbackWatch { .. } => {
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn validate_command(settings: &Settings, paths: &[PathBuf]) -> ExitCode {
    let paths = if paths.is_empty() {
        vec![settings.config.policies_dir.clone()]
    } else {
        paths.to_vec()
    };
    let set = load_policies_with(&paths, settings.load);
    print_diagnostics(&set.diagnostics, &set.sources);
    if !set.is_valid() {
        let errors = set.diagnostics.iter().filter(|d| d.is_error()).count();
        eprintln!(
            "{errors} error{} in {} file{}: nothing from these files may be applied",
            plural(errors),
            set.sources.len(),
            plural(set.sources.len())
        );
        return ExitCode::from(1);
    }
    println!(
        "valid: {} polic{}, {} network set{}, {} host endpoint{} in {} file{}",
        set.model.policies.len(),
        if set.model.policies.len() == 1 {
            "y"
        } else {
            "ies"
        },
        set.model.network_sets.len(),
        plural(set.model.network_sets.len()),
        set.model.host_endpoints.len(),
        plural(set.model.host_endpoints.len()),
        set.sources.len(),
        plural(set.sources.len())
    );
    ExitCode::SUCCESS
}

fn plural(count: usize) -> &'static str {
    if count == 1 { "" } else { "s" }
}

/// Loads, validates and compiles the policy directory for this host. On invalid input, prints
/// the diagnostics and returns `None`.
pub fn compile_policies(settings: &Settings) -> Option<(PolicySet, Compiled)> {
    compile_policies_for(settings, &system::host::host_facts(&settings.config))
}

/// [`compile_policies`] for a host whose facts were read already.
pub fn compile_policies_for(
    settings: &Settings,
    facts: &crate::facts::HostFacts,
) -> Option<(PolicySet, Compiled)> {
    if !settings.config.policies_dir.is_dir() {
        eprintln!(
            "error: the policy directory `{}` does not exist or is not a directory",
            settings.config.policies_dir.display()
        );
        return None;
    }
    let set = load_policies_with(
        std::slice::from_ref(&settings.config.policies_dir),
        settings.load,
    );
    if !set.is_valid() {
        print_diagnostics(&set.diagnostics, &set.sources);
        return None;
    }
    let compiled = compile::compile(&set.model, &settings.config, facts);
    let mut warnings = set.diagnostics.clone();
    warnings.extend(compiled.warnings.iter().cloned());
    print_diagnostics(&warnings, &set.sources);
    Some((set, compiled))
}

fn render_command(settings: &Settings) -> Result<ExitCode> {
    let Some((_, compiled)) = compile_policies(settings) else {
        return Ok(ExitCode::from(1));
    };
    let text = match settings.backend {
        BackendChoice::Nftables => crate::render::nft::render_script(&compiled.ruleset),
        _ => crate::render::render_iptables(&compiled.ruleset),
    };
    let mut stdout = std::io::stdout().lock();
    stdout
        .write_all(text.as_bytes())
        .context("cannot write to stdout")?;
    Ok(ExitCode::SUCCESS)
}

fn generate(what: GenerateWhat, out_dir: &Path) -> Result<ExitCode> {
    use clap::CommandFactory as _;
    fs_err::create_dir_all(out_dir)?;
    let mut command = Cli::command();
    match what {
        GenerateWhat::Man => {
            // One page for the program and one per command, which the main page refers to.
            clap_mangen::generate_to(command, out_dir)?;
        }
        GenerateWhat::Completions => {
            for shell in [
                clap_complete::Shell::Bash,
                clap_complete::Shell::Zsh,
                clap_complete::Shell::Fish,
            ] {
                clap_complete::generate_to(shell, &mut command, "nodeport-guard", out_dir)?;
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
