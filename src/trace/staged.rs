//! The staged policies' pass of an endpoint chain (`compile::staged`), traced: judged among
//! themselves, tier by tier, logging what they would do with `staged:` prefixes; they decide
//! nothing, and every mark bit they set is cleared before the enforced policies run.

use super::{Step, Tracer, chain_step};
use crate::compile::binding::{Binding, Path};
use crate::compile::rules::{nflog_prefix, staged_name};
use crate::config::LogTarget;
use crate::model::{self, Policy, TierAction};

impl Tracer<'_> {
    /// The staged pass of `binding`'s chain on `path`; nothing when no staged policy applies.
    pub(super) fn staged_pass(
        &mut self,
        path: Path,
        binding: &Binding<'_>,
        chain: &str,
        steps: &mut Vec<Step>,
    ) {
        let policies = path.staged(binding);
        if policies.is_empty() {
            return;
        }
        let marks = self.marks;
        let verdict_bits = marks.accept | marks.pass | marks.drop;
        let normal = path.is_normal();
        let direction = path.direction();
        let group = self.nflog_group(direction);
        self.bits &= !verdict_bits;
        steps.push(chain_step(
            Step::new(
                "staged",
                1,
                "staged policies: they log what they would do and decide nothing",
            ),
            chain,
        ));
        for tier_policies in policies.chunk_by(|a, b| a.tier == b.tier) {
            let tier = tier_policies[0].tier.clone();
            self.bits &= !marks.pass;
            let mut step = Step::new("stagedTier", 2, format!("staged tier {tier}"));
            step.tier = Some(tier.clone());
            steps.push(chain_step(step, chain));
            for policy in tier_policies {
                if self.bits & verdict_bits != 0 {
                    break;
                }
                self.staged_policy(policy, path, steps);
            }
            if self.bits & verdict_bits != 0 || !normal {
                continue;
            }
            let denies = self
                .model
                .tier(&tier)
                .is_none_or(|tier| tier.default_action == TierAction::Deny);
            let name = staged_name(&tier);
            let (letter, words) = if denies {
                self.bits |= marks.drop;
                ('D', "would drop (only logged)")
            } else if self.config.log_actions.contains(&model::Action::Pass) {
                ('P', "would pass to the next tier (logged)")
            } else {
                continue;
            };
            let prefix = nflog_prefix(letter, direction, None, &name);
            let mut step = Step::new(
                "stagedEndOfTier",
                2,
                format!("end of staged tier {tier}: {words}"),
            );
            step.tier = Some(tier.clone());
            self.log_in(&mut step, group, &prefix);
            steps.push(chain_step(step, chain));
        }
        self.bits = 0;
        steps.push(chain_step(
            Step::new(
                "stagedEnd",
                1,
                "end of staged policies: their marks are cleared",
            ),
            chain,
        ));
    }

    /// One staged policy's chain: its rules in order until one decides what it would do.
    fn staged_policy(&mut self, policy: &Policy, path: Path, steps: &mut Vec<Step>) {
        let direction = path.direction();
        let chain = crate::compile::names::staged_policy_chain(&policy.name, direction);
        let group = self.nflog_group(direction);
        let mut header = Step::new("stagedPolicy", 3, format!("staged policy {}", policy.name));
        header.policy = Some(policy.name.clone());
        header.tier = Some(policy.tier.clone());
        header.chain = Some(chain.clone());
        steps.push(header);
        let logs = |action: model::Action| self.config.log_actions.contains(&action);
        for (index, rule) in policy
            .rules(direction)
            .unwrap_or_default()
            .iter()
            .enumerate()
        {
            if !super::rule_matches(self.model, self.selections, rule, self.packet, self.family) {
                continue;
            }
            let marks = self.marks;
            let (bit, letter, logged, words) = match rule.action {
                model::Action::Allow => {
                    (marks.accept, 'A', logs(model::Action::Allow), "would allow")
                }
                model::Action::Pass => (marks.pass, 'P', logs(model::Action::Pass), "would pass"),
                // A staged Deny always logs: that is what it is for.
                model::Action::Deny => (marks.drop, 'D', true, "would drop (only logged)"),
                model::Action::Log if self.config.log_target != LogTarget::Nflog => (
                    0,
                    'L',
                    false,
                    "logged to the kernel log; the next rule goes on",
                ),
                model::Action::Log => (0, 'L', true, "logged; the next rule goes on"),
            };
            let prefix = nflog_prefix(letter, direction, Some(index), &staged_name(&policy.name));
            let mut step = Step::new(
                "stagedRule",
                4,
                format!("rule {index} ({}) matched: {words}", rule.action),
            );
            step.policy = Some(policy.name.clone());
            step.rule = Some(index);
            step.action = Some(rule.action.to_string());
            step.chain = Some(chain.clone());
            if logged {
                self.log_in(&mut step, group, &prefix);
            }
            steps.push(step);
            if bit != 0 {
                self.bits |= bit;
                return;
            }
        }
    }
}
