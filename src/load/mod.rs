//! Loading policy files: which files are read, and how their YAML becomes `RawResource`s.
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
//!
//! The parts, each using only those after it: `read` does the file system work (and leaves
//! unparsed the files a caller says it knows), `parse` splits a file into documents and turns them into resources with their
//! diagnostics, `peek` is the lenient first pass and `decode` holds the serde visitors that
//! decode a resource (in one pass, or in the second of two).

mod decode;
mod parse;

pub use parse::{tag_span, yaml_error};
mod peek;
mod read;

pub use parse::{Document, MAX_DOCUMENTS, parse_file, split_documents};
pub use read::{
    Known, LoadOptions, Loaded, MAX_FILE_BYTES, is_policy_file_name, list_policy_files, load_paths,
    load_paths_known, load_paths_with, permission_problem, read_source, text_from_bytes,
};
