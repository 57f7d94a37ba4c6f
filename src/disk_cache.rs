//! The command line's cache in the state directory: the validated policy sets of the last
//! commands, keyed by the digest of their files ([`policy_set::files_key`]), so that a `plan`
//! or `apply` neither parses nor checks again a directory it already read, nor the files the
//! last apply recorded (what the cut-off warning and the established-connection count are
//! computed from).
//!
//! A cache is only a shortcut. Each entry is one file, `<state-dir>/cache/validated-<key>.json`:
//! a first line with the SHA-256 of the rest, then the JSON of what validation made of the
//! files. A missing entry, one of another version (the key holds the version), one whose
//! checksum or content does not hold, or one that cannot be read is a miss, and the files are
//! read in full; a cache that cannot be written is logged at debug level and forgotten. Entries
//! are written whole (a temporary file, then a rename), readable by the owner only, and only the
//! [`KEEP`] most recently used are kept.

use std::io::Write as _;
use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _};
use std::path::{Path, PathBuf};

use crate::policy_set::{self, ValidatedFiles};

/// How many validated sets are kept: the policy directory's and the last apply's, with room
/// for a plan made between two edits.
pub const KEEP: usize = 4;

/// The cache of validated policy sets under a state directory.
pub struct DiskCache {
    dir: PathBuf,
}

impl DiskCache {
    /// The cache under the state directory `state_dir`.
    pub fn new(state_dir: &Path) -> DiskCache {
        DiskCache {
            dir: state_dir.join("cache"),
        }
    }

    fn entry(&self, key: &str) -> PathBuf {
        self.dir.join(format!("validated-{key}.json"))
    }

    fn read(&self, key: &str) -> Result<Option<ValidatedFiles>, String> {
        let path = self.entry(key);
        let bytes = match std::fs::read(&path) {
            Ok(bytes) => bytes,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(error) => return Err(format!("cannot read `{}`: {error}", path.display())),
        };
        let (sum, body) = bytes
            .split_first_chunk::<SUM_LINE>()
            .ok_or_else(|| format!("`{}` is truncated", path.display()))?;
        if *sum != sum_line(body) {
            return Err(format!("`{}` does not match its checksum", path.display()));
        }
        let value = serde_json::from_slice(body)
            .map_err(|error| format!("`{}` is damaged: {error}", path.display()))?;
        // Used now: it is among the last to be pruned.
        if let Ok(file) = std::fs::File::options().write(true).open(&path) {
            file.set_modified(std::time::SystemTime::now()).ok();
        }
        Ok(Some(value))
    }

    fn write(&self, key: &str, value: &ValidatedFiles) -> anyhow::Result<()> {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&self.dir)?;
        let body = serde_json::to_vec(value)?;
        let path = self.entry(key);
        // Named after this process: two commands writing at once each rename a whole file.
        let temporary = self
            .dir
            .join(format!(".validated-{key}.{}.tmp", std::process::id()));
        let written = std::fs::File::options()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&temporary)
            .and_then(|mut file| {
                file.write_all(&sum_line(&body))?;
                file.write_all(&body)
            })
            .and_then(|()| std::fs::rename(&temporary, &path));
        if written.is_err() {
            std::fs::remove_file(&temporary).ok();
        }
        written?;
        self.prune();
        Ok(())
    }

    /// Removes all but the [`KEEP`] entries used last.
    fn prune(&self) {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return;
        };
        let mut kept: Vec<(std::time::SystemTime, PathBuf)> = entries
            .filter_map(Result::ok)
            .filter(|entry| {
                let name = entry.file_name();
                let name = name.to_string_lossy();
                name.starts_with("validated-") && name.ends_with(".json")
            })
            .filter_map(|entry| Some((entry.metadata().ok()?.modified().ok()?, entry.path())))
            .collect();
        kept.sort_by_key(|(modified, _)| std::cmp::Reverse(*modified));
        for (_, path) in kept.iter().skip(KEEP) {
            std::fs::remove_file(path).ok();
        }
    }
}

impl policy_set::Store for DiskCache {
    fn get(&self, key: &str) -> Option<ValidatedFiles> {
        self.read(key)
            .inspect_err(|error| tracing::debug!("ignoring the cached validation: {error}"))
            .ok()
            .flatten()
    }

    fn put(&self, key: &str, value: &ValidatedFiles) {
        if let Err(error) = self.write(key, value) {
            tracing::debug!("cannot cache the validated policies: {error:#}");
        }
    }
}

/// Length of the checksum line: 43 characters of URL-safe base64 and a newline.
const SUM_LINE: usize = 44;

/// The checksum line of `body`.
fn sum_line(body: &[u8]) -> [u8; SUM_LINE] {
    use base64::Engine as _;
    use sha2::Digest as _;
    let mut line = [b'\n'; SUM_LINE];
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .encode_slice(sha2::Sha256::digest(body), &mut line[..SUM_LINE - 1])
        .expect("43 characters hold 32 bytes in base64");
    line
}
