//! The configuration file (`/etc/nodeport-guard/config.yaml`): its raw form, its defaults, and
//! the checked [`Config`] the rest of the program uses.
//!
//! A missing file means every default. Unknown keys are errors, as in policy files, and every
//! error names `path:line:column`.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use ipnet::IpNet;
use regex::Regex;
use serde::Deserialize;

pub use crate::dataplane::BackendChoice;
use crate::diagnostic::Diagnostic;
use crate::model::{Action, Protocol};
use crate::source::{FileId, SourceFile, Sources};
use crate::spec::Sp;

/// Where the config file is looked for when `--config` is not given.
pub const DEFAULT_CONFIG_PATH: &str = "/etc/nodeport-guard/config.yaml";
/// Where policies are read from when neither `--policies` nor `policiesDir` says otherwise.
pub const DEFAULT_POLICIES_DIR: &str = "/etc/nodeport-guard/policies";
/// The default `hostInterfaceExclude`: virtual interfaces whose addresses are not "the host".
pub const DEFAULT_HOST_INTERFACE_EXCLUDE: &str =
    "^(cali|tunl|vxlan|flannel|docker|veth|wireguard|wg|cni|kube|dummy|nodelocaldns)";
/// kube-proxy's masquerade and drop mark bits, which our mask must not touch.
pub const KUBE_PROXY_MARKS: u32 = 0x4000 | 0x8000;

/// Whether to program IPv6.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ipv6Mode {
    /// Program IPv6 unless `/proc/sys/net/ipv6/conf/all/disable_ipv6` is 1.
    Auto,
    /// Always program IPv6.
    Enabled,
    /// Never program IPv6.
    Disabled,
}

/// Where `Log` rules write.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum LogTarget {
    /// NFLOG, in the rule's direction's group with Calico's prefix (`LPI0|<policy>`), so
    /// `drops` and `tcpdump -i nflog:1` see it.
    Nflog,
    /// The kernel log (`dmesg`, the journal), as Felix writes its `Log` action: `-j LOG`
    /// (nftables: `log`) with this prefix and syslog level.
    KernelLog {
        /// The text before each logged packet, as the kernel prints it.
        prefix: String,
        /// The syslog level, 0 (emerg) to 7 (debug).
        level: u8,
    },
}

/// Felix's prefix of the kernel-log lines of a `Log` rule: its `logPrefix` default
/// (`calico-packet`) with the `: ` Felix's LOG action adds.
pub const DEFAULT_LOG_PREFIX: &str = "calico-packet: ";
/// Felix's syslog level of a `Log` rule (notice).
pub const DEFAULT_LOG_LEVEL: u8 = 5;
/// The longest prefix `-j LOG` takes (the kernel keeps 29 characters and a NUL); nftables
/// takes more, but one limit lets a config move between backends.
pub const MAX_LOG_PREFIX: usize = 29;

/// A port that stays open whatever the policies say, so nobody locks themselves out.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Failsafe {
    /// `tcp`, `udp` or `sctp`.
    pub protocol: Protocol,
    /// The port, on every host address, that stays reachable whatever the policies say.
    pub port: u16,
    /// Limit to this peer network (source for inbound, destination for outbound).
    pub net: Option<IpNet>,
}

impl Failsafe {
    fn new(protocol: Protocol, port: u16) -> Failsafe {
        Failsafe {
            protocol,
            port,
            net: None,
        }
    }
}

/// Calico's default inbound failsafe ports.
pub fn default_failsafe_inbound() -> Vec<Failsafe> {
    use Protocol::{Tcp, Udp};
    [
        (Tcp, 22),
        (Udp, 68),
        (Tcp, 179),
        (Tcp, 2379),
        (Tcp, 2380),
        (Tcp, 5473),
        (Tcp, 6443),
        (Tcp, 6666),
        (Tcp, 6667),
    ]
    .into_iter()
    .map(|(protocol, port)| Failsafe::new(protocol, port))
    .collect()
}

/// Calico's default outbound failsafe ports.
pub fn default_failsafe_outbound() -> Vec<Failsafe> {
    use Protocol::{Tcp, Udp};
    [
        (Udp, 53),
        (Udp, 67),
        (Tcp, 179),
        (Tcp, 2379),
        (Tcp, 2380),
        (Tcp, 5473),
        (Tcp, 6443),
        (Tcp, 6666),
        (Tcp, 6667),
    ]
    .into_iter()
    .map(|(protocol, port)| Failsafe::new(protocol, port))
    .collect()
}

/// The checked configuration.
#[derive(Clone, Debug)]
pub struct Config {
    /// The policy directory.
    pub policies_dir: PathBuf,
    /// The backend to use.
    pub backend: BackendChoice,
    /// The mark bits we may use.
    pub mark_mask: u32,
    /// NFLOG group of ingress log rules.
    pub nflog_group: u16,
    /// NFLOG group of egress log rules.
    pub nflog_group_egress: u16,
    /// Which actions are logged to NFLOG.
    pub log_actions: BTreeSet<Action>,
    /// Where `Log` rules write.
    pub log_target: LogTarget,
    /// Inbound failsafe ports.
    pub failsafe_inbound: Vec<Failsafe>,
    /// Outbound failsafe ports.
    pub failsafe_outbound: Vec<Failsafe>,
    /// This host's node name, if set; else the hostname.
    pub node_name: Option<String>,
    /// Labels of the implicit host endpoint.
    pub host_labels: BTreeMap<String, String>,
    /// Interfaces whose addresses are not counted as the host's own.
    pub host_interface_exclude: Regex,
    /// IPv6 handling.
    pub ipv6: Ipv6Mode,
    /// How often the daemon re-reads the kernel and repairs drift.
    pub resync_interval: Duration,
    /// How long the daemon waits for file events to settle.
    pub debounce: Duration,
    /// Whether the daemon may go from some policies to none.
    pub allow_empty: bool,
    /// Whether TCP SYNs that pre-DNAT policy denies are dropped in raw `PREROUTING`, before
    /// connection tracking (same verdict and NFLOG prefix as in mangle).
    pub early_drop: bool,
    /// Whether an apply or reload that takes reachability away also cuts the established
    /// connections it now denies (by deleting their conntrack entries).
    pub revoke_established: bool,
    /// Whether the daemon holds the NFLOG groups (counting drops for `/metrics` and streaming
    /// them to `drops`); off, other programs such as `tcpdump -i nflog:1` may listen.
    pub nflog_listener: bool,
    /// Where to serve Prometheus metrics, if anywhere.
    pub metrics_address: Option<SocketAddr>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            policies_dir: PathBuf::from(DEFAULT_POLICIES_DIR),
            backend: BackendChoice::Auto,
            mark_mask: 0xffff_0000,
            nflog_group: 1,
            nflog_group_egress: 2,
            log_actions: BTreeSet::from([Action::Deny]),
            log_target: LogTarget::Nflog,
            failsafe_inbound: default_failsafe_inbound(),
            failsafe_outbound: default_failsafe_outbound(),
            node_name: None,
            host_labels: BTreeMap::new(),
            #[allow(clippy::unwrap_used)] // A constant known to compile; tested below.
            host_interface_exclude: Regex::new(DEFAULT_HOST_INTERFACE_EXCLUDE).unwrap(),
            ipv6: Ipv6Mode::Auto,
            resync_interval: Duration::from_secs(90),
            debounce: Duration::from_millis(200),
            allow_empty: false,
            early_drop: true,
            revoke_established: false,
            nflog_listener: false,
            metrics_address: None,
        }
    }
}

/// The config file as written.
#[derive(Debug, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
#[schemars(rename = "Config")]
pub struct RawConfig {
    /// The policy directory.
    pub policies_dir: Option<Sp<String>>,
    /// `auto`, `iptables-legacy`, `iptables-nft` or `nftables`.
    pub backend: Option<Sp<String>>,
    /// Mark bits nodeport-guard may use (a number or a `0x…` string).
    pub mark_mask: Option<Sp<RawNumber>>,
    /// NFLOG group for ingress.
    pub nflog_group: Option<Sp<i64>>,
    /// NFLOG group for egress.
    pub nflog_group_egress: Option<Sp<i64>>,
    /// Actions that log to NFLOG: any of `Allow`, `Deny`, `Pass`.
    pub log_actions: Option<Sp<Vec<Sp<String>>>>,
    /// Where `Log` rules write: `nflog` (the default: NFLOG, which `drops` reads) or `log`
    /// (the kernel log, as Felix's `Log` action).
    pub log_target: Option<Sp<String>>,
    /// With `logTarget: log`, the text before each logged packet (default
    /// `"calico-packet: "`, Felix's; at most 29 characters).
    pub log_prefix: Option<Sp<String>>,
    /// With `logTarget: log`, the syslog level, 0 (emerg) to 7 (debug) (default 5, notice,
    /// Felix's).
    pub log_level: Option<Sp<i64>>,
    /// Inbound failsafe ports.
    pub failsafe_inbound: Option<Sp<Vec<Sp<RawFailsafe>>>>,
    /// Outbound failsafe ports.
    pub failsafe_outbound: Option<Sp<Vec<Sp<RawFailsafe>>>>,
    /// This host's node name.
    pub node_name: Option<Sp<String>>,
    /// Labels of the implicit host endpoint.
    pub host_labels: Option<Sp<BTreeMap<Sp<String>, Sp<String>>>>,
    /// Regex of interfaces whose addresses are not the host's own.
    pub host_interface_exclude: Option<Sp<String>>,
    /// `auto`, `true` or `false`.
    pub ipv6: Option<Sp<RawBoolOrAuto>>,
    /// How often the daemon re-reads everything it owns and repairs what differs, e.g. `90s`
    /// (changes by other programs are noticed within a second regardless).
    pub resync_interval: Option<Sp<String>>,
    /// File event debounce, e.g. `200ms`.
    pub debounce: Option<Sp<String>>,
    /// Allow going from some policies to none.
    pub allow_empty: Option<Sp<bool>>,
    /// Drop the TCP SYNs pre-DNAT policy denies in raw `PREROUTING`, before connection tracking
    /// (default true; false keeps every drop in mangle).
    pub early_drop: Option<Sp<bool>>,
    /// After a change that takes reachability away, cut the established connections it now
    /// denies (default false: only new connections are judged, as in Calico).
    pub revoke_established: Option<Sp<bool>>,
    /// The daemon holds the NFLOG groups: counts drops for `/metrics` and streams them to
    /// `drops` (default false: `tcpdump -i nflog:1` and `drops` bind the groups themselves).
    pub nflog_listener: Option<Sp<bool>>,
    /// `host:port` for Prometheus metrics.
    pub metrics_address: Option<Sp<String>>,
}

/// A failsafe entry as written.
#[derive(Debug, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
#[schemars(rename = "Failsafe")]
pub struct RawFailsafe {
    /// `tcp`, `udp` or `sctp`.
    pub protocol: Option<Sp<String>>,
    /// The port (1-65535) that stays reachable on every host address, whatever the policies say.
    pub port: Option<Sp<i64>>,
    /// Optional peer network.
    pub net: Option<Sp<String>>,
}

/// A number written as an integer or as a string (`0xffff0000`).
#[derive(Debug, Clone, PartialEq, Eq, schemars::JsonSchema)]
#[serde(untagged)]
pub enum RawNumber {
    /// An integer.
    Integer(i64),
    /// A string, decimal or `0x` hexadecimal.
    Text(String),
}

impl<'de> Deserialize<'de> for RawNumber {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct NumberVisitor;
        impl serde::de::Visitor<'_> for NumberVisitor {
            type Value = RawNumber;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a number such as `0xffff0000`")
            }
            fn visit_i64<E>(self, value: i64) -> Result<RawNumber, E> {
                Ok(RawNumber::Integer(value))
            }
            fn visit_u64<E>(self, value: u64) -> Result<RawNumber, E> {
                Ok(RawNumber::Integer(i64::try_from(value).unwrap_or(i64::MAX)))
            }
            fn visit_str<E>(self, value: &str) -> Result<RawNumber, E> {
                Ok(RawNumber::Text(value.to_owned()))
            }
        }
        deserializer.deserialize_any(NumberVisitor)
    }
}

/// `true`, `false` or `auto`.
#[derive(Debug, Clone, PartialEq, Eq, schemars::JsonSchema)]
#[serde(untagged)]
pub enum RawBoolOrAuto {
    /// A boolean.
    Bool(bool),
    /// A string (only `auto` is valid).
    Text(String),
}

impl<'de> Deserialize<'de> for RawBoolOrAuto {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct BoolVisitor;
        impl serde::de::Visitor<'_> for BoolVisitor {
            type Value = RawBoolOrAuto;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("`auto`, `true` or `false`")
            }
            fn visit_bool<E>(self, value: bool) -> Result<RawBoolOrAuto, E> {
                Ok(RawBoolOrAuto::Bool(value))
            }
            fn visit_str<E>(self, value: &str) -> Result<RawBoolOrAuto, E> {
                Ok(RawBoolOrAuto::Text(value.to_owned()))
            }
        }
        deserializer.deserialize_any(BoolVisitor)
    }
}

/// Reads the config file. A missing file means all defaults; a file that cannot be read or is
/// invalid gives diagnostics (the config file's [`FileId`] is in `sources`).
pub fn load(path: &Path, sources: &mut Sources) -> (Config, Vec<Diagnostic>) {
    let text = match fs_err::read_to_string(path) {
        Ok(text) => text,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            return (Config::default(), Vec::new());
        }
        Err(error) => {
            let id = sources.add(SourceFile::new(path, String::new()));
            return (
                Config::default(),
                vec![Diagnostic::file_error(
                    id,
                    format!("cannot read the config file: {}", error_reason(&error)),
                )],
            );
        }
    };
    let id = sources.add(SourceFile::new(path, text));
    parse(id, sources.get(id))
}

fn error_reason(error: &std::io::Error) -> String {
    match error.get_ref() {
        Some(inner) => inner.to_string(),
        None => error.to_string(),
    }
}

/// Parses and checks config text. Pure.
pub fn parse(file: FileId, source: &SourceFile) -> (Config, Vec<Diagnostic>) {
    if source.text.trim().is_empty() {
        return (Config::default(), Vec::new());
    }
    let mut options = serde_saphyr::Options::default();
    options.with_snippet = false;
    options.reject_unsupported_tags = true;
    options.reject_tagged_field_names = true;
    let raw: RawConfig = match serde_saphyr::from_str_with_options(&source.text, options) {
        Ok(Some(raw)) => raw,
        Ok(None) => return (Config::default(), Vec::new()),
        Err(error) => {
            let span = error
                .location()
                .map(|location| crate::spec::span_of(&location))
                .unwrap_or_default();
            let message = error.to_string();
            let span = crate::load::tag_span(&source.text, 0, span, &message);
            return (
                Config::default(),
                vec![crate::load::yaml_error(file, span, &message)],
            );
        }
    };
    check(file, raw)
}

/// The errors found while checking a config file.
struct Errors {
    file: FileId,
    list: Vec<Diagnostic>,
}

impl Errors {
    /// Every error of the config file says what to write instead.
    fn error(&mut self, span: crate::source::Span, message: String, help: &str) {
        debug_assert!(!help.is_empty(), "a config error without help: {message}");
        self.list
            .push(Diagnostic::error(self.file, span, message).with_help(help));
    }
}

fn check(file: FileId, raw: RawConfig) -> (Config, Vec<Diagnostic>) {
    let mut config = Config::default();
    let mut errors = Errors {
        file,
        list: Vec::new(),
    };
    check_rules(&raw, &mut config, &mut errors);
    check_log_target(&raw, &mut config, &mut errors);
    check_failsafes(&raw, &mut config, &mut errors);
    check_host(&raw, &mut config, &mut errors);
    check_daemon(&raw, &mut config, &mut errors);
    let mut errors = errors.list;
    crate::diagnostic::sort(&mut errors);
    (config, errors)
}

/// Where policies come from and how they become kernel rules: `policiesDir`, `backend`,
/// `markMask`, the NFLOG groups, `logActions` and `earlyDrop`.
fn check_rules(raw: &RawConfig, config: &mut Config, errors: &mut Errors) {
    if let Some(dir) = &raw.policies_dir {
        if dir.value.is_empty() {
            errors.error(
                dir.span,
                "`policiesDir` is empty".into(),
                "name a directory, for example `/etc/nodeport-guard/policies`",
            );
        } else {
            config.policies_dir = PathBuf::from(&dir.value);
        }
    }
    if let Some(backend) = &raw.backend {
        match BackendChoice::parse(&backend.value) {
            Some(choice) => config.backend = choice,
            None => errors.error(
                backend.span,
                format!("unknown backend `{}`", backend.value),
                &format!(
                    "write one of {}",
                    BackendChoice::names()
                        .map(|name| format!("`{name}`"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            ),
        }
    }
    if let Some(mask) = &raw.mark_mask {
        match parse_mark_mask(&mask.value) {
            Ok(value) => config.mark_mask = value,
            Err(message) => errors.error(
                mask.span,
                message,
                "the default `0xffff0000` suits most hosts",
            ),
        }
    }
    for (raw_group, target, name) in [
        (&raw.nflog_group, &mut config.nflog_group, "nflogGroup"),
        (
            &raw.nflog_group_egress,
            &mut config.nflog_group_egress,
            "nflogGroupEgress",
        ),
    ] {
        if let Some(group) = raw_group {
            match u16::try_from(group.value) {
                Ok(value) => *target = value,
                Err(_) => errors.error(
                    group.span,
                    format!(
                        "`{name}` must be an NFLOG group between 0 and 65535, not `{}`",
                        group.value
                    ),
                    "Calico's groups are 1 (ingress) and 2 (egress); pick groups no other program listens on",
                ),
            }
        }
    }
    if let Some(actions) = &raw.log_actions {
        config.log_actions.clear();
        for action in &actions.value {
            match action.value.as_str() {
                "Allow" => {
                    config.log_actions.insert(Action::Allow);
                }
                "Deny" => {
                    config.log_actions.insert(Action::Deny);
                }
                "Pass" => {
                    config.log_actions.insert(Action::Pass);
                }
                other => errors.error(
                    action.span,
                    format!("unknown log action `{other}`"),
                    "write any of `Allow`, `Deny`, `Pass` (a `Log` rule always logs)",
                ),
            }
        }
    }
    if let Some(early) = &raw.early_drop {
        config.early_drop = early.value;
    }
}

/// `logTarget`, and the `logPrefix` and `logLevel` that only the kernel log uses.
fn check_log_target(raw: &RawConfig, config: &mut Config, errors: &mut Errors) {
    let kernel_log = match &raw.log_target {
        None => false,
        Some(target) => match target.value.as_str() {
            "nflog" => false,
            "log" => true,
            other => {
                errors.error(
                    target.span,
                    format!("unknown `logTarget` `{other}`"),
                    "write `nflog` (NFLOG, which `drops` reads) or `log` (the kernel log, as Felix)",
                );
                false
            }
        },
    };
    let mut prefix = DEFAULT_LOG_PREFIX.to_owned();
    if let Some(raw_prefix) = &raw.log_prefix {
        match log_prefix_problem(&raw_prefix.value) {
            Some(message) => errors.error(
                raw_prefix.span,
                message,
                "write up to 29 letters, digits, spaces and any of `_.,:;=/@%+|()#-`, e.g. `\"calico-packet: \"`",
            ),
            None => prefix.clone_from(&raw_prefix.value),
        }
    }
    let mut level = DEFAULT_LOG_LEVEL;
    if let Some(raw_level) = &raw.log_level {
        match u8::try_from(raw_level.value) {
            Ok(value) if value <= 7 => level = value,
            _ => errors.error(
                raw_level.span,
                format!(
                    "`logLevel` must be a syslog level from 0 to 7, not `{}`",
                    raw_level.value
                ),
                "5 (notice) is Felix's; 4 is warning, 6 info, 7 debug",
            ),
        }
    }
    // Felix keeps `logPrefix` whatever writes the logs; so do we, and they are checked either
    // way, so that switching `logTarget` never turns a config invalid.
    if !kernel_log {
        return;
    }
    config.log_target = LogTarget::KernelLog { prefix, level };
}

/// What a kernel-log prefix may hold besides letters and digits: the characters a rule's
/// comment keeps (`ruleset::sanitize_comment`), none of which needs quoting inside quotes.
const LOG_PREFIX_PUNCTUATION: &str = " _.,:;=/@%+|()#-";

/// What is wrong with a kernel-log prefix, if anything: it goes into `iptables-restore` and
/// `nft` input between double quotes.
fn log_prefix_problem(prefix: &str) -> Option<String> {
    if prefix.is_empty() {
        return Some("`logPrefix` is empty".into());
    }
    if prefix.len() > MAX_LOG_PREFIX {
        return Some(format!(
            "`logPrefix` has {} characters; the kernel keeps at most {MAX_LOG_PREFIX}",
            prefix.len()
        ));
    }
    prefix
        .chars()
        .find(|&c| !(c.is_ascii_alphanumeric() || LOG_PREFIX_PUNCTUATION.contains(c)))
        .map(|c| format!("`logPrefix` may not hold {c:?}"))
}

/// `failsafeInbound` and `failsafeOutbound`.
fn check_failsafes(raw: &RawConfig, config: &mut Config, errors: &mut Errors) {
    for (raw_list, target, name) in [
        (
            &raw.failsafe_inbound,
            &mut config.failsafe_inbound,
            "failsafeInbound",
        ),
        (
            &raw.failsafe_outbound,
            &mut config.failsafe_outbound,
            "failsafeOutbound",
        ),
    ] {
        if let Some(list) = raw_list {
            target.clear();
            for entry in &list.value {
                match check_failsafe(&entry.value) {
                    Ok(failsafe) => target.push(failsafe),
                    Err((span, message)) => errors.error(
                        span.unwrap_or(entry.span),
                        format!("`{name}`: {message}"),
                        "write entries as `{protocol: tcp, port: 22}`, optionally with `net: 192.0.2.0/24`",
                    ),
                }
            }
        }
    }
}

/// What the host is: `nodeName`, `hostLabels`, `hostInterfaceExclude`, `ipv6`.
fn check_host(raw: &RawConfig, config: &mut Config, errors: &mut Errors) {
    if let Some(name) = &raw.node_name {
        if crate::validate::is_subdomain(&name.value) {
            config.node_name = Some(name.value.clone());
        } else {
            errors.error(
                name.span,
                format!("`nodeName` `{}` is not a valid node name", name.value),
                "node names are lowercase letters, digits, `-` and `.`",
            );
        }
    }
    if let Some(labels) = &raw.host_labels {
        for (key, value) in &labels.value {
            if let Some(message) = crate::validate::label_key_problem(&key.value) {
                errors.error(key.span, message, crate::validate::QUALIFIED_NAME_RULE);
            } else if let Some(message) = crate::validate::label_value_problem(&value.value) {
                errors.error(value.span, message, crate::validate::LABEL_VALUE_RULE);
            } else {
                config
                    .host_labels
                    .insert(key.value.clone(), value.value.clone());
            }
        }
    }
    if let Some(pattern) = &raw.host_interface_exclude {
        match Regex::new(&pattern.value) {
            Ok(regex) => config.host_interface_exclude = regex,
            Err(problem) => errors.error(
                pattern.span,
                format!(
                    "`hostInterfaceExclude` is not a valid regex: {}",
                    problem.to_string().lines().last().unwrap_or_default()
                ),
                "write a Rust regex matching the interface names to leave out, e.g. `^(docker|veth|flannel|cni)`",
            ),
        }
    }
    if let Some(ipv6) = &raw.ipv6 {
        match &ipv6.value {
            RawBoolOrAuto::Bool(true) => config.ipv6 = Ipv6Mode::Enabled,
            RawBoolOrAuto::Bool(false) => config.ipv6 = Ipv6Mode::Disabled,
            RawBoolOrAuto::Text(text) if text == "auto" => config.ipv6 = Ipv6Mode::Auto,
            RawBoolOrAuto::Text(text) => errors.error(
                ipv6.span,
                format!("`ipv6` must be `auto`, `true` or `false`, not `{text}`"),
                "`auto` guards IPv6 where the host has it, `false` never writes IPv6 rules",
            ),
        }
    }
}

/// How the daemon runs: `resyncInterval`, `debounce`, `allowEmpty`, `metricsAddress`.
fn check_daemon(raw: &RawConfig, config: &mut Config, errors: &mut Errors) {
    for (raw_duration, target, name, minimum) in [
        (
            &raw.resync_interval,
            &mut config.resync_interval,
            "resyncInterval",
            Duration::from_millis(100),
        ),
        (
            &raw.debounce,
            &mut config.debounce,
            "debounce",
            Duration::ZERO,
        ),
    ] {
        if let Some(text) = raw_duration {
            match humantime::parse_duration(&text.value) {
                Ok(duration) if duration >= minimum => *target = duration,
                Ok(_) => errors.error(
                    text.span,
                    format!(
                        "`{name}` must be at least {}",
                        humantime::format_duration(minimum)
                    ),
                    "write a longer duration such as `90s` or `5m`",
                ),
                Err(problem) => errors.error(
                    text.span,
                    format!("`{name}` is not a duration: {problem}"),
                    "write a duration such as `90s`, `200ms` or `5m`",
                ),
            }
        }
    }
    if let Some(allow) = &raw.allow_empty {
        config.allow_empty = allow.value;
    }
    if let Some(revoke) = &raw.revoke_established {
        config.revoke_established = revoke.value;
    }
    if let Some(listener) = &raw.nflog_listener {
        config.nflog_listener = listener.value;
    }
    if let Some(address) = &raw.metrics_address {
        match address.value.parse::<SocketAddr>() {
            Ok(parsed) => config.metrics_address = Some(parsed),
            Err(_) => errors.error(
                address.span,
                format!(
                    "`metricsAddress` `{}` is not an address and port",
                    address.value
                ),
                "write it as `127.0.0.1:9808` or `[::1]:9808`",
            ),
        }
    }
}

fn check_failsafe(raw: &RawFailsafe) -> Result<Failsafe, (Option<crate::source::Span>, String)> {
    let protocol = match &raw.protocol {
        None => return Err((None, "an entry needs a `protocol`".into())),
        Some(protocol) => match protocol.value.to_ascii_lowercase().as_str() {
            "tcp" => Protocol::Tcp,
            "udp" => Protocol::Udp,
            "sctp" => Protocol::Sctp,
            other => {
                return Err((
                    Some(protocol.span),
                    format!("protocol `{other}` has no ports; use `tcp`, `udp` or `sctp`"),
                ));
            }
        },
    };
    let port = match &raw.port {
        None => return Err((None, "an entry needs a `port`".into())),
        Some(port) => match u16::try_from(port.value) {
            Ok(value) if value > 0 => value,
            _ => {
                return Err((
                    Some(port.span),
                    format!("port `{}` is not between 1 and 65535", port.value),
                ));
            }
        },
    };
    let net = match &raw.net {
        None => None,
        Some(net) => match crate::validate::parse_cidr(&net.value) {
            Ok(parsed) => Some(parsed),
            Err(message) => return Err((Some(net.span), message)),
        },
    };
    Ok(Failsafe {
        protocol,
        port,
        net,
    })
}

/// Parses a mark mask and checks that it leaves room for our five bits and stays clear of
/// kube-proxy's.
pub fn parse_mark_mask(raw: &RawNumber) -> Result<u32, String> {
    let value = match raw {
        RawNumber::Integer(value) => u32::try_from(*value).ok(),
        RawNumber::Text(text) => {
            let text = text.trim();
            match text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
                Some(hex) => u32::from_str_radix(hex, 16).ok(),
                None => text.parse().ok(),
            }
        }
    };
    let Some(mask) = value else {
        return Err("`markMask` must be a 32-bit number such as `0xffff0000`".into());
    };
    if mask & KUBE_PROXY_MARKS != 0 {
        return Err(format!(
            "`markMask` {mask:#x} overlaps kube-proxy's mark bits 0x4000 and 0x8000"
        ));
    }
    if mask.count_ones() < crate::marks::BITS_NEEDED {
        return Err(format!(
            "`markMask` {mask:#x} has {} bits set; at least {} are needed",
            mask.count_ones(),
            crate::marks::BITS_NEEDED
        ));
    }
    Ok(mask)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_text(text: &str) -> (Config, Vec<String>) {
        let mut sources = Sources::new();
        let id = sources.add(SourceFile::new("config.yaml", text));
        let (config, diagnostics) = parse(id, sources.get(id));
        let rendered = diagnostics.iter().map(|d| d.headline(&sources)).collect();
        (config, rendered)
    }

    /// The diagnostics of a config text, whole.
    fn diagnostics(text: &str) -> Vec<Diagnostic> {
        let mut sources = Sources::new();
        let id = sources.add(SourceFile::new("config.yaml", text));
        parse(id, sources.get(id)).1
    }

    #[test]
    fn a_misspelt_key_is_said_once_with_the_closest_key() {
        let found = diagnostics("backnd: nftables\n");
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].message, "unknown field `backnd`");
        let help = found[0].help.as_deref().unwrap_or_default();
        assert!(
            help.starts_with(
                "did you mean `backend`? The fields here are `policiesDir`, `backend`"
            ),
            "{help}"
        );
    }

    #[test]
    fn a_tag_is_an_error_at_the_tag() {
        // `!worker-1` unquoted is a tag on an empty string, never a node name.
        let (_, found) = parse_text("nodeName: !worker-1\n");
        assert_eq!(
            found,
            ["config.yaml:1:11: error: `!worker-1` is read as a YAML tag, not as text"]
        );
    }

    #[test]
    fn a_bad_indent_gets_a_help_line_about_indentation() {
        let found = diagnostics("backend: nftables\n  debounce: 100ms\n");
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(
            found[0].message,
            "mapping values are not allowed in this context"
        );
        assert!(
            found[0]
                .help
                .as_deref()
                .is_some_and(|help| help.contains("indentation")),
            "{found:?}"
        );
    }

    #[test]
    fn every_config_error_says_what_to_write_instead() {
        let bad = [
            "backnd: nftables\n",
            "backend: iptables\n",
            "markMask: 0x1\n",
            "markMask: nope\n",
            "nflogGroup: 70000\n",
            "logActions: [Alow]\n",
            "failsafeInbound: [{protocol: gre, port: 22}]\n",
            "failsafeInbound: [{protocol: tcp, port: 70000}]\n",
            "nodeName: Node_1\n",
            "hostLabels: {\"a/\": x}\n",
            "hostLabels: {role: \"-x\"}\n",
            "hostInterfaceExclude: \"(\"\n",
            "ipv6: maybe\n",
            "resyncInterval: 90x\n",
            "resyncInterval: 1ms\n",
            "metricsAddress: nowhere\n",
            "allowEmpty: perhaps\n",
            "nflogGroup: abc\n",
            "ipv6: [1]\n",
            "logActions: Deny\n",
            "hostLabels: [a]\n",
            "debounce: 5\n",
        ];
        for text in bad {
            let found = diagnostics(text);
            assert!(!found.is_empty(), "no error for {text:?}");
            for diagnostic in found {
                assert!(
                    diagnostic
                        .help
                        .as_deref()
                        .is_some_and(|help| !help.is_empty()),
                    "no help for {text:?}: {diagnostic:?}"
                );
            }
        }
    }

    #[test]
    fn empty_file_means_defaults() {
        let (config, errors) = parse_text("# nothing\n");
        assert!(errors.is_empty());
        assert_eq!(config.mark_mask, 0xffff_0000);
        assert_eq!(config.failsafe_inbound.len(), 9);
        assert_eq!(config.resync_interval, Duration::from_secs(90));
        assert!(config.early_drop);
        assert!(config.host_interface_exclude.is_match("flannel.1"));
        assert!(!config.host_interface_exclude.is_match("eth0"));
    }

    #[test]
    fn every_documented_key_is_read() {
        let (config, errors) = parse_text(
            "policiesDir: /srv/p\nbackend: iptables-nft\nmarkMask: 0xff000000\nnflogGroup: 5\n\
             logActions: [Allow, Deny]\nfailsafeInbound: [{protocol: tcp, port: 2222}]\n\
             failsafeOutbound: []\nnodeName: node-1\nhostLabels: {role: edge}\n\
             hostInterfaceExclude: '^docker'\nipv6: false\nresyncInterval: 1s\ndebounce: 100ms\n\
             allowEmpty: true\nnflogGroupEgress: 6\nmetricsAddress: 127.0.0.1:9808\n\
             earlyDrop: false\n",
        );
        assert_eq!(errors, Vec::<String>::new());
        assert_eq!(config.policies_dir, PathBuf::from("/srv/p"));
        assert_eq!(config.backend.as_str(), "iptables-nft");
        assert_eq!(config.mark_mask, 0xff00_0000);
        assert_eq!(config.nflog_group, 5);
        assert_eq!(config.nflog_group_egress, 6);
        assert_eq!(
            config.log_actions,
            BTreeSet::from([Action::Allow, Action::Deny])
        );
        assert_eq!(
            config.failsafe_inbound,
            vec![Failsafe::new(Protocol::Tcp, 2222)]
        );
        assert!(config.failsafe_outbound.is_empty());
        assert_eq!(config.node_name.as_deref(), Some("node-1"));
        assert_eq!(
            config.host_labels.get("role").map(String::as_str),
            Some("edge")
        );
        assert_eq!(config.ipv6, Ipv6Mode::Disabled);
        assert_eq!(config.resync_interval, Duration::from_secs(1));
        assert_eq!(config.debounce, Duration::from_millis(100));
        assert!(config.allow_empty);
        assert!(!config.early_drop);
        assert_eq!(
            config.metrics_address,
            Some("127.0.0.1:9808".parse().unwrap())
        );
    }

    #[test]
    fn unknown_keys_are_errors_with_position() {
        let (_, errors) = parse_text("backend: auto\nresync: 5s\n");
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert!(
            errors[0].starts_with("config.yaml:2:1: error: unknown field `resync`"),
            "{errors:?}"
        );
    }

    #[test]
    fn bad_values_are_all_reported() {
        let (_, errors) = parse_text(
            "backend: iptables\nmarkMask: 0xc000\nresyncInterval: soon\nipv6: maybe\nmetricsAddress: x\n",
        );
        assert_eq!(errors.len(), 5, "{errors:?}");
        assert!(errors[0].contains("1:10: error: unknown backend `iptables`"));
        assert!(errors[1].contains("overlaps kube-proxy"));
        assert!(errors[2].contains("is not a duration"));
        assert!(errors[3].contains("`ipv6` must be"));
        assert!(errors[4].contains("not an address and port"));
    }

    #[test]
    fn log_rules_go_to_nflog_unless_the_kernel_log_is_chosen_with_felixs_defaults() {
        assert_eq!(Config::default().log_target, LogTarget::Nflog);
        let (config, errors) = parse_text("logTarget: nflog\nlogPrefix: 'x: '\nlogLevel: 7\n");
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(config.log_target, LogTarget::Nflog);
        let (config, errors) = parse_text("logTarget: log\n");
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(
            config.log_target,
            LogTarget::KernelLog {
                prefix: "calico-packet: ".into(),
                level: 5
            }
        );
        let (config, errors) = parse_text("logTarget: log\nlogPrefix: 'npg drop: '\nlogLevel: 4\n");
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(
            config.log_target,
            LogTarget::KernelLog {
                prefix: "npg drop: ".into(),
                level: 4
            }
        );
    }

    #[test]
    fn log_target_prefix_and_level_are_checked_whatever_the_target() {
        let (_, errors) = parse_text("logTarget: syslog\nlogPrefix: 'say \"hi\"'\nlogLevel: 8\n");
        assert_eq!(errors.len(), 3, "{errors:?}");
        assert!(
            errors[0].contains("unknown `logTarget` `syslog`"),
            "{errors:?}"
        );
        assert!(errors[1].contains("may not hold '\"'"), "{errors:?}");
        assert!(
            errors[2].contains("syslog level from 0 to 7, not `8`"),
            "{errors:?}"
        );
        let (_, errors) = parse_text(&format!("logPrefix: '{}'\n", "x".repeat(30)));
        assert!(errors[0].contains("has 30 characters"), "{errors:?}");
        let (_, errors) = parse_text("logPrefix: ''\n");
        assert!(errors[0].contains("`logPrefix` is empty"), "{errors:?}");
    }

    #[test]
    fn mark_masks_need_five_free_bits() {
        assert_eq!(
            parse_mark_mask(&RawNumber::Text("0x1f0000".into())),
            Ok(0x1f_0000)
        );
        assert!(parse_mark_mask(&RawNumber::Text("0xf0000".into())).is_err());
        assert!(parse_mark_mask(&RawNumber::Integer(0xffff_c000)).is_err());
        assert!(parse_mark_mask(&RawNumber::Text("nope".into())).is_err());
    }
}
