//! Reading policy files, the IO half of loading: which files are read, how large they may be,
//! who may write them, how their bytes become text, and the cache of what was parsed before.

use std::io::Read as _;
use std::path::{Path, PathBuf};

use super::parse::parse_file;
use crate::diagnostic::Diagnostic;
use crate::source::{FileId, SourceFile, Sources};
use crate::spec::RawResource;

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
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LoadOptions {
    /// Refuse (rather than warn about) policy files and directories that someone other than
    /// root may write.
    pub strict_permissions: bool,
    /// The instant the files are read at: what has expired by then is left out of the model
    /// (`nodeport-guard.io/expires`). The caller reads its clock once and puts it here; the
    /// daemon sets it at each reload, tests set what they need.
    pub now: jiff::Timestamp,
}

impl Default for LoadOptions {
    /// Not strict, at the system clock's present.
    fn default() -> LoadOptions {
        LoadOptions {
            strict_permissions: false,
            now: jiff::Timestamp::now(),
        }
    }
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

/// Asked for each file read, before it is parsed: whether the caller already knows what the
/// file's text holds (it keeps what it validated of an earlier read), so that the file is read
/// but not parsed. Its arguments are the file's path, its id in this read, and its text.
pub type Known<'a> = &'a mut dyn FnMut(&Path, FileId, &str) -> bool;

/// [`load_paths_with`], leaving unparsed the files `known` says it knows (their sources are
/// read, their resources are not in the result).
pub fn load_paths_known(paths: &[PathBuf], options: LoadOptions, known: Known<'_>) -> Loaded {
    load(paths, options, Some(known))
}

fn load(paths: &[PathBuf], options: LoadOptions, known: Option<Known<'_>>) -> Loaded {
    let mut read = Read {
        loaded: Loaded::default(),
        known,
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
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                let id = read
                    .loaded
                    .sources
                    .add(SourceFile::new(path, String::new()));
                read.loaded.diagnostics.push(
                    Diagnostic::file_error(
                        id,
                        format!("`{}` does not exist (no such file or directory)", path.display()),
                    )
                    .with_help(
                        "name an existing policy file or directory; the policy directory is `--policies DIR`, `NODEPORT_GUARD_POLICIES` or `policiesDir` in the config file",
                    ),
                );
            }
            _ => read.load_one(path, options),
        }
    }
    read.loaded
}

/// One read of the policy files.
struct Read<'a> {
    loaded: Loaded,
    /// Which files the caller knows and need not be parsed.
    known: Option<Known<'a>>,
}

impl Read<'_> {
    fn load_one(&mut self, path: &Path, options: LoadOptions) {
        let loaded = &mut self.loaded;
        match read_source(path) {
            Ok(text) => {
                let source = SourceFile::new(path, text);
                let source = if readable_by_everyone(path) {
                    source
                } else {
                    source.unquotable()
                };
                let id = loaded.sources.add(source);
                check_permissions(loaded, path, Some(id), options);
                let text = &loaded.sources.get(id).text;
                if let Some(known) = &mut self.known
                    && known(path, id, text)
                {
                    return;
                }
                let (resources, diagnostics) = parse_file(id, loaded.sources.get(id));
                loaded
                    .resources
                    .extend(resources.into_iter().map(|resource| (id, resource)));
                loaded.diagnostics.extend(diagnostics);
            }
            Err(message) => {
                let id = loaded.sources.add(SourceFile::new(path, String::new()));
                loaded.diagnostics.push(Diagnostic::file_error(id, message).with_help(
                    "make it a readable file (a symbolic link must lead to one), or move it out of the policy directory",
                ));
            }
        }
    }
}

/// Whether every user may read the file `path` leads to (links followed): diagnostics quote
/// only the lines of such files.
fn readable_by_everyone(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::metadata(path).is_ok_and(|metadata| metadata.permissions().mode() & 0o004 != 0)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_that_does_not_exist_is_named_with_what_to_do() {
        let missing = Path::new("/nonexistent/nodeport-guard-policies");
        let loaded = load_paths(&[missing.to_path_buf()]);
        assert_eq!(loaded.diagnostics.len(), 1);
        let diagnostic = &loaded.diagnostics[0];
        assert!(diagnostic.is_error());
        let text = diagnostic.render(&loaded.sources);
        assert!(
            text.contains("`/nonexistent/nodeport-guard-policies` does not exist"),
            "{text}"
        );
        assert!(
            text.contains("help: name an existing policy file or directory"),
            "{text}"
        );
    }

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
