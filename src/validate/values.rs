//! Single values: pure functions that say what is wrong with one port, protocol, network,
//! name, label or annotation key. The config file's checks use some of them too.

use std::net::IpAddr;

use ipnet::IpNet;

use crate::model::{Port, Protocol};
use crate::spec::{RawPort, RawProtocol};

use super::MAX_NAME_BYTES;
use super::checker::Problem;

/// Longest label value, and longest name part of a label or annotation key.
const MAX_LABEL_NAME_CHARS: usize = 63;

/// Longest named port (Kubernetes' `IANA_SVC_NAME`).
const MAX_PORT_NAME_CHARS: usize = 15;

/// Protocol names as Calico spells them (exact case).
const PROTOCOL_NAMES: [(&str, Protocol); 6] = [
    ("TCP", Protocol::Tcp),
    ("UDP", Protocol::Udp),
    ("ICMP", Protocol::Icmp),
    ("ICMPv6", Protocol::Icmpv6),
    ("SCTP", Protocol::Sctp),
    ("UDPLite", Protocol::UdpLite),
];

/// Parses one entry of `ports` / `notPorts`: a number, a string of digits, a `first:last`
/// range, or else a named port.
pub(super) fn parse_port(raw: &RawPort) -> Result<Port, Problem> {
    let text = match raw {
        RawPort::Number(number) => return port_number(*number).map(Port::Single),
        RawPort::Text(text) => text,
    };
    let is_number = |part: &str| !part.is_empty() && part.bytes().all(|b| b.is_ascii_digit());
    if is_number(text) {
        return port_digits(text).map(Port::Single);
    }
    if let Some((first, last)) = text.split_once(':')
        && is_number(first)
        && is_number(last)
    {
        return parse_port_range(first, last);
    }
    match port_name_problem(text) {
        None => Ok(Port::Named(text.clone())),
        // Calico reads `80-90` as a port *name*; it is a range written the wrong way.
        Some(problem) => Err(match text.split_once('-') {
            Some((first, last)) if is_number(first) && is_number(last) => {
                problem.help(format!("ranges are written with a colon: `{first}:{last}`"))
            }
            _ if text.contains(':') => problem
                .help("ranges are written `first:last` with two port numbers, such as `80:90`"),
            _ => problem,
        }),
    }
}

/// Parses `first:last` (both strings of digits) into a range.
fn parse_port_range(first: &str, last: &str) -> Result<Port, Problem> {
    let low = port_digits(first);
    let high = port_digits(last);
    match (low, high) {
        (Ok(low), Ok(high)) if low > high => Err(Problem::new(format!(
            "the range `{first}:{last}` starts after it ends"
        ))
        .help(format!("write `{high}:{low}`"))),
        (Ok(low), Ok(high)) => Ok(Port::Range(low, high)),
        (Err(problem), Ok(high)) => Err(Problem {
            help: Some(format!("ranges lie within 1-65535: write `1:{high}`")),
            ..problem
        }),
        (Ok(low), Err(problem)) => Err(Problem {
            help: Some(format!("ranges lie within 1-65535: write `{low}:65535`")),
            ..problem
        }),
        (Err(problem), Err(_)) => Err(problem),
    }
}

/// A port number 1–65535 written as digits.
fn port_digits(text: &str) -> Result<u16, Problem> {
    match text.parse::<i64>() {
        Ok(number) => port_number(number),
        // More digits than an i64 holds.
        Err(_) => Err(Problem::new(format!(
            "`{}` is not a port: ports are 1-65535",
            shown(text)
        ))
        .help(PORT_HELP)),
    }
}

/// A port number 1–65535.
pub(super) fn port_number(number: i64) -> Result<u16, Problem> {
    match u16::try_from(number) {
        Ok(port) if port > 0 => Ok(port),
        _ if number == 0 => Err(Problem::new("port 0 is not a port: ports are 1-65535")
            .help("remove it; a rule without ports matches every port")),
        _ => Err(
            Problem::new(format!("`{number}` is not a port: ports are 1-65535")).help(PORT_HELP),
        ),
    }
}

/// What to write for a port.
const PORT_HELP: &str =
    "write a port from 1 to 65535, a range such as `30000:32767`, or a named port";

/// What is wrong with a port name (Kubernetes' `IANA_SVC_NAME`: 1–15 lowercase letters, digits
/// and `-`, at least one letter, no `-` at either end, no `--`), if anything.
pub(super) fn port_name_problem(name: &str) -> Option<Problem> {
    let rule = "port names are 1-15 lowercase letters, digits and `-`, with at least one letter";
    let problem = |reason: String| Some(Problem::new(reason).help(rule));
    if name.is_empty() {
        return problem("a port name cannot be empty".to_owned());
    }
    let quoted = shown(name);
    if name.chars().any(|c| c.is_ascii_uppercase())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
    {
        return Some(
            Problem::new(format!("port name `{quoted}` has uppercase letters"))
                .help(format!("write `{}`", name.to_ascii_lowercase())),
        );
    }
    if let Some(bad) = name
        .chars()
        .find(|c| !(c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '-'))
    {
        return problem(format!(
            "port name `{quoted}` contains {}, which port names cannot hold",
            describe_char(bad)
        ));
    }
    let length = name.chars().count();
    if length > MAX_PORT_NAME_CHARS {
        return problem(format!(
            "port name `{quoted}` is {length} characters long, more than the {MAX_PORT_NAME_CHARS} allowed"
        ));
    }
    if !name.chars().any(|c| c.is_ascii_lowercase()) {
        return problem(format!("port name `{quoted}` has no letter"));
    }
    if name.starts_with('-') || name.ends_with('-') {
        return problem(format!("port name `{quoted}` starts or ends with `-`"));
    }
    if name.contains("--") {
        return problem(format!("port name `{quoted}` contains `--`"));
    }
    None
}

/// Parses a protocol: one of Calico's names in exact case, or a number 1–255.
pub(super) fn parse_protocol(raw: &RawProtocol) -> Result<Protocol, Problem> {
    match raw {
        RawProtocol::Number(number) => match u8::try_from(*number) {
            Ok(number) if number > 0 => Ok(Protocol::from_number(number)),
            _ if *number == 0 => Err(Problem::new("protocol number 0 is not a protocol")
                .help("leave `protocol` out to match every protocol, or write a number 1-255")),
            _ => Err(
                Problem::new(format!("protocol number {number} is not between 1 and 255"))
                    .help("write a protocol name such as `TCP`, or a number 1-255"),
            ),
        },
        RawProtocol::Name(name) => {
            if let Some(&(_, protocol)) = PROTOCOL_NAMES.iter().find(|(known, _)| known == name) {
                return Ok(protocol);
            }
            let alias = match name.to_ascii_lowercase().as_str() {
                "icmp6" | "ipv6-icmp" => Some("ICMPv6"),
                "udp-lite" => Some("UDPLite"),
                _ => None,
            };
            let right_case = PROTOCOL_NAMES
                .iter()
                .map(|(known, _)| *known)
                .find(|known| known.eq_ignore_ascii_case(name))
                .or(alias);
            Err(match right_case {
                Some(known) => Problem::new(format!(
                    "`{}` is not a protocol name: names are case-sensitive",
                    shown(name)
                ))
                .help(format!("write `{known}`")),
                None => Problem::new(format!("`{}` is not a protocol", shown(name))).help(
                    "write `TCP`, `UDP`, `ICMP`, `ICMPv6`, `SCTP`, `UDPLite` or a protocol number 1-255",
                ),
            })
        }
    }
}

/// Parses an entry of a rule's `nets` / `notNets`: a CIDR with an explicit prefix length and no
/// host bits set.
pub(super) fn parse_rule_net(text: &str) -> Result<IpNet, Problem> {
    match text.parse::<IpNet>() {
        Ok(net) if net.trunc() == net => Ok(net),
        Ok(net) => Err(
            Problem::new(format!("`{text}` has host bits set")).help(format!(
                "write the network `{}`, or `{}/{}` for the single address",
                net.trunc(),
                net.addr(),
                net.max_prefix_len()
            )),
        ),
        Err(_) => Err(match text.parse::<IpAddr>() {
            Ok(addr) => Problem::new(format!("`{text}` is an address, not a CIDR"))
                .help(format!("write `{text}/{}`", IpNet::from(addr).prefix_len())),
            Err(_) => Problem::new(format!("`{}` is not a CIDR", shown(text)))
                .help("write a network such as `192.0.2.0/24` or `2001:db8::/32`"),
        }),
    }
}

/// Parses an entry of a GlobalNetworkSet's `nets`: a CIDR without host bits, or a single address
/// (meaning `/32` or `/128`).
pub(super) fn parse_set_member(text: &str) -> Result<IpNet, Problem> {
    if let Ok(addr) = text.parse::<IpAddr>() {
        return Ok(IpNet::from(addr));
    }
    parse_rule_net(text).map_err(|problem| {
        if text.parse::<IpNet>().is_ok() {
            problem
        } else {
            Problem::new(format!("`{}` is not an address or a CIDR", shown(text)))
                .help("write an address such as `192.0.2.1` or a network such as `192.0.2.0/24`")
        }
    })
}

/// Parses a CIDR with an explicit prefix length and no host bits set.
pub fn parse_cidr(text: &str) -> Result<IpNet, String> {
    parse_rule_net(text).map_err(|problem| match problem.help {
        Some(help) => format!("{}; {help}", problem.message),
        None => problem.message,
    })
}

/// What to write in a name, said once for every name check.
const NAME_RULE: &str = "names are lowercase letters, digits, `-` and `.`, at most 253 characters, each dot-separated part starting and ending with a letter or digit";

/// What to write in a label or annotation key.
pub const QUALIFIED_NAME_RULE: &str = "keys are an optional DNS-subdomain prefix and `/`, then 1-63 letters, digits, `-`, `_` or `.`, starting and ending with a letter or digit";

/// What to write in a label value.
pub const LABEL_VALUE_RULE: &str = "label values are empty or 1-63 letters, digits, `-`, `_` or `.`, starting and ending with a letter or digit";

/// What a name must be beyond an RFC 1123 subdomain, so that the name suggested in place of an
/// invalid one is itself valid.
#[derive(Clone, Copy, Debug)]
pub(super) enum NameShape<'a> {
    /// Any subdomain (network sets, host endpoints, node names).
    Subdomain,
    /// One DNS label of at most 63 characters: a `Tier` (Calico's `tierNameRegex`).
    Label,
    /// A (staged) GlobalNetworkPolicy in this tier: `<name>` or `default.<name>` in `default`,
    /// `<tier>.<name>` in any other (`globalNetworkPolicyNameRegex`,
    /// `names.ValidateTieredPolicyName`).
    Policy(&'a str),
}

/// Calico's limit on a tier's name (`k8svalidation.DNS1123LabelMaxLength`).
pub(super) const MAX_LABEL_BYTES: usize = 63;

/// What is wrong with a resource or node name (`what` says which), if anything; the help
/// suggests a name of `shape` when there is one close by.
pub(super) fn name_problem(name: &str, what: &str, shape: NameShape<'_>) -> Option<Problem> {
    if name.is_empty() {
        return Some(Problem::new(format!("the {what} is empty")).help(NAME_RULE));
    }
    let reason = subdomain_reason(name)?;
    let problem = Problem::new(format!("the {what} `{}` {reason}", shown(name)));
    Some(match suggest_name(name, shape) {
        Some(better) if better != name => problem.help(format!("write `{better}`")),
        _ => problem.help(NAME_RULE),
    })
}

/// A valid name of `shape` close to `name`, if there is one.
pub(super) fn suggest_name(name: &str, shape: NameShape<'_>) -> Option<String> {
    match shape {
        NameShape::Subdomain => suggest_subdomain(name),
        NameShape::Label => labelled(name).filter(|label| label.len() <= MAX_LABEL_BYTES),
        NameShape::Policy(tier) => {
            let better = if tier == crate::model::DEFAULT_TIER {
                labelled(name.strip_prefix("default.").unwrap_or(name))?
            } else {
                // A tier that is no label has no valid policy name to offer.
                if labelled(tier).as_deref() != Some(tier) {
                    return None;
                }
                let rest = name
                    .strip_prefix(tier)
                    .and_then(|rest| rest.strip_prefix('.'))
                    .unwrap_or(name);
                format!("{tier}.{}", labelled(rest)?)
            };
            (better.len() <= MAX_NAME_BYTES).then_some(better)
        }
    }
}

/// `text` as one DNS label (lowercase, `-` for every other character, no `-` at either end),
/// of any length; `None` if nothing is left.
fn labelled(text: &str) -> Option<String> {
    let replaced: String = text
        .chars()
        .map(|c| match c.to_ascii_lowercase() {
            c @ ('a'..='z' | '0'..='9') => c,
            _ => '-',
        })
        .collect();
    let trimmed = replaced.trim_matches('-');
    (!trimmed.is_empty()).then(|| trimmed.to_owned())
}

/// A valid name close to `name` (lowercase, `-` for characters names cannot hold), if there is
/// one.
fn suggest_subdomain(name: &str) -> Option<String> {
    let replaced: String = name
        .chars()
        .map(|c| match c.to_ascii_lowercase() {
            c @ ('a'..='z' | '0'..='9' | '.' | '-') => c,
            _ => '-',
        })
        .collect();
    let trimmed = replaced.trim_matches(['-', '.']).to_owned();
    is_subdomain(&trimmed).then_some(trimmed)
}

/// Why `name` is not an RFC 1123 subdomain, as words that follow the name ("has uppercase
/// letters"), or `None` if it is one.
fn subdomain_reason(name: &str) -> Option<String> {
    if name.is_empty() {
        return Some("is empty".to_owned());
    }
    if name.len() > MAX_NAME_BYTES {
        return Some(format!(
            "is {} bytes long, more than the {MAX_NAME_BYTES} allowed",
            name.len()
        ));
    }
    if name.bytes().any(|b| b.is_ascii_uppercase()) {
        return Some("has uppercase letters".to_owned());
    }
    if let Some(bad) = name
        .chars()
        .find(|c| !(c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '-' | '.')))
    {
        return Some(format!("contains {}", describe_char(bad)));
    }
    if name.starts_with(['.', '-']) {
        return Some("does not start with a letter or digit".to_owned());
    }
    if name.ends_with(['.', '-']) {
        return Some("does not end with a letter or digit".to_owned());
    }
    if name.contains("..") {
        return Some("has two dots in a row".to_owned());
    }
    if name.contains("-.") || name.contains(".-") {
        return Some("has `-` next to `.`".to_owned());
    }
    None
}

/// Whether `name` is an RFC 1123 subdomain, as Kubernetes checks it: at most 253 characters of
/// lowercase letters, digits, `-` and `.`, in dot-separated parts that start and end with a
/// letter or digit. Like Kubernetes (and Calico), it sets no length limit on a single part.
pub fn is_subdomain(name: &str) -> bool {
    subdomain_reason(name).is_none()
}

/// Why `key` is not a Kubernetes qualified name (an optional DNS-subdomain prefix and `/`, then
/// 1–63 letters, digits, `-`, `_`, `.`, starting and ending with a letter or digit), as words
/// that follow the key, or `None` if it is one.
pub(super) fn qualified_name_reason(key: &str) -> Option<String> {
    if key.is_empty() {
        return Some("is empty".to_owned());
    }
    let (prefix, name) = match key.split_once('/') {
        Some((_, rest)) if rest.contains('/') => {
            return Some("has more than one `/`".to_owned());
        }
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    if let Some(prefix) = prefix {
        if prefix.is_empty() {
            return Some("has nothing before `/`".to_owned());
        }
        if let Some(reason) = subdomain_reason(prefix) {
            return Some(format!("has a prefix `{}` that {reason}", shown(prefix)));
        }
        if name.is_empty() {
            return Some("has nothing after `/`".to_owned());
        }
    }
    let length = name.chars().count();
    if length > MAX_LABEL_NAME_CHARS {
        return Some(match prefix {
            Some(_) => format!(
                "has a part after `/` of {length} characters, more than the {MAX_LABEL_NAME_CHARS} allowed"
            ),
            None => {
                format!("is {length} characters long, more than the {MAX_LABEL_NAME_CHARS} allowed")
            }
        });
    }
    let reason = label_text_reason(name)?;
    Some(match prefix {
        Some(_) => format!("has a part after `/` that {reason}"),
        None => reason,
    })
}

/// Why `text` is not 1–63 letters, digits, `-`, `_` or `.` starting and ending with a letter or
/// digit, as words that follow it. Length is checked by the callers, which word it differently.
fn label_text_reason(text: &str) -> Option<String> {
    if let Some(bad) = text
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')))
    {
        return Some(format!("contains {}", describe_char(bad)));
    }
    if !text.starts_with(|c: char| c.is_ascii_alphanumeric()) {
        return Some("does not start with a letter or digit".to_owned());
    }
    if !text.ends_with(|c: char| c.is_ascii_alphanumeric()) {
        return Some("does not end with a letter or digit".to_owned());
    }
    None
}

/// A message about a key or value: "label key `x` has …", or "the label key is empty".
pub(super) fn subject_reason(subject: &str, text: &str, reason: &str) -> String {
    if text.is_empty() {
        format!("the {subject} is empty")
    } else {
        format!("{subject} `{}` {reason}", shown(text))
    }
}

/// What is wrong with a label key (Kubernetes qualified name), if anything.
pub fn label_key_problem(key: &str) -> Option<String> {
    qualified_name_reason(key).map(|reason| subject_reason("label key", key, &reason))
}

/// What is wrong with a label value, if anything.
pub fn label_value_problem(value: &str) -> Option<String> {
    if value.is_empty() {
        return None;
    }
    let length = value.chars().count();
    if length > MAX_LABEL_NAME_CHARS {
        return Some(format!(
            "label value `{}` is {length} characters long, more than the {MAX_LABEL_NAME_CHARS} allowed",
            shown(value)
        ));
    }
    label_text_reason(value).map(|reason| subject_reason("label value", value, &reason))
}

/// A user's text made safe to quote in a one-line message: control characters escaped, long
/// text shortened.
pub(super) fn shown(text: &str) -> String {
    const LIMIT: usize = 64;
    let mut out = String::new();
    for (count, c) in text.chars().enumerate() {
        if count == LIMIT {
            out.push('…');
            break;
        }
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

/// A character as a message names it: "a space", or the character in backticks.
pub(super) fn describe_char(c: char) -> String {
    match c {
        ' ' => "a space".to_owned(),
        '`' => "a backtick".to_owned(),
        _ => format!("`{}`", shown(c.encode_utf8(&mut [0; 4]))),
    }
}
