//! Rules: action, protocol, ICMP, IP version, and the checks across a rule's fields.

use crate::model::{Action, IcmpMatch, IpFamily, Port, Protocol, Rule};
use crate::source::Span;
use crate::spec::{RawIcmp, RawProtocol, RawRule, Sp};

use super::checker::{Checker, Problem};
use super::entity::{CheckedEntity, check_entity_rule};
use super::envelope::check_annotations;
use super::values::{parse_port, parse_protocol, shown};

pub(super) fn check_rules(checker: &mut Checker<'_>, rules: &[Sp<RawRule>]) -> Vec<Rule> {
    rules
        .iter()
        .filter_map(|rule| check_rule(checker, rule))
        .collect()
}

/// Checks one rule; returns it when it is entirely valid.
fn check_rule(checker: &mut Checker<'_>, rule: &Sp<RawRule>) -> Option<Rule> {
    let errors_before = checker.errors;
    let raw = &rule.value;
    let action = check_action(checker, rule);
    let protocol = raw
        .protocol
        .as_ref()
        .and_then(|protocol| check_protocol(checker, protocol));
    let not_protocol = raw
        .not_protocol
        .as_ref()
        .and_then(|protocol| check_protocol(checker, protocol));
    // A protocol that is written but wrong is reported once; checks that depend on it are
    // skipped rather than repeated.
    let protocol_known = raw.protocol.is_none() || protocol.is_some();
    let ip_version = raw
        .ip_version
        .as_ref()
        .and_then(|version| check_ip_version(checker, version));
    if let (Some(version), Some(written)) = (ip_version, &raw.ip_version) {
        for (field, checked) in [("protocol", protocol), ("notProtocol", not_protocol)] {
            if let Some(protocol) = checked {
                check_protocol_family(checker, field, protocol, version, written.span);
            }
        }
    }
    let icmp = raw
        .icmp
        .as_ref()
        .and_then(|icmp| check_icmp(checker, icmp, "icmp", protocol, protocol_known));
    // Calico v3.30 does not check `notICMP` against the protocol, newer Calico does: an ICMP
    // type means nothing for another protocol.
    let not_icmp = raw
        .not_icmp
        .as_ref()
        .and_then(|icmp| check_icmp(checker, icmp, "notICMP", protocol, protocol_known));
    if let Some(http) = &raw.http {
        checker.error_help(
            http.span,
            "`http` matches HTTP requests of workloads, which does not apply to host endpoints",
            "remove `http`; match the port with `destination.ports` instead",
        );
    }
    let source = raw
        .source
        .as_ref()
        .map(|entity| check_entity_rule(checker, entity))
        .unwrap_or_default();
    let destination = raw
        .destination
        .as_ref()
        .map(|entity| check_entity_rule(checker, entity))
        .unwrap_or_default();
    check_rule_families(checker, raw, ip_version, protocol, &source, &destination);
    if protocol_known {
        check_ports_have_protocol(checker, raw, protocol);
    }
    let annotations = raw
        .metadata
        .as_ref()
        .and_then(|metadata| metadata.value.annotations.as_ref())
        .map(|annotations| check_annotations(checker, annotations))
        .unwrap_or_default();
    if checker.errors > errors_before {
        return None;
    }
    Some(Rule {
        action: action?,
        protocol,
        not_protocol,
        icmp,
        not_icmp,
        ip_version,
        source: source.rule,
        destination: destination.rule,
        annotations,
        origin: checker.origin(rule.span),
    })
}

fn check_action(checker: &mut Checker<'_>, rule: &Sp<RawRule>) -> Option<Action> {
    let Some(action) = &rule.value.action else {
        checker.error_help(
            rule.span,
            "the rule has no `action`",
            "add `action: Allow` (or `Deny`, `Pass`, `Log`)",
        );
        return None;
    };
    match parse_action(&action.value) {
        Ok(parsed) => Some(parsed),
        Err(problem) => {
            checker.report(action.span, problem);
            None
        }
    }
}

/// Parses an action as Calico spells it.
pub(super) fn parse_action(text: &str) -> Result<Action, Problem> {
    const ACTIONS: [Action; 4] = [Action::Allow, Action::Deny, Action::Pass, Action::Log];
    if let Some(action) = ACTIONS.into_iter().find(|action| action.as_str() == text) {
        return Ok(action);
    }
    let problem = Problem::new(format!("`{}` is not an action", shown(text)));
    let lower = text.to_ascii_lowercase();
    let suggestion = ACTIONS
        .into_iter()
        .find(|action| action.as_str().eq_ignore_ascii_case(text))
        .or(match lower.as_str() {
            "accept" | "permit" => Some(Action::Allow),
            "drop" | "reject" | "block" => Some(Action::Deny),
            _ => None,
        });
    Err(match suggestion {
        Some(action) => problem.help(format!("write `{action}`")),
        None => problem.help("write `Allow`, `Deny`, `Pass` or `Log`"),
    })
}

fn check_protocol(checker: &mut Checker<'_>, protocol: &Sp<RawProtocol>) -> Option<Protocol> {
    match parse_protocol(&protocol.value) {
        Ok(parsed) => Some(parsed),
        Err(problem) => {
            checker.report(protocol.span, problem);
            None
        }
    }
}

fn check_ip_version(checker: &mut Checker<'_>, version: &Sp<i64>) -> Option<IpFamily> {
    match version.value {
        4 => Some(IpFamily::V4),
        6 => Some(IpFamily::V6),
        other => {
            checker.error_help(
                version.span,
                format!("`ipVersion` must be 4 or 6, not {other}"),
                "write `ipVersion: 4` or `ipVersion: 6`, or leave it out for both",
            );
            None
        }
    }
}

/// ICMP exists only in IPv4 and ICMPv6 only in IPv6: Calico refuses either with the other
/// `ipVersion`, in `protocol` and in `notProtocol`.
fn check_protocol_family(
    checker: &mut Checker<'_>,
    field: &str,
    protocol: Protocol,
    version: IpFamily,
    version_span: Span,
) {
    let Some(family) = protocol.family() else {
        return;
    };
    if family == version {
        return;
    }
    let other = match protocol {
        Protocol::Icmp => "ICMPv6",
        _ => "ICMP",
    };
    checker.error_help(
        version_span,
        format!(
            "`{field}: {protocol}` exists only in {family}, so it cannot go with `ipVersion: {}`",
            version.number()
        ),
        format!(
            "write `ipVersion: {}`, or use `{other}` for {version}",
            family.number()
        ),
    );
}

/// Checks `icmp` / `notICMP`; returns the match when it has a type.
fn check_icmp(
    checker: &mut Checker<'_>,
    icmp: &Sp<RawIcmp>,
    field: &str,
    protocol: Option<Protocol>,
    protocol_known: bool,
) -> Option<IcmpMatch> {
    // Calico v3.30 demands the protocol *name*; `1` and `58` are accepted as well, as newer
    // Calico does, since they mean the same protocols.
    if protocol_known && !matches!(protocol, Some(Protocol::Icmp | Protocol::Icmpv6)) {
        let message = match protocol {
            Some(other) => {
                format!("`{field}` needs `protocol: ICMP` or `protocol: ICMPv6`, not `{other}`")
            }
            None => format!("`{field}` needs `protocol: ICMP` or `protocol: ICMPv6`"),
        };
        checker.error_help(
            icmp.span,
            message,
            "add `protocol: ICMP` (IPv4) or `protocol: ICMPv6` (IPv6) to the rule",
        );
    }
    let icmp_type = icmp.value.icmp_type.as_ref().and_then(|icmp_type| {
        let valid = u8::try_from(icmp_type.value)
            .ok()
            .filter(|&value| value <= 254);
        if valid.is_none() {
            checker.error_help(
                icmp_type.span,
                format!("ICMP type {} is not between 0 and 254", icmp_type.value),
                "write a type such as `8` (echo request) or `3` (destination unreachable)",
            );
        }
        valid
    });
    let code = icmp.value.code.as_ref().and_then(|code| {
        let valid = u8::try_from(code.value).ok();
        if valid.is_none() {
            checker.error_help(
                code.span,
                format!("ICMP code {} is not between 0 and 255", code.value),
                "write a code such as `0`",
            );
        }
        if icmp.value.icmp_type.is_none() {
            checker.error_help(
                code.span,
                "an ICMP code needs an ICMP type",
                "add the `type` the code belongs to, for example `type: 3` for destination unreachable",
            );
        }
        valid
    });
    Some(IcmpMatch {
        icmp_type: icmp_type?,
        code,
    })
}

/// Checks the IP families of a rule's nets against each other and against `ipVersion`.
/// Calico scans the four lists in this order (source nets, source notNets, destination nets,
/// destination notNets) and reports the net that introduced a mix.
fn check_rule_families(
    checker: &mut Checker<'_>,
    raw: &RawRule,
    ip_version: Option<IpFamily>,
    protocol: Option<Protocol>,
    source: &CheckedEntity,
    destination: &CheckedEntity,
) {
    let mut first: Option<IpFamily> = None;
    let mut mixed = false;
    for net in source.nets.iter().chain(&destination.nets) {
        let family = IpFamily::of_net(&net.value);
        if let Some(version) = ip_version {
            if family != version {
                checker.error_help(
                    net.span,
                    format!(
                        "`{}` is an {family} network, but `ipVersion` is {}",
                        net.value,
                        version.number()
                    ),
                    format!(
                        "write an {version} network, or `ipVersion: {}`",
                        family.number()
                    ),
                );
            }
            continue;
        }
        match first {
            None => first = Some(family),
            Some(earlier) if earlier != family && !mixed => {
                mixed = true;
                checker.error_help(
                    net.span,
                    format!(
                        "`{}` is an {family} network, but this rule already has {earlier} networks",
                        net.value
                    ),
                    "split the rule into one rule per IP family (each may set `ipVersion`)",
                );
            }
            Some(_) => {}
        }
    }
    // Calico accepts this, but such a rule can never match: worth a word.
    if let (Some(protocol), Some(family), false) = (protocol, first, mixed)
        && let (Some(only), Some(written)) = (protocol.family(), &raw.protocol)
        && only != family
    {
        let matching = if family == IpFamily::V4 {
            "ICMP"
        } else {
            "ICMPv6"
        };
        checker.warning_help(
            written.span,
            format!(
                "the rule never matches: `{protocol}` exists only in {only}, and its networks are {family}"
            ),
            format!("write `protocol: {matching}` for {family} networks"),
        );
    }
}

/// Ports exist only for TCP, UDP and SCTP (numbers 6, 17, 132); as in Calico, `notProtocol`
/// never tells which protocol a packet has. Named ports alone need no protocol.
fn check_ports_have_protocol(checker: &mut Checker<'_>, raw: &RawRule, protocol: Option<Protocol>) {
    if protocol.is_some_and(Protocol::has_ports) {
        return;
    }
    let sides = [raw.source.as_ref(), raw.destination.as_ref()];
    for entity in sides.into_iter().flatten() {
        let lists = [entity.value.ports.as_ref(), entity.value.not_ports.as_ref()];
        for list in lists.into_iter().flatten() {
            if list.value.is_empty() {
                continue;
            }
            // A named port carries its own protocol (Calico: "should accept Rule with dest
            // named ports and no protocol"); numbers and ranges need the rule's.
            let only_named = list
                .value
                .iter()
                .all(|port| matches!(parse_port(&port.value), Ok(Port::Named(_))));
            if protocol.is_none() && only_named {
                continue;
            }
            match protocol {
                Some(other) => checker.error_help(
                    list.span,
                    format!("ports can only be matched with `TCP`, `UDP` or `SCTP`, not `{other}`"),
                    "write `protocol: TCP` (or `UDP`, `SCTP`), or remove the ports",
                ),
                None if raw.not_protocol.is_some() => checker.error_help(
                    list.span,
                    "ports need a protocol that has ports",
                    "add `protocol: TCP` (or `UDP`, `SCTP`) to the rule; `notProtocol` does not say which protocol a packet has",
                ),
                None => checker.error_help(
                    list.span,
                    "ports need a protocol that has ports",
                    "add `protocol: TCP` (or `UDP`, `SCTP`) to the rule",
                ),
            }
        }
    }
}
