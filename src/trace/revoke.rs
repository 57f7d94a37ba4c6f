//! Which established connections a change of policies revokes: each tracked connection's
//! original tuple (as mangle `PREROUTING` saw its first packet, before DNAT) traced as a new
//! connection through the policies before and after. Cut are exactly those that the old
//! policies let through and the new ones drop, among the connections that entered through a
//! host endpoint from elsewhere: the host's own connections (from one of its addresses),
//! loopback and connections that are closing are never candidates, and a failsafe port is
//! allowed either way.

use std::collections::HashMap;
use std::net::IpAddr;

use super::{ConnState, Evaluator, Outcome, Packet, Travel, Verdict};
use crate::config::Config;
use crate::conntrack::Flow;
use crate::facts::HostFacts;
use crate::model::{Model, PolicyKind};

/// TCP states of connections that are over: nothing to revoke.
const CLOSING: [&str; 3] = ["TIME_WAIT", "CLOSE", "LAST_ACK"];

/// Protocols whose connections are revoked (those with ports).
const WITH_PORTS: [u8; 4] = [6, 17, 132, 136];

/// Judges tracked connections against a change, remembering verdicts per tuple.
pub struct Judge<'a> {
    before: Option<&'a Model>,
    after: &'a Model,
    host: &'a HostFacts,
    /// The policies before and after, bound to this host's endpoints once.
    judge_before: Option<Evaluator<'a>>,
    judge_after: Evaluator<'a>,
    host_addresses: Vec<IpAddr>,
    source_ports_matter: bool,
    seen: HashMap<Key, Option<Verdict>>,
}

#[derive(Clone, PartialEq, Eq, Hash)]
struct Key {
    src: IpAddr,
    dst: IpAddr,
    protocol: u8,
    sport: Option<u16>,
    dport: Option<u16>,
    forward: bool,
    interface: Option<String>,
}

impl<'a> Judge<'a> {
    /// A judge of the change from `before` (`None`: everything was allowed, as for an
    /// on-demand `revoke`) to `after`.
    pub fn new(
        before: Option<&'a Model>,
        after: &'a Model,
        config: &'a Config,
        host: &'a HostFacts,
    ) -> Judge<'a> {
        let mut host_addresses: Vec<IpAddr> = host
            .interfaces
            .iter()
            .flat_map(|interface| interface.addresses.iter().copied())
            .collect();
        host_addresses.sort();
        host_addresses.dedup();
        let models = before.into_iter().chain(std::iter::once(after));
        let source_ports_matter = models.clone().any(|model| {
            model.policies().iter().any(|policy| {
                policy.kind == PolicyKind::Untracked
                    || policy.ingress.iter().flatten().any(|rule| {
                        !rule.source.ports.is_empty() || !rule.source.not_ports.is_empty()
                    })
            })
        });
        Judge {
            before,
            after,
            host,
            judge_before: before.map(|model| Evaluator::new(model, config, host)),
            judge_after: Evaluator::new(after, config, host),
            host_addresses,
            source_ports_matter,
            seen: HashMap::new(),
        }
    }

    /// Whether host endpoints of named interfaces exist, so that a connection's interface
    /// matters (the caller looks it up then).
    pub fn interfaces_matter(&self) -> bool {
        [self.before, Some(self.after)]
            .into_iter()
            .flatten()
            .any(|model| {
                model
                    .host_endpoints()
                    .iter()
                    .any(|endpoint| endpoint.node == self.host.node_name)
            })
    }

    /// Whether `flow` may be revoked at all: a connection with ports, not closing, that came
    /// from elsewhere.
    pub fn is_candidate(&self, flow: &Flow) -> bool {
        let src = flow.original.src;
        WITH_PORTS.contains(&flow.protocol)
            && !flow
                .state
                .as_deref()
                .is_some_and(|state| CLOSING.contains(&state))
            && !src.is_loopback()
            && !self.host_addresses.contains(&src)
            && src != flow.original.dst
    }

    /// What drops `flow` under the new policies, when the old ones let it through: the
    /// connection to cut. `interface` is the one its packets arrive on, if known.
    pub fn cut(&mut self, flow: &Flow, interface: Option<String>) -> Option<Verdict> {
        if !self.is_candidate(flow) {
            return None;
        }
        let original = flow.original;
        // Judged in filter INPUT when it was for the host (DNAT to one of its own addresses
        // included), else in FORWARD.
        let dnat_elsewhere = flow.dnat() && !self.host_addresses.contains(&flow.reply.src);
        let to_host = self.host_addresses.contains(&original.dst) && !dnat_elsewhere;
        let key = Key {
            src: original.src,
            dst: original.dst,
            protocol: flow.protocol,
            sport: original.sport.filter(|_| self.source_ports_matter),
            dport: original.dport,
            forward: !to_host,
            interface,
        };
        if let Some(known) = self.seen.get(&key) {
            return known.clone();
        }
        let packet = Packet {
            src: original.src,
            dst: original.dst,
            protocol: flow.protocol,
            sport: original.sport,
            dport: original.dport,
            icmp_type: None,
            icmp_code: None,
            in_interface: key.interface.clone(),
            out_interface: None,
            travel: if to_host {
                Travel::Inbound
            } else {
                Travel::Forward
            },
            state: ConnState::New,
        };
        let now = self.judge_after.verdict(&packet);
        let verdict = (now.outcome == Outcome::Dropped
            && self
                .judge_before
                .as_ref()
                .is_none_or(|before| before.verdict(&packet).outcome != Outcome::Dropped))
        .then_some(now);
        self.seen.insert(key, verdict.clone());
        verdict
    }
}
