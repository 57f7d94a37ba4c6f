//! One policy rule → the kernel rules that implement it, in Felix's shapes.
//!
//! A policy rule may need an OR (several nets, several port lists) that one kernel rule cannot
//! express. As in Felix, such alternatives become *match blocks* before the main rule: each
//! alternative of a block sets a scratch mark bit, and the main rule requires the bit. Long
//! lists of nets become sets instead, so the number of kernel rules does not grow with the
//! whitelist.

use std::collections::BTreeSet;

use ipnet::IpNet;

use super::sets::SetRegistry;
use crate::config::LogTarget;
use crate::marks::MarkBits;
use crate::model::{self, Direction, IcmpMatch, IpFamily, Port};
use crate::ruleset::{
    Action, MULTIPORT_SLOTS, Match, PortRange, Rule, RuleOrigin, SetLookup, Side,
};

/// Lists of more nets than this become a set rather than one kernel rule per net.
pub const INLINE_NETS_MAX: usize = 8;

/// Longest NFLOG prefix the kernel keeps (64 bytes with the terminating NUL). A prefix this
/// long or longer is hashed (Felix's `maybeHash`), so a plain prefix is always shorter and can
/// never pass for a hashed one.
pub const MAX_NFLOG_PREFIX: usize = 63;

/// Everything the rule compiler needs besides the rule itself.
pub struct RuleContext<'a> {
    /// The family being compiled.
    pub family: IpFamily,
    /// Mark bits.
    pub marks: MarkBits,
    /// The policy's name.
    pub policy: &'a str,
    /// The policy's tier.
    pub tier: &'a str,
    /// The same two as the origins of its rules share them.
    pub origin_names: (std::sync::Arc<str>, std::sync::Arc<str>),
    /// The direction of the rule list.
    pub direction: Direction,
    /// Which actions log to NFLOG.
    pub log_actions: &'a BTreeSet<model::Action>,
    /// The NFLOG group of this direction.
    pub nflog_group: u16,
    /// Where `Log` rules write.
    pub log_target: &'a LogTarget,
    /// Whether the policy is staged: its Deny logs (always) and returns instead of dropping,
    /// and its prefixes and comments say `staged`.
    pub staged: bool,
}

/// The policy-name part of a staged policy's NFLOG prefix, `staged:<policy>` (or
/// `staged:<tier>` for a staged tier's end).
pub fn staged_name(name: &str) -> String {
    format!("staged:{name}")
}

/// Calico's NFLOG prefix, `<A|D|P|L>P<I|E><index>|<policy>`, shortened as Felix shortens it
/// when longer than the kernel keeps.
pub fn nflog_prefix(
    action: char,
    direction: Direction,
    index: Option<usize>,
    name: &str,
) -> String {
    let direction = match direction {
        Direction::Ingress => 'I',
        Direction::Egress => 'E',
    };
    let index = index.map(|i| i.to_string()).unwrap_or_default();
    let prefix = format!("{action}P{direction}{index}|{name}");
    shorten_prefix(prefix)
}

/// Shortens an NFLOG prefix of [`MAX_NFLOG_PREFIX`] characters or more, as Felix's
/// `maybeHash` does: the first and last ten characters stay readable, the middle becomes `_`
/// and a hash of the whole prefix, 63 characters in all.
pub fn shorten_prefix(prefix: String) -> String {
    if prefix.len() < MAX_NFLOG_PREFIX {
        return prefix;
    }
    let head = &prefix[..10];
    let tail = &prefix[prefix.len() - 10..];
    let middle = super::names::length_limited("", &prefix, 42);
    format!("{head}{middle}_{tail}")
}

/// The words every kernel rule of a policy rule carries: `[staged ]policy <name> <direction>
/// rule <index>`, then the rule's annotations. A name too long for the words to fit in
/// [`crate::ruleset::MAX_RULE_WORDS`] keeps its start, then `_` and a hash of the whole name,
/// so that every backend keeps the rule's index and two long names stay apart.
pub fn rule_comment(
    policy: &str,
    direction: Direction,
    index: usize,
    staged: bool,
    annotations: &[(String, String)],
) -> String {
    let kind = if staged { "staged policy" } else { "policy" };
    let tail = format!(" {direction} rule {index}");
    let room = crate::ruleset::MAX_RULE_WORDS.saturating_sub(kind.len() + 1 + tail.len());
    let mut comment = format!("{kind} ");
    if policy.chars().count() <= room {
        comment.push_str(policy);
    } else {
        const HASH: usize = 8;
        comment.extend(policy.chars().take(room.saturating_sub(HASH + 1)));
        comment.push('_');
        comment.push_str(&super::names::hash(policy)[..HASH]);
    }
    comment.push_str(&tail);
    for (key, value) in annotations {
        comment.push_str(&format!("; {key}={value}"));
    }
    comment
}

/// A group of alternatives of which at least one (`Any`) or none (`None`) must match. An `Any`
/// block is of ports or of nets: Felix writes every port block before every net block.
enum Block {
    Any(BlockOf, Vec<Vec<Match>>),
    None(Vec<Vec<Match>>),
}

/// What an `Any` block's alternatives are.
#[derive(Clone, Copy)]
enum BlockOf {
    Ports,
    Nets,
}

impl Block {
    /// Where the block goes: Felix's order is the port blocks (source, then destination), the
    /// net blocks, then the negated net blocks.
    fn rank(&self) -> u8 {
        match self {
            Block::Any(BlockOf::Ports, _) => 0,
            Block::Any(BlockOf::Nets, _) => 1,
            Block::None(_) => 2,
        }
    }
}

/// The conditions of one policy rule, gathered field by field before they become kernel rules.
#[derive(Default)]
struct Conditions {
    /// What the main rule requires, in the order the policy wrote it.
    main: Vec<Match>,
    /// The negated matches, which the main rule requires after the positive ones.
    negations: Vec<Match>,
    /// The ORs one kernel rule cannot express, as match blocks ahead of the main rule.
    blocks: Vec<Block>,
}

/// The protocol conditions of a rule.
#[derive(Clone, Copy)]
struct Protocols {
    /// `protocol`, as a number.
    positive: Option<u8>,
    /// `notProtocol`, as a number, when it says more than `protocol`.
    negated: Option<u8>,
}

impl Protocols {
    /// `notProtocol` next to a different `protocol` says nothing more; next to the same one
    /// the rule can never match, and this is `None`.
    fn of(rule: &model::Rule) -> Option<Protocols> {
        let negated = match (rule.protocol, rule.not_protocol) {
            (Some(p), Some(n)) if p == n => return None,
            (Some(_), Some(_)) => None,
            (None, not_protocol) => not_protocol.map(|p| p.number()),
            (Some(_), None) => None,
        };
        Some(Protocols {
            positive: rule.protocol.map(|p| p.number()),
            negated,
        })
    }
}

/// One policy rule being compiled, with what its kernel rules and sets are named and tagged
/// after.
struct RuleScope<'r, 'c> {
    rule: &'r model::Rule,
    index: usize,
    context: &'r RuleContext<'c>,
    /// The comment every kernel rule of this policy rule carries.
    comment: String,
}

/// Compiles one rule of a policy for one family. Returns no kernel rules when the rule can
/// never match in this family.
pub fn compile_rule(
    rule: &model::Rule,
    index: usize,
    context: &RuleContext<'_>,
    sets: &mut SetRegistry<'_>,
) -> Vec<Rule> {
    // Every field is compiled below or said not to be a match; this list makes a new field
    // fail to compile here until it is (as in the trace's `rule_matches`).
    let model::Rule {
        action: _,       // `action_rules`
        protocol: _,     // `Protocols::of`
        not_protocol: _, // `Protocols::of`
        icmp: _,         // `finish_conditions`
        not_icmp: _,     // `finish_conditions`
        ip_version: _,   // `applies_to`
        source: _,       // the loop over the sides
        destination: _,  // the loop over the sides
        annotations: _,  // the rule's comment
        origin: _,       // the rule's comment and NFLOG prefix
    } = rule;
    if !rule.applies_to(context.family) {
        return Vec::new();
    }
    let Some(protocols) = Protocols::of(rule) else {
        return Vec::new();
    };
    let scope = RuleScope::new(rule, index, context);
    let mut conditions = Conditions::default();
    if let Some(number) = protocols.positive {
        conditions.main.push(protocol_match(number, false));
    }
    // Felix's order within each side: nets, selector, ports (numeric, then named).
    for (side, entity) in [
        (Side::Source, &rule.source),
        (Side::Destination, &rule.destination),
    ] {
        scope.net_conditions(&mut conditions, side, entity, sets);
        selector_conditions(&mut conditions, side, entity, sets);
        scope.port_conditions(&mut conditions, side, entity, protocols.positive, sets);
    }
    let (mut main, blocks) = scope.finish_conditions(conditions, protocols.negated);
    let mut out = scope.block_rules(&blocks);
    if !blocks.is_empty() {
        main.push(mark_set(context.marks.scratch0));
    }
    out.extend(scope.action_rules(main));
    out
}

impl<'r, 'c> RuleScope<'r, 'c> {
    fn new(rule: &'r model::Rule, index: usize, context: &'r RuleContext<'c>) -> Self {
        let comment = rule_comment(
            context.policy,
            context.direction,
            index,
            context.staged,
            &rule
                .annotations
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect::<Vec<_>>(),
        );
        RuleScope {
            rule,
            index,
            context,
            comment,
        }
    }

    /// The identity of a set made from one of the rule's net lists (`what` is
    /// `<side>.<field>`).
    fn set_identity(&self, what: &str) -> String {
        format!(
            "{}{}/{}/{}/{what}/{}",
            if self.context.staged { "staged:" } else { "" },
            self.context.policy,
            self.context.direction,
            self.index,
            rule_fingerprint(self.rule, what)
        )
    }

    /// A kernel rule with this policy rule's comment.
    fn tag(&self, rule: Rule) -> Rule {
        rule.comment(self.comment.clone())
    }

    /// `ports` and `notPorts` of one side: numeric ports in multiport chunks, named ports
    /// through address-port sets. Several alternatives make a block; every `notPorts` chunk
    /// must fail, so they are ANDed in the main rule.
    fn port_conditions(
        &self,
        conditions: &mut Conditions,
        side: Side,
        entity: &model::EntityRule,
        protocol: Option<u8>,
        sets: &mut SetRegistry<'_>,
    ) {
        let word = side_word(side);
        let selector = entity.selector.as_ref();
        let purpose = format!("{word} ports");
        let alternatives = port_matches(
            &entity.ports,
            side,
            protocol,
            false,
            selector,
            sets,
            &purpose,
        );
        match alternatives.len() {
            0 => {}
            1 => conditions.main.extend(without_protocol(alternatives)),
            _ => conditions
                .blocks
                .push(Block::Any(BlockOf::Ports, alternatives)),
        }
        let purpose = format!("{word} notPorts");
        let negated = port_matches(
            &entity.not_ports,
            side,
            protocol,
            true,
            selector,
            sets,
            &purpose,
        );
        conditions.negations.extend(without_protocol(negated));
    }

    /// `nets` and `notNets` of one side: one kernel rule holds one `-s`/`-d`, so several nets
    /// are alternatives of a block; long lists become a set.
    fn net_conditions(
        &self,
        conditions: &mut Conditions,
        side: Side,
        entity: &model::EntityRule,
        sets: &mut SetRegistry<'_>,
    ) {
        let family = self.context.family;
        let nets = inline_nets(&entity.nets, family);
        let not_nets = inline_nets(&entity.not_nets, family);
        if nets.len() > INLINE_NETS_MAX {
            let name = self.net_set(side, "nets", &nets, sets);
            conditions
                .main
                .push(set_match(side, name, SetLookup::Address, false));
        } else if nets.len() == 1 {
            conditions.main.push(net_match(side, nets[0], false));
        } else if nets.len() > 1 {
            conditions
                .blocks
                .push(Block::Any(BlockOf::Nets, net_alternatives(&nets, side)));
        }
        if not_nets.len() > INLINE_NETS_MAX {
            let name = self.net_set(side, "notNets", &not_nets, sets);
            conditions
                .negations
                .push(set_match(side, name, SetLookup::Address, true));
        } else if not_nets.len() == 1 && nets.len() != 1 {
            // One kernel rule holds one `-s` (or `-d`): a single negated net goes into the
            // main rule unless one positive net holds that place already, as in Felix.
            conditions
                .negations
                .push(net_match(side, not_nets[0], true));
        } else if !not_nets.is_empty() {
            conditions
                .blocks
                .push(Block::None(net_alternatives(&not_nets, side)));
        }
    }

    /// The set of one side's net list (`what` is `nets` or `notNets`); returns its name.
    fn net_set(
        &self,
        side: Side,
        what: &str,
        nets: &[IpNet],
        sets: &mut SetRegistry<'_>,
    ) -> String {
        let word = side_word(side);
        let purpose = format!(
            "{word} {what} of {}policy {} {} rule {}",
            if self.context.staged { "staged " } else { "" },
            self.context.policy,
            self.context.direction,
            self.index
        );
        sets.nets(
            &self.set_identity(&format!("{word}.{what}")),
            nets,
            &purpose,
        )
    }

    /// The main rule's matches once every field is in: the positive ones, `icmp`, then the
    /// negations with `notProtocol` first and `notICMP` last. Returns them with the blocks,
    /// every `Any` block ahead of every `None` block.
    fn finish_conditions(
        &self,
        conditions: Conditions,
        not_protocol: Option<u8>,
    ) -> (Vec<Match>, Vec<Block>) {
        let family = self.context.family;
        let Conditions {
            mut main,
            negations,
            mut blocks,
        } = conditions;
        if let Some(icmp) = self.rule.icmp {
            main.push(icmp_match(family, icmp, false));
        }
        if let Some(number) = not_protocol {
            main.push(protocol_match(number, true));
        }
        main.extend(negations);
        if let Some(icmp) = self.rule.not_icmp {
            main.push(icmp_match(family, icmp, true));
        }
        // The first `Any` block can only *set* scratch0 (it starts the AND chain from 0), so
        // every `Any` block must come before any `None` block, whichever side each came from:
        // a source `notNets` block ahead of a destination `nets` block would otherwise be
        // overridden by it, and the destination condition would never be required. AND is
        // commutative, so the blocks may go in Felix's order (ports, nets, negated nets); the
        // sort is stable, so within each kind the source side comes first.
        blocks.sort_by_key(Block::rank);
        (main, blocks)
    }

    /// The match blocks ahead of the main rule, which then requires scratch0: the first `Any`
    /// block sets scratch0, each later `Any` block sets scratch1 and ANDs it into scratch0,
    /// and each `None` block clears scratch0. No rules when there are no blocks.
    fn block_rules(&self, blocks: &[Block]) -> Vec<Rule> {
        let marks = self.context.marks;
        let Some(first) = blocks.first() else {
            return Vec::new();
        };
        let initial = match first {
            Block::Any(..) => 0,
            Block::None(_) => marks.scratch0,
        };
        let mut out = vec![self.tag(Rule::new(
            Vec::new(),
            Action::SetMark {
                value: initial,
                mask: marks.scratch(),
            },
        ))];
        let mut any_blocks_seen = 0;
        for block in blocks {
            match block {
                Block::Any(_, alternatives) => {
                    out.extend(self.any_block_rules(alternatives, any_blocks_seen));
                    any_blocks_seen += 1;
                }
                Block::None(alternatives) => {
                    for alternative in alternatives {
                        out.push(
                            self.tag(Rule::new(alternative.clone(), clear_bits(marks.scratch0))),
                        );
                    }
                }
            }
        }
        out
    }

    /// The rules of one `Any` block, `earlier` being the number of `Any` blocks before it.
    fn any_block_rules(&self, alternatives: &[Vec<Match>], earlier: usize) -> Vec<Rule> {
        let marks = self.context.marks;
        let mut out = Vec::new();
        if earlier == 0 {
            for alternative in alternatives {
                out.push(self.tag(Rule::new(alternative.clone(), set_bit(marks.scratch0))));
            }
            return out;
        }
        // The block before this one left scratch1 set if it matched; clear it, or this block
        // would pass without matching. (Felix does not, and accepts what only some positive
        // blocks match: docs/felix.md.)
        if earlier > 1 {
            out.push(self.tag(Rule::new(Vec::new(), clear_bits(marks.scratch1))));
        }
        for alternative in alternatives {
            out.push(self.tag(Rule::new(alternative.clone(), set_bit(marks.scratch1))));
        }
        // AND this block's result into scratch0.
        out.push(self.tag(Rule::new(
            vec![mark_clear(marks.scratch1)],
            clear_bits(marks.scratch0),
        )));
        out
    }

    /// The main rule and what follows it for the rule's action: the verdict's mark bit, the
    /// log when the action logs, and the return or drop.
    fn action_rules(&self, main: Vec<Match>) -> Vec<Rule> {
        let marks = self.context.marks;
        let logs = |action: model::Action| self.context.log_actions.contains(&action);
        match self.rule.action {
            model::Action::Allow => self.verdict(
                main,
                marks.accept,
                'A',
                logs(model::Action::Allow),
                Action::Return,
            ),
            model::Action::Pass => self.verdict(
                main,
                marks.pass,
                'P',
                logs(model::Action::Pass),
                Action::Return,
            ),
            // A staged Deny always logs (that is what it is for) and drops nothing: it sets
            // the drop bit, which ends the staged evaluation, and returns.
            model::Action::Deny if self.context.staged => {
                self.verdict(main, marks.drop, 'D', true, Action::Return)
            }
            model::Action::Deny => self.verdict(
                main,
                marks.drop,
                'D',
                logs(model::Action::Deny),
                Action::Drop,
            ),
            model::Action::Log => {
                let action = match self.context.log_target {
                    LogTarget::Nflog => self.log('L'),
                    LogTarget::KernelLog { prefix, level } => Action::Log {
                        prefix: prefix.clone(),
                        level: *level,
                    },
                };
                vec![self.main_rule(main, action)]
            }
        }
    }

    /// The main rule setting `bit`, then (if `logged`) the log and `last`, both on `bit`.
    fn verdict(
        &self,
        main: Vec<Match>,
        bit: u32,
        letter: char,
        logged: bool,
        last: Action,
    ) -> Vec<Rule> {
        let main = self.main_rule(main, set_bit(bit));
        // The rules on the mark bit are part of the policy rule (`status` says whether it is
        // whole) but count no packet of their own.
        let follow = |action| {
            let mut rule = self.tag(Rule::new(vec![mark_set(bit)], action));
            rule.origin = main.origin.as_ref().map(|origin| {
                Box::new(RuleOrigin {
                    counted: false,
                    ..RuleOrigin::clone(origin)
                })
            });
            rule
        };
        let mut out = Vec::with_capacity(3);
        if logged {
            out.push(follow(self.log(letter)));
        }
        out.push(follow(last));
        out.insert(0, main);
        out
    }

    /// The main rule: the one that carries the rule's origin, for `explain` and the counters.
    fn main_rule(&self, main: Vec<Match>, action: Action) -> Rule {
        let mut rule = self.tag(Rule::new(main, action));
        rule.origin = Some(Box::new(RuleOrigin {
            policy: std::sync::Arc::clone(&self.context.origin_names.0),
            tier: std::sync::Arc::clone(&self.context.origin_names.1),
            direction: self.context.direction,
            rule_index: self.index,
            staged: self.context.staged,
            counted: true,
        }));
        rule
    }

    /// The NFLOG action of this rule with the letter of its action.
    fn log(&self, letter: char) -> Action {
        let name = if self.context.staged {
            staged_name(self.context.policy)
        } else {
            self.context.policy.to_owned()
        };
        Action::Nflog {
            group: self.context.nflog_group,
            prefix: nflog_prefix(letter, self.context.direction, Some(self.index), &name),
        }
    }
}

/// `selector` and `notSelector` of one side, as address sets.
fn selector_conditions(
    conditions: &mut Conditions,
    side: Side,
    entity: &model::EntityRule,
    sets: &mut SetRegistry<'_>,
) {
    if let Some(selector) = &entity.selector {
        let name = sets.selector(selector);
        conditions
            .main
            .push(set_match(side, name, SetLookup::Address, false));
    }
    if let Some(selector) = &entity.not_selector {
        let name = sets.selector(selector);
        conditions
            .negations
            .push(set_match(side, name, SetLookup::Address, true));
    }
}

/// The word for a side in set purposes and identities.
fn side_word(side: Side) -> &'static str {
    match side {
        Side::Source => "source",
        Side::Destination => "destination",
    }
}

/// The matches of port alternatives without the protocol match each starts with (the main
/// rule has its own).
fn without_protocol(alternatives: Vec<Vec<Match>>) -> impl Iterator<Item = Match> {
    alternatives
        .into_iter()
        .flatten()
        .filter(|m| !matches!(m, Match::Protocol { .. }))
}

/// One alternative per net, for a block.
fn net_alternatives(nets: &[IpNet], side: Side) -> Vec<Vec<Match>> {
    nets.iter()
        .map(|net| vec![net_match(side, *net, false)])
        .collect()
}

fn protocol_match(number: u8, negated: bool) -> Match {
    Match::Protocol { number, negated }
}

/// The nets of one family as the user listed them, without repeats. (Sets merge them further;
/// rules keep the user's nets so `iptables-save` reads like the policy.)
pub fn inline_nets(nets: &[IpNet], family: IpFamily) -> Vec<IpNet> {
    let mut seen = BTreeSet::new();
    nets.iter()
        .filter(|net| IpFamily::of_net(net) == family && seen.insert(**net))
        .copied()
        .collect()
}

fn net_match(side: Side, net: IpNet, negated: bool) -> Match {
    Match::Net { side, net, negated }
}

/// A fingerprint of a rule with one of its net lists left out: a set named after it keeps its
/// name when only its own members change (updated in place), and gets a new name when anything
/// else about the rule changes (so the set and the rule using it change together, atomically).
fn rule_fingerprint(rule: &model::Rule, left_out: &str) -> String {
    let mut text = format!(
        "{:?}|{:?}|{:?}|{:?}|{:?}|{:?}",
        rule.action, rule.protocol, rule.not_protocol, rule.icmp, rule.not_icmp, rule.ip_version
    );
    for (side, entity) in [("source", &rule.source), ("destination", &rule.destination)] {
        for (what, nets) in [("nets", &entity.nets), ("notNets", &entity.not_nets)] {
            if format!("{side}.{what}") != left_out {
                text.push_str(&format!("|{side}.{what}={nets:?}"));
            }
        }
        text.push_str(&format!(
            "|{side}.selector={:?}|{side}.notSelector={:?}|{side}.ports={:?}|{side}.notPorts={:?}",
            entity.selector.as_ref().map(ToString::to_string),
            entity.not_selector.as_ref().map(ToString::to_string),
            entity.ports,
            entity.not_ports
        ));
    }
    super::names::hash(&text)
}

/// The alternatives a port list gives: each numeric chunk of at most 15 slots, and one
/// address-port set per named port. Each alternative starts with the protocol match that
/// `multiport` needs.
fn port_matches(
    ports: &[Port],
    side: Side,
    protocol: Option<u8>,
    negated: bool,
    selector: Option<&crate::selector::Selector>,
    sets: &mut SetRegistry<'_>,
    purpose: &str,
) -> Vec<Vec<Match>> {
    let mut numeric: Vec<PortRange> = Vec::new();
    let mut named: Vec<&str> = Vec::new();
    for port in ports {
        match port {
            Port::Single(port) => numeric.push(PortRange {
                first: *port,
                last: *port,
            }),
            Port::Range(first, last) => numeric.push(PortRange {
                first: *first,
                last: *last,
            }),
            Port::Named(name) => named.push(name),
        }
    }
    let mut alternatives = Vec::new();
    // Validation allows a rule without a protocol only when all its ports are named: each
    // named port's set carries the protocols the endpoints give it.
    if let Some(protocol) = protocol {
        for chunk in split_ports(&numeric) {
            alternatives.push(vec![
                Match::Protocol {
                    number: protocol,
                    negated: false,
                },
                Match::Ports {
                    side,
                    ports: chunk,
                    negated,
                },
            ]);
        }
    }
    for name in named {
        let set = sets.named_port(selector, protocol, name, purpose);
        alternatives.push(vec![set_match(side, set, SetLookup::AddressPort, negated)]);
    }
    alternatives
}

/// Splits ports into `multiport` chunks of at most 15 slots (a range takes two), in order.
pub fn split_ports(ports: &[PortRange]) -> Vec<Vec<PortRange>> {
    let mut chunks: Vec<Vec<PortRange>> = Vec::new();
    let mut current: Vec<PortRange> = Vec::new();
    let mut used = 0;
    for port in ports {
        if used + port.slots() > MULTIPORT_SLOTS {
            chunks.push(std::mem::take(&mut current));
            used = 0;
        }
        used += port.slots();
        current.push(*port);
    }
    if !current.is_empty() {
        chunks.push(current);
    }
    chunks
}

fn icmp_match(family: IpFamily, icmp: IcmpMatch, negated: bool) -> Match {
    Match::Icmp {
        family,
        icmp_type: icmp.icmp_type,
        code: icmp.code,
        negated,
    }
}

fn set_match(side: Side, name: String, lookup: SetLookup, negated: bool) -> Match {
    Match::Set {
        side,
        name,
        lookup,
        negated,
    }
}

/// `-j MARK --set-xmark bit/bit`.
pub fn set_bit(bit: u32) -> Action {
    Action::SetMark {
        value: bit,
        mask: bit,
    }
}

/// `-j MARK --set-xmark 0/bits`.
pub fn clear_bits(bits: u32) -> Action {
    Action::SetMark {
        value: 0,
        mask: bits,
    }
}

/// `-m mark --mark bit/bit`.
pub fn mark_set(bit: u32) -> Match {
    Match::Mark {
        value: bit,
        mask: bit,
        negated: false,
    }
}

/// `-m mark --mark 0/bits`.
pub fn mark_clear(bits: u32) -> Match {
    Match::Mark {
        value: 0,
        mask: bits,
        negated: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_policy_name_leaves_room_for_the_rule_index() {
        let short = rule_comment("web", Direction::Ingress, 3, false, &[]);
        assert_eq!(short, "policy web ingress rule 3");
        let long = "a".repeat(250);
        let other = format!("{}b", "a".repeat(249));
        for staged in [false, true] {
            let words = rule_comment(&long, Direction::Egress, 12, staged, &[]);
            assert!(words.len() <= crate::ruleset::MAX_RULE_WORDS, "{words}");
            assert!(words.ends_with(" egress rule 12"), "{words}");
            assert!(words.contains("policy aaaaaaaaaa"), "{words}");
            assert_ne!(
                words,
                rule_comment(&other, Direction::Egress, 12, staged, &[])
            );
        }
        // A name that fits is written whole, up to the last character that fits.
        let fits = "n".repeat(crate::ruleset::MAX_RULE_WORDS - "policy  ingress rule 0".len());
        assert_eq!(
            rule_comment(&fits, Direction::Ingress, 0, false, &[]),
            format!("policy {fits} ingress rule 0")
        );
    }

    fn ports(list: &[(u16, u16)]) -> Vec<PortRange> {
        list.iter()
            .map(|&(first, last)| PortRange { first, last })
            .collect()
    }

    #[test]
    fn multiport_chunks_hold_fifteen_slots_and_ranges_count_two() {
        let singles: Vec<(u16, u16)> = (1000..1017).map(|p| (p, p)).collect();
        let chunks = split_ports(&ports(&singles));
        assert_eq!(chunks.iter().map(Vec::len).collect::<Vec<_>>(), vec![15, 2]);

        let mut mixed: Vec<(u16, u16)> = (1..=13).map(|p| (p, p)).collect();
        mixed.push((30000, 32767));
        let chunks = split_ports(&ports(&mixed));
        // 13 singles use 13 slots; the range needs 2 more and fits exactly... 15.
        assert_eq!(chunks.len(), 1);
        mixed.push((40, 40));
        assert_eq!(split_ports(&ports(&mixed)).len(), 2);
    }

    #[test]
    fn nflog_prefixes_follow_calico_and_fit_the_kernel() {
        assert_eq!(
            nflog_prefix(
                'D',
                Direction::Ingress,
                Some(1),
                "allow-cluster-nodeport-only"
            ),
            "DPI1|allow-cluster-nodeport-only"
        );
        assert_eq!(
            nflog_prefix('D', Direction::Egress, None, "default"),
            "DPE|default"
        );
        let long = nflog_prefix('A', Direction::Ingress, Some(12), &"x".repeat(200));
        assert_eq!(long.len(), MAX_NFLOG_PREFIX);
        assert!(long.starts_with("API12|xxxx"), "{long}");
    }

    #[test]
    fn inline_nets_keep_order_and_drop_repeats_and_other_families() {
        let nets: Vec<IpNet> = [
            "192.0.2.128/25",
            "2001:db8::/32",
            "192.0.2.0/25",
            "192.0.2.128/25",
        ]
        .iter()
        .map(|n| n.parse().expect("net"))
        .collect();
        let v4: Vec<String> = inline_nets(&nets, IpFamily::V4)
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(v4, vec!["192.0.2.128/25", "192.0.2.0/25"]);
        assert_eq!(inline_nets(&nets, IpFamily::V6).len(), 1);
    }
}
