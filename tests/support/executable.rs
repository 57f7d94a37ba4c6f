//! Writing a script or binary that a test runs at once.

use std::path::Path;
use std::process::Command;

/// Writes `contents` to `path` as an executable (mode 0755) that can be run straight away.
///
/// A file this process writes itself is, for a moment, held open for writing by every child
/// that another test thread forks meanwhile (the copied descriptor lives until that child's
/// `exec`), and running the file in that moment fails with "Text file busy" — a scriptlet
/// that swallows the error then looks as if it never called the fake. So this process writes
/// a staging copy and a child (`install`) writes the executable: no descriptor of this
/// process is ever open on it.
pub fn write_executable(path: &Path, contents: impl AsRef<[u8]>) {
    let staging = path.with_extension("staging");
    std::fs::write(&staging, contents)
        .unwrap_or_else(|e| panic!("write {}: {e}", staging.display()));
    let status = Command::new("install")
        .arg("-m")
        .arg("0755")
        .arg(&staging)
        .arg(path)
        .status()
        .unwrap_or_else(|e| panic!("run install: {e}"));
    assert!(
        status.success(),
        "install {} failed: {status}",
        path.display()
    );
    std::fs::remove_file(&staging).unwrap_or_else(|e| panic!("remove {}: {e}", staging.display()));
}
