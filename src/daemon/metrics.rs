//! Prometheus metrics and the health endpoint, served when `metricsAddress` is set.
//!
//! The server is a few lines over tokio's `TcpListener`: it answers `GET /metrics` and
//! `GET /healthz` and nothing else, which does not justify a web framework.

use std::fmt::Write as _;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpListener;

use crate::counters::RuleCounter;

/// Everything the daemon reports.
#[derive(Debug, Default)]
pub struct Metrics {
    /// Reloads that applied (or found nothing to change).
    pub reloads_ok: u64,
    /// Reloads that failed: invalid policies or a failed apply.
    pub reloads_failed: u64,
    /// Reloads refused because the policy set became empty.
    pub reloads_refused: u64,
    /// Resyncs that found and repaired drift.
    pub drift_repairs: u64,
    /// Established connections cut because a change denies them (`revokeEstablished`).
    pub revoked_connections: u64,
    /// Established connections that could not be cut.
    pub revoke_failures: u64,
    /// Seconds since the epoch of the last successful apply.
    pub last_apply_timestamp: u64,
    /// Duration of the last apply.
    pub last_apply_seconds: f64,
    /// Sum and count of apply durations.
    pub apply_seconds_sum: f64,
    /// Number of applies.
    pub apply_count: u64,
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

/// Metrics shared between the loop and the server.
pub type Shared = Arc<Mutex<Metrics>>;

/// Renders the Prometheus text format.
pub fn render(metrics: &Metrics, counters: &[RuleCounter]) -> String {
    let mut out = String::new();
    let mut metric = |name: &str, kind: &str, help: &str, lines: &[(String, String)]| {
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} {kind}");
        for (labels, value) in lines {
            let _ = writeln!(out, "{name}{labels} {value}");
        }
    };
    metric(
        "nodeport_guard_reloads_total",
        "counter",
        "Policy reloads by result.",
        &[
            ("{result=\"ok\"}".into(), metrics.reloads_ok.to_string()),
            (
                "{result=\"failed\"}".into(),
                metrics.reloads_failed.to_string(),
            ),
            (
                "{result=\"refused\"}".into(),
                metrics.reloads_refused.to_string(),
            ),
        ],
    );
    metric(
        "nodeport_guard_drift_repairs_total",
        "counter",
        "Resyncs that found rules changed by someone else and put them back.",
        &[(String::new(), metrics.drift_repairs.to_string())],
    );
    metric(
        "nodeport_guard_revoked_connections_total",
        "counter",
        "Established connections cut because a change of policies denies them (revokeEstablished).",
        &[
            (
                "{result=\"cut\"}".into(),
                metrics.revoked_connections.to_string(),
            ),
            (
                "{result=\"failed\"}".into(),
                metrics.revoke_failures.to_string(),
            ),
        ],
    );
    metric(
        "nodeport_guard_last_apply_timestamp_seconds",
        "gauge",
        "When the rules were last applied successfully.",
        &[(String::new(), metrics.last_apply_timestamp.to_string())],
    );
    metric(
        "nodeport_guard_apply_duration_seconds",
        "summary",
        "How long applying took (last value in the gauge, all in sum and count).",
        &[
            ("_sum".into(), format!("{:.6}", metrics.apply_seconds_sum)),
            ("_count".into(), metrics.apply_count.to_string()),
        ],
    );
    metric(
        "nodeport_guard_last_apply_duration_seconds",
        "gauge",
        "How long the last apply took.",
        &[(String::new(), format!("{:.6}", metrics.last_apply_seconds))],
    );
    metric(
        "nodeport_guard_policies",
        "gauge",
        "Policies in the applied set.",
        &[(String::new(), metrics.policies.to_string())],
    );
    metric(
        "nodeport_guard_rules",
        "gauge",
        "Kernel rules nodeport-guard owns.",
        &[(String::new(), metrics.rules.to_string())],
    );
    metric(
        "nodeport_guard_set_members",
        "gauge",
        "Members over all sets nodeport-guard owns.",
        &[(String::new(), metrics.set_members.to_string())],
    );
    metric(
        "nodeport_guard_policy_files_invalid",
        "gauge",
        "1 when the policy files are invalid and the last good set is kept.",
        &[(
            String::new(),
            u8::from(metrics.policy_files_invalid).to_string(),
        )],
    );
    let labels = |counter: &RuleCounter| {
        format!(
            "{{policy=\"{}\",direction=\"{}\",rule=\"{}\",tier=\"{}\"{}}}",
            counter.policy,
            counter.direction,
            counter.rule,
            counter.tier,
            if counter.staged {
                ",staged=\"true\""
            } else {
                ""
            }
        )
    };
    metric(
        "nodeport_guard_rule_packets_total",
        "counter",
        "Packets matched by each policy rule (kernel counters).",
        &counters
            .iter()
            .map(|c| (labels(c), c.packets.to_string()))
            .collect::<Vec<_>>(),
    );
    metric(
        "nodeport_guard_rule_bytes_total",
        "counter",
        "Bytes matched by each policy rule (kernel counters).",
        &counters
            .iter()
            .map(|c| (labels(c), c.bytes.to_string()))
            .collect::<Vec<_>>(),
    );
    sync_metrics(metrics, &mut metric);
    drop_metrics(metrics, &mut metric);
    out
}

/// `nodeport_guard_in_sync` and the timestamps and interval that say for how long.
fn sync_metrics(metrics: &Metrics, metric: &mut impl FnMut(&str, &str, &str, &[(String, String)])) {
    metric(
        "nodeport_guard_in_sync",
        "gauge",
        "1 when the kernel holds the rules the daemon means to apply (its last write or repair succeeded); 0 after a failed write, until one succeeds.",
        &[(String::new(), u8::from(metrics.in_sync).to_string())],
    );
    metric(
        "nodeport_guard_last_sync_timestamp_seconds",
        "gauge",
        "When the daemon last read the kernel and found, or left, its rules in place (every resync does).",
        &[(String::new(), metrics.last_sync_timestamp.to_string())],
    );
    metric(
        "nodeport_guard_resync_interval_seconds",
        "gauge",
        "The configured resyncInterval: how often the daemon re-reads the kernel in full.",
        &[(
            String::new(),
            format!("{}", metrics.resync_interval_seconds),
        )],
    );
}

/// `nodeport_guard_healthy`: what `/healthz` answers, as a sample Prometheus can alert on
/// without probing `/healthz` itself.
pub fn render_health(healthy: bool) -> String {
    format!(
        "# HELP nodeport_guard_healthy 1 when the reconcile loop ran recently enough for /healthz to answer 200.\n\
         # TYPE nodeport_guard_healthy gauge\nnodeport_guard_healthy {}\n",
        u8::from(healthy)
    )
}

impl Metrics {
    /// Whether the loop went round within `stale_after`: what `/healthz` answers.
    pub fn healthy(&self, stale_after: Duration) -> bool {
        self.heartbeat
            .is_some_and(|beat| beat.elapsed() < stale_after)
    }
}

/// `nodeport_guard_dropped_packets_total` and friends.
fn drop_metrics(metrics: &Metrics, metric: &mut impl FnMut(&str, &str, &str, &[(String, String)])) {
    let mut dropped: Vec<_> = metrics.dropped.counts.iter().collect();
    dropped.sort();
    metric(
        "nodeport_guard_dropped_packets_total",
        "counter",
        "Packets dropped and logged to NFLOG, by the policy rule that dropped them (rule is the index, or end-of-tier, no-profile, unknown).",
        &dropped
            .iter()
            .map(|(key, count)| {
                (
                    format!(
                        "{{policy=\"{}\",rule=\"{}\",direction=\"{}\",tier=\"{}\"}}",
                        key.policy, key.rule, key.direction, key.tier
                    ),
                    count.to_string(),
                )
            })
            .collect::<Vec<_>>(),
    );
    let mut sources: Vec<_> = metrics.dropped_sources.counts.iter().collect();
    sources.sort();
    metric(
        "nodeport_guard_dropped_source_packets_total",
        "counter",
        "Packets dropped and logged to NFLOG, by source address (at most 256 sources; further ones count under source=\"other\").",
        &sources
            .iter()
            .map(|(source, count)| (format!("{{source=\"{source}\"}}"), count.to_string()))
            .collect::<Vec<_>>(),
    );
    metric(
        "nodeport_guard_dropped_packets_skipped_total",
        "counter",
        "Logged packets lost before they were counted (the NFLOG socket's buffer overflowed).",
        &[(String::new(), metrics.drops_skipped.to_string())],
    );
    metric(
        "nodeport_guard_drops_listening",
        "gauge",
        "1 when the daemon reads the NFLOG groups (0: drop logging off, or another program holds a group).",
        &[(String::new(), u8::from(metrics.drops_listening).to_string())],
    );
    if let Some(exposed) = &metrics.exposed_ports {
        let lines: Vec<(String, String)> = exposed
            .iter()
            .map(|((reachable, via), count)| {
                (
                    format!(
                        "{{reachable=\"{}\",via=\"{}\"}}",
                        reachable.as_str(),
                        via.as_str()
                    ),
                    count.to_string(),
                )
            })
            .collect();
        metric(
            "nodeport_guard_exposed_ports",
            "gauge",
            "Ports of this host other hosts can reach (listening sockets, DNAT rules), by who the policies applied let reach them.",
            &lines,
        );
    }
}

/// Serves `/metrics` and `/healthz` on `listener`. `counters` reads the kernel counters (it
/// runs programs, so it is called on a blocking thread); `stale_after` is how long the loop may
/// be silent before `/healthz` says it is unhealthy.
pub async fn serve<F>(listener: TcpListener, metrics: Shared, counters: F, stale_after: Duration)
where
    F: Fn() -> Vec<RuleCounter> + Send + Sync + Clone + 'static,
{
    loop {
        let Ok((mut stream, _)) = listener.accept().await else {
            continue;
        };
        let metrics = metrics.clone();
        let counters = counters.clone();
        tokio::spawn(async move {
            let mut request = Vec::new();
            let mut buffer = [0u8; 1024];
            let read = tokio::time::timeout(Duration::from_secs(5), async {
                while !request.windows(4).any(|w| w == b"\r\n\r\n") && request.len() < 8192 {
                    match stream.read(&mut buffer).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => request.extend_from_slice(&buffer[..n]),
                    }
                }
            })
            .await;
            if read.is_err() {
                return;
            }
            let first = String::from_utf8_lossy(&request);
            let path = first.split_whitespace().nth(1).unwrap_or("/");
            let (status, body) = match path {
                "/metrics" => {
                    let rules = tokio::task::spawn_blocking(counters)
                        .await
                        .unwrap_or_default();
                    let text = match metrics.lock() {
                        Ok(metrics) => {
                            render(&metrics, &rules) + &render_health(metrics.healthy(stale_after))
                        }
                        Err(_) => String::new(),
                    };
                    ("200 OK", text)
                }
                "/healthz" => {
                    let healthy = metrics.lock().is_ok_and(|m| m.healthy(stale_after));
                    if healthy {
                        ("200 OK", "ok\n".to_owned())
                    } else {
                        (
                            "503 Service Unavailable",
                            "the reconcile loop is not running\n".to_owned(),
                        )
                    }
                }
                _ => ("404 Not Found", "not found\n".to_owned()),
            };
            let response = format!(
                "HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = stream.write_all(response.as_bytes()).await;
            let _ = stream.shutdown().await;
        });
    }
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
        assert!(text.contains("nodeport_guard_apply_duration_seconds_sum 0.000000\n"));
        assert!(text.contains(
            "nodeport_guard_rule_packets_total{policy=\"p\",direction=\"ingress\",rule=\"1\",tier=\"default\"} 5\n"
        ));
        assert!(text.contains("nodeport_guard_dropped_packets_skipped_total 0\n"));
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
            "nodeport_guard_resync_interval_seconds 90\n",
            "nodeport_guard_dropped_source_packets_total{source=\"203.0.113.7\"} 4\n",
        ] {
            assert!(text.contains(line), "{line} missing in {text}");
        }
        assert!(
            !metrics.healthy(Duration::from_secs(60)),
            "never went round"
        );
        metrics.heartbeat = Some(Instant::now());
        assert!(metrics.healthy(Duration::from_secs(60)));
        let health = render_health(true);
        assert!(health.contains("# TYPE nodeport_guard_healthy gauge\n"));
        assert!(health.ends_with("\nnodeport_guard_healthy 1\n"), "{health}");
    }
}
