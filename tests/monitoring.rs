//! The monitoring files in `packaging/monitoring/` load as shipped and ask only for what the
//! daemon exports: `promtool` accepts the alerting rules and their unit tests pass, the
//! `PrometheusRule` is the rules file for the Prometheus Operator (generated from it), the
//! Grafana dashboard has the structure Grafana expects and queries `promtool` parses, and every
//! metric and label the rules and the dashboard name is one a running daemon serves (a kernel
//! test scrapes one), so a renamed metric breaks the build, not a fleet's alerts.
//!
//! The rules' groups other than `nodeport-guard` alert on metrics that other features add
//! (grants, the exposure audit); for those the scrape check holds each metric to the scrape
//! once `src/` names it, and reports it as not exported yet until then.
//!
//! Tests that need `promtool` (Debian package `prometheus`) skip with a printed reason when it
//! is missing, unless `NPG_REQUIRE_KERNEL_TESTS=1` is set (CI sets it). To regenerate the
//! `PrometheusRule` after editing the rules file: `NPG_BLESS=1 cargo test --test monitoring`.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsStr;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use regex::Regex;
use serde_json::Value;
use support::daemon::{Daemon, counting_guard, http_get_ok, parse_prometheus};
use support::fixtures::Whitelist;
use support::{Backend, Lab, POLL, addr, ports, sa, wait_until};

const RULES: &str = "packaging/monitoring/nodeport-guard.rules.yml";
const RULES_TESTS: &str = "packaging/monitoring/nodeport-guard.rules.test.yml";
const PROMETHEUS_RULE: &str = "packaging/monitoring/prometheusrule.yaml";
const DASHBOARD: &str = "packaging/monitoring/nodeport-guard.dashboard.json";

/// The rule group whose every metric the daemon exports today; the others wait for features.
const CORE_GROUP: &str = "nodeport-guard";

/// Series Prometheus makes itself rather than scraping them.
const PROMETHEUS_SERIES: [&str; 1] = ["up"];

/// Labels Prometheus adds to every scraped series (the target's).
const TARGET_LABELS: [&str; 2] = ["instance", "job"];

/// What the `PrometheusRule` puts before the rules file's `groups:`.
const PROMETHEUS_RULE_HEADER: &str = "\
# Generated from nodeport-guard.rules.yml by `NPG_BLESS=1 cargo test --test monitoring`:
# edit that file, not this one. The same alerts as a PrometheusRule for the Prometheus Operator
# (kube-prometheus); its namespace is the DaemonSet's (packaging/kubernetes/).
apiVersion: monitoring.coreos.com/v1
kind: PrometheusRule
metadata:
  name: nodeport-guard
  namespace: kube-system
  labels:
    app.kubernetes.io/name: nodeport-guard
    prometheus: k8s
    role: alert-rules
spec:
";

// ---------------------------------------------------------------------------------------------
// Helpers

/// Whether CI demands that every test runs (`NPG_REQUIRE_KERNEL_TESTS=1`).
fn everything_required() -> bool {
    std::env::var("NPG_REQUIRE_KERNEL_TESTS").is_ok_and(|value| value == "1")
}

/// Whether `promtool` is there; else a printed skip (a failure when every test must run).
fn have_promtool() -> bool {
    let found = support::cmd::find_program("promtool").is_some();
    if !found {
        assert!(
            !everything_required(),
            "NPG_REQUIRE_KERNEL_TESTS=1 is set, but `promtool` is not installed (Debian package `prometheus`)"
        );
        eprintln!("skipped: `promtool` is not installed (Debian package `prometheus`)");
    }
    found
}

fn read(path: impl AsRef<Path>) -> String {
    let path = path.as_ref();
    std::fs::read_to_string(path)
        .unwrap_or_else(|error| panic!("cannot read `{}`: {error}", path.display()))
}

fn yaml(path: &str) -> Value {
    serde_saphyr::from_str(&read(path))
        .unwrap_or_else(|error| panic!("`{path}` is not valid YAML: {error}"))
}

fn dashboard() -> Value {
    serde_json::from_str(&read(DASHBOARD))
        .unwrap_or_else(|error| panic!("`{DASHBOARD}` is not valid JSON: {error}"))
}

/// The `PrometheusRule` text the rules file makes: the header, then its `groups:` on, under
/// `spec:`.
fn prometheus_rule_from(rules: &str) -> String {
    let start = rules
        .find("\ngroups:")
        .map(|at| at + 1)
        .expect("the rules file has `groups:`");
    let mut text = PROMETHEUS_RULE_HEADER.to_owned();
    for line in rules[start..].lines() {
        if !line.is_empty() {
            text.push_str("  ");
        }
        text.push_str(line);
        text.push('\n');
    }
    text
}

/// The dashboard's panels, rows' nested panels included.
fn panels(dashboard: &Value) -> Vec<&Value> {
    let mut all = Vec::new();
    for panel in dashboard["panels"].as_array().expect("panels") {
        all.push(panel);
        if let Some(nested) = panel["panels"].as_array() {
            all.extend(nested);
        }
    }
    all
}

/// Every query of the dashboard.
fn dashboard_queries(dashboard: &Value) -> Vec<(String, String)> {
    panels(dashboard)
        .into_iter()
        .filter(|panel| panel["type"] != "row")
        .flat_map(|panel| panel["targets"].as_array().cloned().unwrap_or_default())
        .map(|target| {
            (
                target["expr"].as_str().unwrap_or_default().to_owned(),
                target["legendFormat"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
            )
        })
        .collect()
}

/// What a set of queries asks of the daemon's metrics.
#[derive(Debug, Default)]
struct Uses {
    /// Metric names, with the labels their selectors match on.
    metrics: BTreeMap<String, BTreeSet<String>>,
    /// Labels grouped by (`by`, `on`), templated (`$labels.x`) or shown (`{{x}}`): each must be
    /// some metric's. Labels only taken away (`without`, `ignoring`) may be absent, harmlessly.
    labels: BTreeSet<String>,
}

impl Uses {
    fn expression(&mut self, expr: &str) {
        let selector = Regex::new(r"\b([a-z_][a-z0-9_]*)\s*(\{[^}]*\})?").expect("regex");
        let matcher = Regex::new(r#"([a-zA-Z_]\w*)\s*(?:=~|!~|!=|=)\s*""#).expect("regex");
        let grouping =
            Regex::new(r"\b(?:by|on|group_left|group_right)\s*\(([^)]*)\)").expect("regex");
        for found in selector.captures_iter(expr) {
            let name = &found[1];
            if !(name.starts_with("nodeport_guard_") || PROMETHEUS_SERIES.contains(&name)) {
                continue;
            }
            let labels = self.metrics.entry(name.to_owned()).or_default();
            if let Some(braces) = found.get(2) {
                labels.extend(
                    matcher
                        .captures_iter(braces.as_str())
                        .map(|m| m[1].to_owned()),
                );
            }
        }
        for found in grouping.captures_iter(expr) {
            self.labels.extend(
                found[1]
                    .split(',')
                    .map(str::trim)
                    .filter(|label| !label.is_empty())
                    .map(str::to_owned),
            );
        }
    }

    fn template(&mut self, text: &str) {
        let templated = Regex::new(r"\$labels\.(\w+)|\{\{\s*(\w+)\s*\}\}").expect("regex");
        for found in templated.captures_iter(text) {
            let label = found.get(1).or(found.get(2)).expect("a group");
            self.labels.insert(label.as_str().to_owned());
        }
    }
}

/// What each rule group asks of the daemon.
fn rule_uses() -> BTreeMap<String, Uses> {
    let rules = yaml(RULES);
    let mut uses = BTreeMap::new();
    for group in rules["groups"].as_array().expect("groups") {
        let name = group["name"].as_str().expect("a group name").to_owned();
        let group_uses: &mut Uses = uses.entry(name).or_default();
        for rule in group["rules"].as_array().expect("rules") {
            group_uses.expression(rule["expr"].as_str().expect("expr"));
            for annotation in rule["annotations"]
                .as_object()
                .expect("annotations")
                .values()
            {
                group_uses.template(annotation.as_str().unwrap_or_default());
            }
        }
    }
    uses
}

/// What the dashboard asks of the daemon.
fn dashboard_uses() -> Uses {
    let mut uses = Uses::default();
    let dashboard = dashboard();
    for (expr, legend) in dashboard_queries(&dashboard) {
        uses.expression(&expr);
        uses.template(&legend);
    }
    for variable in dashboard["templating"]["list"]
        .as_array()
        .expect("variables")
    {
        if let Some(query) = variable["query"]["query"].as_str() {
            let inner = query
                .strip_prefix("label_values(")
                .and_then(|q| q.strip_suffix(')'))
                .unwrap_or(query);
            if let Some((metric, label)) = inner.split_once(',') {
                uses.expression(metric.trim());
                uses.labels.insert(label.trim().to_owned());
            }
        }
    }
    uses
}

/// Whether some file under `src/` names `metric` in a string.
fn source_names(metric: &str) -> bool {
    fn walk(dir: &Path, needle: &str) -> bool {
        std::fs::read_dir(dir).expect("src/").any(|entry| {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                walk(&path, needle)
            } else {
                path.extension().is_some_and(|ext| ext == "rs") && names(&read(&path), needle)
            }
        })
    }
    /// Whether `text` holds `metric` as a whole name, not as the start of a longer one.
    fn names(text: &str, metric: &str) -> bool {
        text.match_indices(metric).any(|(at, _)| {
            !text[at + metric.len()..].starts_with(|c: char| c.is_ascii_alphanumeric() || c == '_')
        })
    }
    walk(Path::new("src"), metric)
}

// ---------------------------------------------------------------------------------------------
// The rules

#[test]
fn prometheus_rule_is_the_rules_file_for_the_operator() {
    let expected = prometheus_rule_from(&read(RULES));
    if std::env::var_os("NPG_BLESS").is_some() {
        std::fs::write(PROMETHEUS_RULE, &expected).expect("write the PrometheusRule");
    }
    assert!(
        read(PROMETHEUS_RULE) == expected,
        "`{PROMETHEUS_RULE}` is stale: regenerate it from `{RULES}` with `NPG_BLESS=1 cargo test --test monitoring` and review the diff"
    );
    let operator = yaml(PROMETHEUS_RULE);
    assert_eq!(operator["apiVersion"], "monitoring.coreos.com/v1");
    assert_eq!(operator["kind"], "PrometheusRule");
    assert_eq!(operator["spec"]["groups"], yaml(RULES)["groups"]);
}

#[test]
fn every_alert_is_written_as_the_mixins_write_theirs() {
    let rules = yaml(RULES);
    let mut alerts = BTreeSet::new();
    for group in rules["groups"].as_array().expect("groups") {
        for rule in group["rules"].as_array().expect("rules") {
            let name = rule["alert"].as_str().expect("only alerting rules");
            assert!(alerts.insert(name), "{name} twice");
            assert!(name.starts_with("NodeportGuard"), "{name}");
            let severity = rule["labels"]["severity"].as_str().unwrap_or_default();
            assert!(
                ["critical", "warning", "info"].contains(&severity),
                "{name}: severity `{severity}`"
            );
            let summary = rule["annotations"]["summary"].as_str().unwrap_or_default();
            assert!(summary.ends_with('.'), "{name}: summary `{summary}`");
            let description = rule["annotations"]["description"]
                .as_str()
                .unwrap_or_default();
            assert!(
                description.contains("$labels.instance")
                    && ["`nodeport-guard", "`systemctl", "`journalctl"]
                        .iter()
                        .any(|command| description.contains(command)),
                "{name}: the description must name the node and say what to run there: {description}"
            );
        }
    }
    let tests = read(RULES_TESTS);
    for alert in &alerts {
        assert!(
            tests.contains(&format!("alertname: {alert}\n"))
                && tests.contains(&format!("alertname: {alert}}}")),
            "{RULES_TESTS} must show {alert} firing and not firing"
        );
    }
}

#[test]
fn promtool_accepts_the_rules_and_their_unit_tests_pass() {
    if !have_promtool() {
        return;
    }
    support::cmd::run_ok("promtool", &["check", "rules", RULES]);
    // What the operator loads: the PrometheusRule's spec is a rules file.
    let dir = tempfile::tempdir().expect("temporary directory");
    let spec = dir.path().join("prometheusrule-spec.json");
    std::fs::write(&spec, yaml(PROMETHEUS_RULE)["spec"].to_string()).expect("write");
    support::cmd::run_ok(
        "promtool",
        &[OsStr::new("check"), OsStr::new("rules"), spec.as_os_str()],
    );
    let output = support::cmd::run_ok("promtool", &["test", "rules", RULES_TESTS]);
    assert!(output.contains("SUCCESS"), "{output}");
}

// ---------------------------------------------------------------------------------------------
// The dashboard

#[test]
fn dashboard_has_the_structure_grafana_expects() {
    let dashboard = dashboard();
    assert!(dashboard["schemaVersion"].as_u64().is_some_and(|v| v >= 36));
    for key in ["uid", "title"] {
        assert!(
            dashboard[key].as_str().is_some_and(|v| !v.is_empty()),
            "{key}"
        );
    }
    let variables = dashboard["templating"]["list"]
        .as_array()
        .expect("templating.list");
    let variable = |name: &str| {
        variables
            .iter()
            .find(|v| v["name"] == name)
            .unwrap_or_else(|| panic!("no `{name}` variable"))
    };
    let datasource = variable("datasource");
    assert_eq!(datasource["type"], "datasource");
    assert_eq!(datasource["query"], "prometheus");
    let node = variable("instance");
    assert_eq!(node["type"], "query");
    assert_eq!(node["datasource"]["uid"], "${datasource}");
    assert_eq!(node["includeAll"], true);

    let mut ids = BTreeSet::new();
    let mut titles = BTreeSet::new();
    for panel in panels(&dashboard) {
        let title = panel["title"].as_str().expect("every panel has a title");
        assert!(
            ids.insert(panel["id"].as_u64().expect("id")),
            "{title}: id twice"
        );
        let grid = &panel["gridPos"];
        let (x, w) = (
            grid["x"].as_u64().expect("x"),
            grid["w"].as_u64().expect("w"),
        );
        assert!(x + w <= 24 && grid["h"].as_u64().is_some() && grid["y"].as_u64().is_some());
        if panel["type"] == "row" {
            continue;
        }
        titles.insert(title);
        assert!(
            ["timeseries", "stat", "state-timeline", "bargauge", "table"]
                .contains(&panel["type"].as_str().unwrap_or_default()),
            "{title}: panel type {}",
            panel["type"]
        );
        assert_eq!(panel["datasource"]["uid"], "${datasource}", "{title}");
        let targets = panel["targets"].as_array().expect("targets");
        assert!(!targets.is_empty(), "{title}: no targets");
        let mut refs = BTreeSet::new();
        for target in targets {
            assert!(
                refs.insert(target["refId"].as_str().expect("refId")),
                "{title}"
            );
            assert_eq!(target["datasource"]["uid"], "${datasource}", "{title}");
            let expr = target["expr"].as_str().expect("expr");
            assert!(
                expr.matches("nodeport_guard_").count()
                    == expr.matches(r#"{instance=~"$instance"}"#).count(),
                "{title}: every selector must follow the node variable: {expr}"
            );
        }
    }
    for wanted in [
        "Reloads by result",
        "Apply latency",
        "Sync state per node",
        "Drops per policy and rule",
        "Top dropped sources",
        "Revoked connections",
        "Drift repairs",
    ] {
        assert!(titles.contains(wanted), "no `{wanted}` panel: {titles:?}");
    }
}

#[test]
fn dashboard_queries_are_promql_that_promtool_parses() {
    if !have_promtool() {
        return;
    }
    // Recording rules are the one place promtool parses a bare expression.
    let rules: Vec<Value> = dashboard_queries(&dashboard())
        .into_iter()
        .enumerate()
        .map(|(index, (expr, _))| {
            let expr = expr
                .replace("$__rate_interval", "5m")
                .replace("$__range", "6h")
                .replace("$instance", ".*");
            serde_json::json!({"record": format!("dashboard:query_{index}"), "expr": expr})
        })
        .collect();
    assert!(rules.len() >= 10, "{rules:?}");
    let dir = tempfile::tempdir().expect("temporary directory");
    let file = dir.path().join("dashboard-queries.json");
    let text = serde_json::json!({"groups": [{"name": "dashboard", "rules": rules}]});
    std::fs::write(&file, text.to_string()).expect("write");
    support::cmd::run_ok(
        "promtool",
        &[OsStr::new("check"), OsStr::new("rules"), file.as_os_str()],
    );
}

// ---------------------------------------------------------------------------------------------
// Only what the daemon exports

/// Without root: every metric the core group and the dashboard name is named in `src/`.
#[test]
fn rules_and_dashboard_name_metrics_the_source_defines() {
    let uses = rule_uses();
    let core = uses.get(CORE_GROUP).expect("the core group");
    let dashboard = dashboard_uses();
    for metric in core.metrics.keys().chain(dashboard.metrics.keys()) {
        // The client library registers a counter without its `_total`.
        let family = metric
            .trim_end_matches("_sum")
            .trim_end_matches("_count")
            .trim_end_matches("_bucket")
            .trim_end_matches("_total")
            .to_owned();
        assert!(
            PROMETHEUS_SERIES.contains(&metric.as_str()) || source_names(&family),
            "`{metric}` is named by {RULES} or {DASHBOARD}, but by nothing in src/"
        );
    }
}

/// `/metrics` on the node's loopback.
const METRICS_ADDR: &str = "127.0.0.1:9808";

/// The families of exposition text (from `# TYPE`), each with the labels its samples carry
/// (`None` when it has no sample, so its labels cannot be told).
type Exported = BTreeMap<String, Option<BTreeSet<String>>>;

/// What `/metrics` exports.
fn exported(text: &str) -> Exported {
    let label = Regex::new(r#"([a-zA-Z_]\w*)="(?:[^"\\]|\\.)*""#).expect("regex");
    let mut families: Exported = text
        .lines()
        .filter_map(|line| line.strip_prefix("# TYPE "))
        .filter_map(|rest| rest.split_whitespace().next())
        .map(|name| (name.to_owned(), None))
        .collect();
    for line in text.lines().filter(|line| !line.starts_with('#')) {
        let name_end = line.find(['{', ' ']).unwrap_or(line.len());
        let name = &line[..name_end];
        let family = [
            name,
            name.trim_end_matches("_sum"),
            name.trim_end_matches("_count"),
            name.trim_end_matches("_bucket"),
        ]
        .into_iter()
        .find(|candidate| families.contains_key(*candidate))
        .unwrap_or_else(|| panic!("sample `{line}` has no # TYPE"))
        .to_owned();
        let labels = families.entry(family).or_default().get_or_insert_default();
        if let Some(braces) = line.get(name_end..).filter(|rest| rest.starts_with('{')) {
            labels.extend(label.captures_iter(braces).map(|m| m[1].to_owned()));
        }
    }
    families
}

/// Where `uses` asks for what `exported` lacks, in words; `pending` names metrics that need
/// only be exported once `src/` names them.
fn missing(uses: &Uses, exported: &Exported, pending: bool) -> Vec<String> {
    let mut problems = Vec::new();
    let all_labels: BTreeSet<&str> = exported
        .values()
        .flatten()
        .flatten()
        .map(String::as_str)
        .chain(TARGET_LABELS)
        .collect();
    for (metric, labels) in &uses.metrics {
        if PROMETHEUS_SERIES.contains(&metric.as_str()) {
            continue;
        }
        let family = [
            metric.as_str(),
            metric.trim_end_matches("_sum"),
            metric.trim_end_matches("_count"),
            metric.trim_end_matches("_bucket"),
        ]
        .into_iter()
        .find(|candidate| exported.contains_key(*candidate));
        let Some(family) = family else {
            if pending && !source_names(metric) {
                eprintln!("not exported yet (nothing in src/ names it): {metric}");
            } else {
                problems.push(format!("metric `{metric}` is not exported"));
            }
            continue;
        };
        let asked: Vec<&String> = labels
            .iter()
            .filter(|label| !TARGET_LABELS.contains(&label.as_str()))
            .collect();
        match &exported[family] {
            Some(has) => problems.extend(
                asked
                    .into_iter()
                    .filter(|label| !has.contains(*label))
                    .map(|label| format!("`{metric}` has no label `{label}`")),
            ),
            None if asked.is_empty() => {}
            None if pending => eprintln!("exported without a sample, labels unchecked: {metric}"),
            None => problems.push(format!(
                "`{metric}` has no sample to check its labels {asked:?} against"
            )),
        }
    }
    for label in &uses.labels {
        if !all_labels.contains(label.as_str()) {
            problems.push(format!("no exported metric has the label `{label}`"));
        }
    }
    problems
}

/// A running daemon (with drops counted, so the per-rule and per-source drop counters carry
/// samples) exports every metric and label the core rules and the dashboard use, and those
/// of the other groups as soon as `src/` names them.
#[test]
fn rules_and_dashboard_use_only_what_a_running_daemon_exports() {
    support::require_kernel!();
    let lab = Lab::new(Backend::Nftables);
    let guard = counting_guard(&lab, METRICS_ADDR);
    guard.write_policy("nodeport.yaml", &Whitelist::mission().yaml());
    let daemon = Daemon::start(&guard);
    let metrics_addr: SocketAddr = METRICS_ADDR.parse().expect("address");
    let nodeport = sa(addr::NODE_V4, ports::NODEPORT);
    let mut body = String::new();
    let counted = wait_until(Duration::from_secs(10), POLL, || {
        let _ = lab.connect(
            addr::CLIENT_V4[1].into(),
            nodeport,
            Duration::from_millis(300),
        );
        body = http_get_ok(lab.node(), metrics_addr, "/metrics").body;
        // The port audit runs a second after the last reload; its series come then.
        body.contains("nodeport_guard_dropped_source_packets_total{source=\"198.51.100.11\"}")
            && body.contains("nodeport_guard_dropped_packets_total{")
            && body.contains("nodeport_guard_exposed_ports")
    });
    assert!(
        counted,
        "the blocked client's drops were not counted, or the port audit never ran\n{body}\n--- daemon ---\n{}",
        daemon.log()
    );
    // The series the sync and health alerts read say what is true: in sync, healthy, synced
    // now, with the configured resync interval.
    let samples = parse_prometheus(&body).unwrap_or_else(|e| panic!("{e}\n{body}"));
    assert_eq!(samples.get("nodeport_guard_in_sync"), Some(&1.0), "{body}");
    assert_eq!(samples.get("nodeport_guard_healthy"), Some(&1.0), "{body}");
    assert_eq!(
        samples.get("nodeport_guard_resync_interval_seconds"),
        Some(&90.0),
        "{body}"
    );
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after the epoch")
        .as_secs_f64();
    let synced = samples["nodeport_guard_last_sync_timestamp_seconds"];
    assert!(
        (now - 60.0..=now + 1.0).contains(&synced),
        "synced at {synced}, now {now}"
    );
    let exported = exported(&body);

    let mut problems = Vec::new();
    for (group, uses) in rule_uses() {
        for problem in missing(&uses, &exported, group != CORE_GROUP) {
            problems.push(format!("{RULES}, group {group}: {problem}"));
        }
    }
    for problem in missing(&dashboard_uses(), &exported, false) {
        problems.push(format!("{DASHBOARD}: {problem}"));
    }
    assert!(
        problems.is_empty(),
        "{}\n--- /metrics ---\n{body}",
        problems.join("\n")
    );
}
