//! A [`State`] packed into one compressed buffer, for a daemon at rest.
//!
//! A daemon keeps the state it last applied for the next plan and for repairs: at 1,000
//! policies that is 34,000 rule lines, each a small allocation of its own, about 9 MiB of
//! heap that nothing reads between events. Packed, the same state is one buffer of about a
//! fifth of that (the lines are long and alike; only their `npg:` hashes do not compress), and
//! unpacking it takes tens of milliseconds. [`PackedState::unpack`] gives back exactly the
//! state that was packed (the tests below, one of them over random states).

use std::collections::BTreeSet;
use std::sync::Arc;

use super::{Counters, HookRule, RuleHash, RuleLine, SetState, State, TableKey, TableState};
use crate::model::IpFamily;
use crate::ruleset::Table;

/// A state packed by [`PackedState::pack`].
pub struct PackedState {
    /// The encoding below, compressed with LZ4, its length in front.
    bytes: Box<[u8]>,
}

impl std::fmt::Debug for PackedState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PackedState({} bytes)", self.bytes.len())
    }
}

/// The first byte of the encoding: a packed state never outlives its process, but a change of
/// layout should fail loudly in a test rather than decode garbage.
const LAYOUT: u8 = 1;

impl PackedState {
    /// Packs `state`.
    pub fn pack(state: &State) -> PackedState {
        let mut out = Writer(Vec::with_capacity(1 << 16));
        out.byte(LAYOUT);
        out.len(state.tables.len());
        for (key, table) in &state.tables {
            out.byte(family_code(key.family));
            out.byte(table_code(key.table));
            out.len(table.chains.len());
            for (name, rules) in &table.chains {
                out.str(name);
                out.len(rules.len());
                for rule in rules.iter() {
                    out.rule(rule);
                }
            }
            out.len(table.hooks.len());
            for (chain, hooks) in &table.hooks {
                out.str(chain);
                out.len(hooks.len());
                for hook in hooks {
                    out.len(hook.position);
                    out.rule(&hook.rule);
                }
            }
        }
        out.len(state.sets.len());
        for (name, set) in &state.sets {
            out.str(name);
            out.byte(family_code(set.family));
            out.str(&set.kind);
            out.len(set.members.len());
            for member in &set.members {
                out.str(member);
            }
        }
        PackedState {
            bytes: lz4_flex::compress_prepend_size(&out.0).into_boxed_slice(),
        }
    }

    /// The state that was packed.
    pub fn unpack(&self) -> State {
        let bytes = lz4_flex::decompress_size_prepended(&self.bytes)
            .expect("a packed state decompresses: it was compressed by this process");
        let mut input = Reader {
            bytes: &bytes,
            at: 0,
        };
        assert_eq!(input.byte(), LAYOUT, "a packed state of this layout");
        let mut state = State::default();
        for _ in 0..input.len() {
            let key = TableKey {
                family: family_of(input.byte()),
                table: table_of(input.byte()),
            };
            let mut table = TableState::default();
            for _ in 0..input.len() {
                let name = input.str().to_owned();
                let count = input.len();
                let rules: Arc<[RuleLine]> = (0..count).map(|_| input.rule()).collect();
                table.chains.insert(name, rules);
            }
            for _ in 0..input.len() {
                let chain = input.str().to_owned();
                let count = input.len();
                let hooks = (0..count)
                    .map(|_| HookRule {
                        position: input.len(),
                        rule: input.rule(),
                    })
                    .collect();
                table.hooks.insert(chain, hooks);
            }
            state.tables.insert(key, table);
        }
        for _ in 0..input.len() {
            let name = input.str().to_owned();
            let family = family_of(input.byte());
            let kind = input.str().to_owned();
            let count = input.len();
            let members: BTreeSet<String> = (0..count).map(|_| input.str().to_owned()).collect();
            state.sets.insert(
                name,
                SetState {
                    family,
                    kind,
                    members,
                },
            );
        }
        assert_eq!(input.at, bytes.len(), "a packed state read to its end");
        state
    }

    /// The bytes it takes.
    pub fn size(&self) -> usize {
        self.bytes.len()
    }
}

fn family_code(family: IpFamily) -> u8 {
    match family {
        IpFamily::V4 => 4,
        IpFamily::V6 => 6,
    }
}

fn family_of(code: u8) -> IpFamily {
    match code {
        4 => IpFamily::V4,
        6 => IpFamily::V6,
        _ => panic!("a packed state names family {code}"),
    }
}

fn table_code(table: Table) -> u8 {
    match table {
        Table::Raw => 0,
        Table::Mangle => 1,
        Table::Filter => 2,
    }
}

fn table_of(code: u8) -> Table {
    match code {
        0 => Table::Raw,
        1 => Table::Mangle,
        2 => Table::Filter,
        _ => panic!("a packed state names table {code}"),
    }
}

struct Writer(Vec<u8>);

impl Writer {
    fn byte(&mut self, byte: u8) {
        self.0.push(byte);
    }

    /// A length or count, as a LEB128 varint.
    fn len(&mut self, mut value: usize) {
        loop {
            let low = (value & 0x7f) as u8;
            value >>= 7;
            if value == 0 {
                self.0.push(low);
                return;
            }
            self.0.push(low | 0x80);
        }
    }

    fn u64(&mut self, value: u64) {
        self.0.extend_from_slice(&value.to_le_bytes());
    }

    fn str(&mut self, text: &str) {
        self.len(text.len());
        self.0.extend_from_slice(text.as_bytes());
    }

    fn rule(&mut self, rule: &RuleLine) {
        let flags = u8::from(rule.hash.is_some()) | (u8::from(rule.counters.is_some()) << 1);
        self.byte(flags);
        if let Some(hash) = &rule.hash {
            self.str(hash);
        }
        self.str(&rule.text);
        if let Some(counters) = &rule.counters {
            self.u64(counters.packets);
            self.u64(counters.bytes);
        }
    }
}

struct Reader<'b> {
    bytes: &'b [u8],
    at: usize,
}

impl<'b> Reader<'b> {
    fn byte(&mut self) -> u8 {
        let byte = self.bytes[self.at];
        self.at += 1;
        byte
    }

    fn len(&mut self) -> usize {
        let mut value = 0usize;
        let mut shift = 0;
        loop {
            let byte = self.byte();
            value |= usize::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return value;
            }
            shift += 7;
        }
    }

    fn u64(&mut self) -> u64 {
        let bytes = &self.bytes[self.at..self.at + 8];
        self.at += 8;
        u64::from_le_bytes(bytes.try_into().expect("eight bytes"))
    }

    fn str(&mut self) -> &'b str {
        let len = self.len();
        let text = &self.bytes[self.at..self.at + len];
        self.at += len;
        std::str::from_utf8(text).expect("packed from a str")
    }

    fn rule(&mut self) -> RuleLine {
        let flags = self.byte();
        let hash = (flags & 1 != 0).then(|| RuleHash::from(self.str()));
        let text = Box::from(self.str());
        let counters = (flags & 2 != 0).then(|| {
            Box::new(Counters {
                packets: self.u64(),
                bytes: self.u64(),
            })
        });
        RuleLine {
            hash,
            text,
            counters,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(hash: Option<&str>, text: &str, counters: Option<(u64, u64)>) -> RuleLine {
        RuleLine {
            hash: hash.map(RuleHash::from),
            text: text.into(),
            counters: counters.map(|(packets, bytes)| Box::new(Counters { packets, bytes })),
        }
    }

    fn sample() -> State {
        let mut state = State::default();
        let mut raw = TableState::default();
        raw.chains.insert(
            "npg-PREROUTING".to_owned(),
            Arc::from(vec![
                line(
                    Some("6mMWxuhM5VEyrCdQ"),
                    "-A npg-PREROUTING -p tcp -m comment --comment \"npg:6mMWxuhM5VEyrCdQ\" -j DROP",
                    None,
                ),
                line(None, "-A npg-PREROUTING -j ACCEPT", Some((3, 180))),
                line(Some(&"x".repeat(40)), "ünïcode \"quoted\"", Some((u64::MAX, 0))),
            ]),
        );
        raw.chains
            .insert("npg-empty".to_owned(), Arc::from(Vec::new()));
        raw.hooks.insert(
            "PREROUTING".to_owned(),
            vec![HookRule {
                position: 300,
                rule: line(
                    Some("KqGo6HcKRGkKCmKp"),
                    "-A PREROUTING -j npg-PREROUTING",
                    None,
                ),
            }],
        );
        raw.hooks.insert("OUTPUT".to_owned(), Vec::new());
        state.tables.insert(
            TableKey {
                family: IpFamily::V4,
                table: Table::Raw,
            },
            raw,
        );
        state.tables.insert(
            TableKey {
                family: IpFamily::V6,
                table: Table::Filter,
            },
            TableState::default(),
        );
        state.sets.insert(
            "npg4-syn-sources".to_owned(),
            SetState {
                family: IpFamily::V4,
                kind: "hash:net".to_owned(),
                members: ["198.51.100.1", "203.0.113.0/28"].map(str::to_owned).into(),
            },
        );
        state.sets.insert(
            "npg6-empty".to_owned(),
            SetState {
                family: IpFamily::V6,
                kind: "hash:ip".to_owned(),
                members: BTreeSet::new(),
            },
        );
        state
    }

    use proptest::prelude::*;

    fn any_line() -> impl Strategy<Value = RuleLine> {
        (
            proptest::option::of("[A-Za-z0-9_-]{0,40}"),
            ".{0,120}",
            proptest::option::of((any::<u64>(), any::<u64>())),
        )
            .prop_map(|(hash, text, counters)| line(hash.as_deref(), &text, counters))
    }

    fn any_state() -> impl Strategy<Value = State> {
        let table = (
            proptest::collection::btree_map(
                "[a-z-]{1,28}",
                proptest::collection::vec(any_line(), 0..6),
                0..4,
            ),
            proptest::collection::btree_map(
                "[A-Z]{1,12}",
                proptest::collection::vec(
                    (0usize..100_000, any_line())
                        .prop_map(|(position, rule)| HookRule { position, rule }),
                    0..3,
                ),
                0..3,
            ),
        )
            .prop_map(|(chains, hooks)| TableState {
                chains: chains
                    .into_iter()
                    .map(|(name, rules)| (name, Arc::from(rules)))
                    .collect(),
                hooks,
            });
        let key = (any::<bool>(), 0u8..3).prop_map(|(v6, table)| TableKey {
            family: if v6 { IpFamily::V6 } else { IpFamily::V4 },
            table: table_of(table),
        });
        let set = (
            any::<bool>(),
            "[a-z:]{0,12}",
            proptest::collection::btree_set(".{0,43}", 0..20),
        )
            .prop_map(|(v6, kind, members)| SetState {
                family: if v6 { IpFamily::V6 } else { IpFamily::V4 },
                kind,
                members,
            });
        (
            proptest::collection::btree_map(key, table, 0..4),
            proptest::collection::btree_map("npg[46]-[a-z-]{0,20}", set, 0..4),
        )
            .prop_map(|(tables, sets)| State { tables, sets })
    }

    proptest! {
        #[test]
        fn any_state_unpacks_as_it_was_packed(state in any_state()) {
            prop_assert_eq!(PackedState::pack(&state).unpack(), state);
        }
    }

    #[test]
    fn unpacking_gives_back_exactly_the_state_packed() {
        let state = sample();
        assert_eq!(PackedState::pack(&state).unpack(), state);
        assert_eq!(
            PackedState::pack(&State::default()).unpack(),
            State::default()
        );
    }

    #[test]
    fn a_state_of_alike_lines_packs_small() {
        let mut state = State::default();
        let mut mangle = TableState::default();
        let rules: Vec<RuleLine> = (0..2_000)
            .map(|n| {
                let hash = format!("{n:016}");
                line(
                    Some(&hash),
                    &format!(
                        "-A npg-pi-allow-clus_poZ0iv3s -s 198.51.{}.{}/32 -m comment --comment \
                         \"npg:{hash} policy allow-cluster-nodeport-only ingress rule 0\" \
                         -j MARK --set-xmark 0x80000/0x80000",
                        n / 256,
                        n % 256
                    ),
                    None,
                )
            })
            .collect();
        let text: usize = rules.iter().map(|rule| rule.text.len()).sum();
        mangle
            .chains
            .insert("npg-pi-allow-clus_poZ0iv3s".to_owned(), Arc::from(rules));
        state.tables.insert(
            TableKey {
                family: IpFamily::V4,
                table: Table::Mangle,
            },
            mangle,
        );
        let packed = PackedState::pack(&state);
        assert!(
            packed.size() * 4 < text,
            "{} bytes packed for {text} bytes of text",
            packed.size()
        );
        assert_eq!(packed.unpack(), state);
    }
}
