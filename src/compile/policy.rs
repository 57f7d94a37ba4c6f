//! One policy → its chain, and the jumps of an endpoint chain to the policies of its tier, as
//! in Felix's `policy.go`: each jump is gated on the pass bit, and the endpoint chain returns
//! as soon as a policy set the accept bit.

use super::binding::Path;
use super::names;
use super::rules::{self, RuleContext, mark_clear, mark_set};
use super::sets::SetRegistry;
use super::{Compiler, TableBuilder};
use crate::model::{Direction, IpFamily, Policy};
use crate::ruleset::{Action, Chain, Rule};

/// Most policies one chain jumps to; longer lists are split into batch chains so no chain grows
/// past a few hundred rules.
pub const POLICIES_PER_CHAIN: usize = 100;

impl Compiler<'_> {
    /// The jumps to each policy (gated on the pass bit), in batch chains when the list is
    /// long.
    pub(super) fn policy_section(
        &self,
        family: IpFamily,
        path: Path,
        policies: &[&Policy],
        builder: &mut TableBuilder,
        sets: &mut SetRegistry<'_>,
    ) -> Vec<Rule> {
        let untracked = matches!(path, Path::UntrackedIn | Path::UntrackedOut);
        let direction = path.direction();
        let mut jumps = Vec::new();
        for policy in policies {
            let chain = self.policy_chain(family, policy, direction, false, builder, sets);
            jumps.extend(self.gated_jump(chain, untracked));
        }
        if policies.len() <= POLICIES_PER_CHAIN {
            return jumps;
        }
        let per_policy = jumps.len() / policies.len();
        let mut section = Vec::new();
        for batch in jumps.chunks(POLICIES_PER_CHAIN * per_policy) {
            let content: Vec<String> = batch
                .iter()
                .filter_map(|rule| match &rule.action {
                    Action::Jump(target) => Some(target.clone()),
                    _ => None,
                })
                .collect();
            let name = names::batch_chain(&format!("{}|{}", path.table(), content.join(",")));
            builder.add(Chain {
                name: name.clone(),
                rules: batch.into(),
            });
            section.extend(self.gated_jump(name, false));
        }
        section
    }

    /// A jump to `chain` while the pass bit is clear, and the return when it accepted
    /// (skipping connection tracking first, for untracked policy).
    fn gated_jump(&self, chain: String, untracked: bool) -> Vec<Rule> {
        let marks = self.marks;
        let mut rules = vec![Rule::new(vec![mark_clear(marks.pass)], Action::Jump(chain))];
        if untracked {
            rules.push(
                Rule::new(vec![mark_set(marks.accept)], Action::NoTrack)
                    .comment("untracked policy accepted: skip connection tracking"),
            );
        }
        rules.push(
            Rule::new(vec![mark_set(marks.accept)], Action::Return)
                .comment("Return if policy accepted"),
        );
        rules
    }

    /// The chain of one policy (enforced, or `staged`) in one direction, built once per
    /// table; returns its name.
    pub(super) fn policy_chain(
        &self,
        family: IpFamily,
        policy: &Policy,
        direction: Direction,
        staged: bool,
        builder: &mut TableBuilder,
        sets: &mut SetRegistry<'_>,
    ) -> String {
        let name = if staged {
            names::staged_policy_chain(&policy.name, direction)
        } else {
            names::policy_chain(&policy.name, direction)
        };
        if builder.has(&name) {
            return name;
        }
        if let Some(entry) = self
            .memo
            .and_then(|memo| memo.get(family, &name, policy, staged))
        {
            sets.replay(&entry.events);
            builder.add(Chain {
                name: name.clone(),
                rules: std::sync::Arc::clone(&entry.rules),
            });
            return name;
        }
        if self.memo.is_some() {
            sets.record();
        }
        let context = RuleContext {
            family,
            marks: self.marks,
            policy: &policy.name,
            tier: &policy.tier,
            origin_names: (
                std::sync::Arc::from(policy.name.as_str()),
                std::sync::Arc::from(policy.tier.as_str()),
            ),
            direction,
            log_actions: &self.config.log_actions,
            log_target: &self.config.log_target,
            nflog_group: self.nflog_group(direction),
            staged,
        };
        let mut rules: Vec<Rule> = policy
            .rules(direction)
            .unwrap_or_default()
            .iter()
            .enumerate()
            .flat_map(|(index, rule)| rules::compile_rule(rule, index, &context, sets))
            .collect();
        // Falling off the end of the chain returns too (Felix strips these as well).
        while rules
            .last()
            .is_some_and(|rule| rule.action == Action::Return)
        {
            rules.pop();
        }
        let rules: std::sync::Arc<[Rule]> = rules.into();
        if let Some(memo) = self.memo {
            let rules = std::sync::Arc::clone(&rules);
            memo.put(family, &name, policy, staged, rules, sets.recorded());
        }
        builder.add(Chain {
            name: name.clone(),
            rules,
        });
        name
    }
}
