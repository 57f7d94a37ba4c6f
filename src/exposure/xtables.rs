//! The DNAT rules nat `PREROUTING` reaches, read from `iptables-save -t nat` (legacy or nft,
//! either family). Pure.
//!
//! The walk starts at `PREROUTING` and follows `-j`/`-g` into user chains, carrying what the
//! rules on the way require (protocol, destination port, destination address or
//! `addrtype --dst-type LOCAL`); a DNAT or REDIRECT rule met on the way publishes the ports the
//! path requires (`--dport`, a range `--dport 32010:32011`, `-m multiport --dports
//! 32001,32002`), each listed apart, a REDIRECT with this host's port as target. kube-proxy's
//! layout (`KUBE-SERVICES` → `KUBE-NODEPORTS` → `KUBE-EXT-…` → `KUBE-SVC-…` → `KUBE-SEP-…`
//! DNAT, each rule commented `ns/svc:port`) and docker's (`DOCKER`, DNAT without a comment)
//! both come out of the same walk. Conditions the walk does not follow (interfaces, sources,
//! marks, statistics) are left out: a port some packets reach is listed.

use std::collections::BTreeMap;

use ipnet::IpNet;

use super::{Destination, Dnat, PortSet, Sends, Transport};
use crate::dataplane::iptables::parse::split_words;
use crate::model::IpFamily;

/// How deep jumps are followed (kube-proxy's deepest path is five chains).
const MAX_DEPTH: usize = 16;

/// What the path to a rule requires.
#[derive(Clone, Debug)]
struct Path<'c> {
    protocol: Option<Transport>,
    /// `None`: any port.
    port: Option<PortSet>,
    destination: Destination,
    chain: &'c str,
    comment: Option<String>,
}

/// One rule's words, as `iptables-save` prints it after `-A CHAIN`.
struct Rule {
    protocol: Option<Transport>,
    /// `None`: no condition; `Some(None)`: a condition the walk cannot follow.
    port: Option<Option<PortSet>>,
    destination: Option<Destination>,
    comment: Option<String>,
    target: Option<String>,
    to_destination: Option<String>,
    /// REDIRECT's `--to-ports`.
    to_ports: Option<String>,
    conditions: usize,
    /// `-i lo`: only the host's own packets to itself, never another host's, match.
    loopback_only: bool,
}

/// The DNAT rules reached from nat `PREROUTING` in `save` (the output of `iptables-save -t
/// nat` for `family`), and notes on those that cannot be listed as ports.
pub fn parse_nat(save: &str, family: IpFamily) -> (Vec<Dnat>, Vec<String>) {
    let mut chains: BTreeMap<&str, Vec<Rule>> = BTreeMap::new();
    let mut in_nat = false;
    for line in save.lines() {
        let line = line.trim();
        if let Some(table) = line.strip_prefix('*') {
            in_nat = table == "nat";
        } else if in_nat && let Some(rest) = line.strip_prefix("-A ") {
            let (chain, rule) = rest.split_once(' ').unwrap_or((rest, ""));
            chains.entry(chain).or_default().push(parse_rule(rule));
        }
    }
    let mut walk = Walk {
        chains: &chains,
        family,
        found: Vec::new(),
        notes: Vec::new(),
        stack: Vec::new(),
    };
    let start = Path {
        protocol: None,
        port: None,
        destination: Destination::Any,
        chain: "PREROUTING",
        comment: None,
    };
    walk.chain("PREROUTING", &start);
    walk.found.sort();
    walk.found.dedup();
    walk.notes.sort();
    walk.notes.dedup();
    (walk.found, walk.notes)
}

fn parse_rule(text: &str) -> Rule {
    let words = split_words(text);
    let mut rule = Rule {
        protocol: None,
        port: None,
        destination: None,
        comment: None,
        target: None,
        to_destination: None,
        to_ports: None,
        conditions: 0,
        loopback_only: false,
    };
    let mut negated = false;
    let mut index = 0;
    while index < words.len() {
        let word = words[index].as_str();
        let value = words.get(index + 1).map(String::as_str);
        let mut consumed = 2;
        match (word, value) {
            ("!", _) => {
                negated = true;
                index += 1;
                continue;
            }
            ("-p" | "--protocol", Some(value)) => {
                rule.conditions += 1;
                if !negated {
                    rule.protocol = Transport::parse(value);
                }
            }
            // `--ports` (multiport: source or destination) is taken as destination ports: a
            // packet for one of them matches.
            (
                "--dport" | "--destination-port" | "--dports" | "--destination-ports" | "--ports",
                Some(value),
            ) => {
                rule.conditions += 1;
                if !negated {
                    rule.port = Some(PortSet::parse_xtables(value));
                }
            }
            ("-d" | "--destination", Some(value)) => {
                rule.conditions += 1;
                if !negated {
                    rule.destination = value.parse::<IpNet>().ok().map(Destination::Net);
                }
            }
            ("--dst-type", Some("LOCAL")) => {
                rule.conditions += 1;
                if !negated {
                    rule.destination = Some(Destination::Local);
                }
            }
            ("-i" | "--in-interface", Some("lo")) if !negated => {
                rule.conditions += 1;
                rule.loopback_only = true;
            }
            ("--comment", Some(value)) => rule.comment = Some(value.to_owned()),
            ("-j" | "--jump" | "-g" | "--goto", Some(value)) => {
                rule.target = Some(value.to_owned());
            }
            ("--to-destination", Some(value)) => rule.to_destination = Some(value.to_owned()),
            ("--to-ports", Some(value)) => rule.to_ports = Some(value.to_owned()),
            ("-m" | "--match", Some("comment")) => {}
            (option, _) if option.starts_with('-') => {
                rule.conditions += 1;
                consumed = 1;
            }
            _ => consumed = 1,
        }
        negated = false;
        index += consumed;
    }
    rule
}

struct Walk<'c> {
    chains: &'c BTreeMap<&'c str, Vec<Rule>>,
    family: IpFamily,
    found: Vec<Dnat>,
    notes: Vec<String>,
    stack: Vec<&'c str>,
}

impl<'c> Walk<'c> {
    fn chain(&mut self, name: &'c str, path: &Path<'c>) {
        let Some(rules) = self.chains.get(name) else {
            return;
        };
        if self.stack.len() >= MAX_DEPTH || self.stack.contains(&name) {
            return;
        }
        self.stack.push(name);
        for rule in rules {
            let target = rule.target.as_deref();
            if target == Some("RETURN") && rule.conditions == 0 {
                break;
            }
            if rule.loopback_only {
                continue;
            }
            let Some(next) = narrow(path, rule, name) else {
                continue;
            };
            match target {
                Some("DNAT") => {
                    let target = rule.to_destination.clone().unwrap_or_default();
                    self.publish(&next, Sends::To(target));
                }
                Some("REDIRECT") => self.publish(&next, Sends::Redirect(rule.to_ports.clone())),
                Some(chain) if self.chains.contains_key(chain) => {
                    self.chain(chain, &next);
                }
                _ => {}
            }
        }
        self.stack.pop();
    }

    /// A DNAT or REDIRECT rule at the end of `path`: its ports, or a note when they are not one
    /// protocol's few ports.
    fn publish(&mut self, path: &Path<'c>, sends: Sends) {
        let what = format!("in nat chain `{}`", path.chain);
        let (Some(protocol), Some(ports)) = (path.protocol, &path.port) else {
            let verb = match &sends {
                Sends::To(target) => format!("a DNAT to `{target}`"),
                Sends::Redirect(_) => "a REDIRECT to this host".to_owned(),
            };
            self.notes.push(format!(
                "{verb} {what} matches no single protocol and port: not listed"
            ));
            return;
        };
        match super::publish(
            self.family,
            protocol,
            ports,
            path.destination,
            &sends,
            |target| owner(path, target),
            &what,
        ) {
            Ok(found) => self.found.extend(found),
            Err(note) => self.notes.push(note),
        }
    }
}

/// The path through `rule` of `chain`; `None` when the rule cannot match on it (another
/// protocol or port than the path requires).
fn narrow<'c>(path: &Path<'c>, rule: &Rule, chain: &'c str) -> Option<Path<'c>> {
    let protocol = match (path.protocol, rule.protocol) {
        (Some(a), Some(b)) if a != b => return None,
        (a, b) => b.or(a),
    };
    let port = match (&path.port, &rule.port) {
        (_, Some(None)) => None,
        (Some(a), Some(Some(b))) => Some(a.intersect(b)?),
        (None, Some(b)) => b.clone(),
        (a, None) => a.clone(),
    };
    let destination = match (path.destination, rule.destination) {
        (_, Some(Destination::Net(net))) => Destination::Net(net),
        (Destination::Net(net), _) => Destination::Net(net),
        (_, Some(Destination::Local)) | (Destination::Local, _) => Destination::Local,
        _ => Destination::Any,
    };
    Some(Path {
        protocol,
        port,
        destination,
        chain,
        comment: rule.comment.clone().or_else(|| path.comment.clone()),
    })
}

/// Who a DNAT serves: the Service of kube-proxy's comment (`ns/svc:port`), the container of
/// docker's `DOCKER` chain, else what the comment of the rule (or of the jump to its chain)
/// says: a hand-written rule's own name for it.
fn owner(path: &Path<'_>, target: &str) -> Option<String> {
    if let Some(service) = path.comment.as_deref().and_then(service_name) {
        return Some(format!("Service {service}"));
    }
    if path.chain == "DOCKER" {
        return Some(format!("container {target}"));
    }
    path.comment.clone().filter(|comment| !comment.is_empty())
}

/// `ns/svc:port` (or `ns/svc`) when `comment` is one of kube-proxy's service comments.
pub(super) fn service_name(comment: &str) -> Option<&str> {
    let name = comment.split_whitespace().next()?;
    let (namespace, rest) = name.split_once('/')?;
    let plain = |text: &str| {
        !text.is_empty()
            && text
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_' | ':'))
    };
    (plain(namespace) && plain(rest) && comment == name).then_some(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hand_written_dnat_in_prerouting_and_what_cannot_be_a_port() {
        let save = "*filter\n-A INPUT -p tcp --dport 1 -j DNAT --to-destination 192.0.2.9:1\nCOMMIT\n\
                    *nat\n:PREROUTING ACCEPT [0:0]\n:LOOP - [0:0]\n\
                    -A PREROUTING -p tcp -m tcp --dport 30008 -j DNAT --to-destination 198.51.100.1:8080\n\
                    -A PREROUTING -p udp -m udp ! --dport 53 -j LOOP\n\
                    -A PREROUTING -d 198.51.100.7/32 -j DNAT --to-destination 192.0.2.7\n\
                    -A LOOP -j LOOP\n\
                    -A LOOP -p tcp -m tcp --dport 9 -j DNAT --to-destination 192.0.2.9:9\n\
                    COMMIT\n";
        let (found, notes) = parse_nat(save, IpFamily::V4);
        // A rule under a contradictory path (udp, then tcp) never matches; the filter table's
        // rule is not nat's.
        assert_eq!(
            super::super::describe(&found),
            ["V4 tcp/30008 Any -> 198.51.100.1:8080 (-)"]
        );
        assert_eq!(
            notes,
            [
                "a DNAT to `192.0.2.7` in nat chain `PREROUTING` matches no single protocol and port: not listed"
            ]
        );
    }

    #[test]
    fn a_hand_written_rules_comment_names_what_it_serves() {
        let save = "*nat\n:PREROUTING ACCEPT [0:0]\n\
                    -A PREROUTING -p tcp -m tcp --dport 30090 -m comment --comment \"my-app web\" -j DNAT --to-destination 192.0.2.51:8080\n\
                    -A PREROUTING -p tcp -m tcp --dport 30091 -j DNAT --to-destination 192.0.2.52:8080\n\
                    COMMIT\n";
        let (found, _) = parse_nat(save, IpFamily::V4);
        assert_eq!(
            super::super::describe(&found),
            [
                "V4 tcp/30090 Any -> 192.0.2.51:8080 (my-app web)",
                "V4 tcp/30091 Any -> 192.0.2.52:8080 (-)",
            ]
        );
    }

    #[test]
    fn port_lists_ranges_and_redirects_as_iptables_save_prints_them() {
        // As `iptables-save -t nat` prints them (iptables 1.8.9, legacy and nft alike).
        // A rule for `-i lo` meets only the host's own packets: never published.
        let save = "*nat\n:PREROUTING ACCEPT [0:0]\n:PORTS - [0:0]\n\
                    -A PREROUTING -i lo -p tcp -m tcp --dport 7778 -j DNAT --to-destination 192.0.2.71:80\n\
                    -A PREROUTING -p udp -m multiport --dports 5000:5002,6000 -j REDIRECT --to-ports 7000-7001\n\
                    -A PREROUTING -p tcp -m tcp --dport 1000:60000 -j DNAT --to-destination 192.0.2.3\n\
                    -A PREROUTING -p tcp -m multiport ! --dports 1,2 -j DNAT --to-destination 192.0.2.4\n\
                    -A PREROUTING -j REDIRECT --to-ports 8080\n\
                    -A PREROUTING -p tcp -m tcp --dport 32001:32005 -j PORTS\n\
                    -A PORTS -p tcp -m multiport --dports 32004,32009 -j DNAT --to-destination 192.0.2.5:80\n\
                    -A PORTS -p tcp -m multiport --ports 4000 -j REDIRECT\n\
                    COMMIT\n";
        let (found, notes) = parse_nat(save, IpFamily::V6);
        assert_eq!(
            super::super::describe(&found),
            [
                // The path's range and the rule's list share one port; `--ports` (either
                // direction) shares none with the path.
                "V6 tcp/32004 Any -> 192.0.2.5:80 (-)",
                "V6 udp/5000 Any -> :7000-7001 (-)",
                "V6 udp/5001 Any -> :7000-7001 (-)",
                "V6 udp/5002 Any -> :7000-7001 (-)",
                "V6 udp/6000 Any -> :7000-7001 (-)",
            ]
        );
        assert!(
            found
                .iter()
                .all(|dnat| dnat.redirect == dnat.target.starts_with(':'))
        );
        assert_eq!(
            notes,
            [
                "a DNAT to `192.0.2.3` in nat chain `PREROUTING` publishes tcp ports 1000-60000 (59001 ports, more than 256): not listed port by port",
                "a DNAT to `192.0.2.4` in nat chain `PREROUTING` matches no single protocol and port: not listed",
                "a REDIRECT to this host in nat chain `PREROUTING` matches no single protocol and port: not listed",
            ]
        );
    }

    #[test]
    fn only_plain_service_comments_name_a_service() {
        assert_eq!(service_name("shop/web:http"), Some("shop/web:http"));
        assert_eq!(service_name("shop/web"), Some("shop/web"));
        assert_eq!(service_name("shop/web:http cluster IP"), None);
        assert_eq!(service_name("kubernetes service portals"), None);
    }
}
