//! `ipset restore` text for the sets of a [`Ruleset`](crate::ruleset::Ruleset).

use std::fmt::Write as _;

use crate::model::IpFamily;
use crate::ruleset::{IpSet, SetMember};

/// Every set is created this large: big enough for any whitelist we expect, and fixed so that a
/// growing whitelist never needs a set of another size (which would mean a swap).
pub const MAX_ELEMENTS: u32 = 1_048_576;

/// The fewest hash buckets the kernel gives a set (`IPSET_MIMINAL_HASHSIZE`).
pub const MIN_HASH_SIZE: usize = 64;

/// The kernel's own default, which a set of more members than that starts at.
pub const DEFAULT_HASH_SIZE: usize = 1024;

/// The `hashsize` a set of `members` members is created with: the next power of two at or
/// above the count, from [`MIN_HASH_SIZE`] to [`DEFAULT_HASH_SIZE`] (the kernel grows a hash
/// as it fills, whatever it started at). The kernel's default of 1,024 buckets for a set of
/// three addresses is not free: listing a set's header (what the daemon's set poll does a
/// few times a second, and every `ipset save`) walks all of its buckets to count its memory,
/// which for a few hundred small sets made most of an idle daemon's CPU time.
pub fn hash_size(members: usize) -> usize {
    members
        .checked_next_power_of_two()
        .unwrap_or(DEFAULT_HASH_SIZE)
        .clamp(MIN_HASH_SIZE, DEFAULT_HASH_SIZE)
}

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
        "create {name} {} family {} hashsize {} maxelem {MAX_ELEMENTS}",
        set.kind.ipset_type(),
        family_option(set.family),
        hash_size(set.members.len()),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_set_gets_buckets_for_its_members_between_the_kernels_least_and_its_default() {
        let sizes: Vec<usize> = [0, 1, 3, 64, 65, 600, 1024, 1025, 100_000]
            .into_iter()
            .map(hash_size)
            .collect();
        assert_eq!(sizes, [64, 64, 64, 64, 128, 1024, 1024, 1024, 1024]);
    }
}
