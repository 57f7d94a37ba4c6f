use super::*;
use crate::ruleset::Action;

fn mark(value: u32, mask: u32) -> Match {
    Match::Mark {
        value,
        mask,
        negated: false,
    }
}

fn tcp(ports: &[u16]) -> Vec<Match> {
    vec![
        Match::Protocol {
            number: 6,
            negated: false,
        },
        Match::Ports {
            side: Side::Destination,
            ports: ports
                .iter()
                .map(|&p| PortRange { first: p, last: p })
                .collect(),
            negated: false,
        },
    ]
}

fn set(bits: u32) -> Action {
    Action::SetMark {
        value: bits,
        mask: bits,
    }
}

fn clear(bits: u32) -> Action {
    Action::SetMark {
        value: 0,
        mask: bits,
    }
}

fn chains(list: &[(&str, Vec<Rule>)]) -> Chains {
    list.iter()
        .map(|(name, rules)| ((*name).to_owned(), rules.clone().into()))
        .collect()
}

const GUARDED: &[PortRange] = &[PortRange {
    first: 30008,
    last: 30008,
}];

#[test]
fn a_denied_syn_walks_only_what_can_concern_it() {
    let mut got = chains(&[
        (
            "root",
            vec![
                Rule::new(vec![], clear(0xff)),
                Rule::new(vec![], Action::Jump("endpoint".into())),
                Rule::new(vec![], set(0x10)),
            ],
        ),
        (
            "endpoint",
            vec![Rule::new(vec![], Action::Goto("tiers".into()))],
        ),
        (
            "failsafe",
            vec![
                Rule::new(tcp(&[22, 6443]), set(0x1)),
                Rule::new(
                    vec![Match::Protocol {
                        number: 17,
                        negated: false,
                    }],
                    set(0x1),
                ),
            ],
        ),
        (
            "tiers",
            vec![
                Rule::new(vec![], Action::Jump("failsafe".into())),
                Rule::new(vec![mark(0x1, 0x1)], Action::Return),
                Rule::new(vec![], clear(0x3)),
                Rule::new(vec![], clear(0x2)),
                Rule::new(vec![mark(0, 0x2)], Action::Jump("policy".into())),
                Rule::new(vec![mark(0x1, 0x1)], Action::Return),
            ],
        ),
        (
            "policy",
            vec![
                Rule::new(vec![], clear(0xc)),
                Rule::new(tcp(&[30008]), set(0x4)),
                Rule::new(vec![mark(0x4, 0x4)], Action::Drop),
            ],
        ),
    ]);
    shorten(&mut got, "root", Some(GUARDED));
    // No failsafe rule can match, no clear changes a bit, the return that ends the tiers'
    // chain changes nothing: what is left of it only jumps to the policy, and the root jumps
    // there itself.
    let want = chains(&[
        (
            "root",
            vec![
                Rule::new(vec![], clear(0xff)),
                Rule::new(vec![], Action::Jump("policy".into())),
                Rule::new(vec![], set(0x10)),
            ],
        ),
        (
            "policy",
            vec![
                Rule::new(tcp(&[30008]), set(0x4)),
                Rule::new(vec![mark(0x4, 0x4)], Action::Drop),
            ],
        ),
    ]);
    assert_eq!(got, want);
}

#[test]
fn bits_a_jump_may_set_are_not_known_after_it() {
    let mut got = chains(&[
        (
            "root",
            vec![
                Rule::new(vec![], clear(0x3)),
                Rule::new(vec![], Action::Jump("policy".into())),
                Rule::new(vec![mark(0x1, 0x1)], Action::Return),
                Rule::new(vec![mark(0x2, 0x2)], Action::Drop),
                Rule::new(vec![], clear(0x2)),
                Rule::new(vec![], set(0x10)),
            ],
        ),
        ("policy", vec![Rule::new(tcp(&[30008]), set(0x1))]),
    ]);
    let want = chains(&[
        (
            "root",
            vec![
                Rule::new(vec![], clear(0x3)),
                Rule::new(vec![], Action::Jump("policy".into())),
                Rule::new(vec![mark(0x1, 0x1)], Action::Return),
                Rule::new(vec![], set(0x10)),
            ],
        ),
        ("policy", vec![Rule::new(tcp(&[30008]), set(0x1))]),
    ]);
    shorten(&mut got, "root", Some(GUARDED));
    assert_eq!(got, want);
}

#[test]
fn without_known_ports_port_matches_stay() {
    let mut got = chains(&[("root", vec![Rule::new(tcp(&[22]), Action::Drop)])]);
    let want = got.clone();
    shorten(&mut got, "root", None);
    assert_eq!(got, want);
    shorten(&mut got, "root", Some(GUARDED));
    assert_eq!(got, chains(&[("root", vec![])]));
}

#[test]
fn a_chain_entered_two_ways_knows_only_what_both_agree_on() {
    let mut got = chains(&[
        (
            "root",
            vec![
                Rule::new(vec![], clear(0x3)),
                Rule::new(vec![], Action::Jump("policy".into())),
                Rule::new(tcp(&[30008]), set(0x2)),
                Rule::new(vec![], Action::Jump("policy".into())),
            ],
        ),
        (
            "policy",
            vec![
                Rule::new(vec![], clear(0x1)),
                Rule::new(vec![], clear(0x2)),
                Rule::new(vec![mark(0x2, 0x2)], Action::Drop),
            ],
        ),
    ]);
    shorten(&mut got, "root", Some(GUARDED));
    assert_eq!(
        got["policy"][..],
        [Rule::new(vec![], clear(0x2))],
        "0x1 is clear both ways in; 0x2 only one way"
    );
}

#[test]
fn a_bit_the_chain_returned_on_is_clear_after_the_return() {
    let mut got = chains(&[(
        "root",
        vec![
            Rule::new(vec![], clear(0x3)),
            Rule::new(tcp(&[30008]), set(0x1)),
            Rule::new(vec![mark(0x1, 0x1)], Action::Return),
            Rule::new(vec![], clear(0x3)),
            Rule::new(vec![mark(0x1, 0x1)], Action::Drop),
            Rule::new(vec![], set(0x10)),
        ],
    )]);
    shorten(&mut got, "root", Some(GUARDED));
    assert_eq!(
        got["root"][..],
        [
            Rule::new(vec![], clear(0x3)),
            Rule::new(tcp(&[30008]), set(0x1)),
            Rule::new(vec![mark(0x1, 0x1)], Action::Return),
            Rule::new(vec![], set(0x10)),
        ]
    );
}

#[test]
fn returns_that_end_a_chain_go() {
    let mut got = chains(&[(
        "root",
        vec![
            Rule::new(tcp(&[30008]), Action::Drop),
            Rule::new(vec![mark(0x1, 0x1)], Action::Return),
            Rule::new(vec![], Action::Return),
        ],
    )]);
    shorten(&mut got, "root", Some(GUARDED));
    assert_eq!(got["root"][..], [Rule::new(tcp(&[30008]), Action::Drop)]);
}
