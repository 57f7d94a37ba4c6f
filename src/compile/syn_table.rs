//! The early drop's decision table: the SYNs that the raw path drops, read off its chains as
//! one rule and one set of source networks, so that a denied SYN under a flood is dropped after
//! one lookup instead of a walk through the policy chains.
//!
//! The raw path (see `syn_path`) judges TCP SYNs to the guarded ports; everything it can look at
//! is known for such a packet but its incoming interface, its source address and its
//! destination port (every mark bit of ours is cleared by its first rule). Where the chains look
//! at nothing else, each packet's fate is a function of those three, and it is worked out here
//! by running the chains over one packet per piece: the interfaces are those the chains name
//! and one they do not; the ports are cut at every boundary a port match draws; the source
//! space is cut at every boundary of every network and set the chains match, and pieces that
//! every source match treats alike share one run. What a run ends in is either a drop, with
//! the log rules it passed on the way (NFLOG, kernel log), or anything else.
//!
//! The drop that most of the space ends in becomes the table: the ports that agree on its
//! sources, the interfaces where it happens (all, all but one, or one), and its sources or
//! their complement, whichever is the smaller set. A SYN the table matches goes to
//! `npg-syn-denied`, which logs what the walk would have logged, with the same rules, and drops
//! with the same rule (`status` counts it for the same policy rule). Every other SYN walks the
//! chains as before. When the chains look at anything else (a destination address, a source
//! port, an interface by prefix) or the space takes too many runs, there is no table.

use std::collections::{BTreeSet, HashMap};

use ipnet::{IpNet, Ipv4Net, Ipv6Net};

use super::sets::SetRegistry;
use super::syn_path::Chains;
use crate::model::{IpFamily, Protocol};
use crate::ruleset::{Action, Match, PortRange, Rule, SetLookup, SetMember, Side};

/// How many runs of the chains a table may take (interfaces × port pieces × kinds of
/// source), and how many rules all of them may pass: a compile stays quick whatever the
/// policies; past it, the chains are walked as they are.
const MAX_RUNS: usize = 4096;
const MAX_STEPS: usize = 1 << 21;

/// The most source pieces a table is cut into (each at most two per network matched).
const MAX_PIECES: usize = 1 << 21;

/// Which interfaces the table's rule applies to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Interfaces {
    /// Every one.
    All,
    /// Only this one.
    Only(String),
    /// Every one but this.
    AllBut(String),
}

/// Which sources the table's rule drops.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Sources {
    /// Every one.
    All,
    /// Those in these networks.
    In(Vec<IpNet>),
    /// Those outside these networks.
    NotIn(Vec<IpNet>),
}

/// The decision table: SYNs to `ports`, arriving on `interfaces`, from `sources`, meet the
/// rules of `denied` (log rules, then the drop), and nothing else.
#[derive(Clone, Debug)]
pub(super) struct Table {
    pub(super) ports: Vec<PortRange>,
    pub(super) interfaces: Interfaces,
    pub(super) sources: Sources,
    pub(super) denied: Vec<Rule>,
}

/// The table for the raw path that starts at `root`, entered only by TCP SYNs of `family` to
/// `ports` (any port if `None`); `None` where there is none to make (see the module's words).
pub(super) fn table(
    chains: &Chains,
    root: &str,
    ports: Option<&[PortRange]>,
    family: IpFamily,
    sets: &SetRegistry<'_>,
    our_bits: u32,
) -> Option<Table> {
    let looks = Looks::gather(chains, root, family, sets, our_bits)?;
    let port_pieces = port_pieces(ports, &looks.port_cuts);
    let space = Space::of(family);
    let (pieces, kinds) = source_pieces(&looks.predicates, space)?;
    let interfaces: Vec<Option<&str>> = looks
        .interfaces
        .iter()
        .map(|name| Some(name.as_str()))
        .chain([None])
        .collect();
    if interfaces.len() * port_pieces.len() * kinds.len() > MAX_RUNS {
        return None;
    }

    // Every run: what the SYN meets, per interface, port piece and kind of source.
    let mut runner = Runner {
        chains,
        root,
        looks: &looks,
        steps: 0,
    };
    let mut ends: Vec<End> = Vec::new();
    // outcome[interface][port piece][kind] = index into `ends`
    let mut outcome = vec![vec![vec![0usize; kinds.len()]; port_pieces.len()]; interfaces.len()];
    for (i, interface) in interfaces.iter().enumerate() {
        for (p, piece) in port_pieces.iter().enumerate() {
            for (k, kind) in kinds.iter().enumerate() {
                let end = runner.run(*interface, piece.first, kind)?;
                let index = match ends.iter().position(|known| *known == end) {
                    Some(index) => index,
                    None => {
                        ends.push(end);
                        ends.len() - 1
                    }
                };
                outcome[i][p][k] = index;
            }
        }
    }

    // The drop that the most (interface, port, source) space ends in.
    let mut weight = vec![0f64; ends.len()];
    for by_port in &outcome {
        for (p, by_kind) in by_port.iter().enumerate() {
            let ports = f64::from(port_pieces[p].last - port_pieces[p].first) + 1.0;
            for (piece, kind) in &pieces {
                weight[by_kind[*kind]] += ports * piece.size();
            }
        }
    }
    let chosen = (0..ends.len())
        .filter(|index| matches!(ends[*index], End::Dropped { .. }))
        .max_by(|a, b| weight[*a].total_cmp(&weight[*b]).then(b.cmp(a)))?;

    // Per interface and port piece: the sources that end in the chosen drop.
    let dropped: Vec<Vec<Vec<Interval>>> = outcome
        .iter()
        .map(|by_port| {
            by_port
                .iter()
                .map(|by_kind| {
                    joined(
                        pieces
                            .iter()
                            .filter(|(_, kind)| by_kind[*kind] == chosen)
                            .map(|(piece, _)| *piece),
                    )
                })
                .collect()
        })
        .collect();

    // The port pieces that agree on the most space, among those that drop anything.
    let mut groups: Vec<(Vec<usize>, f64)> = Vec::new();
    for p in 0..port_pieces.len() {
        let same = groups.iter_mut().find(|(members, _)| {
            dropped
                .iter()
                .all(|by_port| by_port[members[0]] == by_port[p])
        });
        let ports = f64::from(port_pieces[p].last - port_pieces[p].first) + 1.0;
        let space: f64 = dropped
            .iter()
            .map(|by_port| by_port[p].iter().map(Interval::size).sum::<f64>())
            .sum::<f64>()
            * ports;
        match same {
            Some((members, total)) => {
                members.push(p);
                *total += space;
            }
            None => groups.push((vec![p], space)),
        }
    }
    let (members, _) = groups
        .into_iter()
        .filter(|(_, total)| *total > 0.0)
        .max_by(|a, b| a.1.total_cmp(&b.1))?;
    let first = members[0];

    // The interfaces where it drops: those whose sources are not empty, which must agree.
    let dropping: Vec<usize> = (0..interfaces.len())
        .filter(|i| !dropped[*i][first].is_empty())
        .collect();
    let sources = &dropped[dropping[0]][first];
    if dropping.iter().any(|i| dropped[*i][first] != *sources) {
        return None;
    }
    let left_out: Vec<usize> = (0..interfaces.len())
        .filter(|i| !dropping.contains(i))
        .collect();
    let interfaces = match (&dropping[..], &left_out[..]) {
        (_, []) => Interfaces::All,
        (_, [one]) if interfaces[*one].is_some() => {
            Interfaces::AllBut(interfaces[*one]?.to_owned())
        }
        ([one], _) if interfaces[*one].is_some() => Interfaces::Only(interfaces[*one]?.to_owned()),
        _ => return None,
    };

    let complement = space.complement(sources);
    let sources = if complement.is_empty() {
        Sources::All
    } else {
        let inside = space.networks(sources);
        let outside = space.networks(&complement);
        if outside.len() < inside.len() {
            Sources::NotIn(outside)
        } else {
            Sources::In(inside)
        }
    };
    let End::Dropped { rules, main } = &ends[chosen] else {
        return None;
    };
    let rule_at = |(chain, index): &(String, usize)| chains[chain.as_str()][*index].clone();
    let mut denied: Vec<Rule> = rules
        .iter()
        .map(|at| {
            let mut rule = rule_at(at);
            rule.matches.clear();
            rule
        })
        .collect();
    if let (Some(drop), Some(main)) = (denied.last_mut(), main) {
        drop.origin = rule_at(main).origin;
    }
    Some(Table {
        ports: merged_ports(members.iter().map(|p| port_pieces[*p])),
        interfaces,
        sources,
        denied,
    })
}

/// An inclusive range of addresses, as numbers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Interval {
    first: u128,
    last: u128,
}

impl Interval {
    fn of(net: &IpNet) -> Interval {
        match net {
            IpNet::V4(net) => Interval {
                first: u128::from(u32::from(net.network())),
                last: u128::from(u32::from(net.broadcast())),
            },
            IpNet::V6(net) => Interval {
                first: u128::from(net.network()),
                last: u128::from(net.broadcast()),
            },
        }
    }

    /// How many addresses, roughly (enough to weigh spaces against each other).
    fn size(&self) -> f64 {
        (self.last - self.first) as f64 + 1.0
    }
}

/// Sorted intervals, touching ones joined.
fn joined(intervals: impl Iterator<Item = Interval>) -> Vec<Interval> {
    let mut out: Vec<Interval> = Vec::new();
    for interval in intervals {
        match out.last_mut() {
            Some(previous) if previous.last.checked_add(1) == Some(interval.first) => {
                previous.last = interval.last;
            }
            _ => out.push(interval),
        }
    }
    out
}

/// The address space of a family.
#[derive(Clone, Copy)]
struct Space {
    family: IpFamily,
    last: u128,
}

impl Space {
    fn of(family: IpFamily) -> Space {
        let last = match family {
            IpFamily::V4 => u128::from(u32::MAX),
            IpFamily::V6 => u128::MAX,
        };
        Space { family, last }
    }

    /// The addresses outside `intervals` (sorted, disjoint).
    fn complement(&self, intervals: &[Interval]) -> Vec<Interval> {
        let mut out = Vec::new();
        let mut next = Some(0u128);
        for interval in intervals {
            if let Some(start) = next
                && start < interval.first
            {
                out.push(Interval {
                    first: start,
                    last: interval.first - 1,
                });
            }
            next = interval.last.checked_add(1).filter(|n| *n <= self.last);
        }
        if let Some(start) = next {
            out.push(Interval {
                first: start,
                last: self.last,
            });
        }
        out
    }

    /// The fewest networks that cover exactly `intervals`.
    fn networks(&self, intervals: &[Interval]) -> Vec<IpNet> {
        let bits: u32 = match self.family {
            IpFamily::V4 => 32,
            IpFamily::V6 => 128,
        };
        let mut out = Vec::new();
        for interval in intervals {
            let mut first = interval.first;
            loop {
                // The largest block that starts at `first` and ends within the interval.
                let mut size_bits = if first == 0 {
                    bits
                } else {
                    first.trailing_zeros().min(bits)
                };
                while size_bits > 0 && block_last(first, size_bits) > interval.last {
                    size_bits -= 1;
                }
                let prefix = u8::try_from(bits - size_bits).expect("a prefix length");
                out.push(match self.family {
                    IpFamily::V4 => IpNet::V4(Ipv4Net::new_assert(
                        u32::try_from(first).expect("an IPv4 address").into(),
                        prefix,
                    )),
                    IpFamily::V6 => IpNet::V6(Ipv6Net::new_assert(first.into(), prefix)),
                });
                let last = block_last(first, size_bits);
                if last >= interval.last {
                    break;
                }
                first = last + 1;
            }
        }
        out
    }
}

/// The last address of the block of 2^`size_bits` addresses that starts at `first`.
fn block_last(first: u128, size_bits: u32) -> u128 {
    if size_bits >= 128 {
        u128::MAX
    } else {
        first + ((1u128 << size_bits) - 1)
    }
}

/// What the chains look at, for a TCP SYN of one family: the source matches (each a
/// predicate over the source space), the port boundaries and the interfaces named.
struct Looks {
    /// Each source match's addresses, sorted and disjoint, by what it is.
    predicates: Vec<Vec<Interval>>,
    by_net: HashMap<IpNet, usize>,
    by_set: HashMap<String, usize>,
    /// Where destination port matches start and stop (the first port of each piece).
    port_cuts: BTreeSet<u32>,
    interfaces: BTreeSet<String>,
}

impl Looks {
    /// What the chains reached from `root` look at; `None` if any rule looks at what the table
    /// cannot hold, or at mark bits other than ours (`our_bits`, cleared on the way in).
    fn gather(
        chains: &Chains,
        root: &str,
        family: IpFamily,
        sets: &SetRegistry<'_>,
        our_bits: u32,
    ) -> Option<Looks> {
        let clears_ours = chains.get(root)?.first().is_some_and(|rule| {
            rule.matches.is_empty()
                && matches!(rule.action, Action::SetMark { value: 0, mask } if mask & our_bits == our_bits)
        });
        if !clears_ours {
            return None;
        }
        let mut looks = Looks {
            predicates: Vec::new(),
            by_net: HashMap::new(),
            by_set: HashMap::new(),
            port_cuts: BTreeSet::new(),
            interfaces: BTreeSet::new(),
        };
        let mut seen = BTreeSet::new();
        let mut queue = vec![root];
        while let Some(name) = queue.pop() {
            if !seen.insert(name) {
                continue;
            }
            for rule in chains.get(name)?.iter() {
                for matched in &rule.matches {
                    looks.note(matched, family, sets, our_bits)?;
                }
                match &rule.action {
                    Action::Jump(target) | Action::Goto(target) => queue.push(target),
                    Action::NoTrack => return None,
                    _ => {}
                }
            }
        }
        Some(looks)
    }

    fn note(
        &mut self,
        matched: &Match,
        family: IpFamily,
        sets: &SetRegistry<'_>,
        our_bits: u32,
    ) -> Option<()> {
        match matched {
            Match::Protocol { .. } | Match::TcpSyn | Match::Icmp { .. } => {}
            Match::Mark { mask, .. } if mask & !our_bits == 0 => {}
            Match::Net {
                side: Side::Source,
                net,
                ..
            } => {
                if IpFamily::of_net(net) != family {
                    return None;
                }
                if !self.by_net.contains_key(net) {
                    self.by_net.insert(*net, self.predicates.len());
                    self.predicates.push(vec![Interval::of(net)]);
                }
            }
            Match::Set {
                side: Side::Source,
                name,
                lookup: SetLookup::Address,
                ..
            } => {
                if !self.by_set.contains_key(name) {
                    let set = sets.get(name)?;
                    let mut intervals = Vec::with_capacity(set.members.len());
                    for member in set.members.iter() {
                        let net = match member {
                            SetMember::Net(net) => *net,
                            SetMember::Ip(ip) => IpNet::from(*ip),
                            SetMember::IpPort(..) => return None,
                        };
                        intervals.push(Interval::of(&net));
                    }
                    intervals.sort_unstable();
                    self.by_set.insert(name.clone(), self.predicates.len());
                    self.predicates.push(disjoint(intervals));
                }
            }
            Match::Ports {
                side: Side::Destination,
                ports,
                ..
            } => {
                for range in ports {
                    self.port_cuts.insert(u32::from(range.first));
                    self.port_cuts.insert(u32::from(range.last) + 1);
                }
            }
            Match::InInterface(name) | Match::NotInInterface(name) => {
                if name.ends_with('+') {
                    return None;
                }
                self.interfaces.insert(name.clone());
            }
            _ => return None,
        }
        Some(())
    }
}

/// Sorted intervals made disjoint (overlapping and touching ones joined).
fn disjoint(sorted: Vec<Interval>) -> Vec<Interval> {
    let mut out: Vec<Interval> = Vec::with_capacity(sorted.len());
    for interval in sorted {
        match out.last_mut() {
            Some(previous) if previous.last.saturating_add(1) >= interval.first => {
                previous.last = previous.last.max(interval.last);
            }
            _ => out.push(interval),
        }
    }
    out
}

/// The port pieces: the dispatched ports (all if `None`) cut at every boundary.
fn port_pieces(ports: Option<&[PortRange]>, cuts: &BTreeSet<u32>) -> Vec<PortRange> {
    let all = [PortRange {
        first: 0,
        last: u16::MAX,
    }];
    let mut out = Vec::new();
    for range in ports.unwrap_or(&all) {
        let mut first = u32::from(range.first);
        let last = u32::from(range.last);
        for cut in cuts.range(first + 1..last + 1) {
            out.push((first, cut - 1));
            first = *cut;
        }
        out.push((first, last));
    }
    out.into_iter()
        .map(|(first, last)| PortRange {
            first: u16::try_from(first).expect("a port"),
            last: u16::try_from(last).expect("a port"),
        })
        .collect()
}

/// Port ranges sorted, touching ones joined.
fn merged_ports(pieces: impl Iterator<Item = PortRange>) -> Vec<PortRange> {
    let mut out: Vec<PortRange> = Vec::new();
    for piece in pieces {
        match out.last_mut() {
            Some(previous) if u32::from(previous.last) + 1 == u32::from(piece.first) => {
                previous.last = piece.last;
            }
            _ => out.push(piece),
        }
    }
    out
}

/// Which source predicates hold, one bit each.
type Kind = Vec<u64>;

/// Source pieces, each with the index of its kind.
type Pieces = Vec<(Interval, usize)>;

/// The source space cut at every predicate's boundaries: each piece with the index of its
/// kind (which predicates hold there), and the kinds.
fn source_pieces(predicates: &[Vec<Interval>], space: Space) -> Option<(Pieces, Vec<Kind>)> {
    // (where, which predicate): each predicate turns on at an interval's first address and
    // off after its last.
    let mut toggles: Vec<(u128, usize)> = Vec::new();
    for (index, intervals) in predicates.iter().enumerate() {
        for interval in intervals {
            toggles.push((interval.first, index));
            if interval.last < space.last {
                toggles.push((interval.last + 1, index));
            }
        }
    }
    if toggles.len() > MAX_PIECES {
        return None;
    }
    toggles.sort_unstable();
    let words = predicates.len().div_ceil(64).max(1);
    let mut kind: Kind = vec![0; words];
    let mut kinds: Vec<Kind> = Vec::new();
    // The kinds seen, by a fingerprint of which predicates hold that each toggle updates
    // (hashing the whole kind at every piece cost more than the rest of the table).
    let mut fingerprint = 0u64;
    let mut known: HashMap<u64, Vec<usize>> = HashMap::new();
    let mut pieces: Vec<(Interval, usize)> = Vec::new();
    let mut at = 0u128;
    let mut toggles = toggles.into_iter().peekable();
    loop {
        while let Some((_, index)) = toggles.next_if(|(position, _)| *position == at) {
            kind[index / 64] ^= 1 << (index % 64);
            fingerprint ^= scrambled(index as u64);
        }
        let last = toggles.peek().map_or(space.last, |(next, _)| next - 1);
        let same = known.entry(fingerprint).or_default();
        let index = match same.iter().find(|seen| kinds[**seen] == kind) {
            Some(index) => *index,
            None => {
                kinds.push(kind.clone());
                same.push(kinds.len() - 1);
                kinds.len() - 1
            }
        };
        pieces.push((Interval { first: at, last }, index));
        if last == space.last {
            break;
        }
        at = last + 1;
    }
    Some((pieces, kinds))
}

/// `x`'s bits spread over the whole word (SplitMix64's finalizer), so that the exclusive-or
/// of a few of them tells sets of predicates apart.
fn scrambled(x: u64) -> u64 {
    let x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    let x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// What a run of the chains ends in.
#[derive(Clone, Debug, PartialEq, Eq)]
enum End {
    /// Dropped, by the last of `rules`, after the log rules before it (chain, index); `main`
    /// is the rule that set the mark bit the drop looked at, which carries the policy rule's
    /// origin for `status`.
    Dropped {
        rules: Vec<(String, usize)>,
        main: Option<(String, usize)>,
    },
    /// Anything else.
    Other,
}

struct Runner<'a> {
    chains: &'a Chains,
    root: &'a str,
    looks: &'a Looks,
    steps: usize,
}

impl Runner<'_> {
    /// Runs a TCP SYN that arrives on `interface` (`None`: one the chains do not name), to
    /// `port`, from a source of `kind`, through the chains; `None` past the budget.
    fn run(&mut self, interface: Option<&str>, port: u16, kind: &Kind) -> Option<End> {
        let holds = |bit: usize| kind[bit / 64] & (1 << (bit % 64)) != 0;
        let mut mark = 0u32;
        let mut logged: Vec<(String, usize)> = Vec::new();
        // The rule that last set each mark bit.
        let mut set_by: HashMap<u32, (String, usize)> = HashMap::new();
        // Where to come back to: (chain, next rule).
        let mut stack: Vec<(&str, usize)> = Vec::new();
        let mut chain: &str = self.root;
        let mut at = 0usize;
        loop {
            let Some(rule) = self.chains.get(chain)?.get(at) else {
                match stack.pop() {
                    Some((caller, next)) => {
                        chain = caller;
                        at = next;
                        continue;
                    }
                    None => return Some(End::Other),
                }
            };
            self.steps += 1;
            if self.steps > MAX_STEPS {
                return None;
            }
            let applies = rule.matches.iter().all(|matched| match matched {
                Match::Protocol { number, negated } => {
                    (*number == Protocol::Tcp.number()) != *negated
                }
                Match::TcpSyn => true,
                Match::Icmp { .. } => false,
                Match::Mark {
                    value,
                    mask,
                    negated,
                } => ((mark & mask) == *value) != *negated,
                Match::Net { net, negated, .. } => holds(self.looks.by_net[net]) != *negated,
                Match::Set { name, negated, .. } => holds(self.looks.by_set[name]) != *negated,
                Match::Ports { ports, negated, .. } => {
                    ports
                        .iter()
                        .any(|range| range.first <= port && port <= range.last)
                        != *negated
                }
                Match::InInterface(name) => interface == Some(name.as_str()),
                Match::NotInInterface(name) => interface != Some(name.as_str()),
                // Left out by `Looks::gather`.
                Match::Conntrack(_) | Match::OutInterface(_) => false,
            });
            at += 1;
            if !applies {
                continue;
            }
            match &rule.action {
                Action::Return => match stack.pop() {
                    Some((caller, next)) => {
                        chain = caller;
                        at = next;
                    }
                    None => return Some(End::Other),
                },
                Action::Drop => {
                    logged.push((chain.to_owned(), at - 1));
                    let main = rule.matches.iter().find_map(|matched| match matched {
                        Match::Mark {
                            value,
                            mask,
                            negated: false,
                        } if value == mask && mask.count_ones() == 1 => set_by.get(mask).cloned(),
                        _ => None,
                    });
                    return Some(End::Dropped {
                        rules: logged,
                        main,
                    });
                }
                Action::Jump(target) => {
                    stack.push((chain, at));
                    chain = target;
                    at = 0;
                }
                Action::Goto(target) => {
                    chain = target;
                    at = 0;
                }
                Action::SetMark { value, mask } => {
                    mark = (mark & !mask) | value;
                    for bit in (0..32).map(|n| 1u32 << n).filter(|bit| value & bit != 0) {
                        set_by.insert(bit, (chain.to_owned(), at - 1));
                    }
                }
                Action::Nflog { .. } | Action::Log { .. } => {
                    logged.push((chain.to_owned(), at - 1))
                }
                Action::NoTrack => return None,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn net(text: &str) -> IpNet {
        text.parse().expect("a network")
    }

    #[test]
    fn intervals_become_the_fewest_networks_and_their_complement() {
        let space = Space::of(IpFamily::V4);
        let whitelist = joined(
            ["192.0.2.10/32", "192.0.2.11/32", "203.0.113.0/28"]
                .iter()
                .map(|text| Interval::of(&net(text))),
        );
        assert_eq!(
            space.networks(&whitelist),
            vec![net("192.0.2.10/31"), net("203.0.113.0/28")]
        );
        let outside = space.networks(&space.complement(&whitelist));
        // Every address is in exactly one of the two.
        let mut all: Vec<Interval> = outside
            .iter()
            .chain(&space.networks(&whitelist))
            .map(Interval::of)
            .collect();
        all.sort_unstable();
        assert_eq!(
            joined(all.into_iter()),
            vec![Interval {
                first: 0,
                last: u128::from(u32::MAX)
            }]
        );
        assert!(outside.contains(&net("0.0.0.0/1")));
        assert_eq!(
            Space::of(IpFamily::V6).networks(&[Interval {
                first: 0,
                last: u128::MAX
            }]),
            vec![net("::/0")]
        );
    }

    #[test]
    fn ports_are_cut_within_the_dispatched_ones() {
        let cuts: BTreeSet<u32> = [30008, 30009, 40000].into_iter().collect();
        let dispatched = [PortRange {
            first: 30000,
            last: 32767,
        }];
        let pieces = port_pieces(Some(&dispatched), &cuts);
        let spans: Vec<(u16, u16)> = pieces.iter().map(|p| (p.first, p.last)).collect();
        assert_eq!(spans, vec![(30000, 30007), (30008, 30008), (30009, 32767)]);
        assert_eq!(merged_ports(pieces.into_iter()), dispatched.to_vec());
    }

    #[test]
    fn pieces_that_every_predicate_treats_alike_share_a_kind() {
        let predicates = vec![
            vec![Interval::of(&net("10.0.0.0/8"))],
            vec![
                Interval::of(&net("10.1.0.0/16")),
                Interval::of(&net("192.0.2.0/24")),
            ],
        ];
        let (pieces, kinds) = source_pieces(&predicates, Space::of(IpFamily::V4)).expect("small");
        // outside, 10/8 only, both, 10/8 only, outside, the second only, outside
        assert_eq!(pieces.len(), 7);
        assert_eq!(kinds.len(), 4);
        assert_eq!(pieces[0].1, pieces[4].1);
        assert_eq!(pieces[1].1, pieces[3].1);
        assert_eq!(pieces.last().map(|p| p.0.last), Some(u128::from(u32::MAX)));
    }
}
