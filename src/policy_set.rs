//! A policy directory, loaded and validated as one set, and compiled for this host: the first
//! half of the pipeline as every command and the daemon run it.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;

use crate::diagnostic::{self, Diagnostic};
use crate::digest::Fingerprinter;
use crate::load;
use crate::model::Model;
use crate::source::{FileId, Sources};
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
    /// A hash of every file's path and content, and of which resources have expired: equal
    /// fingerprints mean equal input.
    pub fingerprint: String,
    /// The instant the set was read at, which decided what has expired.
    pub now: jiff::Timestamp,
    /// The model as validated, with the resources that have expired at `now` (the model in
    /// force is `model`): what lists and times the expiries.
    pub validated: Model,
}

impl PolicySet {
    /// Whether the set is valid.
    pub fn is_valid(&self) -> bool {
        !diagnostic::has_errors(&self.diagnostics)
    }

    /// Whether the files hold no policy at all, counting those that have expired: an expiry
    /// never counts as the directory emptying (the daemon's `allowEmpty` guard).
    pub fn holds_no_policy(&self) -> bool {
        self.validated.is_empty()
    }

    /// The earliest expiry still to come, if any.
    pub fn next_expiry(&self) -> Option<jiff::Timestamp> {
        validate::expiry::next_expiry(&self.validated, self.now)
    }

    /// The set a missing policy directory reads as: valid and empty, so that the daemon's
    /// empty-set guard decides what happens.
    pub fn missing() -> PolicySet {
        let loaded = load::Loaded::default();
        PolicySet {
            fingerprint: "missing".to_owned(),
            ..validated(loaded, jiff::Timestamp::UNIX_EPOCH)
        }
    }
}

/// Reads and validates policy files and directories.
pub fn load(paths: &[PathBuf]) -> PolicySet {
    load_with(paths, load::LoadOptions::default())
}

/// [`load()`] with options.
pub fn load_with(paths: &[PathBuf], options: load::LoadOptions) -> PolicySet {
    validated(load::load_paths_with(paths, options), options.now)
}

/// [`load_with`], parsing and checking only the files whose text changed since the read that
/// filled `cache` (the daemon's reloads). The result is the same as [`load_with`]'s.
pub fn load_cached(paths: &[PathBuf], options: load::LoadOptions, cache: &mut Cache) -> PolicySet {
    let previous = std::mem::take(&mut cache.files);
    let fingerprinter = &cache.fingerprinter;
    let mut known = HashMap::new();
    let mut loaded = load::load_paths_known(paths, options, &mut |path, file, text| {
        let Some(entry) = previous.get(path) else {
            return false;
        };
        let same = entry.file == file && entry.text == fingerprinter.of(text);
        if same {
            known.insert(file, entry.resources.clone());
        }
        same
    });
    let with_diagnostics: HashSet<FileId> = loaded
        .diagnostics
        .iter()
        .filter_map(|diagnostic| diagnostic.file)
        .collect();
    let resources = std::mem::take(&mut loaded.resources);
    let inputs = file_inputs(&loaded.sources, &resources, &mut known);
    let validated = validate::validate_files(&loaded.sources, &inputs);
    drop(inputs);
    drop(resources);
    let set = assembled(loaded, validated.model, validated.diagnostics, options.now);
    for (reusable, (file, source)) in validated.reusable.iter().zip(set.sources.iter()) {
        if let Some(resources) = reusable
            && !with_diagnostics.contains(&file)
        {
            cache.files.insert(
                source.path.clone(),
                CachedFile {
                    file,
                    text: fingerprinter.of(&source.text),
                    resources: resources.clone(),
                },
            );
        }
    }
    set
}

/// What the daemon keeps of the policy files it read: for each file that had no diagnostic,
/// a fingerprint of its text, its position in the read, and what validation made of it. The
/// file's text is not kept.
#[derive(Debug, Default)]
pub struct Cache {
    files: HashMap<PathBuf, CachedFile>,
    fingerprinter: Fingerprinter,
}

#[derive(Debug)]
struct CachedFile {
    /// The file's id in the read that checked it: its resources' origins point there.
    file: FileId,
    text: u128,
    resources: Arc<[validate::CheckedResource]>,
}

impl Cache {
    /// How many files are kept.
    pub fn len(&self) -> usize {
        self.files.len()
    }

    /// Whether no file is kept.
    pub fn is_empty(&self) -> bool {
        self.files.is_empty()
    }
}

/// One input per file read, in order: the resources parsed, or those `known` holds for it.
fn file_inputs<'a>(
    sources: &Sources,
    resources: &'a [(FileId, crate::spec::RawResource)],
    known: &mut HashMap<FileId, Arc<[validate::CheckedResource]>>,
) -> Vec<validate::FileInput<'a>> {
    let mut parsed = resources.chunk_by(|a, b| a.0 == b.0).peekable();
    sources
        .iter()
        .map(|(file, _)| {
            let resources = match known.remove(&file) {
                Some(checked) => validate::Resources::Checked(checked),
                None => match parsed.next_if(|chunk| chunk[0].0 == file) {
                    Some(chunk) => validate::Resources::Raw(chunk),
                    None => validate::Resources::Raw(&[]),
                },
            };
            validate::FileInput { file, resources }
        })
        .collect()
}

/// Validates policy files given as texts (the files an apply recorded), as [`load()`] validates
/// what it reads, at the instant `now` (for the files an apply recorded: when it applied them).
pub fn from_files(files: &[crate::counters::PolicyFile], now: jiff::Timestamp) -> PolicySet {
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
    validated(loaded, now)
}

/// Validates what was read into a policy set, at the instant `now`.
fn validated(loaded: load::Loaded, now: jiff::Timestamp) -> PolicySet {
    let (model, diagnostics) = validate::validate(&loaded.sources, &loaded.resources);
    assembled(loaded, model, diagnostics, now)
}

/// The policy set of what was read and what its validation found, at the instant `now`: what
/// has expired by then is left out of the model, with a warning.
fn assembled(
    loaded: load::Loaded,
    validated: Model,
    mut diagnostics: Vec<Diagnostic>,
    now: jiff::Timestamp,
) -> PolicySet {
    let (model, expired) = validate::expiry::at(&validated, now);
    diagnostics.extend(loaded.diagnostics);
    diagnostics.extend(expired);
    diagnostic::sort(&mut diagnostics);
    let mut fingerprint_input = String::new();
    for (_, file) in loaded.sources.iter() {
        fingerprint_input.push_str(&file.path.display().to_string());
        fingerprint_input.push('\0');
        fingerprint_input.push_str(&file.text);
        fingerprint_input.push('\0');
    }
    // The same files mean other rules once something in them has expired.
    for expiry in validate::expiry::expiries(&validated).filter(|e| e.has_passed(now)) {
        fingerprint_input.push_str(&format!("expired {}\0", expiry.at));
    }
    PolicySet {
        sources: loaded.sources,
        model,
        diagnostics,
        fingerprint: crate::digest::hash(&fingerprint_input),
        now,
        validated,
    }
}
