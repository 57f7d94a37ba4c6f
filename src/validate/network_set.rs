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
        match parse_set_member(&net.value) {
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
        origin: identity.origin,
    })
}
