//! ipsets: `ipset restore`, `ipset save [NAME]`, `ipset list -n` as ipset v7.17 does them.

use std::net::IpAddr;

use ipnet::IpNet;

use super::{Kernel, output, split_words};
use crate::dataplane::Output;

const VERSION: &str = "ipset v7.17";

/// One set.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Set {
    pub name: String,
    pub kind: String,
    pub inet6: bool,
    pub maxelem: u64,
    pub hashsize: u64,
    pub members: Vec<String>,
}

/// Every set, in the kernel's slots (a destroyed set's slot is reused).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct Sets {
    slots: Vec<Option<Set>>,
}

impl Sets {
    pub fn get(&self, name: &str) -> Option<&Set> {
        self.slots.iter().flatten().find(|set| set.name == name)
    }

    fn get_mut(&mut self, name: &str) -> Option<&mut Set> {
        self.slots.iter_mut().flatten().find(|set| set.name == name)
    }

    fn insert(&mut self, set: Set) {
        match self.slots.iter_mut().find(|slot| slot.is_none()) {
            Some(slot) => *slot = Some(set),
            None => self.slots.push(Some(set)),
        }
    }

    fn remove(&mut self, name: &str) {
        for slot in &mut self.slots {
            if slot.as_ref().is_some_and(|set| set.name == name) {
                *slot = None;
            }
        }
    }

    fn names(&self) -> Vec<String> {
        self.slots
            .iter()
            .flatten()
            .map(|set| set.name.clone())
            .collect()
    }

    /// `ipset save [NAME]`; `None` when the named set does not exist.
    pub fn save(&self, name: Option<&str>) -> Option<String> {
        let mut out = String::new();
        let mut found = false;
        for set in self.slots.iter().flatten() {
            if name.is_some_and(|name| name != set.name) {
                continue;
            }
            found = true;
            out.push_str(&format!(
                "create {} {} family {} hashsize {} maxelem {} bucketsize 12 initval 0x{:08x}\n",
                set.name,
                set.kind,
                if set.inet6 { "inet6" } else { "inet" },
                set.hashsize,
                set.maxelem,
                initval(&set.name)
            ));
            for member in &set.members {
                out.push_str(&format!("add {} {member}\n", set.name));
            }
        }
        (found || name.is_none()).then_some(out)
    }
}

/// A stable stand-in for the random `initval` the kernel picks.
fn initval(name: &str) -> u32 {
    name.bytes().fold(0x811c_9dc5_u32, |hash, byte| {
        (hash ^ u32::from(byte)).wrapping_mul(0x0100_0193)
    })
}

fn in_use(kernel: &Kernel, name: &str) -> bool {
    kernel
        .legacy
        .iter()
        .chain(kernel.nft_xt.iter())
        .any(|store| store.uses_set(name))
}

/// The `ipset` command.
pub(super) fn command(kernel: &mut Kernel, args: &[&str], stdin: Option<&str>) -> Output {
    match args {
        ["restore", ..] => restore(kernel, stdin.unwrap_or_default()),
        ["save"] | ["-o", "save", "save"] => {
            output(0, kernel.sets.save(None).unwrap_or_default(), String::new())
        }
        ["save", name] => match kernel.sets.save(Some(name)) {
            Some(text) => output(0, text, String::new()),
            None => output(
                1,
                String::new(),
                format!("{VERSION}: The set with the given name does not exist\n"),
            ),
        },
        ["list", "-n"] | ["list", "-name"] => {
            let text: String = kernel
                .sets
                .names()
                .iter()
                .map(|n| format!("{n}\n"))
                .collect();
            output(0, text, String::new())
        }
        ["version"] | ["-v"] | ["--version"] => output(
            0,
            format!("{VERSION}, protocol version: 7\n"),
            String::new(),
        ),
        _ => {
            let mut input = args.join(" ");
            input.push('\n');
            let result = restore(kernel, &input);
            if result.success {
                result
            } else {
                // A command-line command names no line.
                let stderr = result.stderr.replace("Error in line 1: ", "");
                output(result.code.unwrap_or(1), result.stdout, stderr)
            }
        }
    }
}

/// Applies `ipset restore` input line by line and stops at the first error. As with the real
/// tool, what came before the failing line stays applied, except a run of `add`/`del` lines
/// for the same set that a syntax error ends: ipset sends such a run to the kernel as one
/// message, and a line it cannot parse drops the message unsent.
fn restore(kernel: &mut Kernel, input: &str) -> Output {
    let mut run: Option<(String, Sets)> = None;
    for (index, line) in input.lines().enumerate() {
        let words = split_words(line);
        if words.is_empty() || words[0].starts_with('#') {
            continue;
        }
        let member_of = match words.first().map(String::as_str) {
            Some("add" | "del" | "-A" | "-D" | "a" | "d") => words.get(1).cloned(),
            _ => None,
        };
        match (&run, member_of) {
            (Some((set, _)), Some(name)) if *set == name => {}
            (_, Some(name)) => run = Some((name, kernel.sets.clone())),
            (_, None) => run = None,
        }
        if let Err(message) = line_command(kernel, &words) {
            if message.starts_with("Syntax error")
                && let Some((_, before)) = run
            {
                kernel.sets = before;
            }
            return output(
                1,
                String::new(),
                format!("{VERSION}: Error in line {}: {message}\n", index + 1),
            );
        }
    }
    output(0, String::new(), String::new())
}

const MISSING: &str = "The set with the given name does not exist";

fn line_command(kernel: &mut Kernel, words: &[String]) -> Result<(), String> {
    let exist = words
        .iter()
        .any(|word| word == "-exist" || word == "--exist");
    let words: Vec<&str> = words
        .iter()
        .map(String::as_str)
        .filter(|word| !matches!(*word, "-exist" | "--exist" | "-!"))
        .collect();
    match words.as_slice() {
        ["create" | "-N" | "n", name, kind, options @ ..] => {
            create(kernel, name, kind, options, exist)
        }
        ["add" | "-A" | "a", name, element] => {
            let set = kernel.sets.get_mut(name).ok_or(MISSING)?;
            let members = normalize(set, element)?;
            for member in members {
                if set.members.contains(&member) {
                    if !exist {
                        return Err(
                            "Element cannot be added to the set: it's already added".to_owned()
                        );
                    }
                    continue;
                }
                if set.members.len() as u64 >= set.maxelem {
                    return Err("Hash is full, cannot add more elements".to_owned());
                }
                set.members.push(member);
            }
            Ok(())
        }
        ["del" | "-D" | "d", name, element] => {
            let set = kernel.sets.get_mut(name).ok_or(MISSING)?;
            for member in normalize(set, element)? {
                match set.members.iter().position(|m| *m == member) {
                    Some(at) => {
                        set.members.remove(at);
                    }
                    None if exist => {}
                    None => {
                        return Err(
                            "Element cannot be deleted from the set: it's not added".to_owned()
                        );
                    }
                }
            }
            Ok(())
        }
        ["flush" | "-F"] => {
            kernel
                .sets
                .slots
                .iter_mut()
                .flatten()
                .for_each(|set| set.members.clear());
            Ok(())
        }
        ["flush" | "-F", name] => {
            kernel.sets.get_mut(name).ok_or(MISSING)?.members.clear();
            Ok(())
        }
        ["destroy" | "-X" | "x"] => {
            if kernel.sets.names().iter().any(|name| in_use(kernel, name)) {
                return Err(
                    "Set cannot be destroyed: it is in use by a kernel component".to_owned(),
                );
            }
            kernel.sets.slots.clear();
            Ok(())
        }
        ["destroy" | "-X" | "x", name] => {
            if kernel.sets.get(name).is_none() {
                return if exist {
                    Ok(())
                } else {
                    Err(MISSING.to_owned())
                };
            }
            if in_use(kernel, name) {
                return Err(
                    "Set cannot be destroyed: it is in use by a kernel component".to_owned(),
                );
            }
            kernel.sets.remove(name);
            Ok(())
        }
        ["swap" | "-W" | "w", from, to] => {
            let (Some(a), Some(b)) = (kernel.sets.get(from).cloned(), kernel.sets.get(to).cloned())
            else {
                return Err(MISSING.to_owned());
            };
            if a.kind != b.kind || a.inet6 != b.inet6 {
                return Err("The sets cannot be swapped: their type does not match".to_owned());
            }
            if let Some(set) = kernel.sets.get_mut(from) {
                *set = Set {
                    name: a.name.clone(),
                    ..b.clone()
                };
            }
            if let Some(set) = kernel.sets.get_mut(to) {
                *set = Set { name: b.name, ..a };
            }
            Ok(())
        }
        [verb, ..] => Err(format!("Syntax error: unknown command {verb}")),
        [] => Ok(()),
    }
}

/// `create NAME TYPE [family inet6] [maxelem N] [hashsize N]`.
fn create(
    kernel: &mut Kernel,
    name: &str,
    kind: &str,
    options: &[&str],
    exist: bool,
) -> Result<(), String> {
    if !matches!(kind, "hash:net" | "hash:ip" | "hash:ip,port") {
        return Err(format!("Syntax error: typename '{kind}' is unknown"));
    }
    let option = |key: &str| {
        options
            .iter()
            .position(|word| *word == key)
            .and_then(|at| options.get(at + 1).copied())
    };
    let inet6 = match option("family") {
        None | Some("inet") => false,
        Some("inet6") => true,
        Some(other) => return Err(format!("Syntax error: unknown family {other}")),
    };
    let number = |key: &str, default: u64| -> Result<u64, String> {
        option(key).map_or(Ok(default), |value| {
            value
                .parse()
                .map_err(|_| format!("Syntax error: '{value}' is invalid as number"))
        })
    };
    let set = Set {
        name: (*name).to_owned(),
        kind: (*kind).to_owned(),
        inet6,
        maxelem: number("maxelem", 65536)?,
        hashsize: number("hashsize", 1024)?,
        members: Vec::new(),
    };
    if name.len() > 31 {
        return Err("Syntax error: setname is longer than 31 characters".to_owned());
    }
    match kernel.sets.get(name) {
        Some(existing) if exist && existing.kind == set.kind && existing.inet6 == set.inet6 => {
            Ok(())
        }
        Some(_) => Err("Set cannot be created: set with the same name already exists".to_owned()),
        None => {
            kernel.sets.insert(set);
            Ok(())
        }
    }
}

fn parse_address(text: &str, inet6: bool) -> Result<IpAddr, String> {
    let family = if inet6 { "IPv6" } else { "IPv4" };
    match text.parse::<IpAddr>() {
        Ok(address) if address.is_ipv6() == inet6 => Ok(address),
        _ => Err(format!(
            "Syntax error: cannot parse {text}: resolving to {family} address failed"
        )),
    }
}

/// An element as the kernel stores and prints it (a cidr of a hash:ip set expands).
fn normalize(set: &Set, element: &str) -> Result<Vec<String>, String> {
    let invalid_cidr = || "The value of the CIDR parameter of the IP address is invalid".to_owned();
    match set.kind.as_str() {
        "hash:net" => {
            let (address, prefix) = match element.split_once('/') {
                Some((address, prefix)) => (
                    parse_address(address, set.inet6)?,
                    Some(prefix.parse::<u8>().map_err(|_| invalid_cidr())?),
                ),
                None => (parse_address(element, set.inet6)?, None),
            };
            let max = if set.inet6 { 128 } else { 32 };
            let prefix = prefix.unwrap_or(max);
            if prefix == 0 || prefix > max {
                return Err(invalid_cidr());
            }
            let net = IpNet::new(address, prefix)
                .map_err(|_| invalid_cidr())?
                .trunc();
            Ok(vec![if prefix == max {
                net.addr().to_string()
            } else {
                net.to_string()
            }])
        }
        "hash:ip" => match element.split_once('/') {
            None => Ok(vec![parse_address(element, set.inet6)?.to_string()]),
            Some((address, prefix)) => {
                let address = parse_address(address, set.inet6)?;
                let prefix: u8 = prefix.parse().map_err(|_| invalid_cidr())?;
                let max = if set.inet6 { 128 } else { 32 };
                if prefix == max {
                    return Ok(vec![address.to_string()]);
                }
                if set.inet6 || prefix < 16 {
                    return Err(invalid_cidr());
                }
                let net = IpNet::new(address, prefix).map_err(|_| invalid_cidr())?;
                Ok(net.hosts_all().map(|ip| ip.to_string()).collect())
            }
        },
        _ => {
            let (address, rest) = element
                .split_once(',')
                .ok_or_else(|| format!("Syntax error: cannot parse {element}"))?;
            let address = parse_address(address, set.inet6)?;
            let (protocol, port) = match rest.split_once(':') {
                Some((protocol, port)) => (protocol, port),
                None => ("tcp", rest),
            };
            let protocol = match protocol {
                "tcp" | "6" => "tcp",
                "udp" | "17" => "udp",
                "sctp" | "132" => "sctp",
                "udplite" | "136" => "udplite",
                other => return Err(format!("Syntax error: cannot parse protocol {other}")),
            };
            let port: u16 = port
                .parse()
                .map_err(|_| format!("Syntax error: cannot parse '{port}' as a port"))?;
            Ok(vec![format!("{address},{protocol}:{port}")])
        }
    }
}

/// Helper for ipnet: every address of a network, network and broadcast included.
trait HostsAll {
    fn hosts_all(&self) -> Box<dyn Iterator<Item = IpAddr>>;
}

impl HostsAll for IpNet {
    fn hosts_all(&self) -> Box<dyn Iterator<Item = IpAddr>> {
        match self.trunc() {
            IpNet::V4(net) => {
                let start = u32::from(net.network());
                let end = u32::from(net.broadcast());
                Box::new((start..=end).map(|n| IpAddr::V4(n.into())))
            }
            IpNet::V6(net) => Box::new(std::iter::once(IpAddr::V6(net.network()))),
        }
    }
}
