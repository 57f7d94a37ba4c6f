//! Names of chains and sets, and the short hashes that keep them within the kernel's limits.
//!
//! Every name is deterministic: the same policies always give the same names, so a plan
//! compares like with like and an unchanged policy never causes a write.

use crate::model::{Direction, IpFamily};
use crate::ruleset::{CHAIN_PREFIX, MAX_CHAIN_NAME, MAX_SET_NAME};

pub use crate::digest::hash;

/// `prefix + suffix` if it fits in `max` characters, else `prefix + "_" + hash(suffix)` cut to
/// `max` (Felix's `GetLengthLimitedID`). Names users write never contain `_`, so a hashed
/// name can never equal a plain one.
pub fn length_limited(prefix: &str, suffix: &str, max: usize) -> String {
    let plain = format!("{prefix}{suffix}");
    if plain.len() <= max && !suffix.starts_with('_') && is_plain_name(suffix) {
        return plain;
    }
    let digest = hash(suffix);
    let room = max.saturating_sub(prefix.len() + 1);
    format!("{prefix}_{}", &digest[..room.min(digest.len())])
}

/// Characters of hash a shortened chain name keeps at least (48 bits: two names that share
/// their readable start collide once in ~10^14 pairs).
const MIN_HASH_CHARS: usize = 8;

/// Characters of a name's readable start a shortened chain name keeps at most; the rest of
/// the room goes to the hash.
const MAX_READABLE_CHARS: usize = 12;

/// A chain name: `prefix + suffix` if it fits in `max` characters; else `prefix`, the readable
/// start of `suffix`, `_` and a hash of the whole `suffix`, cut to `max`, so that `iptables -L`
/// and `nft list` still say which policy a chain is of (`npg-pi-allow-clus_K2b3j16N`, where
/// Felix keeps only the hash). Names users write never contain `_`, so a shortened name never
/// equals a plain one.
pub fn chain_name(prefix: &str, suffix: &str, max: usize) -> String {
    let plain = format!("{prefix}{suffix}");
    if plain.len() <= max && !suffix.starts_with('_') && is_plain_name(suffix) {
        return plain;
    }
    let digest = hash(suffix);
    let room = max.saturating_sub(prefix.len() + 1);
    let readable: String = suffix
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.'))
        .take(room.saturating_sub(MIN_HASH_CHARS).min(MAX_READABLE_CHARS))
        .collect();
    let hash_room = room - readable.len();
    format!(
        "{prefix}{readable}_{}",
        &digest[..hash_room.min(digest.len())]
    )
}

/// Whether a name can appear in kernel input as it is: letters, digits, `-`, `.`.
fn is_plain_name(text: &str) -> bool {
    !text.is_empty()
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.')
}

/// The chain of a policy's rules for one direction: `npg-pi-<name>` / `npg-po-<name>`.
pub fn policy_chain(policy: &str, direction: Direction) -> String {
    let prefix = match direction {
        Direction::Ingress => "npg-pi-",
        Direction::Egress => "npg-po-",
    };
    chain_name(prefix, policy, MAX_CHAIN_NAME)
}

/// The chain of a staged policy's rules for one direction: `npg-spi-<name>` /
/// `npg-spo-<name>`, distinct from the enforced policy of the same name's.
pub fn staged_policy_chain(policy: &str, direction: Direction) -> String {
    let prefix = match direction {
        Direction::Ingress => "npg-spi-",
        Direction::Egress => "npg-spo-",
    };
    chain_name(prefix, policy, MAX_CHAIN_NAME)
}

/// The top chain of the early drop in raw `PREROUTING` (`earlyDrop`): where a TCP SYN goes to
/// be judged by pre-DNAT policy before connection tracking.
pub const EARLY_DROP_CHAIN: &str = "npg-syn-PREROUTING";

/// Where the early drop's decision table sends the TCP SYNs it knows pre-DNAT policy denies:
/// the log rules and the drop they would meet in the policy chains.
pub const EARLY_DROP_DENIED: &str = "npg-syn-denied";

/// The set of the early drop's decision table: the sources its rule drops, or those it
/// leaves to the walk (one name whatever the members, so that an edit of the policies changes
/// the members, not the rule).
pub fn early_drop_set(family: IpFamily) -> String {
    format!("npg{}-syn-sources", family.number())
}

/// The raw table's copy of one of the pre-DNAT path's own chains (dispatch, endpoint,
/// failsafe), for the early drop: `npg-syn-…`, apart from the doNotTrack chains of the same
/// shape that raw may hold. Policy chains keep their names: a policy is on one path only.
pub fn early_drop_chain(name: &str) -> String {
    let rest = name.strip_prefix(CHAIN_PREFIX).unwrap_or(name);
    chain_name("npg-syn-", rest, MAX_CHAIN_NAME)
}

/// Whether a chain holds one policy's rules, or a batch of policy jumps: chains whose names
/// say what they hold, the same in every table.
pub fn is_policy_chain(name: &str) -> bool {
    ["npg-pi-", "npg-po-", "npg-spi-", "npg-spo-", "npg-pb-"]
        .iter()
        .any(|prefix| name.starts_with(prefix))
}

/// Token standing for "every interface" in endpoint chain names. It is longer than any
/// interface name may be (15), so it cannot collide with one.
pub const ALL_INTERFACES: &str = "all-interfaces.any";

/// The kinds of per-endpoint chain.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum EndpointChainKind {
    /// Traffic from the endpoint to the host (`fh`).
    FromHost,
    /// Traffic from the host out of the endpoint (`th`).
    ToHost,
    /// Forwarded traffic arriving through the endpoint (`fhfw`).
    FromHostForward,
    /// Forwarded traffic leaving through the endpoint (`thfw`).
    ToHostForward,
}

/// The chain of one endpoint for one kind of traffic, e.g. `npg-fh-eth0`.
pub fn endpoint_chain(kind: EndpointChainKind, interface: Option<&str>) -> String {
    let prefix = match kind {
        EndpointChainKind::FromHost => "npg-fh-",
        EndpointChainKind::ToHost => "npg-th-",
        EndpointChainKind::FromHostForward => "npg-fhfw-",
        EndpointChainKind::ToHostForward => "npg-thfw-",
    };
    length_limited(prefix, interface.unwrap_or(ALL_INTERFACES), MAX_CHAIN_NAME)
}

/// A chain holding a slice of a long policy list, named after its content so endpoints with the
/// same policies share it.
pub fn batch_chain(content: &str) -> String {
    length_limited("npg-pb-", &format!("_{content}"), MAX_CHAIN_NAME)
}

/// A set's name: `npg4-<tag>-<hash>` or `npg6-…`, at most 31 characters.
pub fn set_name(family: IpFamily, tag: &str, identity: &str) -> String {
    let prefix = format!("npg{}-{tag}-", family.number());
    let digest = hash(identity);
    let room = MAX_SET_NAME - prefix.len();
    format!("{prefix}{}", &digest[..room.min(digest.len())])
}

/// The set of this host's own addresses.
pub fn this_host_set(family: IpFamily) -> String {
    format!("npg{}-this-host", family.number())
}

/// Whether a chain name is ours.
pub fn is_our_chain(name: &str) -> bool {
    name.starts_with(CHAIN_PREFIX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_names_stay_readable() {
        assert_eq!(
            policy_chain("allow-office", Direction::Ingress),
            "npg-pi-allow-office"
        );
        assert_eq!(
            endpoint_chain(EndpointChainKind::FromHost, Some("eth0")),
            "npg-fh-eth0"
        );
    }

    #[test]
    fn long_names_are_hashed_to_the_limit() {
        let name = policy_chain("allow-cluster-nodeport-only", Direction::Ingress);
        assert_eq!(name.len(), MAX_CHAIN_NAME);
        // The start of the policy's name stays readable; the hash keeps names unique.
        assert!(name.starts_with("npg-pi-allow-clus_"), "{name}");
        assert_ne!(
            name,
            policy_chain("allow-cluster-nodeport-onlz", Direction::Ingress)
        );
        for kind in [
            EndpointChainKind::FromHost,
            EndpointChainKind::ToHost,
            EndpointChainKind::FromHostForward,
            EndpointChainKind::ToHostForward,
        ] {
            assert!(endpoint_chain(kind, None).len() <= MAX_CHAIN_NAME);
            assert!(endpoint_chain(kind, Some("abcdefghijklmno")).len() <= MAX_CHAIN_NAME);
        }
    }

    #[test]
    fn staged_chains_differ_from_enforced_ones() {
        assert_eq!(
            staged_policy_chain("office-only", Direction::Ingress),
            "npg-spi-office-only"
        );
        assert_eq!(
            staged_policy_chain("office-only", Direction::Egress),
            "npg-spo-office-only"
        );
        let long = "allow-cluster-nodeport-only";
        for direction in [Direction::Ingress, Direction::Egress] {
            let staged = staged_policy_chain(long, direction);
            assert_eq!(staged.len(), MAX_CHAIN_NAME);
            assert!(staged.starts_with("npg-sp"), "{staged}");
            assert_ne!(staged, policy_chain(long, direction));
        }
    }

    #[test]
    fn set_names_fit_ipset() {
        let name = set_name(IpFamily::V6, "n", "policy/ingress/0/source");
        assert_eq!(name.len(), MAX_SET_NAME);
        assert!(name.starts_with("npg6-n-"));
        assert_eq!(this_host_set(IpFamily::V4), "npg4-this-host");
    }

    #[test]
    fn hashed_names_never_equal_plain_ones() {
        // A hashed name has `_` right after the prefix, which no valid name contains.
        let hashed = length_limited("npg-pi-", &"a".repeat(40), MAX_CHAIN_NAME);
        assert_eq!(&hashed[7..8], "_");
        // A shortened chain name keeps the start of the name, then `_` and the hash.
        let chain = chain_name("npg-pi-", &"a".repeat(40), MAX_CHAIN_NAME);
        assert_eq!(
            chain,
            format!("npg-pi-{}_{}", "a".repeat(10), &hash(&"a".repeat(40))[..8])
        );
    }
}
