//! `ipset restore` text for the sets of a [`Ruleset`](crate::ruleset::Ruleset).

use std::fmt::Write as _;

use crate::model::IpFamily;
use crate::ruleset::{IpSet, SetMember};

/// Every set is created this large: big enough for any whitelist we expect, and fixed so that a
/// growing whitelist never needs a set of another size (which would mean a swap).
pub const MAX_ELEMENTS: u32 = 1_048_576;

/// The `family` option of `ipset create`.
pub fn family_option(family: IpFamily) -> &'static str {
    match family {
        IpFamily::V4 => "inet",
        IpFamily::V6 => "inet6",
    }
}

/// The `create` line of a set, under `name` (the set's own name, or a temporary one).
pub fn create_line(set: &IpSet, name: &str) -> String {
    format!(
        "create {name} {} family {} maxelem {MAX_ELEMENTS}",
        set.kind.ipset_type(),
        family_option(set.family)
    )
}

/// The `add` line of one member.
pub fn add_line(name: &str, member: &SetMember) -> String {
    format!("add {name} {member}")
}

/// The `del` line of one member (`-exist` so a member already gone is no error).
pub fn del_line(name: &str, member: &str) -> String {
    format!("del {name} {member} -exist")
}

/// `ipset restore` input that creates `sets` from nothing.
pub fn render_sets(sets: &[IpSet]) -> String {
    let mut out = String::new();
    for set in sets {
        let _ = writeln!(out, "{}", create_line(set, &set.name));
        for member in set.members.iter() {
            let _ = writeln!(out, "{}", add_line(&set.name, member));
        }
    }
    out
}
