//! Choosing the iptables backend with `--backend auto`: the one the host already uses.
//!
//! Rules in iptables-legacy and iptables-nft live in separate kernel subsystems; a jump
//! inserted with the wrong one runs before or after everything in the other, whatever its
//! position. So, as kube-proxy's iptables-wrapper and Felix do:
//! 1. where our own chains already are, stay;
//! 2. where kubelet left its hint chains (`KUBE-IPTABLES-HINT`, `KUBE-KUBELET-CANARY`), go;
//! 3. else, when no iptables rules exist at all but native nftables tables do (firewalld,
//!    docker's or kube-proxy's nftables mode), native nftables;
//! 4. else where more rules are;
//! 5. on a tie, what the system's `iptables` command is.

use super::{Backend, Host};
use crate::model::IpFamily;

/// The backends detection chooses between.
const LEGACY: &dyn Backend = &super::iptables::LEGACY;
const NFT: &dyn Backend = &super::iptables::NFT;
const NATIVE: &dyn Backend = &super::nftables::NFTABLES;

/// What one backend's save shows, for the decision.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Evidence {
    /// It holds a chain of ours.
    pub ours: bool,
    /// It holds kubelet's hint chains.
    pub kubelet_hint: bool,
    /// How many rules it holds.
    pub rules: usize,
    /// Its save program ran.
    pub available: bool,
}

/// Reads the evidence from save output. Pure.
pub fn evidence(save_output: &str) -> Evidence {
    Evidence {
        ours: save_output
            .lines()
            .any(|line| line.starts_with(":npg-") || line.contains(" -j npg-")),
        kubelet_hint: save_output.contains("KUBE-IPTABLES-HINT")
            || save_output.contains("KUBE-KUBELET-CANARY"),
        rules: save_output
            .lines()
            .filter(|line| line.starts_with("-A "))
            .count(),
        available: true,
    }
}

/// What `nft list tables` shows.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NativeEvidence {
    /// Our `nodeport_guard` table exists.
    pub ours: bool,
    /// Tables that are not iptables-nft's (`filter`, `nat`, `mangle`, `raw`, `security` of
    /// `ip`/`ip6`) and not ours.
    pub native_tables: usize,
}

/// Reads `nft list tables` output. Pure.
pub fn native_evidence(list_tables: &str) -> NativeEvidence {
    let mut evidence = NativeEvidence::default();
    for line in list_tables.lines() {
        let mut words = line.split_whitespace();
        if words.next() != Some("table") {
            continue;
        }
        let (Some(family), Some(name)) = (words.next(), words.next()) else {
            continue;
        };
        if name == super::nftables::render::TABLE {
            evidence.ours = true;
        } else if !(matches!(family, "ip" | "ip6")
            && matches!(name, "filter" | "nat" | "mangle" | "raw" | "security"))
        {
            evidence.native_tables += 1;
        }
    }
    evidence
}

/// Decides between the backends. Pure.
pub fn decide_all(
    legacy: Evidence,
    nft: Evidence,
    native: NativeEvidence,
    system_default: &'static dyn Backend,
) -> (&'static dyn Backend, &'static str) {
    if native.ours && !legacy.ours && !nft.ours {
        return (NATIVE, "our rules are already in native nftables");
    }
    if !legacy.ours
        && !nft.ours
        && !legacy.kubelet_hint
        && !nft.kubelet_hint
        && legacy.rules == 0
        && nft.rules == 0
        && native.native_tables > 0
    {
        return (
            NATIVE,
            "the host uses native nftables and no iptables rules",
        );
    }
    decide(legacy, nft, system_default)
}

/// Decides between the iptables backends. Pure.
pub fn decide(
    legacy: Evidence,
    nft: Evidence,
    system_default: &'static dyn Backend,
) -> (&'static dyn Backend, &'static str) {
    match (legacy.available, nft.available) {
        (true, false) => return (LEGACY, "only iptables-legacy is installed"),
        (false, true) => return (NFT, "only iptables-nft is installed"),
        _ => {}
    }
    if nft.ours != legacy.ours {
        return if nft.ours {
            (NFT, "our rules are already in iptables-nft")
        } else {
            (LEGACY, "our rules are already in iptables-legacy")
        };
    }
    if nft.kubelet_hint != legacy.kubelet_hint {
        return if nft.kubelet_hint {
            (NFT, "kubelet uses iptables-nft")
        } else {
            (LEGACY, "kubelet uses iptables-legacy")
        };
    }
    if nft.rules != legacy.rules {
        return if nft.rules > legacy.rules {
            (NFT, "iptables-nft holds more rules")
        } else {
            (LEGACY, "iptables-legacy holds more rules")
        };
    }
    (system_default, "the system's `iptables` command uses it")
}

/// Detects the backend the host uses.
pub fn detect(runner: &dyn Host) -> (&'static dyn Backend, String) {
    let gather = |iptables: &super::iptables::Iptables| {
        let mut total = Evidence::default();
        for family in IpFamily::BOTH {
            let (save, _) = iptables.programs(family);
            if let Ok(output) = runner.run(save, &[], None)
                && output.success
            {
                let found = evidence(&output.stdout);
                total.available = true;
                total.ours |= found.ours;
                total.kubelet_hint |= found.kubelet_hint;
                total.rules += found.rules;
            }
        }
        total
    };
    let legacy = gather(&super::iptables::LEGACY);
    let nft = gather(&super::iptables::NFT);
    let system_default = match runner.run("iptables", &["--version"], None) {
        Ok(output) if output.stdout.contains("legacy") => LEGACY,
        _ => NFT,
    };
    let native = match super::nft_tables::listing(runner, runner) {
        Ok(output) if output.success => native_evidence(&output.stdout),
        _ => NativeEvidence::default(),
    };
    let (backend, reason) = decide_all(legacy, nft, native, system_default);
    (backend, reason.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(ours: bool, kubelet_hint: bool, rules: usize) -> Evidence {
        Evidence {
            ours,
            kubelet_hint,
            rules,
            available: true,
        }
    }

    #[test]
    fn our_own_rules_win_then_kubelet_then_rule_count_then_the_system() {
        let nft_default = NFT;
        assert_eq!(
            decide(seen(true, false, 0), seen(false, true, 99), nft_default).0,
            LEGACY
        );
        assert_eq!(
            decide(seen(false, true, 0), seen(false, false, 99), nft_default).0,
            LEGACY
        );
        assert_eq!(
            decide(seen(false, false, 3), seen(false, false, 2), nft_default).0,
            LEGACY
        );
        assert_eq!(
            decide(seen(false, false, 2), seen(false, false, 3), LEGACY).0,
            NFT
        );
        assert_eq!(
            decide(seen(false, false, 0), seen(false, false, 0), nft_default).0,
            NFT
        );
        let missing = Evidence::default();
        assert_eq!(decide(missing, seen(false, false, 0), LEGACY).0, NFT);
    }

    #[test]
    fn native_nftables_is_chosen_only_where_iptables_is_unused() {
        let native = native_evidence("table inet firewalld\ntable ip filter\ntable ip6 nat\n");
        assert_eq!(
            native,
            NativeEvidence {
                ours: false,
                native_tables: 1
            }
        );
        let empty = seen(false, false, 0);
        assert_eq!(decide_all(empty, empty, native, NFT).0, NATIVE);
        assert_eq!(decide_all(empty, seen(false, false, 4), native, NFT).0, NFT);
        let ours = native_evidence("table ip nodeport_guard\n");
        assert_eq!(
            decide_all(empty, seen(false, false, 9), ours, LEGACY).0,
            NATIVE
        );
        assert_eq!(
            decide_all(empty, empty, NativeEvidence::default(), LEGACY).0,
            LEGACY
        );
    }

    #[test]
    fn evidence_reads_save_output() {
        let found = evidence(
            "*mangle\n:KUBE-IPTABLES-HINT - [0:0]\n:npg-PREROUTING - [0:0]\n-A PREROUTING -j npg-PREROUTING\nCOMMIT\n",
        );
        assert_eq!(found, seen(true, true, 1));
    }
}
