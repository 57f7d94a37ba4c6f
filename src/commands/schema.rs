//! `schema`: the JSON Schema of the policy files or of the config file.

use std::process::ExitCode;

/// `schema [--config-schema]`.
pub fn run(config_schema: bool) -> ExitCode {
    print!(
        "{}",
        if config_schema {
            crate::schema::config_schema()
        } else {
            crate::schema::policy_schema()
        }
    );
    ExitCode::SUCCESS
}
