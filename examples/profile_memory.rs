//! What the daemon keeps between reloads, piece by piece, in heap bytes (counted by a global
//! allocator): the validated-file cache, the model, the compile memo, the rendered state and its memo.
//! `cargo run --release --example profile_memory 1000`.

#![allow(missing_docs)]

#[path = "../benches/common/mod.rs"]
mod common;

use common::heap::in_use;

#[global_allocator]
static ALLOCATOR: common::heap::Counting = common::heap::Counting;

fn mib(bytes: usize) -> String {
    format!("{:.1} MiB", bytes as f64 / 1024.0 / 1024.0)
}

fn main() {
    let policies: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(1_000);
    let dir = tempfile::tempdir().expect("temporary directory");
    std::fs::write(
        dir.path().join("bulk.yaml"),
        common::policy_set(policies, policies * 10),
    )
    .expect("write");
    let paths = [dir.path().to_path_buf()];
    let options = nodeport_guard::load::LoadOptions::default();
    let config = nodeport_guard::config::Config::default();
    let host = nodeport_guard::facts::HostFacts::minimal("n");
    let backend = nodeport_guard::dataplane::by_name("nftables").expect("backend");

    let start = in_use();
    let start_live = common::heap::live();
    let mut parse_cache = nodeport_guard::policy_set::Cache::default();
    let set = nodeport_guard::policy_set::load_cached(&paths, options, &mut parse_cache);
    assert!(set.is_valid());
    let with_set = in_use();
    let model = set.model;
    drop(set.sources);
    drop(set.diagnostics);
    let with_model = in_use();
    let mut memo = nodeport_guard::compile::Memo::default();
    let compiled = nodeport_guard::compile::compile_with(&model, &config, &host, &mut memo);
    let with_compiled = in_use();
    let mut render_memo = nodeport_guard::state::RenderMemo::default();
    let desired = backend.desired_with(&compiled.ruleset, &mut render_memo);
    let with_desired = in_use();
    drop(compiled);
    let kept = in_use();
    let kept_live = common::heap::live() - start_live;
    println!("{policies} policies, heap in use (what a daemon keeps):");
    println!(
        "  validated-file cache and model: {}",
        mib(with_model - start)
    );
    println!(
        "  set (sources, diagnostics; dropped after the reload): {}",
        mib(with_set - with_model)
    );
    println!(
        "  compiled ruleset (kept by the memos): {}",
        mib(with_compiled - with_model)
    );
    println!(
        "  desired state (lines): {}",
        mib(with_desired - with_compiled)
    );
    println!("  everything kept after the reload: {}", mib(kept - start));
    println!(
        "  of which a copy of the model (the last good one; it shares the cache's resources): {}",
        mib(model_bytes(&model, &mut || in_use()))
    );
    let lines: Vec<_> = desired
        .tables
        .values()
        .flat_map(|table| table.chains.values().flat_map(|rules| rules.iter()))
        .collect();
    let text: usize = lines.iter().map(|line| line.text.len()).sum();
    let members: usize = desired.sets.values().map(|set| set.members.len()).sum();
    println!(
        "  of the desired state: {} rule lines, {} of text; {members} set members",
        lines.len(),
        mib(text),
    );
    let before_pack = in_use();
    let started = std::time::Instant::now();
    let packed = nodeport_guard::state::PackedState::pack(&desired);
    let pack_ms = started.elapsed().as_secs_f64() * 1e3;
    let packed_heap = in_use() - before_pack;
    let started = std::time::Instant::now();
    let unpacked = packed.unpack();
    let unpack_ms = started.elapsed().as_secs_f64() * 1e3;
    assert!(unpacked == *desired, "unpacked as packed");
    drop(unpacked);
    println!(
        "  the desired state packed, as a resting daemon keeps it: {} ({} bytes), packed in {pack_ms:.1} ms, unpacked in {unpack_ms:.1} ms",
        mib(packed_heap),
        packed.size(),
    );
    drop(packed);
    let mut freed = in_use();
    let mut then = |what: &str| {
        let now = in_use();
        println!("  of it, {what}: {}", mib(freed - now));
        freed = now;
    };
    drop(render_memo);
    then("held by the render memo alone");
    drop(memo);
    then("held by the compile memo (and the render memo)");
    drop(desired);
    then("the desired state");
    drop(parse_cache);
    drop(model);
    then("the validated files and the model");
    println!("  allocations kept: {kept_live}");
    println!(
        "  sizes: Rule {} B, Match {} B, RuleLine {} B",
        std::mem::size_of::<nodeport_guard::ruleset::Rule>(),
        std::mem::size_of::<nodeport_guard::ruleset::Match>(),
        std::mem::size_of::<nodeport_guard::state::RuleLine>(),
    );
}

/// The bytes a clone of the model takes (what the daemon's last good model holds).
fn model_bytes(model: &nodeport_guard::model::Model, in_use: &mut dyn FnMut() -> usize) -> usize {
    let before = in_use();
    let copy = model.clone();
    let after = in_use();
    drop(copy);
    after - before
}
