//! `trace`: one packet through the policies, worked out without the kernel (`crate::trace`).

use std::fmt::Write as _;
use std::io::Write as _;
use std::process::ExitCode;

use anyhow::{Context as _, Result};

use crate::cli::{TraceArgs, TraceDirection, TraceState};
use crate::model::{IpFamily, Protocol};
use crate::policy_set;
use crate::settings::Settings;
use crate::system::host::host_facts;
use crate::trace::{self, ConnState, DEFAULT_SOURCE_PORT, Outcome, Packet, Trace, Travel};

/// `trace`. Exit 0 with the trace, 1 on invalid policy files or an impossible packet.
pub fn run(settings: &Settings, args: &TraceArgs) -> Result<ExitCode> {
    let (packet, notes) = match packet(args) {
        Ok(packet) => packet,
        Err(message) => {
            eprintln!("error: {message}");
            return Ok(ExitCode::from(1));
        }
    };
    let Some(set) = super::load_valid(settings) else {
        return Ok(ExitCode::from(1));
    };
    let facts = host_facts(&settings.config);
    let mut packet = packet;
    let mut notes = notes;
    assume_interface(&mut packet, &facts, &mut notes);
    let mut traced = trace::trace(&set.model, &settings.config, &facts, &packet);
    traced.notes.splice(0..0, notes);
    traced.notes.extend(deciding_expiry(&set, &traced));
    traced.notes.extend(dnat_note(&traced));
    let text = if args.json {
        let fields = serde_json::to_value(&traced).context("cannot encode the trace")?;
        let document = super::output::json_document("Trace", fields);
        let mut text =
            serde_json::to_string_pretty(&document).context("cannot encode the trace")?;
        text.push('\n');
        text
    } else {
        describe(&traced)
    };
    std::io::stdout()
        .lock()
        .write_all(text.as_bytes())
        .context("cannot write to stdout")?;
    Ok(ExitCode::SUCCESS)
}

/// A packet judged in filter INPUT was taken to be for this host itself; `trace` reads no
/// kernel, so it cannot know that nat PREROUTING sends a NodePort or a published port
/// elsewhere, where normal policy judges it in FORWARD.
fn dnat_note(traced: &Trace) -> Option<String> {
    (traced.packet.travel == Travel::Inbound
        && traced.packet.dport.is_some()
        && traced.verdict.at.as_deref() == Some("filter INPUT"))
    .then(|| {
        "judged as a packet for this host itself: if nat PREROUTING sends this port elsewhere (a NodePort, a `docker -p` port), normal policy judges it after that DNAT, in filter FORWARD, and only policies with `applyOnForward: true` count; trace that with `--direction forward` and the address and port it goes to (pre-DNAT policies judge it before, as above)".to_owned()
    })
}

/// When the policy that decided the packet expires, in words, if it does: the verdict holds
/// until then.
pub(crate) fn deciding_expiry(set: &policy_set::PolicySet, traced: &Trace) -> Option<String> {
    let name = traced.verdict.policy.as_deref()?;
    let policy = set
        .model
        .policies()
        .iter()
        .find(|policy| policy.name == name)?;
    let expiry = policy.expires.as_ref()?;
    Some(format!(
        "the deciding policy `{name}` {} ({}): from then on it no longer counts and this packet is judged without it",
        crate::grants::relative(expiry.at, set.now),
        expiry.at
    ))
}

/// The packet the arguments describe, with notes on what was assumed; an error in words when
/// it cannot exist.
pub fn packet(args: &TraceArgs) -> Result<(Packet, Vec<String>), String> {
    let family = IpFamily::of_addr(&args.src);
    if IpFamily::of_addr(&args.dst) != family {
        return Err(format!(
            "--src {} and --dst {} are of different families",
            args.src, args.dst
        ));
    }
    let protocol = match &args.proto {
        Some(name) => parse_protocol(name)?,
        None if args.icmp_type.is_some() => match family {
            IpFamily::V4 => Protocol::Icmp,
            IpFamily::V6 => Protocol::Icmpv6,
        },
        None => Protocol::Tcp,
    };
    if let Some(only) = protocol.family()
        && only != family
    {
        return Err(format!("{protocol} does not exist in {family}"));
    }
    let with_ports = protocol.has_ports() || protocol == Protocol::UdpLite;
    if !with_ports && (args.sport.is_some() || args.dport.is_some()) {
        return Err(format!(
            "{protocol} has no ports: leave out --sport and --dport"
        ));
    }
    let icmp = matches!(protocol, Protocol::Icmp | Protocol::Icmpv6);
    if !icmp && args.icmp_type.is_some() {
        return Err(format!(
            "--icmp-type needs --proto icmp or icmpv6, not {protocol}"
        ));
    }
    let mut notes = Vec::new();
    // A real ICMP message has a code; rules that name one must see it.
    let icmp_code = match (icmp, args.icmp_type, args.icmp_code) {
        (true, Some(_), None) => {
            notes.push("ICMP code 0 assumed (--icmp-code to change it)".to_owned());
            Some(0)
        }
        (_, _, code) => code,
    };
    let sport = match (with_ports, args.sport) {
        (true, None) => {
            notes.push(format!(
                "source port {DEFAULT_SOURCE_PORT} assumed (--sport to change it)"
            ));
            Some(DEFAULT_SOURCE_PORT)
        }
        (_, sport) => sport,
    };
    if with_ports && args.dport.is_none() {
        notes.push("no destination port given: rules on destination ports do not match".into());
    }
    let travel = match args.direction {
        TraceDirection::Inbound => Travel::Inbound,
        TraceDirection::Forward => Travel::Forward,
        TraceDirection::Outbound => Travel::Outbound,
    };
    let (in_interface, out_interface) = match travel {
        Travel::Inbound => (args.iface.clone(), None),
        Travel::Forward => (args.iface.clone(), args.out_iface.clone()),
        Travel::Outbound => (None, args.iface.clone()),
    };
    if args.out_iface.is_some() && travel != Travel::Forward {
        return Err("--out-iface is for --direction forward; use --iface".into());
    }
    let state = match args.state {
        TraceState::New => ConnState::New,
        TraceState::Established => ConnState::Established,
        TraceState::Related => ConnState::Related,
        TraceState::Invalid => ConnState::Invalid,
    };
    let packet = Packet {
        src: args.src,
        dst: args.dst,
        protocol: protocol.number(),
        sport,
        dport: args.dport,
        icmp_type: args.icmp_type,
        icmp_code,
        in_interface,
        out_interface,
        travel,
        state,
    };
    Ok((packet, notes))
}

/// Without `--iface`, the interface of this host that holds the packet's own address on the
/// host's side (the destination of an inbound packet, the source of an outbound one), as the
/// kernel would see it on a host with symmetric routing; said in a note.
fn assume_interface(packet: &mut Packet, facts: &crate::facts::HostFacts, notes: &mut Vec<String>) {
    let (slot, address) = match packet.travel {
        Travel::Inbound => (&mut packet.in_interface, packet.dst),
        Travel::Outbound => (&mut packet.out_interface, packet.src),
        Travel::Forward => return,
    };
    if slot.is_some() {
        return;
    }
    if let Some(interface) = facts
        .interfaces
        .iter()
        .find(|interface| interface.addresses.contains(&address))
    {
        notes.push(format!(
            "interface {} assumed: it holds {address} (--iface to change it)",
            interface.name
        ));
        *slot = Some(interface.name.clone());
    }
}

/// A protocol by name (any case) or number.
fn parse_protocol(text: &str) -> Result<Protocol, String> {
    let protocol = match text.to_ascii_lowercase().as_str() {
        "tcp" => Protocol::Tcp,
        "udp" => Protocol::Udp,
        "sctp" => Protocol::Sctp,
        "udplite" | "udp-lite" => Protocol::UdpLite,
        "icmp" => Protocol::Icmp,
        "icmpv6" | "icmp6" | "ipv6-icmp" => Protocol::Icmpv6,
        other => match other.parse::<u8>() {
            Ok(number) if number > 0 => Protocol::from_number(number),
            _ => {
                return Err(format!(
                    "--proto `{}`: write tcp, udp, sctp, udplite, icmp, icmpv6 or a number 1-255",
                    text.escape_debug()
                ));
            }
        },
    };
    Ok(protocol)
}

/// The trace in words.
pub fn describe(traced: &Trace) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "packet: {}", packet_words(&traced.packet));
    for note in &traced.notes {
        let _ = writeln!(out, "note: {note}");
    }
    for stage in &traced.stages {
        let _ = writeln!(out, "\n{} {} ({}):", stage.table, stage.hook, stage.judges);
        for step in &stage.steps {
            let indent = "  ".repeat(step.depth + 1);
            let mut line = format!("{indent}{}", step.text);
            if !step.marks.is_empty() {
                let _ = write!(line, "; sets {}", step.marks.join(", "));
            }
            if let (Some(prefix), Some(group)) = (&step.nflog_prefix, step.nflog_group) {
                let _ = write!(line, "; logs {prefix} to NFLOG group {group}");
            }
            let _ = writeln!(out, "{line}");
        }
    }
    if traced.stages.is_empty() {
        let _ = writeln!(
            out,
            "\nno chain of nodeport-guard sees this packet (no policy applies on its path)"
        );
    }
    let verdict = &traced.verdict;
    let word = match verdict.outcome {
        Outcome::Dropped => "DROPPED",
        Outcome::Allowed => "ALLOWED",
        Outcome::NotOurs => "NOT OURS TO DECIDE",
    };
    let at = verdict
        .at
        .as_deref()
        .map(|at| format!(" (in {at})"))
        .unwrap_or_default();
    let _ = writeln!(out, "\nverdict: {word}: {}{at}", verdict.reason);
    if verdict.outcome != Outcome::Dropped {
        let _ = writeln!(
            out,
            "         nodeport-guard never accepts: other rules of the kernel (docker's, kube-proxy's, yours) still apply"
        );
    }
    out
}

fn packet_words(packet: &Packet) -> String {
    let protocol = Protocol::from_number(packet.protocol)
        .to_string()
        .to_lowercase();
    let end = |ip: std::net::IpAddr, port: Option<u16>| match port {
        Some(port) => std::net::SocketAddr::new(ip, port).to_string(),
        None => ip.to_string(),
    };
    let mut text = format!(
        "{protocol} {} → {}",
        end(packet.src, packet.sport),
        end(packet.dst, packet.dport)
    );
    if let Some(icmp_type) = packet.icmp_type {
        let _ = write!(text, " type {icmp_type}");
        if let Some(code) = packet.icmp_code {
            let _ = write!(text, " code {code}");
        }
    }
    let state = match packet.state {
        ConnState::New => "new",
        ConnState::Established => "established",
        ConnState::Related => "related",
        ConnState::Invalid => "invalid",
    };
    let _ = write!(text, ", {state}");
    let iface = |name: &Option<String>| name.clone().unwrap_or_else(|| "any interface".into());
    let _ = match packet.travel {
        Travel::Inbound => write!(text, ", arriving on {}", iface(&packet.in_interface)),
        Travel::Forward => write!(
            text,
            ", forwarded from {} to {}",
            iface(&packet.in_interface),
            iface(&packet.out_interface)
        ),
        Travel::Outbound => write!(
            text,
            ", sent by this host via {}",
            iface(&packet.out_interface)
        ),
    };
    text
}

#[cfg(test)]
mod tests {
    use clap::Parser as _;

    use super::*;
    use crate::cli::{Cli, Command};

    fn traced_packet(args: &[&str]) -> (Packet, Vec<String>) {
        let cli = Cli::try_parse_from(["nodeport-guard", "trace"].iter().chain(args))
            .expect("command line");
        let Command::Trace(args) = &cli.command else {
            panic!("not trace")
        };
        packet(args).expect("a packet")
    }

    #[test]
    fn an_icmp_type_without_a_code_is_code_0_and_says_so() {
        let args = ["--src", "198.51.100.10", "--dst", "198.51.100.1"];
        let (packet, notes) = traced_packet(&[&args[..], &["--icmp-type", "8"]].concat());
        assert_eq!((packet.icmp_type, packet.icmp_code), (Some(8), Some(0)));
        assert!(
            notes
                .iter()
                .any(|note| note.contains("ICMP code 0 assumed")),
            "{notes:?}"
        );
        let (packet, notes) =
            traced_packet(&[&args[..], &["--icmp-type", "3", "--icmp-code", "4"]].concat());
        assert_eq!((packet.icmp_type, packet.icmp_code), (Some(3), Some(4)));
        assert!(
            !notes.iter().any(|note| note.contains("assumed")),
            "{notes:?}"
        );
    }

    #[test]
    fn a_verdict_of_filter_input_says_a_dnat_would_be_judged_in_forward() {
        let normal = "apiVersion: projectcalico.org/v3\nkind: GlobalNetworkPolicy\nmetadata: {name: web}\nspec:\n  ingress:\n  - {action: Allow, protocol: TCP, destination: {ports: [80]}}\n";
        let pre_dnat = "apiVersion: projectcalico.org/v3\nkind: GlobalNetworkPolicy\nmetadata: {name: guard}\nspec:\n  preDNAT: true\n  applyOnForward: true\n  ingress:\n  - {action: Deny, protocol: TCP, destination: {ports: [30008]}}\n";
        let args = [
            "--src",
            "198.51.100.10",
            "--dst",
            "198.51.100.1",
            "--dport",
            "30008",
            "--iface",
            "eth0",
        ];
        let (packet, _) = traced_packet(&args);
        let trace_with = |yaml: &str| {
            trace::trace(
                &crate::fixtures::model(yaml),
                &crate::config::Config::default(),
                &crate::fixtures::golden_host(),
                &packet,
            )
        };
        let in_input = trace_with(normal);
        assert_eq!(in_input.verdict.at.as_deref(), Some("filter INPUT"));
        assert!(
            dnat_note(&in_input).is_some_and(|note| note.contains("--direction forward")),
            "{in_input:?}"
        );
        // Decided before any DNAT: nothing to add.
        let before_dnat = trace_with(pre_dnat);
        assert_eq!(before_dnat.verdict.outcome, Outcome::Dropped);
        assert_eq!(dnat_note(&before_dnat), None);
    }
}
