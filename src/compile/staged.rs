//! Staged policies (`StagedGlobalNetworkPolicy`): judged like enforced ones, tier by tier, on
//! the same paths, but in a section of the endpoint chain of their own, after the failsafes and
//! before the enforced policies, that never drops or accepts anything:
//!
//! ```text
//! clear accept|pass|drop                      Start of staged policies
//! clear pass                                  Start of staged tier <tier>
//! accept|pass|drop clear → jump npg-spi-<p>   (one per staged policy of the tier)
//! accept|pass|drop clear → NFLOG DPI|staged:<tier>, set drop   (normal policy, tier Deny)
//! clear accept|pass|drop|scratch0|scratch1    End of staged policies
//! ```
//!
//! A staged policy's chain sets the bits an enforced one would (accept on Allow, pass on Pass,
//! drop on Deny) but returns instead of dropping; a set accept or drop bit skips every later
//! staged jump (the staged verdict is in), a set pass bit the rest of its tier. The last rule
//! clears every bit the section used, so the enforced policies start as they would without it.

use super::binding::{Binding, Path};
use super::names;
use super::policy::POLICIES_PER_CHAIN;
use super::rules::{self, clear_bits, mark_clear, set_bit};
use super::sets::SetRegistry;
use super::{Compiler, TableBuilder};
use crate::diagnostic::Diagnostic;
use crate::model::{self, IpFamily, Model, TierAction};
use crate::ruleset::{Action, Chain, Match, Rule};

impl Compiler<'_> {
    /// The staged section of an endpoint chain on one path; no rules when no staged policy
    /// applies there.
    pub(super) fn staged_section(
        &self,
        family: IpFamily,
        path: Path,
        binding: &Binding<'_>,
        builder: &mut TableBuilder,
        sets: &mut SetRegistry<'_>,
    ) -> Vec<Rule> {
        let policies = path.staged(binding);
        if policies.is_empty() {
            return Vec::new();
        }
        let marks = self.marks;
        let direction = path.direction();
        let verdict_bits = marks.accept | marks.pass | marks.drop;
        let undecided = || vec![mark_clear(verdict_bits)];
        let normal = path.is_normal();
        let mut out = vec![
            Rule::new(Vec::new(), clear_bits(verdict_bits))
                .comment("Start of staged policies: they log, never drop"),
        ];
        for tier_policies in policies.chunk_by(|a, b| a.tier == b.tier) {
            let tier = tier_policies[0].tier.as_str();
            out.push(
                Rule::new(Vec::new(), clear_bits(marks.pass))
                    .comment(format!("Start of staged tier {tier}")),
            );
            let jumps: Vec<Rule> = tier_policies
                .iter()
                .map(|policy| {
                    let chain = self.policy_chain(family, policy, direction, true, builder, sets);
                    Rule::new(undecided(), Action::Jump(chain))
                })
                .collect();
            out.extend(batched(path, jumps, builder, &undecided));
            let denies = self
                .model
                .tier(tier)
                .is_none_or(|tier| tier.default_action == TierAction::Deny);
            let group = self.nflog_group(direction);
            let name = rules::staged_name(tier);
            if normal && denies {
                out.push(
                    Rule::new(
                        undecided(),
                        Action::Nflog {
                            group,
                            prefix: rules::nflog_prefix('D', direction, None, &name),
                        },
                    )
                    .comment(format!("End of staged tier {tier}: would drop, logged")),
                );
                out.push(
                    Rule::new(undecided(), set_bit(marks.drop))
                        .comment(format!("End of staged tier {tier}: staged evaluation ends")),
                );
            } else if normal && self.config.log_actions.contains(&model::Action::Pass) {
                out.push(
                    Rule::new(
                        undecided(),
                        Action::Nflog {
                            group,
                            prefix: rules::nflog_prefix('P', direction, None, &name),
                        },
                    )
                    .comment(format!("End of staged tier {tier}: pass, logged")),
                );
            }
        }
        out.push(
            Rule::new(Vec::new(), clear_bits(marks.all()))
                .comment("End of staged policies: clear their marks"),
        );
        out
    }
}

/// The jumps of one staged tier, in batch chains (as the enforced policies') when there are
/// more than [`POLICIES_PER_CHAIN`]; every jump stays gated, so a batch skips the rest of its
/// policies once one decided.
fn batched(
    path: Path,
    jumps: Vec<Rule>,
    builder: &mut TableBuilder,
    undecided: &dyn Fn() -> Vec<Match>,
) -> Vec<Rule> {
    if jumps.len() <= POLICIES_PER_CHAIN {
        return jumps;
    }
    let mut section = Vec::new();
    for batch in jumps.chunks(POLICIES_PER_CHAIN) {
        let content: Vec<String> = batch
            .iter()
            .filter_map(|rule| match &rule.action {
                Action::Jump(target) => Some(target.clone()),
                _ => None,
            })
            .collect();
        let name = names::batch_chain(&format!("staged|{}|{}", path.table(), content.join(",")));
        builder.add(Chain {
            name: name.clone(),
            rules: batch.into(),
        });
        section.push(Rule::new(undecided(), Action::Jump(name)));
    }
    section
}

/// What the staged deletions say, in words, for `plan`: one note per deletion, pointing at it.
pub(super) fn deletion_notes(model: &Model, notes: &mut Vec<Diagnostic>) {
    for deletion in model.staged_deletions() {
        let exists = model
            .policies()
            .iter()
            .any(|policy| policy.name == deletion.name);
        let message = if exists {
            format!(
                "staged: would delete policy `{}` (a staged deletion: the policy is still enforced)",
                deletion.name
            )
        } else {
            format!(
                "staged: would delete policy `{}`, which no GlobalNetworkPolicy of the files defines",
                deletion.name
            )
        };
        notes.push(Diagnostic::warning(
            deletion.origin.file,
            deletion.origin.span,
            message,
        ));
    }
}
