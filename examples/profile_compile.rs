//! Compiles and renders a large generated policy set once, for profilers
//! (`perf record target/release/examples/profile_compile`).

#![allow(missing_docs)]

#[path = "../benches/common/mod.rs"]
mod common;

fn main() {
    let policies: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(10_000);
    let mut sources = nodeport_guard::source::Sources::new();
    let id = sources.add(nodeport_guard::source::SourceFile::new(
        "g.yaml",
        common::policy_set(policies, policies * 10),
    ));
    let loading = std::time::Instant::now();
    let (resources, _) = nodeport_guard::load::parse_file(id, sources.get(id));
    let parse_time = loading.elapsed();
    let resources: Vec<_> = resources.into_iter().map(|r| (id, r)).collect();
    let (model, _) = nodeport_guard::validate::validate(&sources, &resources);
    eprintln!(
        "parse {:?}, validate {:?}",
        parse_time,
        loading.elapsed() - parse_time
    );
    let started = std::time::Instant::now();
    let compiled = nodeport_guard::compile::compile(
        &model,
        &nodeport_guard::config::Config::default(),
        &nodeport_guard::facts::HostFacts::minimal("n"),
    );
    let compile_time = started.elapsed();
    let text = nodeport_guard::dataplane::iptables::render::render_all(&compiled.ruleset);
    eprintln!(
        "compile {:?}, render {:?}, {} bytes",
        compile_time,
        started.elapsed() - compile_time,
        text.len()
    );
    let desiring = std::time::Instant::now();
    let desired = nodeport_guard::state::desired(
        &compiled.ruleset,
        &nodeport_guard::dataplane::iptables::SPELLING,
    );
    eprintln!(
        "desired state (rendered and hashed, what plan and apply compare) {:?}, {} tables",
        desiring.elapsed(),
        desired.tables.len()
    );
    let mut memo = nodeport_guard::compile::Memo::default();
    let config = nodeport_guard::config::Config::default();
    let host = nodeport_guard::facts::HostFacts::minimal("n");
    let mut render_memo = nodeport_guard::state::RenderMemo::default();
    for round in 0..std::env::args()
        .nth(2)
        .and_then(|a| a.parse().ok())
        .unwrap_or(3)
    {
        let started = std::time::Instant::now();
        let again = nodeport_guard::compile::compile_with(&model, &config, &host, &mut memo);
        let compiled_in = started.elapsed();
        let started = std::time::Instant::now();
        nodeport_guard::state::desired_with(
            &again.ruleset,
            &nodeport_guard::dataplane::iptables::SPELLING,
            &mut render_memo,
        );
        eprintln!(
            "incremental round {round}: compile {compiled_in:?} ({:?}), render {:?} ({:?})",
            memo.last_compile(),
            started.elapsed(),
            render_memo.last_render()
        );
    }
    breakdown(&compiled);
}

#[allow(dead_code)]
fn breakdown(compiled: &nodeport_guard::compile::Compiled) {
    let started = std::time::Instant::now();
    let sets: Vec<_> = compiled
        .ruleset
        .families
        .iter()
        .flat_map(|f| f.sets.iter().cloned())
        .collect();
    let s = nodeport_guard::dataplane::iptables::ipset::render_sets(&sets);
    eprintln!("sets {:?} {}", started.elapsed(), s.len());
    for family in &compiled.ruleset.families {
        for table in &family.tables {
            let started = std::time::Instant::now();
            let t = nodeport_guard::dataplane::iptables::render::render_table(table, family.family);
            eprintln!("table {:?} {}", started.elapsed(), t.len());
            let started = std::time::Instant::now();
            let state = nodeport_guard::state::desired(
                &compiled.ruleset,
                &nodeport_guard::dataplane::iptables::SPELLING,
            );
            eprintln!(
                "desired state {:?} {}",
                started.elapsed(),
                state.tables.len()
            );
        }
    }
}
