//! The chains between the kernel's hooks and the endpoint chains, as in Felix's `dispatch.go`
//! and the top-level chains of `static.go`: each hooked kernel chain jumps to an `npg-<CHAIN>`
//! chain, which returns early for replies and the host's own traffic and jumps to the
//! dispatch chains; a dispatch chain sends each interface to its endpoint's chain.

use std::collections::BTreeMap;
use std::net::IpAddr;

use super::binding::{Binding, Path};
use super::names;
use super::rules::{clear_bits, mark_set};
use super::sets::SetRegistry;
use super::{Compiler, TableBuilder};
use crate::model::{Direction, IpFamily};
use crate::ruleset::{Action, Chain, CtState, Hook, Match, Rule, SetLookup, Side, Table};

/// The shape of a top-level chain.
struct TopChain {
    /// Return at once for replies and established connections.
    conntrack: bool,
    /// Return at once for packets an earlier table's policy accepted.
    honour_accept: bool,
    /// Return for the host's own traffic, recognised on this side.
    self_traffic: Option<Side>,
    /// The dispatch chains to jump to.
    dispatch: Vec<&'static str>,
}

impl Compiler<'_> {
    /// Builds the dispatch chain, the endpoint chains and the policy chains of one path.
    pub(super) fn build_path(
        &self,
        family: IpFamily,
        path: Path,
        bindings: &[Binding<'_>],
        builder: &mut TableBuilder,
        sets: &mut SetRegistry<'_>,
    ) {
        let wildcard_needed = bindings
            .iter()
            .any(|binding| binding.interface.is_none() && path.needed(binding));
        let mut dispatch = Vec::new();
        for binding in bindings {
            let needed = path.needed(binding);
            let chain_name = names::endpoint_chain(path.chain_kind(), binding.interface.as_deref());
            dispatch.extend(dispatch_rule(
                path,
                binding,
                needed,
                wildcard_needed,
                &chain_name,
            ));
            if needed {
                let chain = self.endpoint_chain(family, path, binding, &chain_name, builder, sets);
                builder.add(chain);
            }
        }
        builder.add(Chain {
            name: path.dispatch_chain().to_owned(),
            rules: dispatch.into(),
        });
    }

    /// The top-level chains of every table that has dispatch chains, with their hooks.
    pub(super) fn hook_chains(
        &self,
        builders: &mut BTreeMap<Table, TableBuilder>,
        sets: &mut SetRegistry<'_>,
        own_addresses: &[IpAddr],
        bindings: &[Binding<'_>],
    ) {
        let needs = |path: Path| bindings.iter().any(|binding| path.needed(binding));
        let enforces = |path: Path| bindings.iter().any(|binding| path.enforced(binding));
        let raw_in = needs(Path::UntrackedIn);
        let raw_out = needs(Path::UntrackedOut);
        let mangle_in = needs(Path::PreDnatIn);
        // Only enforced policy accepts: staged policies clear the accept bit they set.
        let accepted_earlier_in = enforces(Path::UntrackedIn) || enforces(Path::PreDnatIn);
        let accepted_earlier_out = enforces(Path::UntrackedOut);
        if raw_in || raw_out {
            let builder = builders.entry(Table::Raw).or_default();
            if raw_in {
                self.top_chain(
                    builder,
                    sets,
                    own_addresses,
                    "PREROUTING",
                    TopChain {
                        conntrack: false,
                        honour_accept: false,
                        self_traffic: Some(Side::Source),
                        dispatch: vec![Path::UntrackedIn.dispatch_chain()],
                    },
                );
            }
            if raw_out {
                self.top_chain(
                    builder,
                    sets,
                    own_addresses,
                    "OUTPUT",
                    TopChain {
                        conntrack: false,
                        honour_accept: false,
                        self_traffic: Some(Side::Destination),
                        dispatch: vec![Path::UntrackedOut.dispatch_chain()],
                    },
                );
            }
        }
        if mangle_in {
            let builder = builders.entry(Table::Mangle).or_default();
            self.top_chain(
                builder,
                sets,
                own_addresses,
                "PREROUTING",
                TopChain {
                    conntrack: true,
                    honour_accept: enforces(Path::UntrackedIn),
                    self_traffic: Some(Side::Source),
                    dispatch: vec![Path::PreDnatIn.dispatch_chain()],
                },
            );
        }
        if let Some(builder) = builders.get_mut(&Table::Filter) {
            self.filter_top_chains(
                builder,
                sets,
                own_addresses,
                accepted_earlier_in,
                accepted_earlier_out,
            );
        }
    }

    /// The filter table's top-level chains: INPUT, FORWARD and OUTPUT, each only when its
    /// dispatch chains exist.
    fn filter_top_chains(
        &self,
        builder: &mut TableBuilder,
        sets: &mut SetRegistry<'_>,
        own_addresses: &[IpAddr],
        accepted_earlier_in: bool,
        accepted_earlier_out: bool,
    ) {
        if builder.has(Path::NormalIn.dispatch_chain()) {
            self.top_chain(
                builder,
                sets,
                own_addresses,
                "INPUT",
                TopChain {
                    conntrack: true,
                    honour_accept: accepted_earlier_in,
                    self_traffic: Some(Side::Source),
                    dispatch: vec![Path::NormalIn.dispatch_chain()],
                },
            );
        }
        let forward: Vec<&'static str> = [Path::ForwardIn, Path::ForwardOut]
            .into_iter()
            .map(Path::dispatch_chain)
            .filter(|chain| builder.has(chain))
            .collect();
        if !forward.is_empty() {
            self.top_chain(
                builder,
                sets,
                own_addresses,
                "FORWARD",
                TopChain {
                    conntrack: true,
                    honour_accept: accepted_earlier_in,
                    self_traffic: None,
                    dispatch: forward,
                },
            );
        }
        if builder.has(Path::NormalOut.dispatch_chain()) {
            self.top_chain(
                builder,
                sets,
                own_addresses,
                "OUTPUT",
                TopChain {
                    conntrack: true,
                    honour_accept: accepted_earlier_out,
                    self_traffic: Some(Side::Destination),
                    dispatch: vec![Path::NormalOut.dispatch_chain()],
                },
            );
        }
    }

    fn top_chain(
        &self,
        builder: &mut TableBuilder,
        sets: &mut SetRegistry<'_>,
        own_addresses: &[IpAddr],
        kernel_chain: &str,
        shape: TopChain,
    ) {
        let marks = self.marks;
        let name = format!("npg-{kernel_chain}");
        let mut rules = Vec::new();
        if shape.conntrack {
            rules.push(
                Rule::new(
                    vec![Match::Conntrack(CtState::RelatedEstablished)],
                    Action::Return,
                )
                .comment("replies and established connections"),
            );
        }
        if shape.honour_accept {
            rules.push(
                Rule::new(vec![mark_set(marks.accept)], Action::Return)
                    .comment("accepted by an earlier table"),
            );
        }
        // Every packet that reaches our policy starts with our bits clear, whatever another
        // program or an earlier table left in them.
        rules.push(Rule::new(Vec::new(), clear_bits(marks.all())));
        if let Some(side) = shape.self_traffic {
            rules.extend(self_traffic_rules(side, sets, own_addresses));
        }
        for dispatch in shape.dispatch {
            rules.push(Rule::new(Vec::new(), Action::Jump(dispatch.to_owned())));
        }
        builder.add(Chain {
            name: name.clone(),
            rules: rules.into(),
        });
        builder.hooks.push(Hook {
            kernel_chain: kernel_chain.to_owned(),
            target: name,
        });
    }
}

/// The rule of a dispatch chain that sends one binding's traffic on this path to its endpoint
/// chain, if it needs one.
fn dispatch_rule(
    path: Path,
    binding: &Binding<'_>,
    needed: bool,
    wildcard_needed: bool,
    chain_name: &str,
) -> Option<Rule> {
    let interface_match = binding
        .interface
        .as_ref()
        .map(|name| match path.direction() {
            Direction::Ingress => Match::InInterface(name.clone()),
            Direction::Egress => Match::OutInterface(name.clone()),
        });
    match (needed, interface_match) {
        (true, Some(interface)) => Some(
            Rule::new(vec![interface], Action::Goto(chain_name.to_owned()))
                .comment(format!("to {}", binding.describe())),
        ),
        (true, None) => Some(
            Rule::new(Vec::new(), Action::Goto(chain_name.to_owned()))
                .comment(format!("to {}", binding.describe())),
        ),
        // An interface with an endpoint of its own but nothing to check on this path must not
        // fall through to the `*` endpoint's chain.
        (false, Some(interface)) if wildcard_needed => Some(
            Rule::new(vec![interface], Action::Return)
                .comment(format!("{} has no policy here", binding.describe())),
        ),
        _ => None,
    }
}

/// The returns of a top-level chain for the host's traffic to itself, recognised on `side`:
/// the loopback interface and the host's own addresses.
pub(super) fn self_traffic_rules(
    side: Side,
    sets: &mut SetRegistry<'_>,
    own_addresses: &[IpAddr],
) -> [Rule; 2] {
    let (interface, direction_word) = match side {
        Side::Source => (Match::InInterface("lo".to_owned()), "src"),
        Side::Destination => (Match::OutInterface("lo".to_owned()), "dst"),
    };
    let loopback = Rule::new(vec![interface], Action::Return).comment("host to itself");
    let set = sets.this_host(own_addresses);
    let addresses = Rule::new(
        vec![Match::Set {
            side,
            name: set,
            lookup: SetLookup::Address,
            negated: false,
        }],
        Action::Return,
    )
    .comment(format!(
        "host to itself ({direction_word} is a host address)"
    ));
    [loopback, addresses]
}
