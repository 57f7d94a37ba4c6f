//! `GlobalNetworkSet`: a named list of networks.

use ipnet::IpNet;

use crate::model::NetworkSet;
use crate::spec::RawNetworkSetSpec;

use super::checker::Checker;
use super::envelope::Identity;
use super::values::parse_set_member;

pub(super) fn check_network_set(
    checker: &mut Checker<'_>,
    identity: Option<Identity>,
    spec: &RawNetworkSetSpec,
) -> Option<NetworkSet> {
    let mut nets: Vec<IpNet> = Vec::new();
    for net in spec.nets.iter().flat_map(|nets| &nets.value) {
        // Calico checks a set's nets with its lenient `cidr` rule: host bits are allowed and
        // the network is what counts (unlike a rule's nets, which must be exact).
        let parsed = match net.value.parse::<IpNet>() {
            Ok(with_host_bits) if with_host_bits.trunc() != with_host_bits => {
                let network = with_host_bits.trunc();
                checker.warning_help(
                    net.span,
                    format!(
                        "`{}` has host bits set: the set holds the network `{network}`",
                        net.value
                    ),
                    format!(
                        "write `{network}`, or `{}/{}` for the single address",
                        with_host_bits.addr(),
                        with_host_bits.max_prefix_len()
                    ),
                );
                Ok(network)
            }
            _ => parse_set_member(&net.value),
        };
        match parsed {
            // The same network twice would make `ipset restore` fail; it means nothing more.
            Ok(parsed) if nets.contains(&parsed) => {}
            Ok(parsed) => nets.push(parsed),
            Err(problem) => checker.report(net.span, problem),
        }
    }
    let identity = identity?;
    Some(NetworkSet {
        name: identity.name,
        labels: identity.labels,
        nets,
        expires: identity.expires,
        origin: identity.origin,
    })
}
