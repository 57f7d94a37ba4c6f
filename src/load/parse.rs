//! Splitting a file into YAML documents, and turning each document into resources with
//! diagnostics: the single pass when it can, else the two passes (the lenient [`peek`] to plan,
//! the strict [`decode`] to decode).
//!
//! [`peek`]: super::peek
//! [`decode`]: super::decode

use serde::de::{DeserializeSeed, Deserializer};

use super::decode::{DocumentSeed, Plan, SinglePassVisitor};
use super::peek::{PeekDocument, PeekItem, PeekResource};
use crate::diagnostic::Diagnostic;
use crate::source::{FileId, SourceFile, Span};
use crate::spec::{Kind, RawResource, span_of};

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
    let threads = std::thread::available_parallelism()
        .map_or(1, std::num::NonZero::get)
        .min(MAX_PARSE_THREADS);
    if threads < 2 || documents.len() < PARALLEL_DOCUMENTS {
        for document in documents {
            parse_document(file, document, &mut resources, &mut diagnostics);
        }
        return (resources, diagnostics);
    }
    // Documents are independent: big files parse in chunks on every core, and the chunks'
    // results are joined in document order, so the output is exactly the sequential one.
    let chunk = documents.len().div_ceil(threads);
    let parts = crate::parallel::map(documents.chunks(chunk).collect(), |part| {
        let mut resources = Vec::new();
        let mut diagnostics = Vec::new();
        for document in part {
            parse_document(file, *document, &mut resources, &mut diagnostics);
        }
        (resources, diagnostics)
    });
    for (part_resources, part_diagnostics) in parts {
        resources.extend(part_resources);
        diagnostics.extend(part_diagnostics);
    }
    (resources, diagnostics)
}

/// Files with at least this many documents are parsed on several threads.
const PARALLEL_DOCUMENTS: usize = 256;

/// Most threads one file is parsed on.
const MAX_PARSE_THREADS: usize = 8;

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
/// comments and directives is joined to the next part; an empty document (`---` and nothing
/// before the next `---`) is left out, as calicoctl and kubectl skip it.
pub fn split_documents(text: &str) -> Vec<Document<'_>> {
    let mut documents = Vec::new();
    let mut start = 0;
    let mut offset = 0;
    // Whether the part since `start` holds content; kept line by line so a storm of markers
    // costs linear time.
    let mut content = false;
    // Whether the part since `start` holds a start marker: then a second one ends an empty
    // document rather than the comments and directives before one.
    let mut marked = false;
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
        } else if is_start && marked {
            start = offset;
        }
        marked |= is_start;
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
            marked = false;
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
    // `selector: !has(x)` is a YAML tag on an empty string, which would select everything: a
    // tag other than YAML's own is an error, never silently dropped.
    options.reject_unsupported_tags = true;
    options.reject_tagged_field_names = true;
    // A label value or a name written `true` or `1` is a boolean or a number to Calico's
    // decoder, which refuses it where a string belongs; quoted, it is the string.
    options.no_schema = true;
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
        "NetworkPolicy" | "StagedNetworkPolicy" | "StagedKubernetesNetworkPolicy" => {
            "namespaced policies apply to workloads, not hosts; write `kind: GlobalNetworkPolicy` (or `StagedGlobalNetworkPolicy` to audit it first)".to_owned()
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
    let message = error.to_string();
    let span = tag_span(document.text, document.offset, span, &message);
    yaml_error(file, span, &message)
}

/// The parser places a tag's error after the tagged node; the writer needs the tag itself:
/// its last spelling in `text` before `span` (positions in `text` start at `offset`).
pub fn tag_span(text: &str, offset: usize, span: Span, message: &str) -> Span {
    let message = clean_yaml_message(message);
    let Some(tag) = message
        .strip_prefix("unsupported tag `")
        .and_then(|rest| rest.strip_suffix('`'))
    else {
        return span;
    };
    let end = span.end.saturating_sub(offset).min(text.len());
    text.get(..end)
        .and_then(|before| before.rfind(tag))
        .map_or(span, |at| Span::new(offset + at, tag.len()))
}

/// A YAML parser's error at `span` as a diagnostic: the position said once (the diagnostic's),
/// an unknown field with the closest known one and the list of fields in the help line, a bad
/// indent with a help line about indentation. Policy files and the config file share it.
pub fn yaml_error(file: FileId, span: Span, error: &str) -> Diagnostic {
    let message = clean_yaml_message(error);
    let (message, help) = match in_words(&message) {
        Some((message, help)) => (message, Some(help)),
        None => {
            let help = help_for(&message);
            (message, help)
        }
    };
    let diagnostic = Diagnostic::error(file, span, short_message(&message));
    match help {
        Some(help) => diagnostic.with_help(help),
        None => diagnostic,
    }
}

/// The parser's messages that speak of its own workings, in the words of someone writing the
/// file, with what to write instead.
fn in_words(message: &str) -> Option<(String, String)> {
    if message.starts_with("cannot deserialize null into ") {
        return Some((
            "nothing is written here, and a value is needed".to_owned(),
            "write the value after the colon, or remove the key".to_owned(),
        ));
    }
    if let Some(rest) = message.strip_prefix("non-finite float ")
        && let Some(value) = rest.strip_suffix(" rejected by the configured policy")
    {
        return Some((
            format!("{value} is not a finite number"),
            "write a number within the range of a 64-bit float, such as `100` or `-5.5`".to_owned(),
        ));
    }
    if let Some(rest) = message.strip_prefix("unsupported tag `")
        && let Some(tag) = rest.strip_suffix('`')
    {
        return Some((
            format!("`{tag}` is read as a YAML tag, not as text"),
            format!(
                "YAML takes a `!` at the start of a value as a tag: quote the whole value, as in `\"{tag}\"`"
            ),
        ));
    }
    if let Some(rest) = message.strip_prefix("The string value [")
        && let Some(value) = rest.strip_suffix("] must be quoted")
    {
        const BOOLEANS: &[&str] = &[
            "y", "Y", "yes", "Yes", "YES", "n", "N", "no", "No", "NO", "true", "True", "TRUE",
            "false", "False", "FALSE", "on", "On", "ON", "off", "Off", "OFF",
        ];
        let kind = if BOOLEANS.contains(&value) {
            "a boolean"
        } else if ["", "~", "null", "Null", "NULL"].contains(&value) {
            "null"
        } else {
            "a number"
        };
        return Some((
            format!("`{value}` is {kind} to YAML, and text is needed here"),
            format!(
                "quote it: `\"{value}\"` (Calico's decoder refuses an unquoted `{value}` where a string belongs)"
            ),
        ));
    }
    if message == "recursion limit exceeded" {
        return Some((
            "the YAML nests too deep here".to_owned(),
            "policy files nest about ten levels deep; look for brackets that are never closed"
                .to_owned(),
        ));
    }
    if message.starts_with("recursive references require") {
        return Some((
            "this alias refers to the anchor it is inside".to_owned(),
            "write the value out instead of the `*alias`".to_owned(),
        ));
    }
    if let Some(rest) = message.strip_prefix("duplicate mapping key: ") {
        let key = rest
            .split(", set DuplicateKeyPolicy")
            .next()
            .unwrap_or(rest);
        return Some((
            format!("`{key}` is written twice in this mapping"),
            format!("keep one `{key}`: only one of them could count"),
        ));
    }
    None
}

/// `unknown field `net`, expected one of nets, notNets, …` → `unknown field `net``: the fields
/// there are go to the help line, with the closest first.
fn short_message(message: &str) -> String {
    match message.split_once(", expected one of ") {
        Some((unknown, _)) if unknown.starts_with("unknown field ") => unknown.to_owned(),
        _ => message.to_owned(),
    }
}

/// What to write instead, for the parser's messages that have an answer.
/// Fields Calico has for workloads only, which the spec names only to refuse them in words.
const WORKLOAD_ONLY_FIELDS: [&str; 5] = [
    "namespaceSelector",
    "serviceAccountSelector",
    "serviceAccounts",
    "services",
    "http",
];

fn help_for(message: &str) -> Option<String> {
    if let Some(rest) = message.strip_prefix("unknown field `")
        && let Some((field, expected)) = rest.split_once("`, expected one of ")
    {
        // The workload-only fields Calico has are known to the parser only so that they can
        // be refused in words; they are no suggestion for a host endpoint.
        let fields: Vec<&str> = expected
            .split(", ")
            .map(|name| name.trim_matches('`'))
            .filter(|name| !name.is_empty() && !WORKLOAD_ONLY_FIELDS.contains(name))
            .collect();
        let closest = fields
            .iter()
            .map(|name| {
                (
                    strsim::levenshtein(&field.to_lowercase(), &name.to_lowercase()),
                    *name,
                )
            })
            .min()
            .filter(|(distance, name)| *distance <= 2.max(name.len() / 3));
        let list = fields
            .iter()
            .map(|name| format!("`{name}`"))
            .collect::<Vec<_>>()
            .join(", ");
        return Some(match closest {
            Some((_, name)) => format!("did you mean `{name}`? The fields here are {list}"),
            None => format!("the fields here are {list}"),
        });
    }
    if let Some(kind) = message.strip_prefix("invalid ")
        && matches!(
            kind,
            "i8" | "i16" | "i32" | "i64" | "u8" | "u16" | "u32" | "u64"
        )
    {
        return Some("write a whole number here".to_owned());
    }
    if message == "invalid boolean" {
        return Some("write `true` or `false` here".to_owned());
    }
    if message == "expected sequence start" {
        return Some(
            "write a list here: `[a, b]`, or one `- item` per line indented under the key"
                .to_owned(),
        );
    }
    if message == "expected mapping start" {
        return Some(
            "write a mapping here: `{key: value}`, or one `key: value` per line indented under the key"
                .to_owned(),
        );
    }
    if let Some(rest) = message.strip_prefix("invalid type: ")
        && let Some((_, expected)) = rest.split_once(", expected ")
    {
        return Some(format!("write {expected} here"));
    }
    if message.starts_with("mapping values are not allowed") {
        return Some(
            "check the indentation: a `key: value` line must line up with the keys of the mapping it belongs to, and a value with a `: ` in it needs quotes"
                .to_owned(),
        );
    }
    None
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
    // Some messages end with the position again (`… at line 12, column 9`).
    let first_line = match first_line.rsplit_once(" at line ") {
        Some((before, position))
            if position
                .split(", column ")
                .all(|part| !part.is_empty() && part.bytes().all(|b| b.is_ascii_digit())) =>
        {
            before
        }
        _ => first_line,
    };
    first_line.trim_end_matches('.').to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unknown_field_is_said_once_with_the_closest_field() {
        let message = clean_yaml_message(
            "unknown field `net`, expected one of nets, notNets, selector at line 12, column 9",
        );
        assert_eq!(short_message(&message), "unknown field `net`");
        assert_eq!(
            help_for(&message).as_deref(),
            Some("did you mean `nets`? The fields here are `nets`, `notNets`, `selector`")
        );
        // Fields that only apply to workloads are not offered.
        let workload = clean_yaml_message(
            "unknown field `namespace`, expected one of `selector`, `namespaceSelector`, `types`",
        );
        assert_eq!(
            help_for(&workload).as_deref(),
            Some("the fields here are `selector`, `types`")
        );
        let far = clean_yaml_message("unknown field `colour`, expected one of nets, selector");
        assert_eq!(
            help_for(&far).as_deref(),
            Some("the fields here are `nets`, `selector`")
        );
        assert!(
            help_for("mapping values are not allowed in this context")
                .is_some_and(|help| help.contains("indentation"))
        );
        // A value of the wrong type says what the field takes.
        assert_eq!(
            help_for("invalid type: integer, expected a string").as_deref(),
            Some("write a string here")
        );
        assert_eq!(
            help_for("invalid boolean").as_deref(),
            Some("write `true` or `false` here")
        );
    }
    use crate::source::Sources;
    use crate::spec::RawSpec;

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

    /// A file big enough to be parsed on several threads gives the resources in document
    /// order and its errors at their own lines, as parsing one document after another does.
    #[test]
    fn big_files_parse_in_parallel_in_document_order() {
        let count = PARALLEL_DOCUMENTS * 3 + 7;
        let mut text = String::new();
        for n in 0..count {
            if n == count - 5 {
                text.push_str("---\napiVersion: projectcalico.org/v3\nkind: GlobalNetworkPolicy\nmetadata:\n  name: broken\nspec:\n  bogus: 1\n");
            } else {
                text.push_str(&format!(
                    "---\n{}",
                    GNP.replace("name: a", &format!("name: p{n}"))
                ));
            }
        }
        let (resources, diagnostics) = parse(&text);
        let names: Vec<String> = resources
            .iter()
            .map(|r| format!("{:?}", r.metadata))
            .collect();
        assert_eq!(resources.len(), count - 1, "{diagnostics:?}");
        for (index, name) in names.iter().enumerate().take(count - 5) {
            assert!(name.contains(&format!("\"p{index}\"")), "{index}: {name}");
        }
        let line = 1 + 7 * (count - 5) + 6;
        assert_eq!(diagnostics.len(), 1, "{diagnostics:?}");
        assert!(
            diagnostics[0].starts_with(&format!("p.yaml:{line}:")),
            "{diagnostics:?}"
        );
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
        let text = "apiVersion: projectcalico.org/v3\nkind: List\nitems:\n- kind: GlobalNetworkSet\n  metadata: {name: s}\n  spec: {nets: [192.0.2.0/24]}\n- kind: HostEndpoint\n  metadata: {name: h}\n  spec: {node: node1, interfaceName: eth0}\n---\nkind: GlobalNetworkPolicyList\napiVersion: projectcalico.org/v3\nitems:\n- metadata: {name: p}\n  spec: {order: 1}\n---\n- apiVersion: projectcalico.org/v3\n  kind: GlobalNetworkPolicy\n  metadata: {name: q}\n";
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
    fn the_parser_s_own_words_are_said_in_the_writer_s() {
        for (text, expected) in [
            (
                "kind: GlobalNetworkPolicy\nmetadata:\n  name: a\n  annotations:\n    k:\n",
                "p.yaml:5:6: error: nothing is written here, and a value is needed",
            ),
            (
                "kind: GlobalNetworkPolicy\nspec:\n  order: 1e400\n",
                "p.yaml:3:10: error: `1e400` is not a finite number",
            ),
            (
                "kind: GlobalNetworkPolicy\nmetadata:\n  name: a\n  labels: {app: true}\n",
                "p.yaml:4:17: error: `true` is a boolean to YAML, and text is needed here",
            ),
            (
                "kind: HostEndpoint\nspec: {node: n}\n",
                "p.yaml:2:14: error: `n` is a boolean to YAML, and text is needed here",
            ),
            (
                "kind: GlobalNetworkPolicy\nmetadata: {name: 123}\n",
                "p.yaml:2:18: error: `123` is a number to YAML, and text is needed here",
            ),
            (
                "kind: GlobalNetworkPolicy\nmetadata: &a\n  labels: *a\n",
                "error: this alias refers to the anchor it is inside",
            ),
        ] {
            let (_, errors) = parse(text);
            assert!(
                errors.iter().any(|error| error.contains(expected)),
                "{expected} in {errors:?}"
            );
            assert!(
                !errors.iter().any(|error| error.contains("Option<")
                    || error.contains("configured policy")
                    || error.contains("weak recursion")),
                "{errors:?}"
            );
        }
    }

    #[test]
    fn a_tag_is_an_error_never_an_empty_value() {
        // Unquoted, `!has(x)` is a tag on an empty string: the selector would be `all()`.
        for (text, expected) in [
            (
                "kind: GlobalNetworkPolicy\nspec:\n  selector: !has(kubernetes.io/hostname)\n",
                "p.yaml:3:13: error: `!has(kubernetes.io/hostname)` is read as a YAML tag, not as text",
            ),
            (
                "kind: GlobalNetworkPolicy\nspec:\n  ingress:\n  - action: Allow\n    source: {selector: !has(blocked)}\n",
                "error: `!has(blocked)` is read as a YAML tag",
            ),
            (
                "kind: GlobalNetworkPolicy\nspec:\n  selector: !foo \"has(a)\"\n",
                "error: `!foo` is read as a YAML tag",
            ),
            (
                "kind: GlobalNetworkPolicy\nspec:\n  !foo selector: all()\n",
                "p.yaml:3:3: error:",
            ),
        ] {
            let (resources, errors) = parse(text);
            assert!(resources.is_empty(), "{resources:?}");
            assert!(
                errors.iter().any(|error| error.contains(expected)),
                "{expected} in {errors:?}"
            );
        }
        // YAML's own tags still mean what they say.
        let (resources, errors) = parse(
            "kind: GlobalNetworkPolicy\nmetadata: {name: !!str a}\nspec:\n  selector: \"!has(x)\"\n",
        );
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(resources.len(), 1);
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
    fn empty_documents_are_left_out() {
        let documents = |text: &'static str| -> Vec<&'static str> {
            split_documents(text).iter().map(|d| d.text).collect()
        };
        assert_eq!(documents("---\n---\na: 1\n"), ["---\na: 1\n"]);
        assert_eq!(
            documents("a: 1\n---\n\n# nothing\n---\nb: 2\n---\n"),
            ["a: 1\n", "---\nb: 2\n"]
        );
        assert_eq!(documents("%YAML 1.2\n---\n---\nc: 3\n"), ["---\nc: 3\n"]);
        // Parsed as well, each document's positions in the file's terms.
        let (resources, errors) = parse(
            "---\n---\napiVersion: projectcalico.org/v3\nkind: GlobalNetworkSet\nmetadata:\n  name: s\n---\n---\nkind: Nope\n",
        );
        assert_eq!(resources.len(), 1, "{errors:?}");
        assert!(
            errors.len() == 1 && errors[0].starts_with("p.yaml:9:7: error:"),
            "{errors:?}"
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
}
