//! The daemon's cached read of the policy directory (files that did not change are neither
//! parsed nor checked again) gives exactly what a full read gives, over random sequences of
//! edits: files added, removed and rewritten, so that positions move, names collide across
//! files, documents turn invalid or unparsable and back. The command line's cache in the state
//! directory (whole validated sets keyed by the digest of their files) is held to the same.

use std::path::Path;

use nodeport_guard::diagnostic::render_all;
use nodeport_guard::disk_cache::DiskCache;
use nodeport_guard::load::LoadOptions;
use nodeport_guard::policy_set::{self, Cache, PolicySet};
use proptest::prelude::*;

/// The documents a file is made of, by index.
fn document(index: u8) -> String {
    let policy = |name: &str, port: &str| {
        format!(
            "apiVersion: projectcalico.org/v3\nkind: GlobalNetworkPolicy\nmetadata:\n  name: {name}\nspec:\n  preDNAT: true\n  applyOnForward: true\n  order: 10\n  ingress:\n  - action: Allow\n    protocol: TCP\n    source:\n      nets: [192.0.2.0/24]\n    destination:\n      ports: [{port}]\n"
        )
    };
    match index % 10 {
        0 => policy("alpha", "30001"),
        1 => policy("beta", "30002"),
        // The same policy as `alpha`, as Calico stores it.
        2 => policy("default.alpha", "30003"),
        // An invalid port.
        3 => policy("gamma", "70000"),
        // An invalid name.
        4 => policy("Bad_Name", "30004"),
        5 => "apiVersion: projectcalico.org/v3\nkind: GlobalNetworkSet\nmetadata:\n  name: office\n  labels:\n    role: office\nspec:\n  nets: [198.51.100.0/24]\n".to_owned(),
        // A policy in a tier that only document 7 declares.
        6 => "apiVersion: projectcalico.org/v3\nkind: GlobalNetworkPolicy\nmetadata:\n  name: security.delta\nspec:\n  tier: security\n  preDNAT: true\n  applyOnForward: true\n  ingress:\n  - action: Deny\n    source:\n      selector: role == 'office'\n".to_owned(),
        7 => "apiVersion: projectcalico.org/v3\nkind: Tier\nmetadata:\n  name: security\nspec:\n  order: 50\n".to_owned(),
        // Not YAML.
        8 => "kind: GlobalNetworkPolicy\nspec: [\n".to_owned(),
        _ => "apiVersion: projectcalico.org/v3\nkind: HostEndpoint\nmetadata:\n  name: eth0-node\n  labels:\n    role: node\nspec:\n  node: node1\n  interfaceName: eth0\n  expectedIPs: [203.0.113.5]\n".to_owned(),
    }
}

#[derive(Clone, Debug)]
enum Edit {
    /// Writes file `n` (of five names) with these documents; an empty list removes it.
    Write(u8, Vec<u8>),
}

fn arb_edit() -> impl Strategy<Value = Edit> {
    (0u8..5, prop::collection::vec(0u8..10, 0..4)).prop_map(|(file, docs)| Edit::Write(file, docs))
}

fn apply(dir: &Path, edit: &Edit) {
    let Edit::Write(file, docs) = edit;
    let path = dir.join(format!("{file}-policies.yaml"));
    if docs.is_empty() {
        let _ = std::fs::remove_file(path);
        return;
    }
    let text: Vec<String> = docs.iter().map(|&doc| document(doc)).collect();
    std::fs::write(path, text.join("---\n")).expect("write a policy file");
}

/// What a read yields, compared whole: the model (with every origin), each diagnostic as
/// printed, and the fingerprint of the input.
fn outcome(set: &PolicySet) -> (String, String, String) {
    (
        format!("{:?}", set.model),
        render_all(&set.diagnostics, &set.sources),
        set.fingerprint.clone(),
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn a_cached_read_equals_a_full_one(edits in prop::collection::vec(arb_edit(), 1..12)) {
        let dir = tempfile::tempdir().unwrap();
        let paths = [dir.path().to_path_buf()];
        let options = LoadOptions::default();
        let mut cache = Cache::default();
        let state = tempfile::tempdir().unwrap();
        let disk = DiskCache::new(state.path());
        for edit in &edits {
            apply(dir.path(), edit);
            let cached = policy_set::load_cached(&paths, options, &mut cache);
            let full = policy_set::load_with(&paths, options);
            prop_assert_eq!(outcome(&cached), outcome(&full));
            // Through the disk cache: a miss then (for a valid set) a hit, and a hit of a set
            // kept before the last edits when the edits bring its files back.
            for _ in 0..2 {
                let persisted = policy_set::load_through(&paths, options, &disk);
                prop_assert_eq!(outcome(&persisted), outcome(&full));
            }
            // The files as an apply records them, through the same cache.
            let files = nodeport_guard::counters::policy_files(&full.sources);
            let recorded = policy_set::from_files_through(&files, options.now, &disk);
            prop_assert_eq!(outcome(&recorded), outcome(&policy_set::from_files(&files, options.now)));
        }
    }
}

#[test]
fn an_unchanged_file_is_kept_and_a_changed_or_broken_one_is_read_again() {
    let dir = tempfile::tempdir().unwrap();
    let paths = [dir.path().to_path_buf()];
    let options = LoadOptions::default();
    let mut cache = Cache::default();
    apply(dir.path(), &Edit::Write(1, vec![0]));
    apply(dir.path(), &Edit::Write(2, vec![1]));
    assert!(policy_set::load_cached(&paths, options, &mut cache).is_valid());
    assert_eq!(cache.len(), 2);
    // A broken file and an invalid one are never kept: their diagnostics must come back on
    // every read.
    apply(dir.path(), &Edit::Write(3, vec![8]));
    apply(dir.path(), &Edit::Write(4, vec![3]));
    for _ in 0..2 {
        let set = policy_set::load_cached(&paths, options, &mut cache);
        assert!(!set.is_valid());
        assert_eq!(cache.len(), 2);
    }
    // A name that collides with a kept file's is reported on the kept file's resource when the
    // new one comes first, though the kept file is not checked again.
    apply(dir.path(), &Edit::Write(0, vec![2]));
    let set = policy_set::load_cached(&paths, options, &mut cache);
    let printed = render_all(&set.diagnostics, &set.sources);
    assert!(printed.contains("1-policies.yaml:4:9: error: another `GlobalNetworkPolicy` is already named `default.alpha`"), "{printed}");
}
