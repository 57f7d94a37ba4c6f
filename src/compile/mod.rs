//! The compiler: a validated [`Model`], the config and the host's facts in, a [`Ruleset`] out.
//!
//! Architecture invariant: compiling never touches the kernel or the file system; it is a pure
//! function, so `render`, `plan` and the daemon all see exactly the same rules for the same
//! input, and the tests check it without root.
//!
//! The chains follow Felix's shapes with the `npg` prefix. For one family the packet path is:
//!
//! ```text
//! raw      PREROUTING → npg-PREROUTING → npg-from-host-endpoint → npg-fh-<if>   (doNotTrack)
//! mangle   PREROUTING → npg-PREROUTING → npg-from-host-endpoint → npg-fh-<if>   (preDNAT)
//! filter   INPUT      → npg-INPUT      → npg-from-host-endpoint → npg-fh-<if>   (normal)
//!          FORWARD    → npg-FORWARD    → npg-from/to-hep-forward → npg-fhfw/thfw-<if>
//!          OUTPUT     → npg-OUTPUT     → npg-to-host-endpoint    → npg-th-<if>
//! raw      OUTPUT     → npg-OUTPUT     → npg-to-host-endpoint    → npg-th-<if>  (doNotTrack)
//! raw      PREROUTING → npg-PREROUTING → npg-syn-PREROUTING → npg-syn-from-host-endpoint
//!                       (TCP SYNs only: pre-DNAT policy before conntrack, `early_drop`)
//! ```
//!
//! An endpoint chain runs the failsafe chain, clears the accept and pass bits, then jumps to
//! each policy's chain (`npg-pi-…`/`npg-po-…`) while the pass bit is clear, returning as soon
//! as a policy set the accept bit. Normal chains end with the default deny Calico applies.
//! Our chains never ACCEPT: an allowed packet returns to the kernel chain, where docker's,
//! kube-proxy's and the operator's own rules still apply. nodeport-guard only ever takes
//! reachability away.
//!
//! The modules follow the seams of Felix's `felix/rules`: `binding` picks the host endpoints
//! of this host, their interfaces and policies; `dispatch` writes the top-level and dispatch
//! chains (`dispatch.go`, `static.go`); `endpoints` one endpoint's chain (`endpoints.go`);
//! `policy` one policy's chain (`policy.go`); [`rules`] one policy rule's kernel rules;
//! `staged` the section of an endpoint chain that evaluates staged policies (log only).

pub mod binding;
mod dispatch;
mod early_drop;
pub(crate) use early_drop::{Guarded, guarded};
mod endpoints;
mod memo;
pub mod names;
mod policy;
pub mod rules;
pub mod sets;
mod staged;
mod syn_path;
mod syn_table;

use std::collections::BTreeMap;

use crate::config::Config;
use crate::diagnostic::Diagnostic;
use crate::facts::HostFacts;
use crate::marks::MarkBits;
use crate::model::{Direction, IpFamily, Model};
use crate::ruleset::{Chain, FamilyRuleset, Hook, Ruleset, Table, TableRuleset};
use binding::{Binding, Path, bind, default_deny_warnings, policy_warnings};
use sets::SetRegistry;

pub use binding::{HOSTNAME_LABEL, endpoints_of_host};
pub use endpoints::NEIGHBOUR_DISCOVERY;
pub use memo::{Memo, Reuse};
pub use policy::POLICIES_PER_CHAIN;

/// The result of compiling.
#[derive(Clone, Debug)]
pub struct Compiled {
    /// The rules and sets to program.
    pub ruleset: Ruleset,
    /// Things the operator should know before applying, in words.
    pub warnings: Vec<Diagnostic>,
    /// The names of the enforced and the staged policies compiled.
    pub names: PolicyNames,
}

/// The names of the policies of a compiled set, enforced and staged (`stagedAction: Set`), so
/// `plan` can tell when a policy moves from one to the other.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PolicyNames {
    /// Enforced policies.
    pub enforced: std::collections::BTreeSet<String>,
    /// Staged policies.
    pub staged: std::collections::BTreeSet<String>,
}

/// The chains of one table being built.
#[derive(Default)]
struct TableBuilder {
    hooks: Vec<Hook>,
    chains: BTreeMap<String, Chain>,
}

impl TableBuilder {
    fn add(&mut self, chain: Chain) {
        self.chains.entry(chain.name.clone()).or_insert(chain);
    }

    fn has(&self, name: &str) -> bool {
        self.chains.contains_key(name)
    }
}

struct Compiler<'a> {
    model: &'a Model,
    config: &'a Config,
    host: &'a HostFacts,
    marks: MarkBits,
    /// The policy chains of the last compile, when compiling incrementally.
    memo: Option<&'a memo::Lent>,
}

/// Compiles the model for this host.
///
/// `config.mark_mask` must have five bits (the config loader refuses other masks); a config
/// built in code with fewer falls back to the default mask's bits.
pub fn compile(model: &Model, config: &Config, host: &HostFacts) -> Compiled {
    compile_lent(model, config, host, None)
}

/// [`compile`], taking from `memo` the chains of every policy unchanged since the last compile
/// with it, and leaving there this compile's chains for the next. The result is the one
/// [`compile`] gives.
pub fn compile_with(model: &Model, config: &Config, host: &HostFacts, memo: &mut Memo) -> Compiled {
    let lent = memo.lend(model, config, marks_of(config));
    let compiled = compile_lent(model, config, host, Some(&lent));
    memo.restore(lent);
    compiled
}

fn compile_lent(
    model: &Model,
    config: &Config,
    host: &HostFacts,
    memo: Option<&memo::Lent>,
) -> Compiled {
    let marks = marks_of(config);
    let compiler = Compiler {
        model,
        config,
        host,
        marks,
        memo,
    };
    let mut warnings = Vec::new();
    let endpoints = endpoints_of_host(model, config, host);
    let bindings = bind(model, endpoints, host, &mut warnings);
    policy_warnings(model, &bindings, host, &mut warnings);
    default_deny_warnings(&bindings, config, &mut warnings);
    staged::deletion_notes(model, &mut warnings);

    let mut families = Vec::new();
    // The families are independent: each compiles on its own thread (a large policy set
    // takes half the time on two cores), and the results are taken in family order.
    let compiled_families = crate::parallel::map(host.families(), |family| {
        let mut sets = SetRegistry::new(family, model);
        let tables = compiler.compile_family(family, &bindings, &mut sets);
        (family, tables, sets)
    });
    for (family, tables, sets) in compiled_families {
        for selector in &sets.empty_selectors {
            warnings.push(Diagnostic::global_warning(format!(
                "rule selector `{selector}` matches no GlobalNetworkSet and no HostEndpoint ({family}): rules using it match nothing"
            )));
        }
        for port in &sets.unknown_named_ports {
            warnings.push(Diagnostic::global_warning(format!(
                "named port `{port}` is defined by no HostEndpoint: rules using it match nothing"
            )));
        }
        families.push(FamilyRuleset {
            family,
            tables,
            sets: sets.into_sets(),
        });
    }
    if !host.ipv6 {
        let reason = host
            .ipv6_off_reason
            .clone()
            .unwrap_or_else(|| "IPv6 is turned off".to_owned());
        warnings.push(Diagnostic::global_warning(format!(
            "IPv6 rules are skipped: {reason}"
        )));
    }
    dedup_warnings(&mut warnings);
    Compiled {
        ruleset: Ruleset { marks, families },
        warnings,
        names: PolicyNames {
            enforced: model.policies().iter().map(|p| p.name.clone()).collect(),
            staged: model
                .staged_policies()
                .iter()
                .map(|p| p.name.clone())
                .collect(),
        },
    }
}

/// The mark bits of `config.mark_mask`: five bits (the config loader refuses other masks); a
/// config built in code with fewer falls back to the default mask's bits. The compiler and the
/// trace carve them the same way.
pub fn marks_of(config: &Config) -> MarkBits {
    MarkBits::from_mask(config.mark_mask).unwrap_or(DEFAULT_MARKS)
}

/// The bits of the default mask `0xffff0000`.
const DEFAULT_MARKS: MarkBits = MarkBits {
    accept: 0x1_0000,
    pass: 0x2_0000,
    drop: 0x4_0000,
    scratch0: 0x8_0000,
    scratch1: 0x10_0000,
};

fn dedup_warnings(warnings: &mut Vec<Diagnostic>) {
    let mut seen = std::collections::HashSet::new();
    warnings.retain(|warning| seen.insert((warning.file, warning.span, warning.message.clone())));
}

impl Compiler<'_> {
    fn compile_family(
        &self,
        family: IpFamily,
        bindings: &[Binding<'_>],
        sets: &mut SetRegistry<'_>,
    ) -> Vec<TableRuleset> {
        let mut builders: BTreeMap<Table, TableBuilder> = BTreeMap::new();
        let own_addresses = self.host.own_addresses(&self.config.host_interface_exclude);

        for path in Path::ALL {
            if !bindings.iter().any(|binding| path.needed(binding)) {
                continue;
            }
            let builder = builders.entry(path.table()).or_default();
            self.build_path(family, path, bindings, builder, sets);
        }

        // Top-level chains, one per hooked kernel chain.
        self.hook_chains(&mut builders, sets, &own_addresses, bindings);
        // TCP SYNs that pre-DNAT policy denies, dropped in raw before conntrack.
        self.early_drop(&mut builders, sets, &own_addresses, bindings);
        // Mangle's pre-DNAT path without the clears and mark checks that cannot change anything.
        if let Some(mangle) = builders.get_mut(&Table::Mangle) {
            syn_path::tidy_table(mangle);
        }

        Table::ALL
            .into_iter()
            .filter_map(|table| {
                let builder = builders.remove(&table)?;
                let mut hooks = builder.hooks;
                let order = crate::ruleset::kernel_chains(table);
                hooks.sort_by_key(|hook| order.iter().position(|c| *c == hook.kernel_chain));
                Some(TableRuleset {
                    table,
                    hooks,
                    chains: builder.chains.into_values().collect(),
                })
            })
            .collect()
    }

    /// The NFLOG group of a direction.
    fn nflog_group(&self, direction: Direction) -> u16 {
        match direction {
            Direction::Ingress => self.config.nflog_group,
            Direction::Egress => self.config.nflog_group_egress,
        }
    }
}

#[cfg(test)]
mod staged_tests;
#[cfg(test)]
mod tests;
