//! The DNAT rules of other programs' nftables tables, read from `nft -j list ruleset`. Pure.
//!
//! The walk starts at every base chain of type `nat` on hook `prerouting` and follows `jump`,
//! `goto` and verdict maps (named, as kube-proxy's `service-nodeports`, or anonymous, as its
//! `numgen` endpoint choice), carrying what the rules and map keys on the way require:
//! protocol (`meta l4proto`, `tcp dport`), destination port (`th dport`), destination address
//! (`ip daddr`, `fib daddr type local`); ports may be one, a range, an anonymous set (`tcp dport
//! { 31001, 31002 }`) or a named set. A `dnat` or `redirect` met on the way publishes the ports
//! the path requires, each listed apart, a `redirect` with this host's port as target
//! (`:8080`).
//! kube-proxy names the Service in its chain names (`external-HASH-ns/svc/tcp/port`) and in
//! some map elements' comments; docker's `docker-bridges` tables DNAT to the container.
//!
//! The tables iptables-nft keeps (`ip nat`, `ip6 nat`) are read through `iptables-nft-save`
//! instead (their rules are xtables matches JSON does not spell out), and nodeport-guard's own
//! tables DNAT nothing.

use std::collections::BTreeMap;

use ipnet::IpNet;
use serde_json::Value;

use super::{Destination, Dnat, PortSet, Sends, Transport};
use crate::dataplane::nat::is_iptables_nft_table;
use crate::model::IpFamily;

/// How deep jumps are followed.
const MAX_DEPTH: usize = 16;

/// A rule: its statements and its comment.
type RuleJson<'j> = (&'j [Value], Option<&'j str>);

#[derive(Default)]
struct Table<'j> {
    chains: BTreeMap<&'j str, Vec<RuleJson<'j>>>,
    maps: BTreeMap<&'j str, &'j [Value]>,
    /// Named sets' elements.
    sets: BTreeMap<&'j str, &'j [Value]>,
    hooked: Vec<&'j str>,
}

/// What the path to a rule requires.
#[derive(Clone, Debug)]
struct Path {
    protocol: Option<Transport>,
    /// `None`: any port.
    port: Option<PortSet>,
    destination: Destination,
    comment: Option<String>,
    chain: String,
}

/// The DNAT rules reached from the nat prerouting base chains of `json` (the output of `nft
/// -j list ruleset`), leaving out iptables-nft's and nodeport-guard's tables; notes on what
/// cannot be listed. An error when the text is not nft's JSON.
pub fn parse_ruleset(json: &str) -> Result<(Vec<Dnat>, Vec<String>), serde_json::Error> {
    let document: Value = serde_json::from_str(json)?;
    let empty = Vec::new();
    let objects = document
        .get("nftables")
        .and_then(Value::as_array)
        .unwrap_or(&empty);
    let mut tables: BTreeMap<(&str, &str), Table<'_>> = BTreeMap::new();
    for object in objects {
        let Some((kind, body)) = object.as_object().and_then(|o| o.iter().next()) else {
            continue;
        };
        let field = |name: &str| body.get(name).and_then(Value::as_str).unwrap_or("");
        let (family, table) = (field("family"), field("table"));
        if is_iptables_nft_table(family, table)
            || table == crate::dataplane::nftables::render::TABLE
        {
            continue;
        }
        let entry = tables.entry((family, table)).or_default();
        match kind.as_str() {
            "chain" => {
                let name = field("name");
                entry.chains.entry(name).or_default();
                if field("type") == "nat" && field("hook") == "prerouting" {
                    entry.hooked.push(name);
                }
            }
            "rule" => {
                let expr = body
                    .get("expr")
                    .and_then(Value::as_array)
                    .map_or(&[][..], Vec::as_slice);
                let comment = body.get("comment").and_then(Value::as_str);
                entry
                    .chains
                    .entry(field("chain"))
                    .or_default()
                    .push((expr, comment));
            }
            "map" | "set" => {
                let elements = body
                    .get("elem")
                    .and_then(Value::as_array)
                    .map_or(&[][..], Vec::as_slice);
                if kind == "map" {
                    entry.maps.insert(field("name"), elements);
                } else {
                    entry.sets.insert(field("name"), elements);
                }
            }
            _ => {}
        }
    }
    let mut found = Vec::new();
    let mut notes = Vec::new();
    for ((family, name), table) in &tables {
        let mut walk = Walk {
            table,
            table_name: name,
            family: match *family {
                "ip" => Some(IpFamily::V4),
                "ip6" => Some(IpFamily::V6),
                _ => None,
            },
            found: &mut found,
            notes: &mut notes,
            stack: Vec::new(),
        };
        for chain in &table.hooked {
            let start = Path {
                protocol: None,
                port: None,
                destination: Destination::Any,
                comment: None,
                chain: (*chain).to_owned(),
            };
            walk.chain(chain, start);
        }
    }
    found.sort();
    found.dedup();
    notes.sort();
    notes.dedup();
    Ok((found, notes))
}

struct Walk<'t, 'j> {
    table: &'t Table<'j>,
    table_name: &'t str,
    family: Option<IpFamily>,
    found: &'t mut Vec<Dnat>,
    notes: &'t mut Vec<String>,
    stack: Vec<&'j str>,
}

impl<'j> Walk<'_, 'j> {
    fn chain(&mut self, name: &str, path: Path) {
        let Some((&name, rules)) = self.table.chains.get_key_value(name) else {
            return;
        };
        if self.stack.len() >= MAX_DEPTH || self.stack.contains(&name) {
            return;
        }
        self.stack.push(name);
        let mut path = path;
        path.chain = name.to_owned();
        for (expr, comment) in rules {
            let mut here = path.clone();
            if let Some(comment) = comment {
                here.comment = Some((*comment).to_owned());
            }
            if self.rule(expr, here) == Flow::Stop {
                break;
            }
        }
        self.stack.pop();
    }

    /// One rule: its matches narrow the path; its verdict, map or DNAT ends it.
    fn rule(&mut self, expr: &[Value], mut path: Path) -> Flow {
        let mut conditions = 0;
        for statement in expr {
            if let Some(found) = statement.get("match") {
                conditions += 1;
                if narrow_by_match(&mut path, found, &self.table.sets).is_none() {
                    return Flow::Next;
                }
            } else if let Some(verdict) = verdict_target(statement) {
                self.follow(verdict, path);
                return Flow::Next;
            } else if let Some(vmap) = statement.get("vmap") {
                self.vmap(vmap, &path);
                return Flow::Next;
            } else if let Some(dnat) = statement.get("dnat") {
                self.dnat(dnat, &path);
                return Flow::Next;
            } else if let Some(redirect) = statement.get("redirect") {
                let to = redirect.get("port").and_then(port_words);
                self.publish(&path, self.family, Sends::Redirect(to));
                return Flow::Next;
            } else if statement.get("return").is_some() && conditions == 0 {
                return Flow::Stop;
            }
        }
        Flow::Next
    }

    fn follow(&mut self, chain: &str, path: Path) {
        self.chain(chain, path);
    }

    /// A verdict map: each element's key narrows the path along the map's key expression.
    fn vmap(&mut self, vmap: &Value, path: &Path) {
        let key = vmap.get("key").unwrap_or(&Value::Null);
        let parts: Vec<&Value> = match key.get("concat").and_then(Value::as_array) {
            Some(parts) => parts.iter().collect(),
            None => vec![key],
        };
        let elements: &[Value] = match vmap.get("data") {
            Some(Value::String(name)) => name
                .strip_prefix('@')
                .and_then(|name| self.table.maps.get(name).copied())
                .unwrap_or(&[]),
            Some(data) => data
                .get("set")
                .and_then(Value::as_array)
                .map_or(&[][..], Vec::as_slice),
            None => &[],
        };
        for element in elements {
            let Some([value, verdict]) = element.as_array().map(Vec::as_slice) else {
                continue;
            };
            let Some(target) = verdict_target(verdict) else {
                continue;
            };
            let (value, comment) = match value.get("elem") {
                Some(inner) => (
                    inner.get("val").unwrap_or(&Value::Null),
                    inner.get("comment").and_then(Value::as_str),
                ),
                None => (value, None),
            };
            let values: Vec<&Value> = match value.get("concat").and_then(Value::as_array) {
                Some(values) => values.iter().collect(),
                None => vec![value],
            };
            let mut next = path.clone();
            if let Some(comment) = comment {
                next.comment = Some(comment.to_owned());
            }
            let fits = parts.iter().zip(&values).all(|(part, value)| {
                narrow(&mut next, part, "==", value, &self.table.sets).is_some()
            });
            if fits {
                let target = target.to_owned();
                self.follow(&target, next);
            }
        }
    }

    fn dnat(&mut self, dnat: &Value, path: &Path) {
        let address = dnat.get("addr").map(scalar).unwrap_or_default();
        let port = dnat.get("port").and_then(Value::as_u64);
        let family = self
            .family
            .or_else(|| address.parse().ok().map(|a| IpFamily::of_addr(&a)));
        let target = match (port, address.contains(':')) {
            (Some(port), true) => format!("[{address}]:{port}"),
            (Some(port), false) => format!("{address}:{port}"),
            (None, _) => address.clone(),
        };
        self.publish(path, family, Sends::To(target));
    }

    /// A `dnat` or `redirect` at the end of `path`: its ports, in `family` (both for a
    /// `redirect` of an `inet` table), or a note when they are not one protocol's few ports.
    fn publish(&mut self, path: &Path, family: Option<IpFamily>, sends: Sends) {
        let what = format!(
            "in nftables chain `{}` of table `{}`",
            path.chain, self.table_name
        );
        let families = match (family, &sends) {
            (Some(family), _) => vec![family],
            (None, Sends::Redirect(_)) => IpFamily::BOTH.to_vec(),
            (None, Sends::To(_)) => Vec::new(),
        };
        let (false, Some(protocol), Some(ports)) = (families.is_empty(), path.protocol, &path.port)
        else {
            let verb = match &sends {
                Sends::To(target) => format!("a DNAT to `{target}`"),
                Sends::Redirect(_) => "a redirect to this host".to_owned(),
            };
            self.notes.push(format!(
                "{verb} {what} matches no single protocol and port: not listed"
            ));
            return;
        };
        for family in families {
            match super::publish(
                family,
                protocol,
                ports,
                path.destination,
                &sends,
                |target| self.owner(path, target),
                &what,
            ) {
                Ok(found) => self.found.extend(found),
                Err(note) => self.notes.push(note),
            }
        }
    }

    /// kube-proxy's Service, from an element's comment or from the chain names on the way
    /// (`endpoint-HASH-ns/svc/tcp/port__addr/port`); docker's container; else the comment of
    /// the rule (or map element) on the way.
    fn owner(&self, path: &Path, target: &str) -> Option<String> {
        if let Some(service) = path
            .comment
            .as_deref()
            .and_then(super::xtables::service_name)
        {
            return Some(format!("Service {service}"));
        }
        if let Some(service) = self
            .stack
            .iter()
            .rev()
            .find_map(|chain| kube_proxy_service(chain))
        {
            return Some(format!("Service {service}"));
        }
        if self.table_name.starts_with("docker") {
            return Some(format!("container {target}"));
        }
        // A hand-written rule's own name for what it serves.
        path.comment.clone().filter(|comment| !comment.is_empty())
    }
}

#[derive(PartialEq)]
enum Flow {
    Next,
    Stop,
}

/// `ns/svc:port` from one of kube-proxy's chain names (`service-HASH-ns/svc/tcp/port`,
/// `external-…`, `endpoint-…__addr/port`).
fn kube_proxy_service(chain: &str) -> Option<String> {
    let rest = ["service-", "external-", "endpoint-", "local-"]
        .iter()
        .find_map(|prefix| chain.strip_prefix(prefix))?;
    let (_hash, rest) = rest.split_once('-')?;
    let rest = rest.split("__").next()?;
    let mut parts = rest.split('/');
    let (namespace, name, _protocol, port) =
        (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    Some(format!("{namespace}/{name}:{port}"))
}

/// The chain a `jump` or `goto` statement names.
fn verdict_target(statement: &Value) -> Option<&str> {
    ["jump", "goto"]
        .iter()
        .find_map(|verb| statement.get(verb))
        .and_then(|verdict| verdict.get("target"))
        .and_then(Value::as_str)
}

/// Narrows `path` by one `match` statement; `None` when the match cannot hold on it.
fn narrow_by_match(path: &mut Path, found: &Value, sets: &Sets<'_>) -> Option<()> {
    let op = found.get("op").and_then(Value::as_str).unwrap_or("==");
    let left = found.get("left").unwrap_or(&Value::Null);
    let right = found.get("right").unwrap_or(&Value::Null);
    narrow(path, left, op, right, sets)
}

/// A table's named sets: their elements by name.
type Sets<'j> = BTreeMap<&'j str, &'j [Value]>;

/// Narrows `path` by `left op right`. Only equality narrows; everything the walk does not
/// follow leaves the path as it is.
fn narrow(path: &mut Path, left: &Value, op: &str, right: &Value, sets: &Sets<'_>) -> Option<()> {
    if op != "==" && op != "in" {
        return Some(());
    }
    if let Some(payload) = left.get("payload") {
        let protocol = payload
            .get("protocol")
            .and_then(Value::as_str)
            .unwrap_or("");
        let field = payload.get("field").and_then(Value::as_str).unwrap_or("");
        match (protocol, field) {
            ("tcp" | "udp", "dport") => {
                let transport = Transport::parse(protocol)?;
                set(&mut path.protocol, transport)?;
                return narrow_port(path, right, sets);
            }
            ("th", "dport") => return narrow_port(path, right, sets),
            ("ip" | "ip6", "daddr") => {
                if let Ok(net) = net_of(right) {
                    path.destination = Destination::Net(net);
                }
                return Some(());
            }
            _ => return Some(()),
        }
    }
    let meta = left
        .get("meta")
        .and_then(|m| m.get("key"))
        .and_then(Value::as_str);
    // `iifname "lo"`: only the host's own packets to itself, never another host's.
    if meta == Some("iifname") && op == "==" && scalar(right) == "lo" {
        return None;
    }
    if meta == Some("l4proto") {
        return match Transport::parse(&scalar(right)) {
            Some(transport) => set(&mut path.protocol, transport),
            None if right.is_string() || right.is_number() => None,
            None => Some(()),
        };
    }
    if let Some(fib) = left.get("fib") {
        let daddr = fib
            .get("flags")
            .and_then(Value::as_array)
            .is_some_and(|flags| flags.iter().any(|flag| flag == "daddr"));
        if daddr && scalar(right) == "local" && !matches!(path.destination, Destination::Net(_)) {
            path.destination = Destination::Local;
        }
    }
    Some(())
}

/// Narrows `path` to the ports `right` names; `None` when it shares none with the path.
fn narrow_port(path: &mut Path, right: &Value, sets: &Sets<'_>) -> Option<()> {
    match ports_of(right, sets) {
        Some(ports) => {
            path.port = Some(match &path.port {
                Some(held) => held.intersect(&ports)?,
                None => ports,
            });
            Some(())
        }
        // Something the walk does not follow (a map lookup, an unknown set): any port.
        None => {
            path.port = None;
            Some(())
        }
    }
}

/// The ports a value names: a port, a range (`{"range": [31010, 31011]}`), an anonymous set
/// of either (`{"set": [31001, 31002]}`), a named set (`"@name"`), a set element with a
/// comment or timeout (`{"elem": {"val": …}}`). `None` for anything else.
fn ports_of(value: &Value, sets: &Sets<'_>) -> Option<PortSet> {
    let union = |items: &[Value]| -> Option<PortSet> {
        let mut ranges = Vec::new();
        for item in items {
            ranges.extend(ports_of(item, sets)?.0);
        }
        PortSet::of(ranges)
    };
    let port = |value: &Value| value.as_u64().and_then(|port| u16::try_from(port).ok());
    match value {
        Value::Number(_) => port(value).map(PortSet::one),
        Value::String(name) => union(sets.get(name.strip_prefix('@')?)?),
        Value::Object(object) => {
            if let Some(range) = object.get("range").and_then(Value::as_array) {
                match range.as_slice() {
                    [low, high] => PortSet::of([(port(low)?, port(high)?)]),
                    _ => None,
                }
            } else if let Some(items) = object.get("set").and_then(Value::as_array) {
                union(items)
            } else {
                ports_of(object.get("elem")?.get("val")?, sets)
            }
        }
        _ => None,
    }
}

/// A `redirect`'s port as nft writes it: `8080`, `8080-8081`.
fn port_words(value: &Value) -> Option<String> {
    if let Some(port) = value.as_u64() {
        return Some(port.to_string());
    }
    match value.get("range")?.as_array()?.as_slice() {
        [low, high] => Some(format!("{}-{}", low.as_u64()?, high.as_u64()?)),
        _ => None,
    }
}

/// Sets `slot` to `value`; `None` when it already holds another value.
fn set<T: PartialEq + Copy>(slot: &mut Option<T>, value: T) -> Option<()> {
    match slot {
        Some(held) if *held != value => None,
        _ => {
            *slot = Some(value);
            Some(())
        }
    }
}

fn net_of(value: &Value) -> Result<IpNet, ()> {
    if let Some(prefix) = value.get("prefix") {
        let address = prefix.get("addr").map(scalar).unwrap_or_default();
        let length = prefix.get("len").and_then(Value::as_u64).unwrap_or(0);
        return format!("{address}/{length}").parse().map_err(|_| ());
    }
    let text = scalar(value);
    text.parse::<IpNet>()
        .or_else(|_| text.parse::<std::net::IpAddr>().map(IpNet::from))
        .map_err(|_| ())
}

fn scalar(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        Value::Number(number) => number.to_string(),
        _ => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iptables_nft_tables_loopback_rules_and_non_json_are_left_alone() {
        let json = r#"{"nftables": [
            {"chain": {"family": "ip", "table": "nat", "name": "PREROUTING", "type": "nat", "hook": "prerouting"}},
            {"rule": {"family": "ip", "table": "nat", "chain": "PREROUTING", "expr": [
                {"match": {"op": "==", "left": {"payload": {"protocol": "tcp", "field": "dport"}}, "right": 1}},
                {"dnat": {"addr": "192.0.2.1", "port": 1}}]}},
            {"chain": {"family": "inet", "table": "mine", "name": "pre", "type": "nat", "hook": "prerouting"}},
            {"rule": {"family": "inet", "table": "mine", "chain": "pre", "expr": [
                {"match": {"op": "==", "left": {"meta": {"key": "l4proto"}}, "right": "udp"}},
                {"match": {"op": "==", "left": {"payload": {"protocol": "tcp", "field": "dport"}}, "right": 2}},
                {"dnat": {"family": "ip", "addr": "192.0.2.2", "port": 2}}]}},
            {"rule": {"family": "inet", "table": "mine", "chain": "pre", "expr": [
                {"match": {"op": "==", "left": {"payload": {"protocol": "udp", "field": "dport"}}, "right": 3}},
                {"dnat": {"family": "ip6", "addr": "2001:db8::3", "port": 3}}]}},
            {"rule": {"family": "inet", "table": "mine", "chain": "pre", "expr": [
                {"match": {"op": "==", "left": {"meta": {"key": "iifname"}}, "right": "lo"}},
                {"match": {"op": "==", "left": {"payload": {"protocol": "udp", "field": "dport"}}, "right": 4}},
                {"dnat": {"family": "ip6", "addr": "2001:db8::4", "port": 4}}]}}
        ]}"#;
        let (found, _) = parse_ruleset(json).expect("nft JSON");
        assert_eq!(
            super::super::describe(&found),
            ["V6 udp/3 Any -> [2001:db8::3]:3 (-)"]
        );
        assert!(parse_ruleset("table ip nat {").is_err());
    }

    #[test]
    fn port_sets_ranges_verdict_map_ranges_and_redirects() {
        // As `nft -j list ruleset` prints them (nft 1.0.6): `tcp dport { 31001, 31002 }`,
        // `udp dport { 31030-31032, 31040 }`, `tcp dport 1000-60000`, `redirect to :9000`,
        // and a verdict map keyed by port ranges.
        let json = r#"{"nftables": [
            {"chain": {"family": "inet", "table": "lab", "name": "pre", "type": "nat", "hook": "prerouting"}},
            {"chain": {"family": "inet", "table": "lab", "name": "to-pod"}},
            {"rule": {"family": "inet", "table": "lab", "chain": "pre", "expr": [
                {"match": {"op": "==", "left": {"payload": {"protocol": "tcp", "field": "dport"}}, "right": {"set": [31001, 31002]}}},
                {"redirect": {"port": 9000}}]}},
            {"rule": {"family": "inet", "table": "lab", "chain": "pre", "expr": [
                {"match": {"op": "==", "left": {"payload": {"protocol": "udp", "field": "dport"}}, "right": {"set": [{"range": [31030, 31032]}, 31040]}}},
                {"dnat": {"family": "ip", "addr": "192.0.2.2"}}]}},
            {"rule": {"family": "inet", "table": "lab", "chain": "pre", "expr": [
                {"match": {"op": "==", "left": {"payload": {"protocol": "tcp", "field": "dport"}}, "right": {"range": [1000, 60000]}}},
                {"dnat": {"family": "ip", "addr": "192.0.2.3"}}]}},
            {"rule": {"family": "inet", "table": "lab", "chain": "pre", "expr": [
                {"match": {"op": "==", "left": {"meta": {"key": "l4proto"}}, "right": "tcp"}},
                {"vmap": {"key": {"payload": {"protocol": "th", "field": "dport"}}, "data": {"set": [
                    [{"range": [32000, 32001]}, {"jump": {"target": "to-pod"}}],
                    [{"range": [33000, 40000]}, {"jump": {"target": "to-pod"}}]]}}}]}},
            {"rule": {"family": "inet", "table": "lab", "chain": "to-pod", "expr": [
                {"match": {"op": "==", "left": {"payload": {"protocol": "th", "field": "dport"}}, "right": {"set": [32001, 32002, 33000]}}},
                {"dnat": {"family": "ip", "addr": "192.0.2.4", "port": 80}}]}}
        ]}"#;
        let (found, notes) = parse_ruleset(json).expect("nft JSON");
        assert_eq!(
            super::super::describe(&found),
            [
                "V4 tcp/31001 Any -> :9000 (-)",
                "V4 tcp/31002 Any -> :9000 (-)",
                // The map's ranges narrowed by the chain's set.
                "V4 tcp/32001 Any -> 192.0.2.4:80 (-)",
                "V4 tcp/33000 Any -> 192.0.2.4:80 (-)",
                "V4 udp/31030 Any -> 192.0.2.2 (-)",
                "V4 udp/31031 Any -> 192.0.2.2 (-)",
                "V4 udp/31032 Any -> 192.0.2.2 (-)",
                "V4 udp/31040 Any -> 192.0.2.2 (-)",
                // A redirect of an inet table: both families.
                "V6 tcp/31001 Any -> :9000 (-)",
                "V6 tcp/31002 Any -> :9000 (-)",
            ]
        );
        assert_eq!(
            notes,
            [
                "a DNAT to `192.0.2.3` in nftables chain `pre` of table `lab` publishes tcp ports 1000-60000 (59001 ports, more than 256): not listed port by port"
            ]
        );
    }

    #[test]
    fn kube_proxy_chain_names_name_the_service() {
        assert_eq!(
            kube_proxy_service("endpoint-WEBEP001-shop/web/tcp/http__192.0.2.2/80").as_deref(),
            Some("shop/web:http")
        );
        assert_eq!(kube_proxy_service("services"), None);
        assert_eq!(kube_proxy_service("nat-prerouting"), None);
    }
}
