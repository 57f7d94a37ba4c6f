//! Loading policy files: which files are read, and how their YAML becomes [`RawResource`]s.
//!
//! Reading is split as ripgrep splits it: [`load_paths`] and [`read_source`] do the file system
//! work (and only they do), [`parse_file`] is pure and unit-tested on strings.
//!
//! A file may hold several YAML documents (`---`); a document may be one resource, a list kind
//! with `items`, or a top-level sequence of resources, as calicoctl accepts. Documents are
//! parsed one at a time so that an error in one does not hide the errors of the others.
//! A document holding one resource whose `kind` comes before its `spec` (what everyone writes)
//! is decoded in a single pass. Any other document (a list, a sequence, `spec` before `kind`,
//! an unknown kind, any error) is read twice: a lenient first pass learns the `kind` of every
//! resource, and the strict second pass decodes each `spec` into the type of that kind,
//! rejecting unknown fields with their position. The single pass yields exactly what the two
//! passes would; it only gives up earlier, and every diagnostic comes from the two passes.

use std::fmt;
use std::io::Read as _;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

use crate::diagnostic::Diagnostic;
use crate::source::{FileId, SourceFile, Sources, Span};
use crate::spec::{
    Kind, RawHostEndpointSpec, RawMetadata, RawNetworkSetSpec, RawPolicySpec, RawResource, RawSpec,
    Sp, span_of,
};

/// Files larger than this are refused (calicoctl's own document limit is 10 MB).
pub const MAX_FILE_BYTES: u64 = 16 * 1024 * 1024;

/// Everything read from the policy files of one run.
#[derive(Debug, Default)]
pub struct Loaded {
    /// The files that were read.
    pub sources: Sources,
    /// Every resource found, with the file it came from, in file then document order.
    pub resources: Vec<(FileId, RawResource)>,
    /// Problems found while reading and parsing.
    pub diagnostics: Vec<Diagnostic>,
}

/// Whether a file name in the policy directory names a policy file: `*.yaml` or `*.yml`, not
/// hidden (which also skips a ConfigMap mount's `..data` and timestamped folders), and not an
/// editor's leftover.
pub fn is_policy_file_name(name: &str) -> bool {
    if name.starts_with('.') || name.starts_with('#') || name.ends_with('~') {
        return false;
    }
    name.ends_with(".yaml") || name.ends_with(".yml")
}

/// Lists the policy files directly in `dir`, sorted by name. Symlinks are followed;
/// subdirectories and entries that do not name policy files are skipped.
pub fn list_policy_files(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    for entry in fs_err::read_dir(dir)? {
        let entry = entry?;
        let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
            continue;
        };
        if !is_policy_file_name(&name) {
            continue;
        }
        let path = entry.path();
        // `metadata` follows symlinks: a ConfigMap's visible names are links into `..data`.
        // A dangling link or a link to a directory is skipped here and reported when read
        // only if it was named explicitly.
        match std::fs::metadata(&path) {
            Ok(metadata) if metadata.is_dir() => continue,
            _ => files.push(path),
        }
    }
    files.sort();
    Ok(files)
}

/// How policy files are read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LoadOptions {
    /// Refuse (rather than warn about) policy files and directories that someone other than
    /// root may write.
    pub strict_permissions: bool,
}

/// Reads files and directories as `validate PATH…` and the daemon do: a directory contributes
/// its policy files, a file named explicitly is read whatever its name (confd's `check_cmd`
/// passes a hidden staging file).
pub fn load_paths(paths: &[PathBuf]) -> Loaded {
    load_paths_with(paths, LoadOptions::default())
}

/// Who may change a file or directory besides root, if anyone: whoever can write the policies
/// can open the firewall, so this is worth saying loudly.
pub fn permission_problem(metadata: &std::fs::Metadata) -> Option<String> {
    use std::os::unix::fs::MetadataExt as _;
    let mode = metadata.mode();
    let mut writers = Vec::new();
    if metadata.uid() != 0 {
        writers.push(format!("its owner (uid {})", metadata.uid()));
    }
    if mode & 0o020 != 0 && metadata.gid() != 0 {
        writers.push(format!("group {}", metadata.gid()));
    }
    if mode & 0o002 != 0 {
        writers.push("every user".to_owned());
    }
    (!writers.is_empty()).then(|| format!("can be changed by {} besides root", writers.join(", ")))
}

fn check_permissions(loaded: &mut Loaded, path: &Path, file: Option<FileId>, options: LoadOptions) {
    let Ok(metadata) = std::fs::metadata(path) else {
        return;
    };
    let Some(problem) = permission_problem(&metadata) else {
        return;
    };
    let what = if metadata.is_dir() {
        "the policy directory"
    } else {
        "this policy file"
    };
    let message = format!(
        "{what} `{}` {problem}: whoever can write it can open the firewall",
        path.display()
    );
    let help = "make it owned by root and writable only by root (`chown root: … && chmod go-w …`)";
    let diagnostic = match (file, options.strict_permissions) {
        (Some(file), true) => Diagnostic::file_error(file, message),
        (Some(file), false) => Diagnostic {
            severity: crate::diagnostic::Severity::Warning,
            ..Diagnostic::file_error(file, message)
        },
        (None, true) => Diagnostic::global_error(message),
        (None, false) => Diagnostic::global_warning(message),
    };
    loaded.diagnostics.push(diagnostic.with_help(help));
}

/// [`load_paths`] with options.
pub fn load_paths_with(paths: &[PathBuf], options: LoadOptions) -> Loaded {
    load(paths, options, None)
}

/// The resources of files parsed before, by path, with the text they were parsed from: a long
/// running reader (the daemon) parses only the files whose text changed since its last read.
/// Only files that parsed without a diagnostic are kept (a diagnostic names its file by the
/// position it had in one read), and only the files of the last read.
#[derive(Debug, Default)]
pub struct ParseCache {
    files: std::collections::HashMap<PathBuf, (String, Vec<RawResource>)>,
}

impl ParseCache {
    /// The resources of `path` if it was parsed from exactly `text`.
    fn get(&self, path: &Path, text: &str) -> Option<&[RawResource]> {
        self.files
            .get(path)
            .filter(|(parsed, _)| parsed == text)
            .map(|(_, resources)| resources.as_slice())
    }
}

/// [`load_paths_with`], reusing (and then updating) what `cache` holds from an earlier read.
/// The result is the same as without the cache.
pub fn load_paths_cached(
    paths: &[PathBuf],
    options: LoadOptions,
    cache: &mut ParseCache,
) -> Loaded {
    load(paths, options, Some(cache))
}

fn load(paths: &[PathBuf], options: LoadOptions, mut cache: Option<&mut ParseCache>) -> Loaded {
    let mut read = Read {
        loaded: Loaded::default(),
        previous: cache.as_deref_mut().map(std::mem::take).unwrap_or_default(),
        next: cache.is_some().then(ParseCache::default),
    };
    for path in paths {
        match std::fs::metadata(path) {
            Ok(metadata) if metadata.is_dir() => match list_policy_files(path) {
                Ok(files) => {
                    check_permissions(&mut read.loaded, path, None, options);
                    for file in files {
                        read.load_one(&file, options);
                    }
                }
                Err(error) => read
                    .loaded
                    .diagnostics
                    .push(Diagnostic::global_error(format!(
                        "cannot read the policy directory `{}`: {}",
                        path.display(),
                        io_reason(&error)
                    ))),
            },
            _ => read.load_one(path, options),
        }
    }
    if let (Some(cache), Some(next)) = (cache, read.next) {
        *cache = next;
    }
    read.loaded
}

/// One read of the policy files.
struct Read {
    loaded: Loaded,
    /// What the last read parsed (empty without a cache).
    previous: ParseCache,
    /// What this read parsed, for the next one (`None` without a cache).
    next: Option<ParseCache>,
}

impl Read {
    fn load_one(&mut self, path: &Path, options: LoadOptions) {
        let loaded = &mut self.loaded;
        match read_source(path) {
            Ok(text) => {
                let id = loaded.sources.add(SourceFile::new(path, text));
                check_permissions(loaded, path, Some(id), options);
                let text = &loaded.sources.get(id).text;
                let (resources, diagnostics) = match self.previous.get(path, text) {
                    Some(resources) => (resources.to_vec(), Vec::new()),
                    None => parse_file(id, loaded.sources.get(id)),
                };
                if let Some(next) = &mut self.next
                    && diagnostics.is_empty()
                {
                    next.files
                        .insert(path.to_path_buf(), (text.clone(), resources.clone()));
                }
                loaded
                    .resources
                    .extend(resources.into_iter().map(|resource| (id, resource)));
                loaded.diagnostics.extend(diagnostics);
            }
            Err(message) => {
                let id = loaded.sources.add(SourceFile::new(path, String::new()));
                loaded.diagnostics.push(Diagnostic::file_error(id, message));
            }
        }
    }
}

/// Reads one policy file, refusing what is not a regular file (a FIFO, a device, a link to
/// `/dev/zero`), what is too large, and what is not UTF-8 text.
pub fn read_source(path: &Path) -> Result<String, String> {
    let metadata = std::fs::metadata(path).map_err(|error| io_reason(&error))?;
    if !metadata.is_file() {
        return Err(format!(
            "`{}` is not a regular file; policy files must be plain files or links to them",
            path.display()
        ));
    }
    if metadata.len() > MAX_FILE_BYTES {
        return Err(format!(
            "the file is {} bytes; at most {} bytes are allowed; split it into several files",
            metadata.len(),
            MAX_FILE_BYTES
        ));
    }
    let file = std::fs::File::open(path).map_err(|error| io_reason(&error))?;
    let mut bytes = Vec::with_capacity(metadata.len() as usize);
    // The size is checked again while reading: the file may grow after `metadata`.
    file.take(MAX_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|error| io_reason(&error))?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err(format!(
            "the file grew while it was read; at most {MAX_FILE_BYTES} bytes are allowed; split it into several files"
        ));
    }
    text_from_bytes(bytes)
}

/// Checks that file content is text a policy can be made of.
pub fn text_from_bytes(bytes: Vec<u8>) -> Result<String, String> {
    if let Some(position) = bytes.iter().position(|&b| b == 0) {
        return Err(format!(
            "the file holds a NUL byte at byte {position}; policy files are text"
        ));
    }
    String::from_utf8(bytes).map_err(|error| {
        format!(
            "the file is not UTF-8 text (invalid byte at byte {})",
            error.utf8_error().valid_up_to()
        )
    })
}

fn io_reason(error: &std::io::Error) -> String {
    // fs-err style: the path is already in the diagnostic's headline, so only the reason.
    let text = error.to_string();
    match error.raw_os_error() {
        Some(code) if code == nix::libc::ELOOP => "too many levels of symbolic links".to_owned(),
        _ => text,
    }
}

/// Parses one file's text into resources. Pure: the file was read already.
pub fn parse_file(file: FileId, source: &SourceFile) -> (Vec<RawResource>, Vec<Diagnostic>) {
    let mut resources = Vec::new();
    let mut diagnostics = Vec::new();
    let documents = split_documents(&source.text);
    if documents.len() > MAX_DOCUMENTS {
        diagnostics.push(Diagnostic::file_error(
            file,
            format!(
                "the file holds {} YAML documents, more than the {MAX_DOCUMENTS} allowed",
                documents.len()
            ),
        ));
        return (resources, diagnostics);
    }
    for document in documents {
        parse_document(file, document, &mut resources, &mut diagnostics);
    }
    (resources, diagnostics)
}

/// Most documents one file may hold.
pub const MAX_DOCUMENTS: usize = 100_000;

/// One YAML document of a file: its text and where it starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Document<'a> {
    /// Byte offset of the document's first byte in the file.
    pub offset: usize,
    /// The document's text, including a leading `---` line if it had one.
    pub text: &'a str,
}

/// Splits a YAML stream into documents at `---` and `...` marker lines. Markers are only
/// recognised at the start of a line, where YAML itself always treats them as markers (a scalar
/// cannot contain such a line), so this agrees with the parser. A part holding nothing but
/// comments and directives is joined to the next part.
pub fn split_documents(text: &str) -> Vec<Document<'_>> {
    let mut documents = Vec::new();
    let mut start = 0;
    let mut offset = 0;
    // Whether the part since `start` holds content; kept line by line so a storm of markers
    // costs linear time.
    let mut content = false;
    for line in text.split_inclusive('\n') {
        let bare = line.trim_end_matches(['\n', '\r']);
        let is_start = bare == "---" || bare.starts_with("--- ") || bare.starts_with("---\t");
        let is_end = bare == "..." || bare.starts_with("... ") || bare.starts_with("...\t");
        if is_start && content {
            documents.push(Document {
                offset: start,
                text: &text[start..offset],
            });
            start = offset;
            content = false;
        }
        offset += line.len();
        content |=
            is_content_line(line) || (is_start && bare.len() > 3 && is_content_line(&bare[3..]));
        if is_end {
            if content {
                documents.push(Document {
                    offset: start,
                    text: &text[start..offset],
                });
            }
            start = offset;
            content = false;
        }
    }
    if content {
        documents.push(Document {
            offset: start,
            text: &text[start..],
        });
    }
    documents
}

/// Whether a line is content: not blank, a comment, a directive or a marker.
fn is_content_line(line: &str) -> bool {
    let trimmed = line.trim();
    !(trimmed.is_empty()
        || trimmed.starts_with('#')
        || trimmed.starts_with('%')
        || trimmed == "---"
        || trimmed == "...")
}

fn yaml_options() -> serde_saphyr::Options {
    let mut options = serde_saphyr::Options::default();
    options.with_snippet = false;
    options.duplicate_keys = serde_saphyr::DuplicateKeyPolicy::Error;
    // Policy files have little use for aliases; a small replay budget stops alias bombs early.
    options.alias_limits.max_total_replayed_events = 100_000;
    if let Some(budget) = options.budget.as_mut() {
        // Policies nest about ten levels deep; anything far deeper is hostile or a mistake.
        budget.max_depth = 48;
        budget.max_aliases = 10_000;
        budget.max_anchors = 10_000;
        budget.max_nodes = 500_000;
        budget.max_events = 1_500_000;
    }
    options
}

/// What the first pass learns about a resource: its kind and, for lists, its items' kinds.
#[derive(Debug, Deserialize)]
struct PeekResource {
    kind: Option<Sp<String>>,
    #[serde(default)]
    items: Option<Vec<PeekItem>>,
}

/// A list item of the first pass: a resource, or anything else (reported in the second pass).
#[derive(Debug)]
enum PeekItem {
    Resource(PeekResource),
    NotAMapping,
}

impl<'de> Deserialize<'de> for PeekItem {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct ItemVisitor;
        impl<'de> Visitor<'de> for ItemVisitor {
            type Value = PeekItem;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a resource")
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<PeekItem, A::Error> {
                PeekResource::deserialize(de::value::MapAccessDeserializer::new(map))
                    .map(PeekItem::Resource)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<PeekItem, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(PeekItem::NotAMapping)
            }
            fn visit_bool<E>(self, _: bool) -> Result<PeekItem, E> {
                Ok(PeekItem::NotAMapping)
            }
            fn visit_i64<E>(self, _: i64) -> Result<PeekItem, E> {
                Ok(PeekItem::NotAMapping)
            }
            fn visit_u64<E>(self, _: u64) -> Result<PeekItem, E> {
                Ok(PeekItem::NotAMapping)
            }
            fn visit_f64<E>(self, _: f64) -> Result<PeekItem, E> {
                Ok(PeekItem::NotAMapping)
            }
            fn visit_str<E>(self, _: &str) -> Result<PeekItem, E> {
                Ok(PeekItem::NotAMapping)
            }
            fn visit_unit<E>(self) -> Result<PeekItem, E> {
                Ok(PeekItem::NotAMapping)
            }
            fn visit_none<E>(self) -> Result<PeekItem, E> {
                Ok(PeekItem::NotAMapping)
            }
        }
        deserializer.deserialize_any(ItemVisitor)
    }
}

/// The first pass's view of a whole document.
#[derive(Debug)]
enum PeekDocument {
    Empty,
    Resource(PeekResource),
    Sequence(Vec<PeekItem>),
    Scalar,
}

impl<'de> Deserialize<'de> for PeekDocument {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct DocumentVisitor;
        impl<'de> Visitor<'de> for DocumentVisitor {
            type Value = PeekDocument;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a resource or a list of resources")
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<PeekDocument, A::Error> {
                PeekResource::deserialize(de::value::MapAccessDeserializer::new(map))
                    .map(PeekDocument::Resource)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<PeekDocument, A::Error> {
                let mut items = Vec::new();
                while let Some(item) = seq.next_element::<PeekItem>()? {
                    items.push(item);
                }
                Ok(PeekDocument::Sequence(items))
            }
            fn visit_unit<E>(self) -> Result<PeekDocument, E> {
                Ok(PeekDocument::Empty)
            }
            fn visit_none<E>(self) -> Result<PeekDocument, E> {
                Ok(PeekDocument::Empty)
            }
            fn visit_bool<E>(self, _: bool) -> Result<PeekDocument, E> {
                Ok(PeekDocument::Scalar)
            }
            fn visit_i64<E>(self, _: i64) -> Result<PeekDocument, E> {
                Ok(PeekDocument::Scalar)
            }
            fn visit_u64<E>(self, _: u64) -> Result<PeekDocument, E> {
                Ok(PeekDocument::Scalar)
            }
            fn visit_f64<E>(self, _: f64) -> Result<PeekDocument, E> {
                Ok(PeekDocument::Scalar)
            }
            fn visit_str<E>(self, _: &str) -> Result<PeekDocument, E> {
                Ok(PeekDocument::Scalar)
            }
        }
        deserializer.deserialize_any(DocumentVisitor)
    }
}

/// The plan for the second pass: the kind each resource will be decoded as (`None` when its kind
/// is missing or unknown, already reported: the resource is skipped).
#[derive(Debug)]
struct Plan {
    kind: Option<Kind>,
    items: Vec<Plan>,
}

fn parse_document(
    file: FileId,
    document: Document<'_>,
    resources: &mut Vec<RawResource>,
    diagnostics: &mut Vec<Diagnostic>,
) {
    if let Ok(resource) = serde_saphyr::with_deserializer_from_str_with_options(
        document.text,
        yaml_options(),
        |deserializer| deserializer.deserialize_any(SinglePassVisitor),
    ) {
        resources.push(shift_resource(resource, document.offset));
        return;
    }
    parse_document_in_two_passes(file, document, resources, diagnostics);
}

fn parse_document_in_two_passes(
    file: FileId,
    document: Document<'_>,
    resources: &mut Vec<RawResource>,
    diagnostics: &mut Vec<Diagnostic>,
) {
    let shift = document.offset;
    let peek: PeekDocument =
        match serde_saphyr::from_str_with_options(document.text, yaml_options()) {
            Ok(peek) => peek,
            Err(error) => {
                diagnostics.push(yaml_diagnostic(file, document, &error));
                return;
            }
        };
    let start = Span::at(shift + first_content_offset(document.text));
    let plans = match peek {
        PeekDocument::Empty => return,
        PeekDocument::Scalar => {
            diagnostics.push(
                Diagnostic::error(
                    file,
                    start,
                    "a policy file document must be a resource, a list kind or a sequence of resources",
                )
                .with_help(
                    "start the document with `apiVersion: projectcalico.org/v3` and `kind: …`",
                ),
            );
            return;
        }
        PeekDocument::Resource(resource) => {
            vec![plan_resource(
                file,
                shift,
                start,
                &resource,
                None,
                diagnostics,
            )]
        }
        PeekDocument::Sequence(items) => items
            .iter()
            .map(|item| plan_item(file, shift, start, item, None, diagnostics))
            .collect(),
    };
    let decoded = serde_saphyr::with_deserializer_from_str_with_options(
        document.text,
        yaml_options(),
        |deserializer| DocumentSeed { plans: &plans }.deserialize(deserializer),
    );
    match decoded {
        Ok(decoded) => resources.extend(
            decoded
                .into_iter()
                .map(|resource| shift_resource(resource, shift)),
        ),
        Err(error) => diagnostics.push(yaml_diagnostic(file, document, &error)),
    }
}

fn plan_item(
    file: FileId,
    shift: usize,
    fallback: Span,
    item: &PeekItem,
    required: Option<Kind>,
    diagnostics: &mut Vec<Diagnostic>,
) -> Plan {
    match item {
        PeekItem::Resource(resource) => {
            plan_resource(file, shift, fallback, resource, required, diagnostics)
        }
        // The second pass reports the shape error with its position.
        PeekItem::NotAMapping => Plan {
            kind: None,
            items: Vec::new(),
        },
    }
}

fn plan_resource(
    file: FileId,
    shift: usize,
    fallback: Span,
    resource: &PeekResource,
    list_item_kind: Option<Kind>,
    diagnostics: &mut Vec<Diagnostic>,
) -> Plan {
    let kind = match (&resource.kind, list_item_kind) {
        (None, Some(implied)) => Some(implied),
        (None, None) => {
            diagnostics.push(
                Diagnostic::error(file, fallback, "the resource has no `kind`").with_help(
                    "add `kind: GlobalNetworkPolicy`, `GlobalNetworkSet` or `HostEndpoint`",
                ),
            );
            None
        }
        (Some(written), implied) => {
            let span = written.clone().shifted(shift).span;
            match Kind::parse(&written.value) {
                None => {
                    diagnostics.push(unknown_kind(file, span, &written.value));
                    None
                }
                Some(kind) if implied.is_some_and(|implied| implied != kind) => {
                    diagnostics.push(
                        Diagnostic::error(
                            file,
                            span,
                            format!(
                                "an item of a `{}List` must be a `{}`, not a `{kind}`",
                                implied.map_or("", Kind::as_str),
                                implied.map_or("", Kind::as_str)
                            ),
                        )
                        .with_help(
                            "move it to its own document, or use `kind: List` for mixed items",
                        ),
                    );
                    None
                }
                Some(kind) if kind.is_list() && implied.is_some() => {
                    diagnostics.push(Diagnostic::error(
                        file,
                        span,
                        format!("a `{kind}` cannot be an item of another list"),
                    ));
                    None
                }
                Some(kind) => Some(kind),
            }
        }
    };
    let items = match (kind, &resource.items) {
        (Some(kind), Some(items)) if kind.is_list() => {
            let item_kind = kind.item_kind();
            items
                .iter()
                // Items of a typed list may leave `kind` out; a `List`'s items may not.
                .map(|item| plan_item(file, shift, fallback, item, item_kind, diagnostics))
                .collect()
        }
        _ => Vec::new(),
    };
    Plan { kind, items }
}

fn unknown_kind(file: FileId, span: Span, written: &str) -> Diagnostic {
    let diagnostic = Diagnostic::error(file, span, format!("unknown kind `{written}`"));
    let help = match written {
        "NetworkPolicy" | "StagedNetworkPolicy" | "StagedGlobalNetworkPolicy" => {
            "namespaced and staged policies apply to workloads, not hosts; write `kind: GlobalNetworkPolicy`".to_owned()
        }
        "NetworkSet" => "namespaced network sets apply to workloads; write `kind: GlobalNetworkSet`".to_owned(),
        _ => match Kind::ALL
            .iter()
            .find(|kind| kind.as_str().eq_ignore_ascii_case(written))
        {
            Some(kind) => format!("kinds are case-sensitive: write `kind: {kind}`"),
            None => format!(
                "the kinds understood here are {}",
                Kind::ALL
                    .iter()
                    .map(|kind| format!("`{kind}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        },
    };
    diagnostic.with_help(help)
}

/// Byte offset of the first line that is not blank, a comment, a directive or a marker.
fn first_content_offset(text: &str) -> usize {
    let mut offset = 0;
    for line in text.split_inclusive('\n') {
        let trimmed = line.trim();
        let skip = trimmed.is_empty()
            || trimmed.starts_with('#')
            || trimmed.starts_with('%')
            || trimmed == "---"
            || trimmed == "...";
        if !skip {
            let indent = line.len() - line.trim_start().len();
            let marker = if line.trim_start().starts_with("--- ") {
                4
            } else {
                0
            };
            return offset + indent + marker;
        }
        offset += line.len();
    }
    0
}

fn shift_resource(mut resource: RawResource, shift: usize) -> RawResource {
    resource.shift = shift;
    resource
}

/// Turns a YAML error into a diagnostic positioned in the file.
fn yaml_diagnostic(
    file: FileId,
    document: Document<'_>,
    error: &serde_saphyr::Error,
) -> Diagnostic {
    let span = error
        .location()
        .map(|location| {
            let span = span_of(&location);
            Span::new(document.offset + span.start, span.end - span.start)
        })
        .unwrap_or(Span::at(document.offset));
    Diagnostic::error(file, span, clean_yaml_message(&error.to_string()))
}

/// Strips the parser's own position prefix (`line 3 column 5: `) and leading `error: ` from its
/// message: the diagnostic carries the position itself.
fn clean_yaml_message(message: &str) -> String {
    let mut text = message.trim();
    if let Some(rest) = text.strip_prefix("error: ") {
        text = rest;
    }
    if let Some(rest) = text.strip_prefix("line ")
        && let Some(colon) = rest.find(": ")
    {
        let position = &rest[..colon];
        if position
            .split(" column ")
            .all(|part| part.bytes().all(|b| b.is_ascii_digit()))
        {
            text = &rest[colon + 2..];
        }
    }
    let first_line = text.lines().next().unwrap_or(text);
    first_line.trim_end_matches('.').to_owned()
}

/// Second pass over a whole document.
struct DocumentSeed<'p> {
    plans: &'p [Plan],
}

impl<'de> DeserializeSeed<'de> for DocumentSeed<'_> {
    type Value = Vec<RawResource>;
    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_any(DocumentVisitor { plans: self.plans })
    }
}

struct DocumentVisitor<'p> {
    plans: &'p [Plan],
}

impl<'de> Visitor<'de> for DocumentVisitor<'_> {
    type Value = Vec<RawResource>;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a resource or a list of resources")
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        let Some(plan) = self.plans.first() else {
            return Ok(Vec::new());
        };
        let mut out = Vec::new();
        ResourceVisitor {
            plan,
            out: &mut out,
        }
        .visit_map(map)?;
        Ok(out)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut out = Vec::new();
        for plan in self.plans {
            let found = seq.next_element_seed(ResourceSeed {
                plan,
                out: &mut out,
            })?;
            if found.is_none() {
                break;
            }
        }
        Ok(out)
    }
    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(Vec::new())
    }
}

/// Second pass over one resource (or list), pushing what it decodes onto `out`.
struct ResourceSeed<'p, 'o> {
    plan: &'p Plan,
    out: &'o mut Vec<RawResource>,
}

impl<'de> DeserializeSeed<'de> for ResourceSeed<'_, '_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_map(ResourceVisitor {
            plan: self.plan,
            out: self.out,
        })
    }
}

struct ResourceVisitor<'p, 'o> {
    plan: &'p Plan,
    out: &'o mut Vec<RawResource>,
}

const SINGLE_FIELDS: &[&str] = &["apiVersion", "kind", "metadata", "spec"];
const LIST_FIELDS: &[&str] = &["apiVersion", "kind", "metadata", "items"];

impl<'de> Visitor<'de> for ResourceVisitor<'_, '_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a resource: a mapping with `apiVersion`, `kind`, `metadata` and `spec`")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let Some(kind) = self.plan.kind else {
            // Already reported in the first pass: skip the whole resource.
            while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
            return Ok(());
        };
        let mut first_key: Option<Span> = None;
        let mut api_version = None;
        let mut kind_span = None;
        let mut metadata = None;
        let mut spec = None;
        let mut items_seen = false;
        let mut items_out = Vec::new();
        while let Some(key) = map.next_key::<Sp<String>>()? {
            first_key.get_or_insert(key.span);
            match key.value.as_str() {
                "apiVersion" => api_version = Some(map.next_value::<Sp<String>>()?),
                "kind" => kind_span = Some(map.next_value::<Sp<String>>()?.span),
                "metadata" => metadata = Some(map.next_value::<Sp<RawMetadata>>()?),
                "spec" if !kind.is_list() => spec = Some(next_spec(&mut map, kind)?),
                "items" if kind.is_list() => {
                    items_seen = true;
                    map.next_value_seed(ItemsSeed {
                        plans: &self.plan.items,
                        out: &mut items_out,
                    })?;
                }
                other => {
                    let expected = if kind.is_list() {
                        LIST_FIELDS
                    } else {
                        SINGLE_FIELDS
                    };
                    return Err(de::Error::unknown_field(other, expected));
                }
            }
        }
        let span = first_key.unwrap_or_default();
        if kind.is_list() {
            if !items_seen {
                return Err(de::Error::custom(format!(
                    "a `{kind}` needs `items`, the list of its resources"
                )));
            }
            // List metadata (resourceVersion) says nothing about the items.
            let _ = metadata;
            self.out.extend(items_out.into_iter().map(|mut item| {
                if item.api_version.is_none() {
                    item.api_version = api_version.clone();
                }
                item
            }));
            return Ok(());
        }
        self.out.push(RawResource {
            span,
            api_version,
            kind: Sp::new(kind, kind_span.unwrap_or(span)),
            metadata,
            spec,
            shift: 0,
        });
        Ok(())
    }
}

/// Decodes the value of `spec` as the spec of `kind` (a kind that is not a list).
fn next_spec<'de, A: MapAccess<'de>>(map: &mut A, kind: Kind) -> Result<Sp<RawSpec>, A::Error> {
    Ok(match kind {
        Kind::GlobalNetworkPolicy => {
            let spec = map.next_value::<Sp<RawPolicySpec>>()?;
            Sp::new(RawSpec::Policy(spec.value), spec.span)
        }
        Kind::GlobalNetworkSet => {
            let spec = map.next_value::<Sp<RawNetworkSetSpec>>()?;
            Sp::new(RawSpec::NetworkSet(spec.value), spec.span)
        }
        _ => {
            let spec = map.next_value::<Sp<RawHostEndpointSpec>>()?;
            Sp::new(RawSpec::HostEndpoint(spec.value), spec.span)
        }
    })
}

/// The single pass over a document holding one resource: learns the kind when it meets `kind`
/// and decodes `spec` right away. Fails (and the caller falls back to the two passes) on
/// anything else: another shape, a list kind, an unknown kind, `spec` before `kind`, an
/// unknown field, any error. On success it yields what [`ResourceVisitor`] yields with the
/// plan of the first pass.
struct SinglePassVisitor;

/// Why the single pass gave up; never shown (the two passes report the real problem).
fn two_passes<E: de::Error>() -> E {
    E::custom("needs two passes")
}

impl<'de> Visitor<'de> for SinglePassVisitor {
    type Value = RawResource;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a resource with `kind` before `spec`")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RawResource, A::Error> {
        let mut first_key: Option<Span> = None;
        let mut api_version = None;
        let mut kind: Option<Sp<Kind>> = None;
        let mut metadata = None;
        let mut spec = None;
        while let Some(key) = map.next_key::<Sp<String>>()? {
            first_key.get_or_insert(key.span);
            match key.value.as_str() {
                "apiVersion" => api_version = Some(map.next_value::<Sp<String>>()?),
                "kind" => {
                    let written = map.next_value::<Sp<String>>()?;
                    match Kind::parse(&written.value) {
                        Some(parsed) if !parsed.is_list() && kind.is_none() => {
                            kind = Some(Sp::new(parsed, written.span));
                        }
                        _ => return Err(two_passes()),
                    }
                }
                "metadata" => metadata = Some(map.next_value::<Sp<RawMetadata>>()?),
                "spec" => match &kind {
                    Some(kind) => spec = Some(next_spec(&mut map, kind.value)?),
                    None => return Err(two_passes()),
                },
                _ => return Err(two_passes()),
            }
        }
        let Some(kind) = kind else {
            return Err(two_passes());
        };
        Ok(RawResource {
            span: first_key.unwrap_or_default(),
            api_version,
            kind,
            metadata,
            spec,
            shift: 0,
        })
    }
}

struct ItemsSeed<'p, 'o> {
    plans: &'p [Plan],
    out: &'o mut Vec<RawResource>,
}

impl<'de> DeserializeSeed<'de> for ItemsSeed<'_, '_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for ItemsSeed<'_, '_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a sequence of resources")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        for plan in self.plans {
            let found = seq.next_element_seed(ResourceSeed {
                plan,
                out: &mut *self.out,
            })?;
            if found.is_none() {
                break;
            }
        }
        Ok(())
    }
    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> (Vec<RawResource>, Vec<String>) {
        let mut sources = Sources::new();
        let id = sources.add(SourceFile::new("p.yaml", text));
        let (resources, diagnostics) = parse_file(id, sources.get(id));
        let rendered = diagnostics.iter().map(|d| d.headline(&sources)).collect();
        (resources, rendered)
    }

    fn kinds(resources: &[RawResource]) -> Vec<Kind> {
        resources.iter().map(|r| r.kind.value).collect()
    }

    const GNP: &str = "apiVersion: projectcalico.org/v3\nkind: GlobalNetworkPolicy\nmetadata:\n  name: a\nspec:\n  selector: all()\n";

    #[test]
    fn policy_file_names() {
        for name in ["a.yaml", "b.yml", "with.dots.yaml"] {
            assert!(is_policy_file_name(name), "{name}");
        }
        for name in [
            ".hidden.yaml",
            "..data",
            "..2024_01_01_00_00_00.123",
            "a.yaml~",
            "a.yaml.swp",
            ".a.yaml.swp",
            "#a.yaml#",
            "a.json",
            "a.yaml.tmp",
            "4913",
            ".policies.yaml123456",
        ] {
            assert!(!is_policy_file_name(name), "{name}");
        }
    }

    /// The single pass yields exactly what the two passes yield (spans included), or gives up.
    #[test]
    fn the_single_pass_agrees_with_the_two_passes() {
        let examples = std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/policies"))
            .expect("policies/")
            .map(|entry| std::fs::read_to_string(entry.expect("entry").path()).expect("read"));
        let odd = [
            GNP.to_owned(),
            format!("# leading comment\n---\n{GNP}"),
            "spec:\n  selector: all()\nkind: GlobalNetworkPolicy\nmetadata: {name: late}\n"
                .to_owned(),
            "kind: GlobalNetworkSet\nmetadata: {name: s}\nspec: {nets: [192.0.2.0/24], bogus: 1}\n"
                .to_owned(),
            "kind: GlobalNetworkPolicy\nkind: GlobalNetworkSet\nspec: {}\n".to_owned(),
            "kind: Nope\nspec: {}\n".to_owned(),
            "apiVersion: v1\nkind: HostEndpoint\nmetadata: {name: h, labels: {a: b}}\nspec: {node: n, interfaceName: eth0, expectedIPs: [192.0.2.1]}\nextra: 1\n".to_owned(),
        ];
        let mut single = 0;
        for text in examples.chain(odd) {
            let mut sources = Sources::new();
            let id = sources.add(SourceFile::new("p.yaml", text.as_str()));
            for document in split_documents(&sources.get(id).text) {
                let (mut fast, mut fast_diagnostics) = (Vec::new(), Vec::new());
                parse_document(id, document, &mut fast, &mut fast_diagnostics);
                let (mut slow, mut slow_diagnostics) = (Vec::new(), Vec::new());
                parse_document_in_two_passes(id, document, &mut slow, &mut slow_diagnostics);
                assert_eq!(
                    format!("{fast:?}"),
                    format!("{slow:?}"),
                    "{}",
                    document.text
                );
                assert_eq!(
                    format!("{fast_diagnostics:?}"),
                    format!("{slow_diagnostics:?}"),
                    "{}",
                    document.text
                );
                single += usize::from(
                    serde_saphyr::with_deserializer_from_str_with_options(
                        document.text,
                        yaml_options(),
                        |deserializer| deserializer.deserialize_any(SinglePassVisitor),
                    )
                    .is_ok(),
                );
            }
        }
        assert!(single > 5, "the single pass must take the usual documents");
    }

    #[test]
    fn one_resource_per_document() {
        let text = format!("{GNP}---\n{}", GNP.replace("name: a", "name: b"));
        let (resources, errors) = parse(&text);
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(resources.len(), 2);
        assert_eq!(resources[1].name().map(|n| n.value.as_str()), Some("b"));
        // Spans are relative to their document; `at` makes them relative to the file.
        let name = resources[1].name().expect("name");
        assert_eq!(&text[resources[1].at(name.span).start..][..1], "b");
    }

    #[test]
    fn list_kinds_and_top_level_sequences_are_flattened() {
        let text = "apiVersion: projectcalico.org/v3\nkind: List\nitems:\n- kind: GlobalNetworkSet\n  metadata: {name: s}\n  spec: {nets: [192.0.2.0/24]}\n- kind: HostEndpoint\n  metadata: {name: h}\n  spec: {node: n, interfaceName: eth0}\n---\nkind: GlobalNetworkPolicyList\napiVersion: projectcalico.org/v3\nitems:\n- metadata: {name: p}\n  spec: {order: 1}\n---\n- apiVersion: projectcalico.org/v3\n  kind: GlobalNetworkPolicy\n  metadata: {name: q}\n";
        let (resources, errors) = parse(text);
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(
            kinds(&resources),
            vec![
                Kind::GlobalNetworkSet,
                Kind::HostEndpoint,
                Kind::GlobalNetworkPolicy,
                Kind::GlobalNetworkPolicy
            ]
        );
        // Items inherit the list's apiVersion when they leave theirs out.
        assert!(resources.iter().all(|r| r.api_version.is_some()));
    }

    #[test]
    fn errors_in_one_document_do_not_hide_the_next() {
        let text = "kind: GlobalNetworkPolicy\nspec:\n  bogus: 1\n---\nkind: Nope\n---\nkind: GlobalNetworkPolicy\nspec:\n  order: [1\n";
        let (resources, errors) = parse(text);
        assert!(resources.is_empty());
        assert_eq!(errors.len(), 3, "{errors:?}");
        assert!(
            errors[0].starts_with("p.yaml:3:3: error: unknown field `bogus`"),
            "{errors:?}"
        );
        assert!(
            errors[1].starts_with("p.yaml:5:7: error: unknown kind `Nope`"),
            "{errors:?}"
        );
        assert!(errors[2].starts_with("p.yaml:9:"), "{errors:?}");
    }

    #[test]
    fn kind_after_spec_still_decodes_the_right_spec() {
        let text = "spec:\n  nets: [192.0.2.0/24]\nmetadata: {name: s}\nkind: GlobalNetworkSet\n";
        let (resources, errors) = parse(text);
        assert!(errors.is_empty(), "{errors:?}");
        assert!(matches!(
            resources[0].spec.as_ref().map(|s| &s.value),
            Some(RawSpec::NetworkSet(_))
        ));
    }

    #[test]
    fn shapes_that_are_not_resources() {
        let (_, errors) = parse("just a string\n");
        assert!(errors[0].contains("must be a resource"), "{errors:?}");
        let (_, errors) = parse("- 1\n- kind: GlobalNetworkSet\n  metadata: {name: s}\n");
        assert_eq!(errors.len(), 1, "{errors:?}");
        let (_, errors) = parse("apiVersion: projectcalico.org/v3\nmetadata: {name: x}\n");
        assert!(errors[0].contains("has no `kind`"), "{errors:?}");
        let (resources, errors) = parse("# only a comment\n---\n...\n");
        assert!(resources.is_empty() && errors.is_empty(), "{errors:?}");
    }

    #[test]
    fn typed_list_items_must_match() {
        let (_, errors) = parse(
            "kind: GlobalNetworkSetList\nitems:\n- kind: HostEndpoint\n  metadata: {name: h}\n",
        );
        assert!(
            errors[0].contains("must be a `GlobalNetworkSet`"),
            "{errors:?}"
        );
    }

    #[test]
    fn split_documents_at_markers_only_at_line_start() {
        let text = "a: 1\n---\nb: '---'\n  ---\n...\n%YAML 1.2\n--- \nc: 3\n";
        let documents = split_documents(text);
        let texts: Vec<_> = documents.iter().map(|d| d.text).collect();
        assert_eq!(
            texts,
            vec![
                "a: 1\n",
                "---\nb: '---'\n  ---\n...\n",
                "%YAML 1.2\n--- \nc: 3\n"
            ]
        );
    }

    #[test]
    fn alias_bombs_are_refused() {
        let mut text = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
        for level in 1..12 {
            let previous = level - 1;
            text.push_str(&format!(
                "a{level}: &a{level} [*a{previous}, *a{previous}, *a{previous}, *a{previous}, *a{previous}, *a{previous}, *a{previous}, *a{previous}, *a{previous}, *a{previous}]\n"
            ));
        }
        let (_, errors) = parse(&text);
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert!(
            errors[0].contains("alias replay limit exceeded"),
            "{errors:?}"
        );
    }

    #[test]
    fn bytes_that_are_not_text_are_refused() {
        assert!(
            text_from_bytes(b"a: \0".to_vec())
                .unwrap_err()
                .contains("NUL byte at byte 3")
        );
        assert!(
            text_from_bytes(vec![b'a', 0xff])
                .unwrap_err()
                .contains("not UTF-8")
        );
    }
}

#[cfg(test)]
mod cache_tests {
    use super::*;

    /// What a read yields, in a comparable form: resources by file path, and diagnostics.
    fn outcome(loaded: &Loaded) -> (Vec<String>, Vec<String>) {
        let resources = loaded
            .resources
            .iter()
            .map(|(id, resource)| {
                format!("{}: {resource:?}", loaded.sources.get(*id).path.display())
            })
            .collect();
        let diagnostics = loaded
            .diagnostics
            .iter()
            .map(|d| d.headline(&loaded.sources))
            .collect();
        (resources, diagnostics)
    }

    fn policy(name: &str, port: u16) -> String {
        format!(
            "apiVersion: projectcalico.org/v3\nkind: GlobalNetworkPolicy\nmetadata:\n  name: {name}\nspec:\n  preDNAT: true\n  applyOnForward: true\n  ingress:\n  - action: Allow\n    protocol: TCP\n    destination:\n      ports: [{port}]\n"
        )
    }

    #[test]
    fn a_cached_read_yields_what_a_fresh_read_yields_as_files_change() {
        let dir = tempfile::tempdir().unwrap();
        let paths = [dir.path().to_path_buf()];
        let options = LoadOptions::default();
        let mut cache = ParseCache::default();
        let write = |name: &str, text: &str| std::fs::write(dir.path().join(name), text).unwrap();
        let check = |cache: &mut ParseCache| {
            let cached = load_paths_cached(&paths, options, cache);
            let fresh = load_paths_with(&paths, options);
            assert_eq!(outcome(&cached), outcome(&fresh));
        };

        write("b.yaml", &policy("b", 30001));
        write("c.yaml", &policy("c", 30002));
        check(&mut cache);
        assert_eq!(cache.files.len(), 2);

        // A file changes, another one appears before the others (file positions move), and a
        // broken file appears: the broken one is parsed every time and never kept.
        write("c.yaml", &policy("c", 30003));
        write("a.yaml", &policy("a", 30004));
        write("broken.yaml", "kind: GlobalNetworkPolicy\nspec: [\n");
        check(&mut cache);
        check(&mut cache);
        assert_eq!(cache.files.len(), 3);
        assert!(!cache.files.contains_key(&dir.path().join("broken.yaml")));

        // A file changes back to an earlier text, another is removed: only present files stay.
        write("c.yaml", &policy("c", 30002));
        std::fs::remove_file(dir.path().join("b.yaml")).unwrap();
        check(&mut cache);
        assert_eq!(cache.files.len(), 2);
        let (text, _) = &cache.files[&dir.path().join("c.yaml")];
        assert!(text.contains("30002"));
    }

    #[test]
    fn an_unchanged_file_is_not_parsed_again() {
        let dir = tempfile::tempdir().unwrap();
        let paths = [dir.path().to_path_buf()];
        std::fs::write(dir.path().join("a.yaml"), policy("a", 30001)).unwrap();
        let mut cache = ParseCache::default();
        load_paths_cached(&paths, LoadOptions::default(), &mut cache);
        // Plant a different result for the same text: a read that parsed the file again could
        // not return it.
        let path = dir.path().join("a.yaml");
        cache.files.get_mut(&path).unwrap().1.clear();
        let loaded = load_paths_cached(&paths, LoadOptions::default(), &mut cache);
        assert!(loaded.resources.is_empty());
        // Once the text changes, it is parsed.
        std::fs::write(&path, policy("a", 30002)).unwrap();
        let loaded = load_paths_cached(&paths, LoadOptions::default(), &mut cache);
        assert_eq!(loaded.resources.len(), 1);
    }
}
