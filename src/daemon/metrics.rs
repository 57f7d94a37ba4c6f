//! Prometheus metrics: what the daemon counts, and its exposition, written by the Prometheus
//! project's client library (`prometheus-client`: names, types, escaping) from a snapshot of
//! [`Metrics`] and the kernel's counters. The HTTP side is [`super::http`].
//!
//! The library writes OpenMetrics, which Prometheus asks for first. Other scrapers get the
//! Prometheus text format 0.0.4, the same text but for two spellings: a counter family is
//! declared under its sample name (`…_total`), and there is no `# EOF` line
//! ([`to_prometheus_text`]).

use std::sync::{Arc, Mutex};
use std::time::Instant;

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use crate::counters::RuleCounter;

/// Drift repairs by what noticed the drift (`nodeport_guard_drift_repairs_total{trigger}`).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct DriftRepairs {
    /// Noticed by an nf_tables change notification.
    pub notification: u64,
    /// Noticed by iptables-legacy's once-a-second check.
    pub poll: u64,
    /// Found by the resync timer (or SIGHUP, or an address change, with the last good rules).
    pub resync: u64,
}

/// The buckets of `nodeport_guard_apply_duration_seconds`, in seconds.
const APPLY_BUCKETS: [f64; 10] = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0];

/// Everything the daemon reports.
#[derive(Debug)]
pub struct Metrics {
    /// Reloads that applied (or found nothing to change).
    pub reloads_ok: u64,
    /// Reloads that failed: invalid policies or a failed apply.
    pub reloads_failed: u64,
    /// Reloads refused because the policy set became empty.
    pub reloads_refused: u64,
    /// Checks that found and repaired drift, by what noticed it.
    pub drift_repairs: DriftRepairs,
    /// Times a drift check was held back by the rate limit (another program keeps changing
    /// our rules).
    pub drift_rate_limited: u64,
    /// Established connections cut because a change denies them (`revokeEstablished`).
    pub revoked_connections: u64,
    /// Established connections that could not be cut.
    pub revoke_failures: u64,
    /// Seconds since the epoch of the last successful apply.
    pub last_apply_timestamp: u64,
    /// Duration of the last apply.
    pub last_apply_seconds: f64,
    /// Every apply's duration.
    pub apply_seconds: Histogram,
    /// Policies in the applied set.
    pub policies: usize,
    /// Kernel rules we own.
    pub rules: usize,
    /// Members over all our sets.
    pub set_members: usize,
    /// Whether the policy files are currently invalid (the last good set is kept).
    pub policy_files_invalid: bool,
    /// When the loop last went round, for the health check.
    pub heartbeat: Option<Instant>,
    /// Denied packets per policy rule, from the NFLOG groups.
    pub dropped: crate::drops::DropCounts,
    /// Logged packets that were lost before they were counted.
    pub drops_skipped: u64,
    /// Whether the daemon listens on the NFLOG groups.
    pub drops_listening: bool,
    /// Resources with an expiry that still count (`nodeport-guard.io/expires`).
    pub grants_active: usize,
    /// Seconds since the epoch of the next expiry, if one is to come.
    pub grant_next_expiry: Option<i64>,
    /// Denied packets per source address, bounded.
    pub dropped_sources: crate::drops::SourceCounts,
    /// Whether the last reconcile (or repair with the last good rules) left the kernel holding
    /// the rules the daemon means to apply; false after a failed write, until one succeeds.
    pub in_sync: bool,
    /// Seconds since the epoch of the last time the daemon read the kernel and found, or left,
    /// its rules in place.
    pub last_sync_timestamp: u64,
    /// The configured `resyncInterval`, so that alerts can say "longer than a resync".
    pub resync_interval_seconds: f64,
    /// Ports other hosts can reach, by who may and how (`None` until the first audit).
    pub exposed_ports: Option<
        std::collections::BTreeMap<(crate::exposure::Reachable, crate::exposure::Via), usize>,
    >,
}

impl Default for Metrics {
    fn default() -> Metrics {
        Metrics {
            reloads_ok: 0,
            reloads_failed: 0,
            reloads_refused: 0,
            drift_repairs: DriftRepairs::default(),
            drift_rate_limited: 0,
            revoked_connections: 0,
            revoke_failures: 0,
            last_apply_timestamp: 0,
            last_apply_seconds: 0.0,
            apply_seconds: Histogram::new(APPLY_BUCKETS),
            policies: 0,
            rules: 0,
            set_members: 0,
            policy_files_invalid: false,
            heartbeat: None,
            dropped: crate::drops::DropCounts::default(),
            drops_skipped: 0,
            drops_listening: false,
            dropped_sources: crate::drops::SourceCounts::default(),
            in_sync: false,
            last_sync_timestamp: 0,
            resync_interval_seconds: 0.0,
            exposed_ports: None,
            grants_active: 0,
            grant_next_expiry: None,
        }
    }
}

/// Metrics shared between the loop and the server.
pub type Shared = Arc<Mutex<Metrics>>;

/// Labels in the order they are written.
type Labels = Vec<(&'static str, String)>;

/// A counter family with one sample per label set.
fn counters(samples: impl IntoIterator<Item = (Labels, u64)>) -> Family<Labels, Counter> {
    let family = Family::<Labels, Counter>::default();
    for (labels, value) in samples {
        family.get_or_create(&labels).inc_by(value);
    }
    family
}

fn counter(value: u64) -> Counter {
    let counter = Counter::default();
    counter.inc_by(value);
    counter
}

fn gauge(value: i64) -> Gauge {
    let gauge = Gauge::default();
    gauge.set(value);
    gauge
}

fn gauge_f64(value: f64) -> Gauge<f64, std::sync::atomic::AtomicU64> {
    let gauge = Gauge::<f64, std::sync::atomic::AtomicU64>::default();
    gauge.set(value);
    gauge
}

fn count(value: usize) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

/// The registry of one snapshot: every family, its help and its samples.
fn registry(metrics: &Metrics, rules: &[RuleCounter]) -> Registry {
    let mut registry = Registry::default();
    let result = |name: &str| vec![("result", name.to_owned())];
    registry.register(
        "nodeport_guard_reloads",
        "Policy reloads by result",
        counters([
            (result("ok"), metrics.reloads_ok),
            (result("failed"), metrics.reloads_failed),
            (result("refused"), metrics.reloads_refused),
        ]),
    );
    let trigger = |name: &str| vec![("trigger", name.to_owned())];
    let repairs = metrics.drift_repairs;
    registry.register(
        "nodeport_guard_drift_repairs",
        "Rules changed by another program and put back, by what noticed it (notification: nf_tables change notifications; poll: the once-a-second check of iptables-legacy; resync: the resync timer)",
        counters([
            (trigger("notification"), repairs.notification),
            (trigger("poll"), repairs.poll),
            (trigger("resync"), repairs.resync),
        ]),
    );
    registry.register(
        "nodeport_guard_drift_checks_rate_limited",
        "Times a drift check was held back because another program keeps changing nodeport-guard's rules (after 5 checks in a burst, one a second)",
        counter(metrics.drift_rate_limited),
    );
    registry.register(
        "nodeport_guard_revoked_connections",
        "Established connections cut because a change of policies denies them (revokeEstablished)",
        counters([
            (result("cut"), metrics.revoked_connections),
            (result("failed"), metrics.revoke_failures),
        ]),
    );
    registry.register(
        "nodeport_guard_last_apply_timestamp_seconds",
        "When the rules were last applied successfully",
        gauge(i64::try_from(metrics.last_apply_timestamp).unwrap_or(i64::MAX)),
    );
    registry.register(
        "nodeport_guard_apply_duration_seconds",
        "How long applying took",
        metrics.apply_seconds.clone(),
    );
    registry.register(
        "nodeport_guard_last_apply_duration_seconds",
        "How long the last apply took",
        gauge_f64(metrics.last_apply_seconds),
    );
    registry.register(
        "nodeport_guard_grants_active",
        "Policies, staged policies and network sets with an expiry that still count",
        gauge(count(metrics.grants_active)),
    );
    if let Some(next) = metrics.grant_next_expiry {
        registry.register(NEXT_EXPIRY.0, NEXT_EXPIRY.1, gauge(next));
    }
    for (name, help, value) in [
        (
            "nodeport_guard_policies",
            "Policies in the applied set",
            metrics.policies,
        ),
        (
            "nodeport_guard_rules",
            "Kernel rules nodeport-guard owns",
            metrics.rules,
        ),
        (
            "nodeport_guard_set_members",
            "Members over all sets nodeport-guard owns",
            metrics.set_members,
        ),
    ] {
        registry.register(name, help, gauge(count(value)));
    }
    registry.register(
        "nodeport_guard_policy_files_invalid",
        "1 when the policy files are invalid and the last good set is kept",
        gauge(i64::from(metrics.policy_files_invalid)),
    );
    rule_metrics(&mut registry, rules);
    sync_metrics(&mut registry, metrics);
    drop_metrics(&mut registry, metrics);
    registry
}

/// `nodeport_guard_rule_packets_total` and `nodeport_guard_rule_bytes_total`.
fn rule_metrics(registry: &mut Registry, rules: &[RuleCounter]) {
    let labels = |counter: &RuleCounter| {
        let mut labels = vec![
            ("policy", counter.policy.clone()),
            ("direction", counter.direction.to_string()),
            ("rule", counter.rule.to_string()),
            ("tier", counter.tier.clone()),
        ];
        if counter.staged {
            labels.push(("staged", "true".to_owned()));
        }
        labels
    };
    registry.register(
        "nodeport_guard_rule_packets",
        "Packets matched by each policy rule (kernel counters)",
        counters(rules.iter().map(|c| (labels(c), c.packets))),
    );
    registry.register(
        "nodeport_guard_rule_bytes",
        "Bytes matched by each policy rule (kernel counters)",
        counters(rules.iter().map(|c| (labels(c), c.bytes))),
    );
}

/// `nodeport_guard_in_sync`, the timestamp and interval that say for how long, and
/// `nodeport_guard_healthy` (what `/healthz` answers, as a sample Prometheus can alert on
/// without probing `/healthz` itself).
fn sync_metrics(registry: &mut Registry, metrics: &Metrics) {
    registry.register(
        "nodeport_guard_in_sync",
        "1 when the kernel holds the rules the daemon means to apply (its last write or repair succeeded); 0 after a failed write, until one succeeds",
        gauge(i64::from(metrics.in_sync)),
    );
    registry.register(
        "nodeport_guard_last_sync_timestamp_seconds",
        "When the daemon last read the kernel and found, or left, its rules in place (every resync does)",
        gauge(i64::try_from(metrics.last_sync_timestamp).unwrap_or(i64::MAX)),
    );
    registry.register(
        "nodeport_guard_resync_interval_seconds",
        "The configured resyncInterval: how often the daemon re-reads the kernel in full",
        gauge_f64(metrics.resync_interval_seconds),
    );
    registry.register(
        "nodeport_guard_healthy",
        "1 when the reconcile loop ran recently enough for /healthz to answer 200",
        gauge(i64::from(metrics.healthy())),
    );
}

impl Metrics {
    /// Whether the loop went round within three resync intervals and 30 s (the daemon's
    /// `stale_after`): what `/healthz` answers.
    pub fn healthy(&self) -> bool {
        let stale_after =
            std::time::Duration::from_secs_f64(self.resync_interval_seconds * 3.0 + 30.0);
        self.heartbeat
            .is_some_and(|beat| beat.elapsed() < stale_after)
    }
}

/// `nodeport_guard_dropped_packets_total` and friends.
fn drop_metrics(registry: &mut Registry, metrics: &Metrics) {
    registry.register(
        "nodeport_guard_dropped_packets",
        "Packets dropped and logged to NFLOG, by the policy rule that dropped them (rule is the index, or end-of-tier, no-profile, unknown)",
        counters(metrics.dropped.counts.iter().map(|(key, count)| {
            (
                vec![
                    ("policy", key.policy.to_string()),
                    ("rule", key.rule.to_string()),
                    ("direction", key.direction.to_string()),
                    ("tier", key.tier.to_string()),
                ],
                *count,
            )
        })),
    );
    registry.register(
        "nodeport_guard_dropped_source_packets",
        "Packets dropped and logged to NFLOG, by source address (at most 256 sources; further ones count under source=\"other\")",
        counters(
            metrics
                .dropped_sources
                .counts
                .iter()
                .map(|(source, count)| (vec![("source", source.clone())], *count)),
        ),
    );
    registry.register(
        "nodeport_guard_dropped_packets_skipped",
        "Logged packets lost before they were counted (the NFLOG socket's buffer overflowed)",
        counter(metrics.drops_skipped),
    );
    registry.register(
        "nodeport_guard_drops_listening",
        "1 when the daemon reads the NFLOG groups (0: drop logging off, or another program holds a group)",
        gauge(i64::from(metrics.drops_listening)),
    );
    register_exposed(registry, metrics);
}

/// `nodeport_guard_exposed_ports{reachable,via}`, once the first audit has counted them.
fn register_exposed(registry: &mut Registry, metrics: &Metrics) {
    let Some(exposed) = &metrics.exposed_ports else {
        return;
    };
    let family = Family::<Labels, Gauge>::default();
    for ((reachable, via), ports) in exposed {
        let labels = vec![
            ("reachable", reachable.as_str().to_owned()),
            ("via", via.as_str().to_owned()),
        ];
        family.get_or_create(&labels).set(count(*ports));
    }
    registry.register(
        "nodeport_guard_exposed_ports",
        "Ports of this host other hosts can reach (listening sockets, DNAT rules), by who the policies applied let reach them",
        family,
    );
}

/// The exposition as OpenMetrics text.
pub fn render_openmetrics(metrics: &Metrics, rules: &[RuleCounter]) -> String {
    let mut text = String::new();
    // Writing into a String cannot fail.
    let _ = encode(&mut text, &registry(metrics, rules));
    if metrics.grant_next_expiry.is_none() {
        // Declared with no sample when no expiry is to come, so that alerts and dashboards can
        // tell "no grant" from "not exported"; the library leaves a family without samples out.
        let (name, help) = NEXT_EXPIRY;
        let declared = format!("# HELP {name} {help}.\n# TYPE {name} gauge\n");
        let end = text.rfind("# EOF").unwrap_or(text.len());
        text.insert_str(end, &declared);
    }
    text
}

/// The next expiry's gauge: its name and help.
const NEXT_EXPIRY: (&str, &str) = (
    "nodeport_guard_grant_next_expiry_timestamp_seconds",
    "When the next expiry is due",
);

/// The exposition as Prometheus text format 0.0.4.
#[cfg(test)]
fn render(metrics: &Metrics, rules: &[RuleCounter]) -> String {
    to_prometheus_text(&render_openmetrics(metrics, rules))
}

/// OpenMetrics text as Prometheus text format 0.0.4: a counter's `# HELP` and `# TYPE` name
/// the family by its samples' name (`x_total`, where OpenMetrics says `x`), and `# EOF` goes.
/// Escaping is the same in both.
pub fn to_prometheus_text(openmetrics: &str) -> String {
    let mut counters = std::collections::HashSet::new();
    for line in openmetrics.lines() {
        if let Some(name) = line
            .strip_prefix("# TYPE ")
            .and_then(|rest| rest.strip_suffix(" counter"))
        {
            counters.insert(name.to_owned());
        }
    }
    let mut text = String::with_capacity(openmetrics.len());
    for line in openmetrics.lines() {
        if line == "# EOF" {
            continue;
        }
        let descriptor = ["# HELP ", "# TYPE "]
            .into_iter()
            .find_map(|prefix| Some((prefix, line.strip_prefix(prefix)?)));
        match descriptor {
            Some((prefix, rest)) => {
                let (name, tail) = rest.split_once(' ').unwrap_or((rest, ""));
                text.push_str(prefix);
                text.push_str(name);
                if counters.contains(name) {
                    text.push_str("_total");
                }
                text.push(' ');
                text.push_str(tail);
            }
            None => text.push_str(line),
        }
        text.push('\n');
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_prometheus_text() {
        let metrics = Metrics {
            reloads_ok: 3,
            policies: 2,
            ..Metrics::default()
        };
        let text = render(
            &metrics,
            &[RuleCounter {
                policy: "p".into(),
                tier: "default".into(),
                direction: crate::model::Direction::Ingress,
                rule: 1,
                packets: 5,
                bytes: 300,
                in_kernel: crate::counters::Presence::Yes,
                staged: false,
            }],
        );
        assert!(text.contains("# TYPE nodeport_guard_reloads_total counter\n"));
        assert!(text.contains("nodeport_guard_reloads_total{result=\"ok\"} 3\n"));
        assert!(text.contains("nodeport_guard_policies 2\n"));
        assert!(text.contains("nodeport_guard_apply_duration_seconds_sum 0.0\n"));
        assert!(text.contains("# TYPE nodeport_guard_drift_repairs_total counter\n"));
        assert!(text.contains("nodeport_guard_drift_repairs_total{trigger=\"poll\"} 0\n"));
        assert!(!text.contains("# EOF"));
        assert!(text.contains(
            "nodeport_guard_rule_packets_total{policy=\"p\",direction=\"ingress\",rule=\"1\",tier=\"default\"} 5\n"
        ));
        assert!(text.contains("nodeport_guard_dropped_packets_skipped_total 0\n"));
        assert!(text.contains("nodeport_guard_grants_active 0\n"));
        assert!(
            !text.contains("\nnodeport_guard_grant_next_expiry_timestamp_seconds "),
            "no sample when no expiry is to come"
        );
        let text = render(
            &Metrics {
                grants_active: 2,
                grant_next_expiry: Some(1_796_493_600),
                ..Metrics::default()
            },
            &[],
        );
        assert!(text.contains("nodeport_guard_grants_active 2\n"));
        assert!(text.contains("nodeport_guard_grant_next_expiry_timestamp_seconds 1796493600\n"));
        assert!(
            !text.contains("nodeport_guard_exposed_ports"),
            "no audit yet: no sample"
        );
        // Every sample line is `name{labels} value` or `name value`.
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            assert_eq!(line.split(' ').count(), 2, "{line}");
        }
    }

    #[test]
    fn renders_exposed_ports_by_reach_and_way() {
        use crate::exposure::{Reachable, Via};
        let exposed = [
            (Reachable::Anyone, Via::Dnat, 2),
            (Reachable::Some, Via::Dnat, 1),
            (Reachable::Nobody, Via::Socket, 0),
        ];
        let metrics = Metrics {
            exposed_ports: Some(exposed.iter().map(|&(r, v, n)| ((r, v), n)).collect()),
            ..Metrics::default()
        };
        let text = render(&metrics, &[]);
        assert!(text.contains("# TYPE nodeport_guard_exposed_ports gauge\n"));
        assert!(
            text.contains("nodeport_guard_exposed_ports{reachable=\"anyone\",via=\"dnat\"} 2\n")
        );
        assert!(text.contains("nodeport_guard_exposed_ports{reachable=\"some\",via=\"dnat\"} 1\n"));
        assert!(
            text.contains("nodeport_guard_exposed_ports{reachable=\"nobody\",via=\"socket\"} 0\n")
        );
    }

    #[test]
    fn renders_drop_counts() {
        let mut metrics = Metrics {
            drops_skipped: 7,
            drops_listening: true,
            ..Metrics::default()
        };
        metrics.dropped.count(&crate::drops::Verdict::Rule {
            policy: "allow-cluster".into(),
            tier: Some("default".into()),
            direction: crate::model::Direction::Ingress,
            rule: 2,
            action: crate::drops::LoggedAction::Deny,
            staged: false,
        });
        let text = render(&metrics, &[]);
        assert!(text.contains("# TYPE nodeport_guard_dropped_packets_total counter\n"));
        assert!(text.contains(
            "nodeport_guard_dropped_packets_total{policy=\"allow-cluster\",rule=\"2\",direction=\"ingress\",tier=\"default\"} 1\n"
        ), "{text}");
        assert!(text.contains("nodeport_guard_dropped_packets_skipped_total 7\n"));
        assert!(text.contains("nodeport_guard_drops_listening 1\n"));
    }

    #[test]
    fn renders_sync_state_sources_and_health() {
        let mut metrics = Metrics {
            in_sync: true,
            last_sync_timestamp: 1_700_000_000,
            resync_interval_seconds: 90.0,
            ..Metrics::default()
        };
        metrics
            .dropped_sources
            .count_n("203.0.113.7".parse().expect("ip"), 4);
        let text = render(&metrics, &[]);
        for line in [
            "nodeport_guard_in_sync 1\n",
            "nodeport_guard_last_sync_timestamp_seconds 1700000000\n",
            "nodeport_guard_resync_interval_seconds 90",
            "nodeport_guard_healthy 0\n",
            "nodeport_guard_dropped_source_packets_total{source=\"203.0.113.7\"} 4\n",
        ] {
            assert!(text.contains(line), "{line} missing in {text}");
        }
        assert!(!metrics.healthy(), "never went round");
        metrics.heartbeat = Some(Instant::now());
        assert!(metrics.healthy());
        let text = render(&metrics, &[]);
        assert!(text.contains("nodeport_guard_healthy 1\n"), "{text}");
    }
}
