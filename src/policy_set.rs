//! A policy directory, loaded and validated as one set, and compiled for this host: the first
//! half of the pipeline as every command and the daemon run it.

use std::path::PathBuf;

use crate::compile::{self, Compiled};
use crate::diagnostic::{self, Diagnostic};
use crate::facts::HostFacts;
use crate::load;
use crate::model::Model;
use crate::settings::Settings;
use crate::source::Sources;
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

    /// The set a missing policy directory reads as: valid and empty, so that the daemon's
    /// empty-set guard decides what happens.
    pub fn missing() -> PolicySet {
        let loaded = load::Loaded::default();
        PolicySet {
            fingerprint: "missing".to_owned(),
            ..validated(loaded)
        }
    }
}

/// Reads and validates policy files and directories.
pub fn load(paths: &[PathBuf]) -> PolicySet {
    load_with(paths, load::LoadOptions::default())
}

/// [`load`] with options.
pub fn load_with(paths: &[PathBuf], options: load::LoadOptions) -> PolicySet {
    validated(load::load_paths_with(paths, options))
}

/// [`load_with`], parsing only the files whose text changed since the read that filled
/// `cache` (the daemon's reloads).
pub fn load_cached(
    paths: &[PathBuf],
    options: load::LoadOptions,
    cache: &mut load::ParseCache,
) -> PolicySet {
    validated(load::load_paths_cached(paths, options, cache))
}

/// Validates policy files given as texts (the files an apply recorded), as [`load`] validates
/// what it reads.
pub fn from_files(files: &[crate::counters::PolicyFile]) -> PolicySet {
    let mut loaded = load::Loaded::default();
    for file in files {
        let id = loaded.sources.add(crate::source::SourceFile::new(
            &file.path,
            file.text.clone(),
        ));
        let (resources, diagnostics) = load::parse_file(id, loaded.sources.get(id));
        loaded
            .resources
            .extend(resources.into_iter().map(|resource| (id, resource)));
        loaded.diagnostics.extend(diagnostics);
    }
    validated(loaded)
}

/// Validates what was read into a policy set.
fn validated(loaded: load::Loaded) -> PolicySet {
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
        fingerprint: crate::digest::hash(&fingerprint_input),
    }
}

/// A policy directory, compiled for a host, or why it could not be.
#[derive(Debug)]
pub enum Compiling {
    /// The directory does not exist or is not a directory.
    MissingDirectory,
    /// Some file is invalid: the set with its diagnostics.
    Invalid(PolicySet),
    /// Compiled.
    Compiled(PolicySet, Compiled),
}

/// Loads, validates and compiles the policy directory for a host whose facts were read,
/// printing nothing.
pub fn compile_quietly(settings: &Settings, facts: &HostFacts) -> Compiling {
    if !settings.config.policies_dir.is_dir() {
        return Compiling::MissingDirectory;
    }
    let set = load_with(
        std::slice::from_ref(&settings.config.policies_dir),
        settings.load,
    );
    if !set.is_valid() {
        return Compiling::Invalid(set);
    }
    let compiled = compile::compile(&set.model, &settings.config, facts);
    Compiling::Compiled(set, compiled)
}

/// Loads, validates and compiles the policy directory for a host whose facts were read. On
/// invalid input, prints the diagnostics and returns `None`; warnings are printed either way.
pub fn compile_for(settings: &Settings, facts: &HostFacts) -> Option<(PolicySet, Compiled)> {
    match compile_quietly(settings, facts) {
        Compiling::MissingDirectory => {
            eprintln!(
                "error: the policy directory `{}` does not exist or is not a directory",
                settings.config.policies_dir.display()
            );
            None
        }
        Compiling::Invalid(set) => {
            diagnostic::eprint_all(&set.diagnostics, &set.sources);
            None
        }
        Compiling::Compiled(set, compiled) => {
            let mut warnings = set.diagnostics.clone();
            warnings.extend(compiled.warnings.iter().cloned());
            diagnostic::eprint_all(&warnings, &set.sources);
            Some((set, compiled))
        }
    }
}
