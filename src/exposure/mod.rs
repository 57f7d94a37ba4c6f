//! `exposure`: every port of this host that a packet from another host can reach, and who may
//! reach it under the policies.
//!
//! The inventory comes from the kernel and is read, never written: the sockets listening on
//! (TCP) or bound to (UDP) a non-loopback address (`system::sockets`), and the DNAT rules that
//! nat `PREROUTING` reaches, in iptables (`xtables`: kube-proxy's iptables mode, docker's
//! iptables firewall, hand-written rules) and in other programs' nftables tables (`nft`:
//! kube-proxy's nftables mode and its NodePort map, docker's nftables firewall). Both parsers
//! are pure and follow jumps, gotos and verdict maps from the hooked chain to each DNAT,
//! carrying the protocol, port and destination the way there requires.
//!
//! Who may reach a port is worked out by `reach` with the evaluator `trace` uses: the source
//! space is cut at every boundary of every net the policies name, one packet per piece is
//! traced, and the pieces let through are put back together as CIDRs.

pub mod nft;
pub mod reach;
pub mod scan;
pub mod xtables;

use std::collections::BTreeMap;
use std::fmt;
use std::net::IpAddr;

use ipnet::IpNet;
use serde::Serialize;

use crate::config::Config;
use crate::facts::HostFacts;
use crate::model::{IpFamily, Model};

/// The transport protocols a port belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Transport {
    /// TCP.
    Tcp,
    /// UDP.
    Udp,
}

impl Transport {
    /// By name, as iptables and nft print it.
    pub fn parse(name: &str) -> Option<Transport> {
        match name {
            "tcp" | "6" => Some(Transport::Tcp),
            "udp" | "17" => Some(Transport::Udp),
            _ => None,
        }
    }

    /// The IP protocol number.
    pub fn number(self) -> u8 {
        match self {
            Transport::Tcp => 6,
            Transport::Udp => 17,
        }
    }
}

impl fmt::Display for Transport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Transport::Tcp => "tcp",
            Transport::Udp => "udp",
        })
    }
}

/// Which destination addresses a DNAT rule applies to, as the path to it requires.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Destination {
    /// Any address (no condition on the destination).
    Any,
    /// The host's own addresses (`-m addrtype --dst-type LOCAL`, `fib daddr type local`).
    Local,
    /// Addresses in this net.
    Net(IpNet),
}

/// Most ports one DNAT or REDIRECT rule is listed with, one entry per port (a multiport list,
/// an nftables set, a range); a rule for more is named in a note instead.
pub const MAX_PORTS_PER_RULE: u32 = 256;

/// The destination ports a path to a rule requires: inclusive ranges, sorted, disjoint and
/// apart (`32001,32002` is one range). Never empty: a path that no port fits is no path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PortSet(Vec<(u16, u16)>);

impl PortSet {
    /// One port.
    pub fn one(port: u16) -> PortSet {
        PortSet(vec![(port, port)])
    }

    /// The ports of `ranges` (inclusive, in any order, overlapping or not); `None` when there
    /// are none (or a range ends before it starts).
    pub fn of(ranges: impl IntoIterator<Item = (u16, u16)>) -> Option<PortSet> {
        let mut ranges: Vec<(u16, u16)> = ranges.into_iter().collect();
        if ranges.is_empty() || ranges.iter().any(|(low, high)| low > high) {
            return None;
        }
        ranges.sort_unstable();
        let mut merged: Vec<(u16, u16)> = Vec::with_capacity(ranges.len());
        for (low, high) in ranges {
            match merged.last_mut() {
                Some(last) if u32::from(low) <= u32::from(last.1) + 1 => last.1 = last.1.max(high),
                _ => merged.push((low, high)),
            }
        }
        Some(PortSet(merged))
    }

    /// The ports both require; `None` when they share none.
    pub fn intersect(&self, other: &PortSet) -> Option<PortSet> {
        let mut both = Vec::new();
        for &(a_low, a_high) in &self.0 {
            for &(b_low, b_high) in &other.0 {
                let (low, high) = (a_low.max(b_low), a_high.min(b_high));
                if low <= high {
                    both.push((low, high));
                }
            }
        }
        PortSet::of(both)
    }

    /// How many ports.
    pub fn len(&self) -> u32 {
        self.0
            .iter()
            .map(|&(low, high)| u32::from(high) - u32::from(low) + 1)
            .sum()
    }

    /// Every port, in order.
    pub fn ports(&self) -> impl Iterator<Item = u16> + '_ {
        self.0.iter().flat_map(|&(low, high)| low..=high)
    }

    /// As iptables' multiport writes it (`80,8000:8080`): `iptables-save`'s `--dport` and
    /// `--dports` values. `None` when the text is not one.
    pub fn parse_xtables(text: &str) -> Option<PortSet> {
        let range = |item: &str| -> Option<(u16, u16)> {
            match item.split_once(':') {
                Some((low, high)) => Some((
                    if low.is_empty() { 0 } else { low.parse().ok()? },
                    if high.is_empty() {
                        u16::MAX
                    } else {
                        high.parse().ok()?
                    },
                )),
                None => {
                    let port = item.parse().ok()?;
                    Some((port, port))
                }
            }
        };
        PortSet::of(text.split(',').map(range).collect::<Option<Vec<_>>>()?)
    }
}

impl fmt::Display for PortSet {
    /// `32001-32002, 32010`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (index, &(low, high)) in self.0.iter().enumerate() {
            if index > 0 {
                f.write_str(", ")?;
            }
            if low == high {
                write!(f, "{low}")?;
            } else {
                write!(f, "{low}-{high}")?;
            }
        }
        Ok(())
    }
}

/// Where a rule that publishes ports sends them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Sends {
    /// DNAT to this address (and port), as the rule writes it (`192.0.2.2:80`).
    To(String),
    /// REDIRECT to this host, on these ports (`8080`, `8080-8081`), or, `None`, on the port
    /// the packet came for.
    Redirect(Option<String>),
}

/// The published ports one DNAT or REDIRECT rule stands for, each port apart: the rules'
/// found entries, or a note when they are more than [`MAX_PORTS_PER_RULE`]. `what` names the
/// rule and where it is, for the note (`in nat chain `PREROUTING``).
pub fn publish(
    family: IpFamily,
    protocol: Transport,
    ports: &PortSet,
    destination: Destination,
    sends: &Sends,
    owner: impl Fn(&str) -> Option<String>,
    what: &str,
) -> Result<Vec<Dnat>, String> {
    let count = ports.len();
    if count > MAX_PORTS_PER_RULE {
        let verb = match sends {
            Sends::To(target) => format!("a DNAT to `{target}`"),
            Sends::Redirect(_) => "a REDIRECT to this host".to_owned(),
        };
        return Err(format!(
            "{verb} {what} publishes {protocol} ports {ports} ({count} ports, more than {MAX_PORTS_PER_RULE}): not listed port by port"
        ));
    }
    Ok(ports
        .ports()
        .map(|port| {
            let (target, redirect) = match sends {
                Sends::To(target) => (target.clone(), false),
                Sends::Redirect(Some(to)) => (format!(":{to}"), true),
                Sends::Redirect(None) => (format!(":{port}"), true),
            };
            Dnat {
                family,
                protocol,
                port,
                destination,
                owner: owner(&target),
                target,
                redirect,
            }
        })
        .collect())
}

/// One DNAT (or REDIRECT) rule that nat `PREROUTING` reaches: a published port.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Dnat {
    pub family: IpFamily,
    /// The protocol it requires.
    pub protocol: Transport,
    /// The destination port it requires.
    pub port: u16,
    /// The destination it requires.
    pub destination: Destination,
    /// Where it sends the packet, as the rule writes it (`192.0.2.2:80`); for a REDIRECT, this
    /// host's port as nft writes it (`:8080`).
    pub target: String,
    /// The Service or container, when the rules name it.
    pub owner: Option<String>,
    /// A REDIRECT: the packet goes to this host itself.
    pub redirect: bool,
}

/// A socket listening on (TCP) or bound to (UDP) an address.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Listening {
    pub protocol: Transport,
    /// The address (the unspecified address for every address).
    pub address: IpAddr,
    pub port: u16,
    /// For an IPv6 socket on `::`, whether it also takes IPv4 (not `IPV6_V6ONLY`).
    pub dual_stack: bool,
    /// The owning processes' names, where the kernel tells them.
    pub processes: Vec<String>,
}

/// What the kernel shows of ports reachable from outside.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Inventory {
    /// Listening and bound sockets (loopback ones included: [`assess`] leaves them out).
    pub sockets: Vec<Listening>,
    /// DNAT rules reached from nat `PREROUTING`.
    pub dnat: Vec<Dnat>,
    /// What could not be listed, in words.
    pub notes: Vec<String>,
    /// The kernel takes no IPv6 packet at all (`disable_ipv6` is 1, or it has no IPv6): no
    /// IPv6 port is reachable, whatever listens or is published.
    pub ipv6_off: bool,
}

/// How a port is reached.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Via {
    /// A socket of this host.
    Socket,
    /// A DNAT rule (a published port).
    Dnat,
}

impl Via {
    /// The word for it.
    pub fn as_str(self) -> &'static str {
        match self {
            Via::Socket => "socket",
            Via::Dnat => "dnat",
        }
    }
}

/// Who may reach a port.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Reachable {
    /// Every source.
    Anyone,
    /// Some sources (listed in `allowed`).
    Some,
    /// No source.
    Nobody,
}

impl Reachable {
    /// The word for it.
    pub fn as_str(self) -> &'static str {
        match self {
            Reachable::Anyone => "anyone",
            Reachable::Some => "some",
            Reachable::Nobody => "nobody",
        }
    }
}

/// One port reachable from outside, and who may reach it.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Exposed {
    /// `tcp` or `udp`.
    pub protocol: Transport,
    /// The port packets arrive for.
    pub port: u16,
    /// `ipv4` or `ipv6`.
    #[serde(serialize_with = "family_word")]
    pub family: IpFamily,
    /// A socket or a DNAT rule.
    pub via: Via,
    /// The DNAT destination, or the listening address.
    pub target: String,
    /// The process, Service or container, when known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// A REDIRECT to this host (`target` is its port, `:8080`).
    #[serde(skip)]
    pub redirect: bool,
    /// Anyone, some sources or nobody.
    pub reachable_from: Reachable,
    /// The source networks allowed, when `some`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub allowed: Vec<IpNet>,
    /// The policy rules (or failsafe port, or absence of policy) that decide, in words,
    /// separated by `; `.
    pub decided_by: String,
}

fn family_word<S: serde::Serializer>(family: &IpFamily, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(match family {
        IpFamily::V4 => "ipv4",
        IpFamily::V6 => "ipv6",
    })
}

/// Every port of `inventory` that another host can reach, with who may reach it under
/// `model`: ports open to anyone first, DNATed ports before sockets, then by port.
pub fn assess(
    inventory: &Inventory,
    model: &Model,
    config: &Config,
    host: &HostFacts,
) -> Vec<Exposed> {
    assess_in(inventory, model, config, host, &IpFamily::BOTH)
}

/// [`assess`] where the kernel holds rules of ours in `guarded` families only: the ports of
/// another family are [`unguarded`] (its tables were deleted or flushed by hand, say).
pub fn assess_in(
    inventory: &Inventory,
    model: &Model,
    config: &Config,
    host: &HostFacts,
    guarded: &[IpFamily],
) -> Vec<Exposed> {
    let reacher = reach::Reacher::new(model, config, host);
    rows(inventory, config, host, |port| {
        if guarded.contains(&port.family) {
            reacher.reach(port)
        } else {
            nothing_applied()
        }
    })
}

/// What decides a port when nothing of nodeport-guard is in the kernel, in words.
pub const NOTHING_APPLIED: &str = "nothing of nodeport-guard is in the kernel";

/// Every port of `inventory` that another host can reach when nothing of nodeport-guard is in
/// the kernel: no rule of it drops anything, so each is reachable by anyone (as far as
/// nodeport-guard is concerned), decided by [`NOTHING_APPLIED`]. In [`assess`]'s order.
pub fn unguarded(inventory: &Inventory, config: &Config, host: &HostFacts) -> Vec<Exposed> {
    rows(inventory, config, host, |_| nothing_applied())
}

/// Who may reach a port no rule of ours guards: anyone.
fn nothing_applied() -> reach::Reach {
    reach::Reach {
        reachable: Reachable::Anyone,
        allowed: Vec::new(),
        decided_by: vec![NOTHING_APPLIED.to_owned()],
    }
}

/// The rows of [`assess`], with who may reach each port told by `reach`.
fn rows(
    inventory: &Inventory,
    config: &Config,
    host: &HostFacts,
    reach: impl Fn(&reach::Port) -> reach::Reach,
) -> Vec<Exposed> {
    let own = host.own_addresses(&config.host_interface_exclude);
    let reachable = |family: IpFamily| family == IpFamily::V4 || !inventory.ipv6_off;
    let mut exposed = Vec::new();
    for dnat in published(&inventory.dnat, &own)
        .into_iter()
        .filter(|dnat| reachable(dnat.family))
    {
        let reach = reach(&dnat_port(&dnat, &own));
        exposed.push(Exposed {
            protocol: dnat.protocol,
            port: dnat.port,
            family: dnat.family,
            via: Via::Dnat,
            target: dnat.target.clone(),
            owner: dnat.owner.clone(),
            redirect: dnat.redirect,
            reachable_from: reach.reachable,
            allowed: reach.allowed,
            decided_by: reach.decided_by.join("; "),
        });
    }
    for (family, socket) in outside_sockets(&inventory.sockets)
        .into_iter()
        .filter(|(family, _)| reachable(*family))
    {
        let address = (!socket.address.is_unspecified()).then_some(socket.address);
        let reach = reach(&reach::Port {
            family,
            protocol: socket.protocol,
            port: socket.port,
            address,
            forwarded: false,
            translated: Vec::new(),
        });
        let owner = (!socket.processes.is_empty()).then(|| socket.processes.join(", "));
        exposed.push(Exposed {
            protocol: socket.protocol,
            port: socket.port,
            family,
            via: Via::Socket,
            target: std::net::SocketAddr::new(socket.address, socket.port).to_string(),
            owner,
            redirect: false,
            reachable_from: reach.reachable,
            allowed: reach.allowed,
            decided_by: reach.decided_by.join("; "),
        });
    }
    exposed.sort_by(|a, b| {
        (
            a.reachable_from,
            a.via == Via::Socket,
            a.port,
            a.protocol,
            a.family,
            &a.target,
        )
            .cmp(&(
                b.reachable_from,
                b.via == Via::Socket,
                b.port,
                b.protocol,
                b.family,
                &b.target,
            ))
    });
    exposed
}

/// The DNAT rules a packet from another host can meet: those for any destination, for the
/// host's own addresses, or for a net holding one of them (not loopback ones: a published
/// `127.0.0.1:5432` only the host reaches). One entry per family, protocol, port and
/// destination, its targets joined.
fn published<'d>(rules: &'d [Dnat], own: &[IpAddr]) -> Vec<Dnat> {
    let mut merged: BTreeMap<(IpFamily, Transport, u16, Destination), Dnat> = BTreeMap::new();
    let reachable = |dnat: &&'d Dnat| match dnat.destination {
        Destination::Any | Destination::Local => true,
        Destination::Net(net) => own
            .iter()
            .any(|address| !address.is_loopback() && net.contains(address)),
    };
    for dnat in rules.iter().filter(reachable) {
        let key = (dnat.family, dnat.protocol, dnat.port, dnat.destination);
        match merged.get_mut(&key) {
            Some(entry) => {
                if !entry.target.split(", ").any(|target| target == dnat.target) {
                    entry.target.push_str(", ");
                    entry.target.push_str(&dnat.target);
                }
                if entry.owner.is_none() {
                    entry.owner.clone_from(&dnat.owner);
                }
                entry.redirect |= dnat.redirect;
            }
            None => {
                merged.insert(key, dnat.clone());
            }
        }
    }
    merged.into_values().collect()
}

/// The address of a DNAT target (`192.0.2.2:80`, `[2001:db8::2]:80`, `192.0.2.2`).
fn target_address(target: &str) -> Option<IpAddr> {
    let first = target.split(", ").next()?;
    if let Ok(socket) = first.parse::<std::net::SocketAddr>() {
        return Some(socket.ip());
    }
    first
        .trim_start_matches('[')
        .split(']')
        .next()
        .and_then(|address| address.parse().ok())
}

/// The sockets another host can reach, with their family: not on a loopback address; a
/// dual-stack IPv6 socket on `::` once per family. Sockets sharing an address and port (as
/// with `SO_REUSEPORT`) are one, their processes joined.
fn outside_sockets(sockets: &[Listening]) -> Vec<(IpFamily, Listening)> {
    let mut merged: BTreeMap<(IpFamily, Transport, IpAddr, u16), Listening> = BTreeMap::new();
    for socket in sockets {
        if socket.address.is_loopback() || is_mapped_loopback(socket.address) {
            continue;
        }
        let mut families = vec![IpFamily::of_addr(&socket.address)];
        if socket.dual_stack && socket.address.is_unspecified() {
            families.push(IpFamily::V4);
        }
        for family in families {
            let key = (family, socket.protocol, socket.address, socket.port);
            let entry = merged.entry(key).or_insert_with(|| Listening {
                processes: Vec::new(),
                ..socket.clone()
            });
            for process in &socket.processes {
                if !entry.processes.contains(process) {
                    entry.processes.push(process.clone());
                }
            }
        }
    }
    merged
        .into_iter()
        .map(|((family, ..), socket)| (family, socket))
        .collect()
}

fn is_mapped_loopback(address: IpAddr) -> bool {
    match address {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback()),
        IpAddr::V4(_) => false,
    }
}

/// How many ports are reachable by whom, per way: the daemon's
/// `nodeport_guard_exposed_ports{reachable,via}`.
pub fn counts(exposed: &[Exposed]) -> BTreeMap<(Reachable, Via), usize> {
    let mut counts = BTreeMap::new();
    for reachable in [Reachable::Anyone, Reachable::Some, Reachable::Nobody] {
        for via in [Via::Socket, Via::Dnat] {
            counts.insert((reachable, via), 0);
        }
    }
    for port in exposed {
        *counts.entry((port.reachable_from, port.via)).or_default() += 1;
    }
    counts
}

/// The port a DNAT rule publishes, as packets from other hosts meet it: on the host address
/// its destination names (any of them for `LOCAL` or no condition), forwarded unless the
/// target is the host itself (a REDIRECT, or a DNAT to one of its addresses).
fn dnat_port(dnat: &Dnat, own: &[IpAddr]) -> reach::Port {
    let address = match dnat.destination {
        Destination::Net(net) => own
            .iter()
            .find(|a| !a.is_loopback() && net.contains(*a))
            .copied(),
        Destination::Any | Destination::Local => None,
    };
    let to_host = dnat.redirect
        || target_address(&dnat.target)
            .is_some_and(|target| target.is_loopback() || own.contains(&target));
    reach::Port {
        family: dnat.family,
        protocol: dnat.protocol,
        port: dnat.port,
        address,
        forwarded: !to_host,
        translated: translations(&dnat.target),
    }
}

/// Most destinations of one published port the audit judges (see [`translations`]).
const MAX_TRANSLATIONS: usize = 8;

/// The destinations a DNAT's targets (`192.0.2.2:80, 192.0.2.3:80`, `[2001:db8::2]:80`,
/// `192.0.2.2`, a REDIRECT's `:8080`, a range's `192.0.2.2:80-81` by its first port) send its
/// packets to, each once: the address (`None`: unchanged) and the port (`None`: unchanged).
/// The first [`MAX_TRANSLATIONS`] only: a Service's endpoints differ by address, which normal
/// policy seldom looks at, and each one is a trace of every piece of the source space.
fn translations(targets: &str) -> Vec<(Option<IpAddr>, Option<u16>)> {
    let mut out = Vec::new();
    for target in targets.split(", ").map(str::trim) {
        if out.len() == MAX_TRANSLATIONS {
            break;
        }
        let (address, port) = match target.rsplit_once(':') {
            // `[v6]:port`, `v4:port`, `:port`; a bare IPv6 address has colons but no brackets.
            Some((address, port)) if !address.contains(':') || address.ends_with(']') => {
                (address, Some(port))
            }
            _ => (target, None),
        };
        let address = address.trim_start_matches('[').trim_end_matches(']');
        let address = if address.is_empty() {
            None
        } else {
            match address.parse::<IpAddr>() {
                Ok(address) => Some(address),
                // A target we cannot read: judge the packet as it arrives.
                Err(_) => return Vec::new(),
            }
        };
        let port = match port.map(|port| port.split('-').next().unwrap_or(port).parse::<u16>()) {
            Some(Ok(port)) => Some(port),
            Some(Err(_)) => return Vec::new(),
            None => None,
        };
        if !out.contains(&(address, port)) {
            out.push((address, port));
        }
    }
    out
}

/// Most packets `plan`'s warning traces per set of policies (pieces of the source space
/// times published ports): past that it says so instead of delaying the plan.
pub const MAX_PLAN_PACKETS: usize = 100_000;

/// The published (DNATed) ports of `dnat` that `before` guarded (some sources or none) and
/// `after` leaves open to anyone, in words: `plan`'s warning.
pub fn newly_open(
    dnat: &[Dnat],
    before: &Model,
    after: &Model,
    config: &Config,
    host: &HostFacts,
) -> Vec<String> {
    let own = host.own_addresses(&config.host_interface_exclude);
    let ports = published(dnat, &own);
    if ports.is_empty() {
        return Vec::new();
    }
    let (was, now) = (
        reach::Reacher::new(before, config, host),
        reach::Reacher::new(after, config, host),
    );
    let work: usize = ports
        .iter()
        .map(|dnat| {
            let port = dnat_port(dnat, &own);
            was.pieces(&port).max(now.pieces(&port))
        })
        .sum();
    if work > MAX_PLAN_PACKETS {
        return vec![format!(
            "what the change does to the {} published ports was not worked out ({work} packets to trace, more than {MAX_PLAN_PACKETS}): `nodeport-guard exposure` says who may reach them",
            ports.len()
        )];
    }
    ports
        .iter()
        .filter(|dnat| {
            let port = dnat_port(dnat, &own);
            now.open_to_anyone(&port) && !was.open_to_anyone(&port)
        })
        .map(|dnat| {
            format!(
                "published port {}/{} ({}, {} to {}{}) was guarded and would be open to anyone",
                dnat.protocol,
                dnat.port,
                match dnat.family {
                    IpFamily::V4 => "IPv4",
                    IpFamily::V6 => "IPv6",
                },
                if dnat.redirect { "REDIRECT" } else { "DNAT" },
                dnat.target,
                dnat.owner
                    .as_deref()
                    .map(|owner| format!(", {owner}"))
                    .unwrap_or_default()
            )
        })
        .collect()
}

/// A DNAT in one line, for the parsers' tests: `V4 tcp/8000 Local -> 192.0.2.2:80 (owner)`.
#[cfg(test)]
fn describe(found: &[Dnat]) -> Vec<String> {
    found
        .iter()
        .map(|dnat| {
            format!(
                "{:?} {}/{} {:?} -> {} ({})",
                dnat.family,
                dnat.protocol,
                dnat.port,
                dnat.destination,
                dnat.target,
                dnat.owner.as_deref().unwrap_or("-")
            )
        })
        .collect()
}

#[cfg(test)]
mod tests;
