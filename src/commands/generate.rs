//! The hidden `generate`: the man pages and shell completions, from the same definition the
//! binary parses its command line with.

use std::path::Path;
use std::process::ExitCode;

use anyhow::Result;

use crate::cli::{Cli, GenerateWhat};

/// `generate man|completions --out-dir DIR`.
pub fn run(what: GenerateWhat, out_dir: &Path) -> Result<ExitCode> {
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
