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
    /// A hash of every file's path and content alone: equal when only expiries moved.
    pub files_fingerprint: String,
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

    /// Whether the files hold no policy that enforces anything (staged ones never change a
    /// verdict), counting those that have expired: an expiry never counts as the directory
    /// emptying (the daemon's `allowEmpty` guard).
    pub fn holds_no_policy(&self) -> bool {
        self.validated.enforces_nothing()
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
            files_fingerprint: "missing".to_owned(),
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
    from_files_through(files, now, &NoStore)
}

/// [`from_files`] through `store`.
pub fn from_files_through(
    files: &[crate::counters::PolicyFile],
    now: jiff::Timestamp,
    store: &dyn Store,
) -> PolicySet {
    let mut loaded = load::Loaded::default();
    for file in files {
        loaded.sources.add(crate::source::SourceFile::new(
            &file.path,
            file.text.clone(),
        ));
    }
    let parse: Vec<FileId> = loaded.sources.iter().map(|(file, _)| file).collect();
    through(loaded, &parse, now, store)
}

/// What validation made of a whole set of files, as a [`Store`] keeps it: a pure function of
/// the files' paths and texts (validation asks nothing of the system, the config or the host).
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub struct ValidatedFiles {
    /// The model as validated, with the resources that expire (what is in force is decided
    /// at each read).
    pub validated: Model,
    /// The diagnostics of validation.
    pub validation: Vec<Diagnostic>,
    /// The diagnostics of parsing.
    pub parse: Vec<Diagnostic>,
}

/// A keeper of validated policy sets across processes (the command line's cache in the state
/// directory), by the key [`files_key`] gives. Only a shortcut: a miss, or anything it cannot
/// give back exactly, makes the set validated in full.
pub trait Store {
    /// What was kept for `key`.
    fn get(&self, key: &str) -> Option<ValidatedFiles>;
    /// Keeps `value` for `key`; a failure only makes the next read slower.
    fn put(&self, key: &str, value: &ValidatedFiles);
}

/// The store that keeps nothing.
struct NoStore;

impl Store for NoStore {
    fn get(&self, _: &str) -> Option<ValidatedFiles> {
        None
    }

    fn put(&self, _: &str, _: &ValidatedFiles) {}
}

/// The key of a set of files for a [`Store`]: the program's version and the format of what is
/// kept, then every file's path and text in the order read (which decides the files' ids).
pub fn files_key(sources: &Sources) -> String {
    use sha2::Digest as _;
    let mut hasher = sha2::Sha256::new();
    hasher.update(concat!(env!("CARGO_PKG_VERSION"), "\0validated-files 1\0"));
    for (_, file) in sources.iter() {
        let path = file.path.as_os_str().as_encoded_bytes();
        for part in [path, file.text.as_bytes()] {
            hasher.update((part.len() as u64).to_le_bytes());
            hasher.update(part);
        }
    }
    use base64::Engine as _;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(hasher.finalize())
}

/// [`load_with`] through `store`: when it holds the validation of exactly the files read,
/// they are neither parsed nor checked. The result is the same as [`load_with`]'s.
pub fn load_through(paths: &[PathBuf], options: load::LoadOptions, store: &dyn Store) -> PolicySet {
    // Every file is read and none parsed; the ones read are parsed below unless the store
    // knows the whole set.
    let mut parse = Vec::new();
    let loaded = load::load_paths_known(paths, options, &mut |_, file, _| {
        parse.push(file);
        true
    });
    through(loaded, &parse, options.now, store)
}

/// The policy set of the files in `loaded` (those in `parse` still to be parsed), from
/// `store` when it knows them, else parsed, validated and given to `store` when valid.
fn through(
    mut loaded: load::Loaded,
    parse: &[FileId],
    now: jiff::Timestamp,
    store: &dyn Store,
) -> PolicySet {
    let read_whole = !diagnostic::has_errors(&loaded.diagnostics);
    let key = read_whole.then(|| files_key(&loaded.sources));
    if let Some(key) = &key
        && let Some(kept) = store.get(key)
    {
        if !fits(&kept, &loaded.sources) {
            tracing::debug!("ignoring a cached validation that does not fit the files read");
        } else {
            tracing::debug!("the policy files were validated before: not parsed again");
            // As a full read orders them: validation's first, then the reader's and the parser's.
            loaded.diagnostics.extend(kept.parse);
            return assembled(loaded, kept.validated, kept.validation, now);
        }
    }
    let mut parsed = Vec::new();
    for &file in parse {
        let (resources, diagnostics) = load::parse_file(file, loaded.sources.get(file));
        loaded
            .resources
            .extend(resources.into_iter().map(|resource| (file, resource)));
        parsed.extend(diagnostics);
    }
    let (validated, validation) = validate::validate(&loaded.sources, &loaded.resources);
    if let Some(key) = key
        && !diagnostic::has_errors(&validation)
        && !diagnostic::has_errors(&parsed)
    {
        store.put(
            &key,
            &ValidatedFiles {
                validated: validated.clone(),
                validation: validation.clone(),
                parse: parsed.clone(),
            },
        );
    }
    loaded.diagnostics.extend(parsed);
    assembled(loaded, validated, validation, now)
}

/// Whether what a store gave back can belong to `sources`: every diagnostic and every
/// resource's origin points into them, and no diagnostic is an error (only valid sets are
/// kept). The key and the store's own checksum vouch for the rest.
fn fits(kept: &ValidatedFiles, sources: &Sources) -> bool {
    let inside = |file: FileId| file.0 < sources.len();
    let model = &kept.validated;
    let policies = model.policies().iter().chain(model.staged_policies());
    kept.validation.iter().chain(&kept.parse).all(|diagnostic| {
        diagnostic.severity == diagnostic::Severity::Warning && diagnostic.file.is_none_or(inside)
    }) && policies.clone().all(|policy| inside(policy.origin.file))
        && policies
            .flat_map(|policy| policy.ingress.iter().chain(&policy.egress).flatten())
            .all(|rule| inside(rule.origin.file))
        && model
            .network_sets()
            .iter()
            .all(|set| inside(set.origin.file))
        && model
            .host_endpoints()
            .iter()
            .all(|endpoint| endpoint.origin.is_none_or(|origin| inside(origin.file)))
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
    // What was said of a resource that has expired by now (a duplicate name, an undeclared
    // tier) no longer holds: it is as if no file held it.
    diagnostics.retain(|diagnostic| !diagnostic.is_moot(now));
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
    let files_fingerprint = crate::digest::hash(&fingerprint_input);
    // The same files mean other rules once something in them has expired.
    for expiry in validate::expiry::expiries(&validated).filter(|e| e.has_passed(now)) {
        fingerprint_input.push_str(&format!("expired {}\0", expiry.at));
    }
    PolicySet {
        sources: loaded.sources,
        model,
        diagnostics,
        fingerprint: crate::digest::hash(&fingerprint_input),
        files_fingerprint,
        now,
        validated,
    }
}
