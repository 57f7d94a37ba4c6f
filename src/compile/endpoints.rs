//! One endpoint's chain on one path, as in Felix's `endpoints.go`: drop what conntrack finds
//! invalid, run the failsafe chain, the staged policies (`staged`, which decide nothing), clear
//! the accept and pass bits, then tier by tier: clear the pass bit, jump to each policy of the
//! tier, end the tier with its default action; and end the chain with the profile's verdict.

use super::binding::{Binding, Path};
use super::rules::{self, clear_bits, mark_clear, mark_set, set_bit};
use super::sets::SetRegistry;
use super::{Compiler, TableBuilder};
use crate::config::Failsafe;
use crate::model::{self, Direction, IpFamily, TierAction};
use crate::ruleset::{Action, Chain, CtState, Match, PortRange, Rule, Side, Table};

impl Compiler<'_> {
    /// The chain of one endpoint on one path, named `name`; adds the failsafe and policy chains
    /// it jumps to.
    pub(super) fn endpoint_chain(
        &self,
        family: IpFamily,
        path: Path,
        binding: &Binding<'_>,
        name: &str,
        builder: &mut TableBuilder,
        sets: &mut SetRegistry<'_>,
    ) -> Chain {
        let marks = self.marks;
        let mut rules = Vec::new();
        if path.is_normal() && path.enforced(binding) {
            rules.push(
                Rule::new(vec![Match::Conntrack(CtState::Invalid)], Action::Drop)
                    .comment("drop packets conntrack finds invalid"),
            );
        }
        if !matches!(path, Path::ForwardIn | Path::ForwardOut) {
            let failsafe = self.failsafe_chain(family, path, builder);
            rules.push(Rule::new(Vec::new(), Action::Jump(failsafe)).comment("failsafe ports"));
            rules.push(
                Rule::new(vec![mark_set(marks.accept)], Action::Return)
                    .comment("allowed as a failsafe port"),
            );
        }
        // Staged policies log what they would do, and clear every bit they used.
        rules.extend(self.staged_section(family, path, binding, builder, sets));
        rules.push(Rule::new(Vec::new(), clear_bits(marks.accept | marks.pass)));
        // Tier by tier (the policies come in tier order): clear the pass bit, the tier's
        // policies, and for normal policy the tier's end.
        for tier_policies in path.policies(binding).chunk_by(|a, b| a.tier == b.tier) {
            let tier = tier_policies[0].tier.as_str();
            rules.push(
                Rule::new(Vec::new(), clear_bits(marks.pass))
                    .comment(format!("Start of tier {tier}")),
            );
            let policy_rules = self.policy_section(family, path, tier_policies, builder, sets);
            rules.extend(policy_rules);
            let denies = self
                .model
                .tier(tier)
                .is_none_or(|tier| tier.default_action == TierAction::Deny);
            let normal = path.is_normal();
            if normal && denies {
                rules.extend(self.end_of_tier(path.direction(), tier));
            } else if normal && self.config.log_actions.contains(&model::Action::Pass) {
                // What a Pass tier leaves undecided goes on to the next tier, logged as
                // Felix's end-of-tier pass (`PPI|<tier>`).
                rules.push(
                    Rule::new(
                        vec![mark_clear(marks.pass)],
                        Action::Nflog {
                            group: self.nflog_group(path.direction()),
                            prefix: rules::nflog_prefix('P', path.direction(), None, tier),
                        },
                    )
                    .comment(format!("End of tier {tier}: pass, logged")),
                );
            }
        }
        if matches!(path, Path::NormalIn | Path::NormalOut) {
            rules.extend(self.end_of_profiles(path.direction(), binding.endpoint.default_allow));
        }
        Chain {
            name: name.to_owned(),
            rules: rules.into(),
        }
    }

    /// The end of a tier whose default action is Deny: what no policy passed is dropped (and
    /// logged first, if denials log).
    fn end_of_tier(&self, direction: Direction, tier: &str) -> Vec<Rule> {
        let marks = self.marks;
        let mut rules = Vec::new();
        if self.config.log_actions.contains(&model::Action::Deny) {
            rules.push(
                Rule::new(
                    vec![mark_clear(marks.pass)],
                    Action::Nflog {
                        group: self.nflog_group(direction),
                        prefix: rules::nflog_prefix('D', direction, None, tier),
                    },
                )
                .comment(format!("End of tier {tier}: log")),
            );
        }
        rules.push(
            Rule::new(vec![mark_clear(marks.pass)], Action::Drop).comment(format!(
                "End of tier {tier}. Drop if no policies passed packet"
            )),
        );
        rules
    }

    /// The end of the chain of the host's own traffic: the allow-all profile returns, and
    /// without it Calico drops (and logs first, if denials log).
    fn end_of_profiles(&self, direction: Direction, default_allow: bool) -> Vec<Rule> {
        if default_allow {
            return vec![
                Rule::new(Vec::new(), Action::Return)
                    .comment("allowed by profile projectcalico-default-allow"),
            ];
        }
        let mut rules = Vec::new();
        if self.config.log_actions.contains(&model::Action::Deny) {
            let letter = match direction {
                Direction::Ingress => "DRI",
                Direction::Egress => "DRE",
            };
            rules.push(
                Rule::new(
                    Vec::new(),
                    Action::Nflog {
                        group: self.nflog_group(direction),
                        prefix: letter.to_owned(),
                    },
                )
                .comment("Drop if no profiles matched: log"),
            );
        }
        rules.push(Rule::new(Vec::new(), Action::Drop).comment("Drop if no profiles matched"));
        rules
    }

    /// The failsafe chain for a path's table and direction; returns its name.
    fn failsafe_chain(&self, family: IpFamily, path: Path, builder: &mut TableBuilder) -> String {
        let direction = path.direction();
        let name = match direction {
            Direction::Ingress => "npg-failsafe-in",
            Direction::Egress => "npg-failsafe-out",
        };
        if builder.has(name) {
            return name.to_owned();
        }
        let accept = set_bit(self.marks.accept);
        // The ports of this direction, matched on their destination; the peer net is the
        // source inbound and the destination outbound.
        let (own, reverse, net_side) = match direction {
            Direction::Ingress => (
                &self.config.failsafe_inbound,
                &self.config.failsafe_outbound,
                Side::Source,
            ),
            Direction::Egress => (
                &self.config.failsafe_outbound,
                &self.config.failsafe_inbound,
                Side::Destination,
            ),
        };
        let mut rules = failsafe_rules(family, own, Side::Destination, net_side, &accept);
        rules.extend(neighbour_discovery(family, &accept));
        // Untracked traffic has no conntrack to let replies back: in raw, the replies of the
        // other direction's failsafe connections (matched on their source port) pass too.
        if path.table() == Table::Raw {
            rules.extend(failsafe_rules(
                family,
                reverse,
                Side::Source,
                net_side,
                &accept,
            ));
        }
        builder.add(Chain {
            name: name.to_owned(),
            rules: rules.into(),
        });
        name.to_owned()
    }
}

/// The ICMPv6 types of neighbour discovery (RFC 4861): router solicitation and advertisement,
/// neighbour solicitation and advertisement. Without them an IPv6 peer cannot find the host's
/// link-layer address, so no failsafe port (nor anything else) would answer it over IPv6.
pub const NEIGHBOUR_DISCOVERY: [u8; 4] = [133, 134, 135, 136];

/// IPv6 only: neighbour discovery in both directions, as if a failsafe port, so that no policy
/// cuts the host off from its IPv6 neighbours (Calico leaves that to the policies; a whitelist
/// that denies everything else would otherwise make the host unreachable over IPv6).
fn neighbour_discovery(family: IpFamily, accept: &Action) -> Vec<Rule> {
    if family != IpFamily::V6 {
        return Vec::new();
    }
    NEIGHBOUR_DISCOVERY
        .iter()
        .map(|&icmp_type| {
            Rule::new(
                vec![
                    Match::Protocol {
                        number: crate::model::Protocol::Icmpv6.number(),
                        negated: false,
                    },
                    Match::Icmp {
                        family,
                        icmp_type,
                        code: None,
                        negated: false,
                    },
                ],
                accept.clone(),
            )
            .comment("IPv6 neighbour discovery")
        })
        .collect()
}

/// What failsafe ports share a rule by: their protocol and peer net.
type FailsafeKey = (crate::model::Protocol, Option<ipnet::IpNet>);

/// The rules of a failsafe chain for `failsafes`, their ports matched on `port_side` and their
/// nets (if any) on `net_side`; those whose net is of the other family are left out.
///
/// Every new connection walks this chain, so it is kept short: the ports of one protocol and
/// net share a rule (one `multiport` match or nftables set of up to 15 ports), in the order
/// they are listed. The default inbound list is two rules (tcp, udp) instead of nine. The
/// rules all set the same mark, so their order decides nothing.
fn failsafe_rules(
    family: IpFamily,
    failsafes: &[Failsafe],
    port_side: Side,
    net_side: Side,
    accept: &Action,
) -> Vec<Rule> {
    // (protocol, peer net) → its ports, in the order first listed.
    let mut groups: Vec<(FailsafeKey, Vec<PortRange>)> = Vec::new();
    for failsafe in failsafes {
        if failsafe
            .net
            .is_some_and(|net| IpFamily::of_net(&net) != family)
        {
            continue;
        }
        let key = (failsafe.protocol, failsafe.net);
        let port = PortRange {
            first: failsafe.port,
            last: failsafe.port,
        };
        match groups.iter_mut().find(|(group, _)| *group == key) {
            Some((_, ports)) if ports.contains(&port) => {}
            Some((_, ports)) => ports.push(port),
            None => groups.push((key, vec![port])),
        }
    }
    let mut rules = Vec::new();
    for ((protocol, net), ports) in groups {
        for chunk in rules::split_ports(&ports) {
            let mut matches = vec![
                Match::Protocol {
                    number: protocol.number(),
                    negated: false,
                },
                Match::Ports {
                    side: port_side,
                    ports: chunk,
                    negated: false,
                },
            ];
            if let Some(net) = net {
                matches.push(Match::Net {
                    side: net_side,
                    net,
                    negated: false,
                });
            }
            rules.push(Rule::new(matches, accept.clone()));
        }
    }
    rules
}
