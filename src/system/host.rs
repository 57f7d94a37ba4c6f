//! Gathering [`HostFacts`]: the node name, the interfaces and their addresses, and whether IPv6
//! is on. This is IO (`getifaddrs`, `/proc`), kept out of the pure compiler.

use std::collections::BTreeMap;
use std::net::IpAddr;

use crate::config::{Config, Ipv6Mode};
use crate::facts::{HostFacts, Interface};

/// The sysctl that says whether IPv6 is disabled.
pub const DISABLE_IPV6: &str = "/proc/sys/net/ipv6/conf/all/disable_ipv6";

/// Reads the facts of the host this process runs on (in its network namespace).
pub fn host_facts(config: &Config) -> HostFacts {
    let node_name = config.node_name.clone().unwrap_or_else(hostname);
    let (ipv6, ipv6_off_reason) = ipv6_state(config.ipv6);
    HostFacts {
        node_name,
        interfaces: interfaces(),
        ipv6,
        ipv6_off_reason,
    }
}

/// The hostname, lowercased as Kubernetes node names are.
pub fn hostname() -> String {
    nix::unistd::gethostname()
        .ok()
        .and_then(|name| name.into_string().ok())
        .unwrap_or_else(|| "localhost".to_owned())
        .to_lowercase()
}

/// Whether the kernel has IPv6 at all (not booted with `ipv6.disable=1`): then ip6tables and
/// the `ip6` nftables family exist, whether or not the interfaces take IPv6 packets.
pub fn kernel_has_ipv6() -> bool {
    std::path::Path::new("/proc/sys/net/ipv6").exists()
}

/// Whether the kernel takes IPv6 packets at all: `disable_ipv6` is there and not 1.
pub fn kernel_takes_ipv6() -> bool {
    std::fs::read_to_string(DISABLE_IPV6).is_ok_and(|text| text.trim() != "1")
}

fn ipv6_state(mode: Ipv6Mode) -> (bool, Option<String>) {
    match mode {
        Ipv6Mode::Enabled => (true, None),
        Ipv6Mode::Disabled => (false, Some("`ipv6: false` in the config".to_owned())),
        Ipv6Mode::Auto => match std::fs::read_to_string(DISABLE_IPV6) {
            Ok(text) if text.trim() == "1" => (false, Some(format!("`{DISABLE_IPV6}` is 1"))),
            Ok(_) => (true, None),
            Err(_) => (
                false,
                Some(format!(
                    "the kernel has no IPv6 (`{DISABLE_IPV6}` is missing)"
                )),
            ),
        },
    }
}

/// Every interface with its addresses, sorted by name.
pub fn interfaces() -> Vec<Interface> {
    let mut by_name: BTreeMap<String, Vec<IpAddr>> = BTreeMap::new();
    if let Ok(addresses) = nix::ifaddrs::getifaddrs() {
        for entry in addresses {
            let list = by_name.entry(entry.interface_name.clone()).or_default();
            let Some(address) = entry.address else {
                continue;
            };
            if let Some(v4) = address.as_sockaddr_in() {
                list.push(IpAddr::V4(v4.ip()));
            } else if let Some(v6) = address.as_sockaddr_in6() {
                list.push(IpAddr::V6(v6.ip()));
            }
        }
    }
    by_name
        .into_iter()
        .map(|(name, mut addresses)| {
            addresses.sort();
            addresses.dedup();
            Interface { name, addresses }
        })
        .collect()
}

/// Who runs this command, for `nodeport-guard.io/granted-by`: the user behind `sudo`
/// (`SUDO_USER`), else the name of the real user, else `uid N`.
pub fn invoking_user() -> String {
    if let Some(user) = std::env::var("SUDO_USER")
        .ok()
        .filter(|user| !user.is_empty() && !user.chars().any(char::is_control))
    {
        return user;
    }
    let uid = nix::unistd::getuid();
    match nix::unistd::User::from_uid(uid) {
        Ok(Some(user)) => user.name,
        _ => format!("uid {uid}"),
    }
}
