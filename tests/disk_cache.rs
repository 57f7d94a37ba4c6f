//! The command line's cache of validated policy sets in the state directory is only a
//! shortcut: a missing, stale, foreign, damaged or unwritable cache gives what a full read
//! gives, and a kept set is used only for exactly its files.

use std::cell::Cell;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};

use nodeport_guard::diagnostic::render_all;
use nodeport_guard::disk_cache::{DiskCache, KEEP};
use nodeport_guard::load::LoadOptions;
use nodeport_guard::policy_set::{self, PolicySet, Store, ValidatedFiles};

fn policy(name: &str, port: u16) -> String {
    format!(
        "apiVersion: projectcalico.org/v3\nkind: GlobalNetworkPolicy\nmetadata:\n  name: {name}\n  annotations:\n    nodeport-guard.io/expires: \"2999-01-01T00:00:00Z\"\nspec:\n  preDNAT: true\n  applyOnForward: true\n  order: 10.1\n  selector: role == 'node'\n  ingress:\n  - action: Allow\n    protocol: TCP\n    source:\n      nets: [192.0.2.0/24]\n    destination:\n      ports: [{port}]\n  - action: Deny\n    source:\n      nets: [2001:db8::/64]\n      selector: role == 'office'\n"
    )
}

/// A store that counts what the disk cache gave back.
struct Counting<'a> {
    disk: &'a DiskCache,
    hits: Cell<usize>,
}

impl Store for Counting<'_> {
    fn get(&self, key: &str) -> Option<ValidatedFiles> {
        let kept = self.disk.get(key);
        self.hits.set(self.hits.get() + usize::from(kept.is_some()));
        kept
    }

    fn put(&self, key: &str, value: &ValidatedFiles) {
        self.disk.put(key, value);
    }
}

fn outcome(set: &PolicySet) -> (String, String, String) {
    (
        format!("{:?}", set.model),
        render_all(&set.diagnostics, &set.sources),
        set.fingerprint.clone(),
    )
}

struct Site {
    policies: tempfile::TempDir,
    state: tempfile::TempDir,
}

impl Site {
    fn new() -> Site {
        let site = Site {
            policies: tempfile::tempdir().expect("test setup"),
            state: tempfile::tempdir().expect("test setup"),
        };
        site.write("a.yaml", &policy("alpha", 30001));
        let set = "apiVersion: projectcalico.org/v3\nkind: GlobalNetworkSet\nmetadata:\n  name: office\n  labels:\n    role: office\nspec:\n  nets: [198.51.100.0/24, 2001:db8:1::/48]\n";
        site.write(
            "b.yaml",
            &format!(
                "{}---\n{}---\n{set}",
                policy("beta", 30002),
                policy("gamma", 30003)
            ),
        );
        site
    }

    fn write(&self, name: &str, text: &str) {
        std::fs::write(self.policies.path().join(name), text).expect("test setup");
    }

    fn paths(&self) -> [PathBuf; 1] {
        [self.policies.path().to_path_buf()]
    }

    /// A read through the cache, checked against a full read; the hits it made.
    fn read(&self, disk: &DiskCache) -> usize {
        let counting = Counting {
            disk,
            hits: Cell::new(0),
        };
        let options = LoadOptions::default();
        let cached = policy_set::load_through(&self.paths(), options, &counting);
        let full = policy_set::load_with(&self.paths(), options);
        assert_eq!(outcome(&cached), outcome(&full));
        counting.hits.get()
    }

    fn entries(&self) -> Vec<PathBuf> {
        let Ok(dir) = std::fs::read_dir(self.state.path().join("cache")) else {
            return Vec::new();
        };
        let mut entries: Vec<PathBuf> =
            dir.map(|entry| entry.expect("test setup").path()).collect();
        entries.sort();
        entries
    }
}

fn only_entry(site: &Site) -> PathBuf {
    let entries = site.entries();
    assert_eq!(entries.len(), 1, "{entries:?}");
    entries[0].clone()
}

#[test]
fn a_set_read_once_is_kept_owner_only_and_used_the_next_time() {
    let site = Site::new();
    let disk = DiskCache::new(site.state.path());
    assert_eq!(site.read(&disk), 0, "nothing is kept yet");
    let entry = only_entry(&site);
    let mode = |path: &Path| {
        std::fs::metadata(path)
            .expect("test setup")
            .permissions()
            .mode()
            & 0o777
    };
    assert_eq!(mode(&entry), 0o600);
    assert_eq!(mode(entry.parent().expect("test setup")), 0o700);
    assert_eq!(site.read(&disk), 1);
    // The files an apply records are the same set.
    let full = policy_set::load_with(&site.paths(), LoadOptions::default());
    let files = nodeport_guard::counters::policy_files(&full.sources);
    let counting = Counting {
        disk: &disk,
        hits: Cell::new(0),
    };
    let recorded = policy_set::from_files_through(&files, full.now, &counting);
    assert_eq!(counting.hits.get(), 1);
    assert_eq!(outcome(&recorded), outcome(&full));
}

#[test]
fn a_changed_file_is_a_miss_and_the_old_set_stays_for_its_files() {
    let site = Site::new();
    let disk = DiskCache::new(site.state.path());
    site.read(&disk);
    site.write("a.yaml", &policy("alpha", 30011));
    assert_eq!(site.read(&disk), 0, "stale: other files");
    assert_eq!(site.entries().len(), 2);
    site.write("a.yaml", &policy("alpha", 30001));
    assert_eq!(site.read(&disk), 1, "the first files again");
    // A renamed file is other input too (paths decide the files' ids and the diagnostics).
    std::fs::rename(
        site.policies.path().join("a.yaml"),
        site.policies.path().join("c.yaml"),
    )
    .expect("test setup");
    assert_eq!(site.read(&disk), 0);
}

#[test]
fn a_damaged_entry_is_a_miss_and_is_written_again() {
    let site = Site::new();
    let disk = DiskCache::new(site.state.path());
    site.read(&disk);
    let entry = only_entry(&site);
    let good = std::fs::read(&entry).expect("test setup");
    let mut flipped = good.clone();
    let last = flipped.len() - 2;
    flipped[last] ^= 0x01;
    let damaged: [Vec<u8>; 5] = [
        flipped,
        good[..10].to_vec(),
        Vec::new(),
        b"garbage".to_vec(),
        // A sound checksum over something that is not a validated set.
        [
            checksum_line(b"{\"validated\": 1}"),
            b"{\"validated\": 1}".to_vec(),
        ]
        .concat(),
    ];
    for bytes in damaged {
        std::fs::write(&entry, &bytes).expect("test setup");
        assert_eq!(site.read(&disk), 0, "{:?}", String::from_utf8_lossy(&bytes));
        assert_eq!(
            std::fs::read(&entry).expect("test setup"),
            good,
            "written again whole"
        );
    }
    assert_eq!(
        good[..44].to_vec(),
        checksum_line(&good[44..]),
        "the format the damaged entries mimic"
    );
}

/// The checksum line the cache writes: the URL-safe base64 of the SHA-256 of the body.
fn checksum_line(body: &[u8]) -> Vec<u8> {
    use base64::Engine as _;
    use sha2::Digest as _;
    let mut line = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .encode(sha2::Sha256::digest(body))
        .into_bytes();
    line.push(b'\n');
    line
}

#[test]
fn an_entry_of_other_files_is_never_read_for_these() {
    let site = Site::new();
    let disk = DiskCache::new(site.state.path());
    site.read(&disk);
    let entry = only_entry(&site);
    // What another version (or other files) kept lies under another key: never consulted.
    let foreign =
        entry.with_file_name("validated-AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA.json");
    std::fs::rename(&entry, &foreign).expect("test setup");
    assert_eq!(site.read(&disk), 0);
}

#[test]
fn an_invalid_set_is_not_kept_and_an_unwritable_cache_changes_nothing() {
    let site = Site::new();
    site.write("c.yaml", &policy("Bad_Name", 30004));
    let disk = DiskCache::new(site.state.path());
    assert_eq!(site.read(&disk), 0);
    assert_eq!(site.read(&disk), 0);
    assert!(site.entries().is_empty());
    // A state directory that is a file: nothing can be kept, every read is a full one.
    std::fs::remove_file(site.policies.path().join("c.yaml")).expect("test setup");
    let file = site.state.path().join("not-a-dir");
    std::fs::write(&file, "").expect("test setup");
    let blocked = DiskCache::new(&file);
    assert_eq!(site.read(&blocked), 0);
    assert_eq!(site.read(&blocked), 0);
}

#[test]
fn only_the_sets_used_last_are_kept() {
    let site = Site::new();
    let disk = DiskCache::new(site.state.path());
    for port in 0..(KEEP as u16 + 3) {
        site.write("a.yaml", &policy("alpha", 30100 + port));
        site.read(&disk);
    }
    assert_eq!(site.entries().len(), KEEP);
}

#[test]
fn a_sound_entry_of_more_files_under_these_files_key_is_a_miss() {
    let site = Site::new();
    let disk = DiskCache::new(site.state.path());
    site.read(&disk);
    let two_files = std::fs::read(only_entry(&site)).expect("test setup");
    std::fs::remove_file(site.policies.path().join("b.yaml")).expect("test setup");
    site.read(&disk);
    let one_file = site
        .entries()
        .into_iter()
        .find(|entry| std::fs::read(entry).expect("test setup") != two_files)
        .expect("test setup");
    // What only a collision or a hand could do: its resources point into a file not read.
    std::fs::write(&one_file, &two_files).expect("test setup");
    // Given back, not used (the read equals a full one), and replaced by this set's.
    site.read(&disk);
    assert_ne!(std::fs::read(&one_file).expect("test setup"), two_files);
    assert_eq!(site.read(&disk), 1);
}
