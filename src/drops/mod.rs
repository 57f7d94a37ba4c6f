//! Denied packets from our NFLOG groups, in the policies' terms (`drops`, and the daemon's
//! drop counting): the pure part. The sockets are in `system::nflog` and the daemon.
//!
//! A packet comes as an [`Observed`] (the prefix, the interface, the first bytes of the
//! packet); [`Resolver`] names the policy rule of its prefix; [`Filters`] picks what is shown;
//! [`Line`] is what is printed; [`Summary`] counts for Ctrl-C; [`Recent`], [`DropCounts`] and
//! [`SourceCounts`] are the daemon's bounded ring and its `/metrics` counters.

pub mod packet;
pub mod prefix;

use std::collections::{HashMap, VecDeque};
use std::fmt::Write as _;
use std::net::IpAddr;

use ipnet::IpNet;
use serde::{Deserialize, Serialize};

pub use packet::PacketSummary;
pub use prefix::{LoggedAction, Resolver, Verdict};

/// One packet as the kernel logged it: what the daemon streams to `drops`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Observed {
    /// When it was received, in milliseconds since the epoch.
    pub time_ms: i64,
    /// The NFLOG group.
    pub group: u16,
    /// The NFLOG prefix.
    pub prefix: String,
    /// The input interface's name, if it had one.
    pub in_interface: Option<String>,
    /// The packet, if its header could be read.
    pub packet: Option<PacketSummary>,
}

/// What the daemon's stream carries, one JSON object a line.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(
    tag = "type",
    rename_all = "camelCase",
    rename_all_fields = "camelCase"
)]
pub enum StreamMessage {
    /// A logged packet.
    Drop(Observed),
    /// Packets the daemon did not pass on (the reader was too slow or the kernel's buffer
    /// overflowed), since the last such message.
    Skipped {
        /// How many.
        count: u64,
    },
    /// The daemon does not serve this client (too many at once); the stream ends.
    Refused {
        /// Why, in words.
        reason: String,
    },
}

/// What the client asks the daemon's stream for, as its first line.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StreamRequest {
    /// Recent packets from this time on (milliseconds since the epoch) first, then live ones.
    pub since_ms: Option<i64>,
}

/// Which packets are shown.
#[derive(Clone, Debug, Default)]
pub struct Filters {
    /// Only this policy's rules.
    pub policy: Option<String>,
    /// Only sources in this net.
    pub src: Option<IpNet>,
    /// Only this destination port.
    pub port: Option<u16>,
    /// Also staged policies' would-be verdicts.
    pub staged: bool,
}

impl Filters {
    /// Whether a packet with this verdict is shown.
    pub fn matches(&self, observed: &Observed, verdict: &Verdict) -> bool {
        if verdict.is_staged() && !self.staged {
            return false;
        }
        if let Some(policy) = &self.policy
            && verdict.policy() != Some(policy.as_str())
        {
            return false;
        }
        let packet = observed.packet.as_ref();
        if let Some(net) = &self.src
            && !packet.is_some_and(|p| net.contains(&p.src))
        {
            return false;
        }
        if let Some(port) = self.port
            && packet.and_then(|p| p.dst_port) != Some(port)
        {
            return false;
        }
        true
    }
}

/// One printed packet: its `--json` object (camelCase keys), or a line of text.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Line<'a> {
    /// Local time, RFC 3339 with the offset.
    pub time: String,
    /// `family`, `protocol`, `src`, `srcPort`, `dst`, `dstPort`.
    #[serde(flatten)]
    pub packet: Option<&'a PacketSummary>,
    /// The input interface.
    pub in_interface: Option<&'a str>,
    /// The NFLOG group.
    pub group: u16,
    /// The NFLOG prefix as logged.
    pub prefix: &'a str,
    /// `kind` and the verdict's fields.
    #[serde(flatten)]
    pub verdict: &'a Verdict,
    /// The verdict in words.
    pub description: String,
}

impl<'a> Line<'a> {
    /// The line of `observed`, with its time in `zone`.
    pub fn new(
        observed: &'a Observed,
        verdict: &'a Verdict,
        zone: &jiff::tz::TimeZone,
    ) -> Line<'a> {
        Line {
            time: local_time(observed.time_ms, zone),
            packet: observed.packet.as_ref(),
            in_interface: observed.in_interface.as_deref(),
            group: observed.group,
            prefix: &observed.prefix,
            verdict,
            description: verdict.words(),
        }
    }

    /// `<time> <family> <proto> <src:port> → <dst:port> in <iface>: <verdict>`.
    pub fn text(&self) -> String {
        let mut out = self.time.clone();
        match self.packet {
            Some(p) => {
                let _ = write!(
                    out,
                    " {} {} {} → {}",
                    p.family,
                    p.protocol,
                    endpoint(p.src, p.src_port),
                    endpoint(p.dst, p.dst_port)
                );
            }
            None => out.push_str(" (packet header not logged)"),
        }
        let _ = write!(
            out,
            " in {}: {}",
            self.in_interface.unwrap_or("-"),
            self.description
        );
        if !matches!(self.verdict, Verdict::Unknown { .. }) {
            let _ = write!(out, " [{}]", self.prefix);
        }
        out
    }
}

/// `192.0.2.1:80`, `[2001:db8::1]:80`, or the address alone without a port.
pub fn endpoint(ip: IpAddr, port: Option<u16>) -> String {
    match (ip, port) {
        (IpAddr::V6(v6), Some(port)) => format!("[{v6}]:{port}"),
        (ip, Some(port)) => format!("{ip}:{port}"),
        (ip, None) => ip.to_string(),
    }
}

/// Milliseconds since the epoch as local RFC 3339 time with milliseconds.
pub fn local_time(time_ms: i64, zone: &jiff::tz::TimeZone) -> String {
    match jiff::Timestamp::from_millisecond(time_ms) {
        Ok(ts) => ts
            .to_zoned_datetime(zone.clone())
            .strftime("%Y-%m-%dT%H:%M:%S%.3f%:z")
            .to_string(),
        Err(_) => time_ms.to_string(),
    }
}

/// The most distinct sources and rules a [`Summary`] tells apart; the rest are "other".
pub const SUMMARY_KEYS: usize = 10_000;

/// Counts of what was shown, for the summary at the end.
#[derive(Debug, Default)]
pub struct Summary {
    /// Packets shown.
    pub shown: u64,
    /// Packets read but filtered out.
    pub filtered: u64,
    /// Packets skipped (not read: the daemon's stream or the kernel's buffer overflowed).
    pub skipped: u64,
    sources: HashMap<String, u64>,
    rules: HashMap<String, u64>,
}

impl Summary {
    /// Counts one shown packet.
    pub fn count(&mut self, observed: &Observed, verdict: &Verdict) {
        self.shown += 1;
        let source = observed
            .packet
            .as_ref()
            .map(|p| p.src.to_string())
            .unwrap_or_else(|| "(unknown)".to_owned());
        bump(&mut self.sources, source);
        let rule = match verdict {
            Verdict::Unknown { .. } => format!("unknown prefix `{}`", observed.prefix),
            other => other.words(),
        };
        bump(&mut self.rules, rule);
    }

    /// The summary in words: totals, then the top `top` sources and rules.
    pub fn render(&self, top: usize) -> String {
        let mut out = format!(
            "{} packet{} shown, {} filtered out, {} skipped\n",
            self.shown,
            if self.shown == 1 { "" } else { "s" },
            self.filtered,
            self.skipped
        );
        for (title, counts) in [("top sources", &self.sources), ("top rules", &self.rules)] {
            if counts.is_empty() {
                continue;
            }
            let _ = writeln!(out, "{title}:");
            for (key, count) in ranked(counts).into_iter().take(top) {
                let _ = writeln!(out, "  {count:>8}  {key}");
            }
        }
        out
    }
}

fn bump(counts: &mut HashMap<String, u64>, key: String) {
    if counts.len() >= SUMMARY_KEYS && !counts.contains_key(&key) {
        *counts.entry("(other)".to_owned()).or_default() += 1;
    } else {
        *counts.entry(key).or_default() += 1;
    }
}

fn ranked(counts: &HashMap<String, u64>) -> Vec<(&str, u64)> {
    let mut ranked: Vec<(&str, u64)> = counts.iter().map(|(k, v)| (k.as_str(), *v)).collect();
    ranked.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    ranked
}

/// The daemon's ring of recent packets, for `drops --since`.
#[derive(Debug)]
pub struct Recent {
    entries: VecDeque<Observed>,
    capacity: usize,
}

impl Recent {
    /// An empty ring that keeps the last `capacity` packets.
    pub fn new(capacity: usize) -> Recent {
        Recent {
            entries: VecDeque::with_capacity(capacity),
            capacity,
        }
    }

    /// Adds a packet, forgetting the oldest when full.
    pub fn push(&mut self, observed: Observed) {
        if self.capacity == 0 {
            return;
        }
        if self.entries.len() == self.capacity {
            self.entries.pop_front();
        }
        self.entries.push_back(observed);
    }

    /// The packets from `since_ms` on, oldest first.
    pub fn since(&self, since_ms: i64) -> Vec<Observed> {
        self.entries
            .iter()
            .filter(|o| o.time_ms >= since_ms)
            .cloned()
            .collect()
    }

    /// How many it holds.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.entries.len()
    }
}

/// The labels of `nodeport_guard_dropped_packets_total`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DropKey {
    /// The policy (empty for the end of a tier, no profile, unknown).
    pub policy: String,
    /// The rule index, or `end-of-tier`, `no-profile`, `unknown`, `other`.
    pub rule: String,
    /// `ingress`, `egress`, or empty when unknown.
    pub direction: String,
    /// The tier, when known.
    pub tier: String,
}

impl DropKey {
    /// The key a denied packet is counted under; `None` for what was not dropped (allow, pass,
    /// log, staged).
    pub fn of(verdict: &Verdict) -> Option<DropKey> {
        let key = |policy: &str, rule: String, direction: String, tier: &str| DropKey {
            policy: policy.to_owned(),
            rule,
            direction,
            tier: tier.to_owned(),
        };
        match verdict {
            Verdict::Rule {
                policy,
                tier,
                direction,
                rule,
                action: LoggedAction::Deny,
                staged: false,
            } => Some(key(
                policy,
                rule.to_string(),
                direction.to_string(),
                tier.as_deref().unwrap_or(""),
            )),
            Verdict::EndOfTier {
                tier,
                direction,
                action: LoggedAction::Deny,
                staged: false,
            } => Some(key("", "end-of-tier".into(), direction.to_string(), tier)),
            Verdict::NoProfile { direction } => {
                Some(key("", "no-profile".into(), direction.to_string(), ""))
            }
            Verdict::Unknown { .. } => Some(key("", "unknown".into(), String::new(), "")),
            _ => None,
        }
    }
}

/// The most label sets [`DropCounts`] keeps; further ones count under `rule="other"`.
pub const DROP_KEYS: usize = 4_096;

/// Denied packets per policy rule, for `/metrics`; bounded in size.
#[derive(Clone, Debug, Default)]
pub struct DropCounts {
    /// Packets per label set.
    pub counts: HashMap<DropKey, u64>,
}

impl DropCounts {
    /// Counts a packet if it was dropped.
    #[cfg(test)]
    pub fn count(&mut self, verdict: &Verdict) {
        self.count_n(verdict, 1);
    }

    /// Counts `packets` packets with the same verdict, if they were dropped.
    pub fn count_n(&mut self, verdict: &Verdict, packets: u64) {
        let Some(key) = DropKey::of(verdict) else {
            return;
        };
        if self.counts.len() >= DROP_KEYS && !self.counts.contains_key(&key) {
            let other = DropKey {
                policy: String::new(),
                rule: "other".into(),
                direction: String::new(),
                tier: String::new(),
            };
            *self.counts.entry(other).or_default() += packets;
        } else {
            *self.counts.entry(key).or_default() += packets;
        }
    }
}

/// The most sources [`SourceCounts`] keeps; packets from further ones count under
/// `source="other"`, so a flood of spoofed addresses cannot grow `/metrics` without bound.
pub const SOURCE_KEYS: usize = 256;

/// Denied packets per source address, for `/metrics` (`top dropped sources` and the alert on a
/// source whose drops rise sharply); bounded in size like [`DropCounts`].
#[derive(Clone, Debug, Default)]
pub struct SourceCounts {
    /// Packets per source address (or `other`).
    pub counts: HashMap<String, u64>,
}

impl SourceCounts {
    /// Counts `packets` dropped packets from `source`.
    pub fn count_n(&mut self, source: IpAddr, packets: u64) {
        let key = source.to_string();
        if self.counts.len() >= SOURCE_KEYS && !self.counts.contains_key(&key) {
            *self.counts.entry("other".to_owned()).or_default() += packets;
        } else {
            *self.counts.entry(key).or_default() += packets;
        }
    }
}

/// Counts a batch of logged packets for `/metrics`: per policy rule, and per source for the
/// dropped ones. A flood is mostly one prefix, so each prefix is resolved once a batch.
pub fn count_batch(
    resolver: &Resolver,
    observed: &[Observed],
    rules: &mut DropCounts,
    sources: &mut SourceCounts,
) {
    let mut per_prefix: HashMap<&str, (Verdict, u64)> = HashMap::new();
    for packet in observed {
        let prefix = packet.prefix.as_str();
        let (verdict, packets) = per_prefix
            .entry(prefix)
            .or_insert_with(|| (resolver.resolve(prefix), 0));
        *packets += 1;
        if let Some(summary) = &packet.packet
            && DropKey::of(verdict).is_some()
        {
            sources.count_n(summary.src, 1);
        }
    }
    for (verdict, packets) in per_prefix.values() {
        rules.count_n(verdict, *packets);
    }
}

/// The peer port id holding each group, from `/proc/net/netfilter/nfnetlink_log` (lines of
/// group, peer port id, queue length, copy mode, copy range, flush timeout, use count).
pub fn group_holders(text: &str) -> Vec<(u16, u32)> {
    text.lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let group = fields.next()?.parse().ok()?;
            let portid = fields.next()?.parse().ok()?;
            Some((group, portid))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Direction;

    fn observed(src: &str, port: u16, prefix: &str) -> Observed {
        let src: std::net::Ipv4Addr = src.parse().expect("ip");
        Observed {
            time_ms: 1_700_000_000_123,
            group: 1,
            prefix: prefix.into(),
            in_interface: Some("eth0".into()),
            packet: packet::parse(&packet::tests::ipv4(
                6,
                src.octets(),
                [198, 51, 100, 1],
                (40000, port),
            )),
        }
    }

    fn deny(policy: &str, rule: usize) -> Verdict {
        Verdict::Rule {
            policy: policy.into(),
            tier: Some("default".into()),
            direction: Direction::Ingress,
            rule,
            action: LoggedAction::Deny,
            staged: false,
        }
    }

    fn staged() -> Verdict {
        Verdict::Rule {
            policy: "audit".into(),
            tier: None,
            direction: Direction::Ingress,
            rule: 0,
            action: LoggedAction::Deny,
            staged: true,
        }
    }

    #[test]
    fn filters_pick_policy_source_port_and_staged() {
        let packet = observed("192.0.2.7", 30080, "DPI0|p");
        let verdict = deny("p", 0);
        assert!(Filters::default().matches(&packet, &verdict));
        let by_policy = |name: &str| Filters {
            policy: Some(name.into()),
            ..Filters::default()
        };
        assert!(by_policy("p").matches(&packet, &verdict));
        assert!(!by_policy("q").matches(&packet, &verdict));
        let by_src = |net: &str| Filters {
            src: Some(net.parse().expect("net")),
            ..Filters::default()
        };
        assert!(by_src("192.0.2.0/24").matches(&packet, &verdict));
        assert!(!by_src("203.0.113.0/24").matches(&packet, &verdict));
        assert!(!by_src("2001:db8::/32").matches(&packet, &verdict));
        let by_port = |port| Filters {
            port: Some(port),
            ..Filters::default()
        };
        assert!(by_port(30080).matches(&packet, &verdict));
        assert!(!by_port(22).matches(&packet, &verdict));
        // Staged verdicts only with --staged; real ones either way.
        assert!(!Filters::default().matches(&packet, &staged()));
        let with_staged = Filters {
            staged: true,
            ..Filters::default()
        };
        assert!(with_staged.matches(&packet, &staged()));
        assert!(with_staged.matches(&packet, &verdict));
    }

    #[test]
    fn lines_in_text_and_json() {
        let packet = observed("192.0.2.7", 30080, "DPI0|p");
        let verdict = deny("p", 0);
        let line = Line::new(&packet, &verdict, &jiff::tz::TimeZone::UTC);
        assert_eq!(
            line.text(),
            "2023-11-14T22:13:20.123+00:00 ipv4 tcp 192.0.2.7:40000 → 198.51.100.1:30080 in eth0: \
             denied by policy p (tier default) ingress rule 0 [DPI0|p]"
        );
        let json = serde_json::to_value(&line).expect("json");
        assert_eq!(
            json,
            serde_json::json!({
                "time": "2023-11-14T22:13:20.123+00:00",
                "family": "ipv4", "protocol": "tcp",
                "src": "192.0.2.7", "srcPort": 40000, "dst": "198.51.100.1", "dstPort": 30080,
                "inInterface": "eth0", "group": 1, "prefix": "DPI0|p",
                "kind": "rule", "policy": "p", "tier": "default", "direction": "ingress",
                "rule": 0, "action": "deny", "staged": false,
                "description": "denied by policy p (tier default) ingress rule 0",
            })
        );
        let unknown = Verdict::Unknown {
            reason: "unknown prefix `x` (not nodeport-guard's format)".into(),
        };
        let line = Line::new(&packet, &unknown, &jiff::tz::TimeZone::UTC);
        assert!(
            line.text()
                .ends_with("in eth0: unknown prefix `x` (not nodeport-guard's format)")
        );
        assert_eq!(
            endpoint("2001:db8::1".parse().expect("ip"), Some(80)),
            "[2001:db8::1]:80"
        );
    }

    #[test]
    fn summary_ranks_sources_and_rules() {
        let mut summary = Summary::default();
        for (src, rule) in [("192.0.2.7", 0), ("192.0.2.7", 0), ("192.0.2.8", 1)] {
            summary.count(&observed(src, 80, "DPI0|p"), &deny("p", rule));
        }
        summary.filtered = 2;
        summary.skipped = 5;
        let text = summary.render(5);
        assert!(
            text.starts_with("3 packets shown, 2 filtered out, 5 skipped\n"),
            "{text}"
        );
        let sources = text.find("top sources:").expect("sources");
        let rules = text.find("top rules:").expect("rules");
        assert!(sources < rules);
        assert!(
            text.contains("         2  192.0.2.7\n         1  192.0.2.8\n"),
            "{text}"
        );
        assert!(
            text.contains("         2  denied by policy p (tier default) ingress rule 0\n"),
            "{text}"
        );
    }

    #[test]
    fn summary_and_counters_stay_bounded() {
        let mut summary = Summary::default();
        let mut counts = DropCounts::default();
        for i in 0..(SUMMARY_KEYS + 10) {
            let mut packet = observed("192.0.2.1", 80, "DPI0|p");
            if let Some(p) = packet.packet.as_mut() {
                p.src = IpAddr::from(std::net::Ipv6Addr::from(i as u128));
            }
            let verdict = deny(&format!("p{i}"), 0);
            summary.count(&packet, &verdict);
            counts.count(&verdict);
        }
        assert!(summary.sources.len() <= SUMMARY_KEYS + 1);
        assert!(summary.rules.len() <= SUMMARY_KEYS + 1);
        assert_eq!(counts.counts.len(), DROP_KEYS + 1);
        let total: u64 = counts.counts.values().sum();
        assert_eq!(total, (SUMMARY_KEYS + 10) as u64);
    }

    #[test]
    fn source_counters_stay_bounded_and_keep_the_total() {
        let mut sources = SourceCounts::default();
        let first: IpAddr = "203.0.113.7".parse().expect("ip");
        sources.count_n(first, 3);
        for i in 0..(SOURCE_KEYS as u128 + 10) {
            sources.count_n(IpAddr::from(std::net::Ipv6Addr::from(i)), 1);
        }
        sources.count_n(first, 2);
        assert_eq!(sources.counts.len(), SOURCE_KEYS + 1);
        assert_eq!(
            sources.counts["203.0.113.7"], 5,
            "a known source keeps counting"
        );
        assert_eq!(sources.counts["other"], 11);
        let total: u64 = sources.counts.values().sum();
        assert_eq!(total, SOURCE_KEYS as u64 + 10 + 5);
    }

    #[test]
    fn only_drops_are_counted() {
        let mut counts = DropCounts::default();
        counts.count(&deny("p", 2));
        counts.count(&staged());
        counts.count(&Verdict::Rule {
            policy: "p".into(),
            tier: None,
            direction: Direction::Ingress,
            rule: 1,
            action: LoggedAction::Log,
            staged: false,
        });
        counts.count(&Verdict::NoProfile {
            direction: Direction::Egress,
        });
        let mut keys: Vec<_> = counts.counts.keys().cloned().collect();
        keys.sort();
        assert_eq!(keys.len(), 2);
        assert_eq!(keys[0].rule, "no-profile");
        assert_eq!((keys[1].policy.as_str(), keys[1].rule.as_str()), ("p", "2"));
    }

    #[test]
    fn the_ring_keeps_the_latest() {
        let mut ring = Recent::new(3);
        for i in 0..5 {
            let mut packet = observed("192.0.2.1", 80, "DPI0|p");
            packet.time_ms = i;
            ring.push(packet);
        }
        assert_eq!(ring.len(), 3);
        let times: Vec<i64> = ring.since(3).iter().map(|o| o.time_ms).collect();
        assert_eq!(times, vec![3, 4]);
    }

    #[test]
    fn reads_the_group_holders() {
        let text =
            "    1   4321     0 2 65535      1  1\n    2 4294954951     0 2   128      1  1\nbad\n";
        assert_eq!(group_holders(text), vec![(1, 4321), (2, 4294954951)]);
        let stream = StreamMessage::Skipped { count: 3 };
        assert_eq!(
            serde_json::to_string(&stream).expect("json"),
            r#"{"type":"skipped","count":3}"#
        );
    }
}
