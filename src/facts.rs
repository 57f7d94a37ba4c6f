//! Facts about the host the rules are compiled for: its node name, interfaces and addresses,
//! and whether IPv6 is on. The shell gathers them (`system::host_facts`); the compiler only
//! reads them, so it stays a pure function.

use std::net::IpAddr;

use regex::Regex;

use crate::model::IpFamily;

/// One network interface and its addresses.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Interface {
    /// Interface name, as the kernel reports it.
    pub name: String,
    /// Its addresses of both families, as `ip address` lists them.
    pub addresses: Vec<IpAddr>,
}

/// What the compiler needs to know about the host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostFacts {
    /// This host's node name (`nodeName` in the config, else the hostname).
    pub node_name: String,
    /// The host's interfaces, sorted by name.
    pub interfaces: Vec<Interface>,
    /// Whether IPv6 rules are programmed.
    pub ipv6: bool,
    /// Why IPv6 is off, when it is (said in `plan`).
    pub ipv6_off_reason: Option<String>,
}

impl HostFacts {
    /// A host with no interfaces and both families on: enough for `render` in tests.
    pub fn minimal(node_name: &str) -> HostFacts {
        HostFacts {
            node_name: node_name.to_owned(),
            interfaces: Vec::new(),
            ipv6: true,
            ipv6_off_reason: None,
        }
    }

    /// The families programmed on this host: IPv4, and IPv6 unless it is off.
    pub fn families(&self) -> Vec<IpFamily> {
        IpFamily::BOTH
            .into_iter()
            .filter(|family| *family == IpFamily::V4 || self.ipv6)
            .collect()
    }

    /// The host's own addresses: every address of every interface whose name does not match
    /// `exclude` (virtual interfaces such as `docker0` or `flannel.1`), sorted and without
    /// duplicates.
    pub fn own_addresses(&self, exclude: &Regex) -> Vec<IpAddr> {
        let mut addresses: Vec<IpAddr> = self
            .interfaces
            .iter()
            .filter(|interface| !exclude.is_match(&interface.name))
            .flat_map(|interface| interface.addresses.iter().copied())
            .collect();
        addresses.sort();
        addresses.dedup();
        addresses
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_addresses_skip_excluded_interfaces() {
        let facts = HostFacts {
            interfaces: vec![
                Interface {
                    name: "eth0".into(),
                    addresses: vec!["198.51.100.1".parse().expect("ip")],
                },
                Interface {
                    name: "docker0".into(),
                    addresses: vec!["172.17.0.1".parse().expect("ip")],
                },
                Interface {
                    name: "lo".into(),
                    addresses: vec!["127.0.0.1".parse().expect("ip"), "::1".parse().expect("ip")],
                },
            ],
            ..HostFacts::minimal("n")
        };
        let exclude = Regex::new(crate::config::DEFAULT_HOST_INTERFACE_EXCLUDE).expect("regex");
        let addresses: Vec<String> = facts
            .own_addresses(&exclude)
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(addresses, vec!["127.0.0.1", "198.51.100.1", "::1"]);
    }
}
