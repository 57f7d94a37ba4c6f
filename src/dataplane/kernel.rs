//! The second seam beside [`Runner`]: what the kernel tells this process without running a
//! program, and the xtables lock.
//!
//! A [`Runner`] runs programs; a [`Kernel`] reads the signs that tell whether anyone changed
//! the rules since we last looked (the nf_tables generation, a digest of the x_tables rules),
//! says which network namespace the programs reach, and holds the xtables lock. The binary
//! fills both with [`SystemRunner`](super::SystemRunner); tests fill both with the in-memory
//! kernel, so that what a test's programs changed is what its signs show. A [`Host`] is the
//! two together, as the commands and the daemon are given them.
//!
//! Backends read the sign and take the lock through these ([`super::Backend::read_sign`],
//! [`super::Backend::hold_writers_off`]); nothing else needs them.

use super::Runner;

/// What the kernel tells without a program. Every answer may be `None`: it cannot be read
/// here, and the caller then reads the rules themselves.
pub trait Kernel: Send + Sync {
    /// The nf_tables ruleset generation of the network namespace (see [`super::nfgen`]): it
    /// changes with every committed nftables or iptables-nft transaction.
    fn nft_generation(&self) -> Option<u32> {
        None
    }

    /// A digest of every iptables-legacy rule of the network namespace (see
    /// [`super::xtables`]): the same exactly when the rules are.
    fn xtables_digest(&self) -> Option<u128> {
        None
    }

    /// Whether the network namespace has any x_tables (iptables-legacy) table at all, in
    /// either family: without one, iptables-legacy holds no rule. `None` when it cannot be
    /// told.
    fn has_xtables(&self) -> Option<bool> {
        None
    }

    /// The nf_tables tables of the network namespace, as (family, name) in nft's words (see
    /// [`super::nft_tables`]): what `nft list tables` prints, without the whole ruleset nft
    /// reads first.
    fn nft_tables(&self) -> Option<Vec<(String, String)>> {
        None
    }

    /// Which kernel and network namespace the programs reach (see [`super::namespace`]), so
    /// that what was read of one is never taken for another's.
    fn namespace_identity(&self) -> Option<String> {
        None
    }

    /// The xtables lock, held until the returned host is dropped, so that nobody who takes it
    /// (iptables, docker, kube-proxy) writes x_tables meanwhile; the iptables commands the
    /// returned host runs take a lock file of their own. `None` when it cannot be taken.
    fn holding_xtables_lock(&self) -> Option<Box<dyn Host + '_>> {
        None
    }
}

/// A borrowed kernel answers as what it borrows.
impl<K: Kernel + ?Sized> Kernel for &K {
    fn nft_generation(&self) -> Option<u32> {
        (**self).nft_generation()
    }

    fn xtables_digest(&self) -> Option<u128> {
        (**self).xtables_digest()
    }

    fn has_xtables(&self) -> Option<bool> {
        (**self).has_xtables()
    }

    fn nft_tables(&self) -> Option<Vec<(String, String)>> {
        (**self).nft_tables()
    }

    fn namespace_identity(&self) -> Option<String> {
        (**self).namespace_identity()
    }

    fn holding_xtables_lock(&self) -> Option<Box<dyn Host + '_>> {
        (**self).holding_xtables_lock()
    }
}

/// Programs to run and the kernel they reach, as one.
pub trait Host: Runner + Kernel {}

impl<T: Runner + Kernel + ?Sized> Host for T {}
