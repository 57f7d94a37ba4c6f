//! The command line: what users type, parsed by clap (in `main`); `commands` does the work.
//!
//! The same definition generates the man page and shell completions (`nodeport-guard
//! generate`), so they can never disagree with the binary.

use clap::{Args, Parser, Subcommand, ValueEnum};
use std::path::PathBuf;

use clap::builder::{PossibleValue, PossibleValuesParser, TypedValueParser as _};

use crate::dataplane::{BACKENDS, BackendChoice};

/// Source-IP whitelists for NodePorts, docker published ports and host services, from
/// Calico-shaped policy files.
#[derive(Debug, Parser)]
#[command(name = "nodeport-guard", version, about, long_about = None, max_term_width = 100)]
pub struct Cli {
    /// Global options.
    #[command(flatten)]
    pub global: GlobalOptions,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Options every command takes.
#[derive(Debug, Args, Clone)]
pub struct GlobalOptions {
    /// Config file [default: /etc/nodeport-guard/config.yaml; a missing file means all defaults]
    #[arg(
        long,
        global = true,
        value_name = "FILE",
        env = "NODEPORT_GUARD_CONFIG"
    )]
    pub config: Option<PathBuf>,
    /// Policy directory [default: `policiesDir` from the config, else /etc/nodeport-guard/policies]
    #[arg(
        long,
        global = true,
        value_name = "DIR",
        env = "NODEPORT_GUARD_POLICIES"
    )]
    pub policies: Option<PathBuf>,
    /// Which program writes the rules [default: `backend` from the config, else auto]
    #[arg(long, global = true, value_name = "BACKEND", value_parser = backend_parser())]
    pub backend: Option<BackendChoice>,
    /// More log detail (-v info, -vv debug, -vvv trace); RUST_LOG overrides
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
    /// Log format on stderr
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// This host's node name for `HostEndpoint.spec.node` [default: `nodeName` from the config, else the hostname]
    #[arg(
        long,
        global = true,
        value_name = "NAME",
        env = "NODEPORT_GUARD_NODE_NAME"
    )]
    pub node_name: Option<String>,
    /// Refuse policy files and directories that anyone but root may change (by default a warning)
    #[arg(long, global = true)]
    pub strict_permissions: bool,
    /// Where runtime state lives: the daemon's lock, pending confirmations, the daemon status
    #[arg(
        long,
        global = true,
        value_name = "DIR",
        env = "NODEPORT_GUARD_STATE_DIR",
        default_value = "/run/nodeport-guard"
    )]
    pub state_dir: PathBuf,
}

/// `--backend` values: `auto` and every backend's name, each with what it runs.
fn backend_parser() -> impl clap::builder::TypedValueParser<Value = BackendChoice> {
    let values = std::iter::once(PossibleValue::new("auto").help(BackendChoice::AUTO_ABOUT)).chain(
        BACKENDS
            .iter()
            .map(|backend| PossibleValue::new(backend.name()).help(backend.about())),
    );
    PossibleValuesParser::new(values)
        .map(|name| BackendChoice::parse(&name).unwrap_or(BackendChoice::Auto))
}

/// `--log-format` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines
    Text,
    /// One JSON object per line, for log collectors
    Json,
}

/// The commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Parse and validate policy files or directories (default: the policy directory); no root,
    /// no kernel. Exit 0 valid, 1 invalid. Usable as confd's `check_cmd`.
    Validate {
        /// Files or directories to check
        #[arg(value_name = "PATH")]
        paths: Vec<PathBuf>,
    },
    /// Print the desired state in the backend's load syntax (ipset restore and
    /// iptables-restore text, or an nft script); reads no firewall state.
    Render,
    /// Show what `apply` would change: a diff per chain and set, warnings, a summary.
    Plan {
        /// Exit 0 when there is nothing to change, 2 when there are changes, 1 on error
        #[arg(long)]
        detailed_exitcode: bool,
        /// Print the plan as JSON
        #[arg(long)]
        json: bool,
        /// Save the plan to FILE for `apply FILE`
        #[arg(long, value_name = "FILE")]
        out: Option<PathBuf>,
        /// Show every line: also the rules of chains created or deleted whole that are counted
        /// by default, and every set member
        #[arg(long)]
        full: bool,
    },
    /// Apply the policies atomically (asks first on a terminal).
    Apply {
        /// Do not ask
        #[arg(long, short = 'y')]
        yes: bool,
        /// Roll back unless `nodeport-guard confirm` runs within SECS seconds (1 to 86400)
        #[arg(long, value_name = "SECS", value_parser = clap::value_parser!(u64).range(1..=86_400))]
        confirm_timeout: Option<u64>,
        /// Apply exactly this saved plan (from `plan --out`), refusing if it is stale
        #[arg(value_name = "PLANFILE")]
        plan_file: Option<PathBuf>,
        /// Show every line of the plan (see `plan --full`)
        #[arg(long)]
        full: bool,
    },
    /// Confirm a pending `apply --confirm-timeout`.
    Confirm,
    /// Run as a daemon: apply, watch the policy directory, repair drift.
    ///
    /// Drift: another program's change to what nodeport-guard owns is noticed within a second
    /// (nf_tables change notifications with iptables-nft and nftables; a check of
    /// iptables-legacy's tables every 400 ms) and repaired; other programs' changes to their
    /// own rules cost nothing more than noticing them. Repairs are rate-limited (5 in a burst,
    /// then one a second), logged and counted. Every `resyncInterval` the whole kernel is
    /// checked again.
    ///
    /// With `metricsAddress`, `/metrics` and `/healthz` are served: the kernel's counters are
    /// read at most once a second whatever the number of scrapes; at most 64 connections at
    /// once (one still waiting for its request head gives way to a new one, the others wait);
    /// a request head over 8 KiB or slower than 5 s is dropped.
    Run,
    /// What the kernel holds, read from the kernel: per policy rule whether it is there and its
    /// packets and bytes, whether that is what the policies say, the last change, the daemon.
    Status {
        /// Print JSON
        #[arg(long)]
        json: bool,
        /// Exit 0 when the kernel holds what the policies say, 2 when it differs, 1 when that
        /// cannot be told (invalid policy files) or on error
        #[arg(long)]
        detailed_exitcode: bool,
    },
    /// Every port of this host another host can reach, and who may reach it: sockets listening
    /// on (TCP) or bound to (UDP) a non-loopback address, with their process, and every port
    /// nat PREROUTING DNATs (kube-proxy NodePorts, docker published ports, hand-written rules),
    /// with the Service or container; for each, `anyone`, `nobody` or the source networks the
    /// policies let through, and the policy rule (or failsafe port) that decides. Read-only:
    /// changes nothing in the kernel and needs no daemon. Judged under the policies last
    /// applied; with nothing of nodeport-guard in the kernel every port is open to anyone; with
    /// our rules there but not recorded, the policy files (it says which).
    Exposure {
        /// Print JSON (`kind: Exposure`)
        #[arg(long)]
        json: bool,
        /// Exit 2 when a published (DNATed) port is open to anyone, 0 when none is, 1 on error
        #[arg(long)]
        detailed_exitcode: bool,
    },
    /// Follow one packet through the policies, without the kernel: the host endpoint, failsafe
    /// ports, each tier and policy with the rule that matched, the marks, and the verdict.
    Trace(TraceArgs),
    /// Cut the established connections the policies deny (their conntrack entries), once; the
    /// host's own connections, loopback and failsafe ports are never cut. `revokeEstablished:
    /// true` does this after every change.
    Revoke {
        /// Do not ask
        #[arg(long, short = 'y')]
        yes: bool,
    },
    /// Show denied packets live from the NFLOG groups, each with its policy, tier and rule in
    /// words (from the daemon's stream when it runs, else from the groups themselves).
    ///
    /// With --json, each line is an object with `time` (local, RFC 3339), `family`, `protocol`,
    /// `src`, `srcPort`, `dst`, `dstPort`, `inInterface`, `group`, `prefix`, `kind` (`rule`,
    /// `endOfTier`, `noProfile`, `unknown`), then for a rule `policy`, `tier`, `direction`,
    /// `rule`, `action`, `staged`; for the end of a tier `tier`, `direction`, `action`,
    /// `staged`; for no profile `direction`; for an unknown prefix `reason`; and `description`,
    /// the verdict in words. The summary on Ctrl-C or SIGTERM goes to stderr. Exit 0 on a
    /// signal or after --count packets, 1 on error (a group another program holds is named).
    Drops(DropsArgs),
    /// Remove every chain, jump and set nodeport-guard owns.
    Cleanup {
        /// Do not ask
        #[arg(long, short = 'y')]
        yes: bool,
        /// List every rule removed (by default chains are counted)
        #[arg(long)]
        full: bool,
    },
    /// Let sources reach ports for a while: writes one pre-DNAT policy file,
    /// `grant-<name>.yaml`, into the policy directory (atomically, after validating the
    /// directory with it), ordered before the default tier's other policies and expiring by
    /// itself (`nodeport-guard.io/expires`). The daemon (or the next `apply`) enforces it.
    /// Exit 0, 1 on invalid input.
    Grant(GrantArgs),
    /// List every policy, staged policy and network set that carries an expiry: kind, name,
    /// file, sources, ports, expiry, who granted it, why, active or expired. Exit 0, 1 on
    /// invalid policy files.
    Grants {
        /// Print JSON (`kind: GrantList`)
        #[arg(long)]
        json: bool,
        /// Delete the files that hold only expired resources
        #[arg(long)]
        prune: bool,
    },
    /// Print the JSON Schema of the policy files.
    Schema {
        /// Print the config file's schema instead
        #[arg(long)]
        config_schema: bool,
    },
    /// Write the man page or shell completions (for packagers).
    #[command(hide = true)]
    Generate {
        /// What to write
        #[arg(value_enum)]
        what: GenerateWhat,
        /// Directory to write into
        #[arg(long, value_name = "DIR", default_value = ".")]
        out_dir: PathBuf,
    },
    /// Internal: the process that rolls back an unconfirmed apply.
    #[command(hide = true, name = "__rollback-watch")]
    RollbackWatch {
        /// The pending apply's id
        id: String,
    },
}

/// What `grant` writes (or, with `--revoke`, removes).
#[derive(Debug, Args)]
pub struct GrantArgs {
    /// Who may come in: addresses or networks, comma-separated
    #[arg(long, value_name = "CIDR", value_delimiter = ',', value_parser = parse_grant_source, required_unless_present = "revoke")]
    pub src: Vec<ipnet::IpNet>,
    /// To which ports (1-65535), comma-separated
    #[arg(
        long,
        value_name = "PORT",
        value_delimiter = ',',
        value_parser = clap::value_parser!(u16).range(1..),
        required_unless_present = "revoke"
    )]
    pub port: Vec<u16>,
    /// The ports' protocol
    #[arg(long, value_enum, default_value_t = GrantProto::Tcp)]
    pub proto: GrantProto,
    /// For how long (e.g. 2h, 3d, 90m)
    #[arg(long = "for", value_name = "DURATION", value_parser = humantime::parse_duration, conflicts_with = "until", required_unless_present_any = ["until", "revoke"])]
    pub for_: Option<std::time::Duration>,
    /// Until when: an RFC 3339 time with its offset (e.g. 2026-12-05T18:00:00Z)
    #[arg(long, value_name = "TIME")]
    pub until: Option<String>,
    /// Why (written in the file, shown by `grants`): one line
    #[arg(long, value_name = "TEXT", value_parser = parse_reason)]
    pub reason: Option<String>,
    /// The grant's name: the policy is `grant-NAME`, the file `grant-NAME.yaml` [default: made
    /// from the first source and port]
    #[arg(long, value_name = "NAME")]
    pub name: Option<String>,
    /// Replace the grant of that name if there is one
    #[arg(long)]
    pub replace: bool,
    /// Delete the grant NAME (its file `grant-NAME.yaml`) now
    #[arg(long, value_name = "NAME", conflicts_with_all = ["src", "port", "for_", "until", "reason", "name", "replace"])]
    pub revoke: Option<String>,
}

/// `grant --proto` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum GrantProto {
    /// TCP
    Tcp,
    /// UDP
    Udp,
}

/// The packet `trace` follows.
#[derive(Debug, Args)]
pub struct TraceArgs {
    /// Source address
    #[arg(long, value_name = "IP")]
    pub src: std::net::IpAddr,
    /// Destination address (before DNAT: the node's address for a NodePort)
    #[arg(long, value_name = "IP")]
    pub dst: std::net::IpAddr,
    /// Protocol: tcp, udp, sctp, udplite, icmp, icmpv6, or a number [default: tcp, or icmp /
    /// icmpv6 with --icmp-type]
    #[arg(long, value_name = "PROTO")]
    pub proto: Option<String>,
    /// Source port [default: 49152 for protocols with ports]
    #[arg(long, value_name = "PORT")]
    pub sport: Option<u16>,
    /// Destination port (before DNAT: the NodePort or published port)
    #[arg(long, value_name = "PORT")]
    pub dport: Option<u16>,
    /// ICMP type
    #[arg(long, value_name = "TYPE")]
    pub icmp_type: Option<u8>,
    /// ICMP code
    #[arg(long, value_name = "CODE", requires = "icmp_type")]
    pub icmp_code: Option<u8>,
    /// The interface of the host endpoint: the packet arrives on it (inbound, forward) or
    /// leaves by it (outbound) [default: one without a host endpoint of its own]
    #[arg(long, value_name = "NAME", value_parser = parse_interface)]
    pub iface: Option<String>,
    /// Forwarded packets: the interface they leave by
    #[arg(long, value_name = "NAME", value_parser = parse_interface)]
    pub out_iface: Option<String>,
    /// How the packet travels
    #[arg(long, value_enum, default_value_t = TraceDirection::Inbound)]
    pub direction: TraceDirection,
    /// The packet's conntrack state
    #[arg(long, value_enum, default_value_t = TraceState::New)]
    pub state: TraceState,
    /// Print JSON
    #[arg(long)]
    pub json: bool,
}

/// `trace --direction` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum TraceDirection {
    /// Arriving for this host (a NodePort or published port is judged before DNAT)
    Inbound,
    /// Routed through this host (after DNAT to a pod or container)
    Forward,
    /// Sent by this host
    Outbound,
}

/// `trace --state` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum TraceState {
    /// The first packet of a connection
    New,
    /// A packet of a known connection, or its reply
    Established,
    /// Related to a known connection (an ICMP error)
    Related,
    /// A packet conntrack cannot place
    Invalid,
}

/// `drops` options. Ctrl-C or SIGTERM prints a summary (top sources and rules) and exits 0.
#[derive(Debug, Args, Clone, Default)]
pub struct DropsArgs {
    /// One JSON object per packet and line (camelCase keys)
    #[arg(long)]
    pub json: bool,
    /// Also show what staged policies would deny
    #[arg(long)]
    pub staged: bool,
    /// Only packets of this policy's rules
    #[arg(long, value_name = "NAME")]
    pub policy: Option<String>,
    /// Only packets from this address or net
    #[arg(long, value_name = "CIDR", value_parser = parse_net)]
    pub src: Option<ipnet::IpNet>,
    /// Only packets to this destination port
    #[arg(long, value_name = "N")]
    pub port: Option<u16>,
    /// First the drops of this recent time (e.g. 5m) from the daemon's buffer; needs the daemon
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
    pub since: Option<std::time::Duration>,
    /// Exit 0 after N shown packets
    #[arg(long, value_name = "N")]
    pub count: Option<u64>,
}

/// A net, or one address as a /32 or /128.
fn parse_net(text: &str) -> Result<ipnet::IpNet, String> {
    text.parse::<ipnet::IpNet>()
        .or_else(|_| text.parse::<std::net::IpAddr>().map(ipnet::IpNet::from))
        .map_err(|_| format!("`{text}` is not an address or a CIDR"))
}

/// A grant's source: an address or a network without host bits, and never an IPv4-mapped
/// IPv6 address (`::ffff:198.51.100.7`), which no IPv6 rule can match: the packets of that
/// client come as IPv4.
fn parse_grant_source(text: &str) -> Result<ipnet::IpNet, String> {
    let net = parse_net(text)?;
    if net != net.trunc() {
        return Err(format!(
            "`{text}` has host bits set: the network is `{}`",
            net.trunc()
        ));
    }
    if let ipnet::IpNet::V6(v6) = net
        && v6.addr().to_ipv4_mapped().is_some()
    {
        return Err(format!(
            "`{text}` is an IPv4-mapped IPv6 address, which no IPv6 rule matches: give the IPv4 address"
        ));
    }
    Ok(net)
}

/// A grant's reason: one line of text (it is written into the policy file's annotations and
/// shown in a table).
fn parse_reason(text: &str) -> Result<String, String> {
    if text
        .chars()
        .any(|c| c.is_control() || matches!(c, '\u{2028}' | '\u{2029}'))
    {
        return Err("the reason must be one line, without control characters".to_owned());
    }
    Ok(text.to_owned())
}

/// A Linux interface name: 1 to 15 bytes, no `/`, whitespace, `:` or control character (what
/// the kernel accepts, `dev_valid_name`, less the `:` of alias labels).
fn parse_interface(text: &str) -> Result<String, String> {
    let valid = !text.is_empty()
        && text.len() <= 15
        && text != "."
        && text != ".."
        && !text
            .chars()
            .any(|c| c == '/' || c == ':' || c.is_whitespace() || c.is_control());
    if valid {
        Ok(text.to_owned())
    } else {
        Err(format!(
            "`{text}` is not an interface name: 1 to 15 characters, without `/`, `:` or spaces"
        ))
    }
}

/// What `generate` writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum GenerateWhat {
    /// nodeport-guard.1
    Man,
    /// bash, zsh and fish completions
    Completions,
}

/// The command line as the binary parses it and the man pages and completions show it: the
/// global options are listed once, in `nodeport-guard --help`; each command's help names them
/// in one line instead of repeating ~45 lines of them.
pub fn command() -> clap::Command {
    use clap::CommandFactory as _;
    let command = Cli::command();
    let globals: Vec<clap::Arg> = command
        .get_arguments()
        .filter(|arg| arg.is_global_set())
        .cloned()
        .collect();
    let names: Vec<String> = globals.iter().map(spelling).collect();
    let note = format!(
        "Global options ({}): see `nodeport-guard --help`.",
        names.join(", ")
    );
    with_hidden_globals(command, &globals, &note)
}

/// How an option is written on the command line: `--config`, `-v/--verbose`.
fn spelling(arg: &clap::Arg) -> String {
    match (arg.get_short(), arg.get_long()) {
        (Some(short), Some(long)) => format!("-{short}/--{long}"),
        (None, Some(long)) => format!("--{long}"),
        (Some(short), None) => format!("-{short}"),
        (None, None) => arg.get_id().to_string(),
    }
}

/// Gives every command below `command` its own hidden copy of the global options (clap then
/// does not propagate the visible ones; their values still reach the top level) and the note
/// that names them.
fn with_hidden_globals(
    mut command: clap::Command,
    globals: &[clap::Arg],
    note: &str,
) -> clap::Command {
    let names: Vec<String> = command
        .get_subcommands()
        .map(|sub| sub.get_name().to_owned())
        .collect();
    for name in names {
        command = command.mut_subcommand(name, |mut sub| {
            for arg in globals {
                sub = sub.arg(arg.clone().hide(true));
            }
            let after = match sub.get_after_help() {
                Some(after) => format!("{after}\n\n{note}"),
                None => note.to_owned(),
            };
            with_hidden_globals(sub.after_help(after), globals, note)
        });
    }
    command
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::FromArgMatches as _;

    fn parse(args: &[&str]) -> Cli {
        let matches = command()
            .try_get_matches_from(args)
            .unwrap_or_else(|e| panic!("{args:?}: {e}"));
        Cli::from_arg_matches(&matches).unwrap_or_else(|e| panic!("{args:?}: {e}"))
    }

    #[test]
    fn global_options_are_listed_once_and_named_in_each_commands_help() {
        let mut top = command();
        let top_help = top.render_long_help().to_string();
        assert!(top_help.contains("--state-dir <DIR>"), "{top_help}");
        let mut command = command();
        command.build();
        for sub in command.get_subcommands_mut() {
            if sub.get_name() == "help" {
                continue;
            }
            for help in [
                sub.render_long_help().to_string(),
                sub.render_help().to_string(),
            ] {
                assert!(
                    !help.contains("--state-dir <DIR>") && !help.contains("--log-format <"),
                    "`{}` repeats the global options:\n{help}",
                    sub.get_name()
                );
                assert!(
                    help.contains("Global options (--config, --policies, --backend, -v/--verbose")
                        && help.contains("see `nodeport-guard --help`"),
                    "`{}` does not name the global options:\n{help}",
                    sub.get_name()
                );
            }
        }
    }

    #[test]
    fn global_options_still_work_before_and_after_the_command() {
        let before = parse(&[
            "nodeport-guard",
            "--policies",
            "/p",
            "-v",
            "--state-dir",
            "/s",
            "plan",
        ]);
        let after = parse(&[
            "nodeport-guard",
            "plan",
            "--policies",
            "/p",
            "-v",
            "--state-dir",
            "/s",
        ]);
        for cli in [before, after] {
            assert_eq!(
                cli.global.policies.as_deref(),
                Some(std::path::Path::new("/p"))
            );
            assert_eq!(cli.global.state_dir, std::path::Path::new("/s"));
            assert_eq!(cli.global.verbose, 1);
            assert!(matches!(cli.command, Command::Plan { .. }));
        }
        let defaults = parse(&["nodeport-guard", "status"]);
        assert_eq!(
            defaults.global.state_dir,
            std::path::Path::new("/run/nodeport-guard")
        );
        assert_eq!(defaults.global.log_format, LogFormat::Text);
        // The hidden copies do not make unknown options acceptable.
        assert!(
            command()
                .try_get_matches_from(["nodeport-guard", "plan", "--bogus"])
                .is_err()
        );
    }
}
