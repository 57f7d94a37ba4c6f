//! Generating one test per backend.

/// Turns a function `fn name(backend: Backend)` into two kernel tests, one
/// per iptables flavour:
///
/// ```ignore
/// /// What user-visible behaviour this guards.
/// fn whitelist_blocks_others(backend: Backend) {
///     let lab = Lab::new(backend);
///     // ...
/// }
/// backend_tests!(whitelist_blocks_others);
/// ```
///
/// expands to a module `whitelist_blocks_others` with the tests `legacy` and
/// `nft`, each gated with `require_kernel!()`: `cargo test
/// whitelist_blocks_others` runs both, `cargo test ::nft` every nft variant.
/// (The function stays outside the macro so that rustfmt formats it.)
macro_rules! backend_tests {
    ($name:ident) => {
        mod $name {
            #[test]
            fn legacy() {
                $crate::support::require_kernel!();
                super::$name($crate::support::Backend::Legacy);
            }

            #[test]
            fn nft() {
                $crate::support::require_kernel!();
                super::$name($crate::support::Backend::Nft);
            }

            #[test]
            fn nftables() {
                $crate::support::require_kernel!();
                super::$name($crate::support::Backend::Nftables);
            }
        }
    };
    // For tests that read or change iptables chains by name: the native nftables backend has
    // its own tests of the same behaviour (`tests/kernel_nftables.rs`).
    ($name:ident, iptables_only) => {
        mod $name {
            #[test]
            fn legacy() {
                $crate::support::require_kernel!();
                super::$name($crate::support::Backend::Legacy);
            }

            #[test]
            fn nft() {
                $crate::support::require_kernel!();
                super::$name($crate::support::Backend::Nft);
            }
        }
    };
}
pub(crate) use backend_tests;
