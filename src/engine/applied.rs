//! The policies last applied, as the state directory recorded them: validated once per
//! engine, and what a plan says with them (the policies of deleted chains, what a change cuts
//! off, the established connections it cuts, the published ports it opens, promotions between
//! staged and enforced).

use std::collections::HashMap;

use super::{Engine, Prepared};
use crate::compile::{PolicyNames, names};
use crate::counters::AppliedFiles;
use crate::model::{Direction, Model};
use crate::plan;
use crate::policy_set;
use crate::state::State;
use crate::trace::impact::{self, Impact};

impl Engine<'_> {
    /// The policies the last apply recorded, validated; `None` when none was recorded
    /// (nothing applied yet, or by a version that did not record them) or they are invalid.
    pub fn applied_model(&self) -> Option<Model> {
        self.validated_applied(self.applied_files()?)
    }

    /// The policy files the last apply recorded; `None` when none was recorded.
    fn applied_files(&self) -> Option<AppliedFiles> {
        let files = self.state_dir.applied_policy_files().ok()??;
        (!files.policy_files.is_empty()).then_some(files)
    }

    /// `files` validated, kept for the next question about the same files.
    fn validated_applied(&self, files: AppliedFiles) -> Option<Model> {
        let mut last = self
            .applied
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some((validated, model)) = last.as_ref()
            && *validated == files
        {
            return Some(model.clone());
        }
        // At the instant they were applied: what had not expired then is in the kernel.
        let set =
            policy_set::from_files_through(&files.policy_files, files.instant(), &self.cache());
        if !set.is_valid() {
            return None;
        }
        *last = Some((files, set.model.clone()));
        Some(set.model)
    }

    /// Validates the policies last applied ahead of the questions a plan asks of them, while
    /// the kernel is read and the policies to apply compile: only when the policy directory
    /// no longer holds exactly the files last applied, since a plan with nothing to change
    /// needs none of it.
    pub(super) fn validate_applied_ahead(&self) {
        let Some(files) = self.applied_files() else {
            return;
        };
        let dir = &self.settings.config.policies_dir;
        let unchanged = crate::load::list_policy_files(dir).is_ok_and(|paths| {
            paths.len() == files.policy_files.len()
                && paths.iter().zip(&files.policy_files).all(|(path, file)| {
                    *path == file.path
                        && crate::load::read_source(path).is_ok_and(|text| text == file.text)
                })
        });
        if !unchanged {
            self.validated_applied(files);
        }
    }

    /// Says which policy (and tier) each policy chain of `changes` belongs to, from `model`
    /// (the policies to apply) and, for the chains a change deletes, the policies last
    /// applied.
    pub fn name_policies(&self, changes: &mut plan::Plan, model: Option<&Model>) {
        // The policies last applied are read (and validated) only for a plan that deletes
        // chains: every other chain of a plan belongs to the policies to apply.
        let deletes = changes.tables.iter().any(|table| {
            table
                .chains
                .iter()
                .any(|chain| chain.action == plan::ChainAction::Delete)
        });
        let applied = if deletes || model.is_none() {
            self.applied_model()
        } else {
            None
        };
        // The policies to apply win: they are inserted last.
        let mut owners = HashMap::new();
        for model in applied.iter().chain(model) {
            let enforced = model.policies().iter().map(|policy| (policy, false));
            let staged = model.staged_policies().iter().map(|policy| (policy, true));
            for (policy, staged) in enforced.chain(staged) {
                for direction in [Direction::Ingress, Direction::Egress] {
                    let chain = if staged {
                        names::staged_policy_chain(&policy.name, direction)
                    } else {
                        names::policy_chain(&policy.name, direction)
                    };
                    let owner = plan::ChainPolicy {
                        name: policy.name.clone(),
                        tier: policy.tier.clone(),
                        direction,
                        staged,
                    };
                    owners.insert(chain, owner);
                }
            }
        }
        changes.name_policies(&owners);
    }

    /// The new connections the policies last applied let through and `prepared` would drop,
    /// among the sources and ports either names; `None` when no apply recorded its policies
    /// (or they are the same files).
    pub fn cut_off(&self, prepared: &Prepared) -> Option<Impact> {
        let files = self.applied_files()?;
        // The same files mean other rules once something in them has expired since.
        let expired_since = prepared
            .expiring
            .iter()
            .any(|item| !item.active && item.expires > files.instant());
        if files.policy_files == prepared.policy_files && !expired_since {
            return None;
        }
        let before = self.validated_applied(files)?;
        Some(impact::cuts(
            &before,
            &prepared.model,
            &self.settings.config,
            &prepared.facts,
        ))
    }

    /// The established connections applying `prepared` would cut, counted (read from the
    /// conntrack table; `None` when it cannot be read).
    pub fn established_cuts(&self, prepared: &Prepared) -> Option<crate::revocation::Report> {
        if !self.runner.exists(crate::dataplane::conntrack::CONNTRACK) {
            return None;
        }
        let before = self.applied_model();
        self.revoke(before.as_ref(), &prepared.model, &prepared.facts, false)
            .map_err(|error| tracing::debug!("cannot count established connections: {error}"))
            .ok()
    }

    /// The published (DNATed) ports the policies last applied guarded (some sources or none)
    /// and `prepared` would leave open to anyone, in words (`exposure::newly_open`, on the nat
    /// rules read now); none when nothing was recorded as applied.
    pub fn opened_published_ports(&self, prepared: &Prepared) -> Vec<String> {
        let Some(before) = self.applied_model() else {
            return Vec::new();
        };
        let (dnat, _) = crate::exposure::scan::published(self.runner);
        crate::exposure::newly_open(
            &dnat,
            &before,
            &prepared.model,
            &self.settings.config,
            &prepared.facts,
        )
    }
}

/// Policies that move between staged and enforced with this plan, in words: a policy the
/// kernel holds as staged and the plan writes only as enforced is promoted (its Deny rules
/// will drop; the staged spec replaced an enforced one of its name, or there was none), and
/// one the kernel enforces and the plan writes only as staged goes back to staged.
pub fn promotions(names: &PolicyNames, desired: &State, observed: &State) -> Vec<String> {
    let has = |state: &State, chain: &dyn Fn(&str, Direction) -> String, policy: &str| {
        [Direction::Ingress, Direction::Egress]
            .into_iter()
            .any(|direction| {
                let name = chain(policy, direction);
                state
                    .tables
                    .values()
                    .any(|table| table.chains.contains_key(&name))
            })
    };
    let enforced = |policy: &str, direction| names::policy_chain(policy, direction);
    let staged = |policy: &str, direction| names::staged_policy_chain(policy, direction);
    let mut lines = Vec::new();
    for policy in &names.enforced {
        if has(desired, &enforced, policy)
            && has(observed, &staged, policy)
            && !has(desired, &staged, policy)
        {
            lines.push(format!(
                "policy `{policy}`: promoted from staged: its Deny rules now drop"
            ));
        }
    }
    for policy in &names.staged {
        if has(desired, &staged, policy)
            && has(observed, &enforced, policy)
            && !has(desired, &enforced, policy)
        {
            lines.push(format!(
                "policy `{policy}`: back to staged: its Deny rules no longer drop, they only log"
            ));
        }
    }
    lines
}
