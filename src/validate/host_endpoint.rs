//! `HostEndpoint`: node, interface, expected addresses, named ports and profiles.

use std::collections::BTreeSet;
use std::net::IpAddr;

use ipnet::IpNet;

use crate::model::{EndpointInterface, HostEndpoint, NamedPort, Protocol};
use crate::source::Span;
use crate::spec::{RawEndpointPort, RawHostEndpointSpec, Sp};

use super::DEFAULT_ALLOW_PROFILE;
use super::checker::{Checker, Problem};
use super::envelope::Identity;
use super::values::{
    NameShape, describe_char, name_problem, parse_protocol, port_name_problem, port_number, shown,
};

/// Longest Linux interface name.
const MAX_INTERFACE_NAME_CHARS: usize = 15;

pub(super) fn check_host_endpoint(
    checker: &mut Checker<'_>,
    identity: Option<Identity>,
    spec: &RawHostEndpointSpec,
    spec_span: Span,
) -> Option<HostEndpoint> {
    let node = match &spec.node {
        None => {
            checker.error_help(
                spec_span,
                "the host endpoint has no `node`",
                "add `node:` with the name of the node it belongs to (`nodeName` in the config, by default the hostname)",
            );
            None
        }
        Some(node) => match name_problem(&node.value, "node name", NameShape::Subdomain) {
            Some(problem) => {
                checker.report(node.span, problem);
                None
            }
            None => Some(node.value.clone()),
        },
    };
    let interface = match &spec.interface_name {
        None => Some(EndpointInterface::ByAddress),
        Some(name) => check_interface_name(checker, name),
    };
    let expected_ips = spec
        .expected_ips
        .as_ref()
        .map(|ips| check_expected_ips(checker, &ips.value))
        .unwrap_or_default();
    let has_interface = spec
        .interface_name
        .as_ref()
        .is_some_and(|name| !name.value.is_empty());
    let has_ips = spec
        .expected_ips
        .as_ref()
        .is_some_and(|ips| !ips.value.is_empty());
    if !has_interface && !has_ips {
        let span = spec
            .interface_name
            .as_ref()
            .map_or(spec_span, |name| name.span);
        checker.error_help(
            span,
            "the host endpoint has neither an `interfaceName` nor `expectedIPs`",
            "add `interfaceName: eth0` (or `\"*\"` for every interface), or the endpoint's `expectedIPs`",
        );
    }
    let ports = spec
        .ports
        .as_ref()
        .map(|ports| check_endpoint_ports(checker, &ports.value))
        .unwrap_or_default();
    let default_allow = spec
        .profiles
        .as_ref()
        .is_some_and(|profiles| check_profiles(checker, &profiles.value));
    let identity = identity?;
    Some(HostEndpoint {
        name: identity.name,
        labels: identity.labels,
        node: node?,
        interface: interface?,
        expected_ips,
        ports,
        default_allow,
        origin: Some(identity.origin),
    })
}

fn check_interface_name(checker: &mut Checker<'_>, name: &Sp<String>) -> Option<EndpointInterface> {
    match name.value.as_str() {
        "*" => Some(EndpointInterface::All),
        "" => Some(EndpointInterface::ByAddress),
        text => match interface_name_problem(text) {
            Some(problem) => {
                checker.report(name.span, problem);
                None
            }
            None => Some(EndpointInterface::Named(text.to_owned())),
        },
    }
}

/// What is wrong with an interface name (Calico: `^[a-zA-Z0-9_.-]{1,15}$`), if anything.
fn interface_name_problem(name: &str) -> Option<Problem> {
    let help = "interface names are 1-15 letters, digits, `_`, `.` and `-`; `\"*\"` stands for every interface";
    if let Some(bad) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-')))
    {
        let help = if matches!(bad, '*' | '+') {
            "only `\"*\"` on its own stands for every interface; write one HostEndpoint per interface otherwise"
        } else {
            help
        };
        return Some(
            Problem::new(format!(
                "interface name `{}` contains {}, which interface names cannot hold",
                shown(name),
                describe_char(bad)
            ))
            .help(help),
        );
    }
    let length = name.chars().count();
    (length > MAX_INTERFACE_NAME_CHARS).then(|| {
        Problem::new(format!(
            "interface name `{}` is {length} characters long, more than the {MAX_INTERFACE_NAME_CHARS} Linux allows",
            shown(name)
        ))
        .help(help)
    })
}

fn check_expected_ips(checker: &mut Checker<'_>, ips: &[Sp<String>]) -> Vec<IpAddr> {
    let mut valid: Vec<IpAddr> = Vec::new();
    for ip in ips {
        match parse_expected_ip(&ip.value) {
            Ok(addr) if valid.contains(&addr) => {}
            Ok(addr) => valid.push(addr),
            Err(problem) => checker.report(ip.span, problem),
        }
    }
    valid
}

/// Parses an entry of `expectedIPs`: a single address.
fn parse_expected_ip(text: &str) -> Result<IpAddr, Problem> {
    if let Ok(addr) = text.parse::<IpAddr>() {
        return Ok(addr);
    }
    Err(match text.parse::<IpNet>() {
        Ok(net) => Problem::new(format!(
            "`{text}` is a network, but `expectedIPs` holds single addresses"
        ))
        .help(format!(
            "write the address without `/{}`: `{}`",
            net.prefix_len(),
            net.addr()
        )),
        Err(_) => Problem::new(format!("`{}` is not an IP address", shown(text)))
            .help("write an address such as `192.0.2.10` or `2001:db8::10`"),
    })
}

fn check_endpoint_ports(
    checker: &mut Checker<'_>,
    ports: &[Sp<RawEndpointPort>],
) -> Vec<NamedPort> {
    let mut valid = Vec::new();
    let mut names = BTreeSet::new();
    for port in ports {
        if let Some(checked) = check_endpoint_port(checker, port, &mut names) {
            valid.push(checked);
        }
    }
    valid
}

/// Checks one named port of a host endpoint; `names` collects the names seen so far, to catch
/// duplicates.
fn check_endpoint_port(
    checker: &mut Checker<'_>,
    port: &Sp<RawEndpointPort>,
    names: &mut BTreeSet<(String, Option<Protocol>)>,
) -> Option<NamedPort> {
    let raw = &port.value;
    let protocol = check_endpoint_port_protocol(checker, port);
    let name = check_endpoint_port_name(checker, port, protocol, names);
    let number = match &raw.port {
        None => {
            checker.error_help(
                port.span,
                "the port has no `port` number",
                "add `port:` with a number 1-65535",
            );
            None
        }
        Some(number) => port_number(number.value)
            .map_err(|problem| checker.report(number.span, problem))
            .ok(),
    };
    Some(NamedPort {
        name: name?,
        port: number?,
        protocol: protocol?,
    })
}

fn check_endpoint_port_name(
    checker: &mut Checker<'_>,
    port: &Sp<RawEndpointPort>,
    protocol: Option<Protocol>,
    names: &mut BTreeSet<(String, Option<Protocol>)>,
) -> Option<String> {
    let Some(name) = &port.value.name else {
        checker.error_help(
            port.span,
            "the port has no `name`",
            "add `name:` with the name rules use, for example `name: web`",
        );
        return None;
    };
    if let Some(problem) = port_name_problem(&name.value) {
        checker.report(name.span, problem);
        return None;
    }
    // As in Calico, one name may stand for ports of several protocols (`dns` on TCP and UDP):
    // a rule's named port matches each of them. Twice on the same protocol is allowed too, and
    // matches both ports, but is more likely a slip.
    if !names.insert((name.value.clone(), protocol))
        && let Some(protocol) = protocol
    {
        checker.warning_help(
            name.span,
            format!(
                "port name `{}` is used twice for {protocol} in this host endpoint: a rule's `{}` matches both ports",
                name.value, name.value
            ),
            "give each port its own name, unless a rule is meant to match both",
        );
    }
    Some(name.value.clone())
}

fn check_endpoint_port_protocol(
    checker: &mut Checker<'_>,
    port: &Sp<RawEndpointPort>,
) -> Option<Protocol> {
    let Some(protocol) = &port.value.protocol else {
        checker.error_help(
            port.span,
            "the port has no `protocol`",
            "add `protocol: TCP` (or `UDP`, `SCTP`)",
        );
        return None;
    };
    match parse_protocol(&protocol.value) {
        Ok(parsed) if parsed.has_ports() => Some(parsed),
        Ok(parsed) => {
            checker.error_help(
                protocol.span,
                format!("a named port needs `TCP`, `UDP` or `SCTP`, not `{parsed}`"),
                "write `protocol: TCP` (or `UDP`, `SCTP`)",
            );
            None
        }
        Err(problem) => {
            checker.report(protocol.span, problem);
            None
        }
    }
}

/// Checks `profiles`; returns whether Calico's allow-all profile is among them.
fn check_profiles(checker: &mut Checker<'_>, profiles: &[Sp<String>]) -> bool {
    let mut default_allow = false;
    for profile in profiles {
        if profile.value == DEFAULT_ALLOW_PROFILE {
            default_allow = true;
        } else {
            checker.error_help(
                profile.span,
                format!("profile `{}` does not exist here", shown(&profile.value)),
                format!(
                    "the only profile is Calico's allow-all `{DEFAULT_ALLOW_PROFILE}`; write the profile's rules as a GlobalNetworkPolicy"
                ),
            );
        }
    }
    default_allow
}
