//! `plan`: what `apply` would change, as a diff per chain and set; and the preparation `plan`
//! and `apply` share (compile the policies while the kernel is read).

use std::collections::HashMap;
use std::path::Path;
use std::process::ExitCode;

use anyhow::Result;
use serde::{Deserialize, Serialize};

use super::output::{established_json, print_cuts, print_established, print_plan};
use crate::compile::{Compiled, PolicyNames, names};
use crate::counters::{self, AppliedIndex};
use crate::dataplane::{Backend, Dataplane, Runner};
use crate::facts::HostFacts;
use crate::model::{Direction, IpFamily, Model};
use crate::plan;
use crate::policy_set;
use crate::reconcile::{Read, view};
use crate::settings::Settings;
use crate::state::State;
use crate::system::host::host_facts;
use crate::system::runtime::{StateDir, now_seconds};
use crate::trace::impact::{self, Impact};

/// A plan saved by `plan --out`.
#[derive(Debug, Serialize, Deserialize)]
pub struct SavedPlan {
    /// Format version.
    pub format: u32,
    /// The backend the plan was made for.
    #[serde(with = "crate::dataplane::serde_by_name")]
    pub backend: &'static dyn Backend,
    /// The families it programs.
    pub families: Vec<IpFamily>,
    /// Fingerprint of what the kernel held when the plan was made.
    pub observed: String,
    /// Fingerprint of the policy files the plan was made from.
    pub policies: String,
    /// The state to apply.
    pub desired: State,
    /// Where the policies were read from.
    pub policies_dir: String,
    /// Which kernel rules carry which policy rule's verdict.
    pub index: AppliedIndex,
}

/// The policies compiled for this host and the backend that will write them.
pub struct Prepared {
    /// The compiled policies.
    pub compiled: Compiled,
    /// The policy files' fingerprint.
    pub policies_fingerprint: String,
    /// The backend.
    pub backend: &'static dyn Backend,
    /// The state the backend writes for them.
    pub desired: State,
    /// The validated policies (for what a change cuts off).
    pub model: crate::model::Model,
    /// The policy files, as read.
    pub policy_files: Vec<crate::counters::PolicyFile>,
    /// The host they were compiled for.
    pub facts: HostFacts,
}

impl Prepared {
    /// The new connections the policies last applied let through and these would drop,
    /// among the sources and ports either names; `None` when no apply recorded its policies
    /// (or they are the same files).
    pub fn cut_off(&self, settings: &Settings) -> Option<Impact> {
        let files = applied_files(settings)?;
        if files == self.policy_files {
            return None;
        }
        let before = validated_applied(files)?;
        Some(impact::cuts(
            &before,
            &self.model,
            &settings.config,
            &self.facts,
        ))
    }
}

/// The policies the last apply recorded, validated; `None` when none was recorded (nothing
/// applied yet, or by a version that did not record them).
pub fn applied_model(settings: &Settings) -> Option<crate::model::Model> {
    applied_policies(settings).map(|(_, model)| model)
}

/// Says which policy (and tier) each policy chain of `changes` belongs to, from `model` (the
/// policies to apply) and, for the chains a change deletes, the policies last applied.
pub fn name_policies(changes: &mut plan::Plan, settings: &Settings, model: Option<&Model>) {
    // The policies last applied are read (and validated) only for a plan that deletes chains:
    // every other chain of a plan belongs to the policies to apply.
    let deletes = changes.tables.iter().any(|table| {
        table
            .chains
            .iter()
            .any(|chain| chain.action == plan::ChainAction::Delete)
    });
    let applied = if deletes || model.is_none() {
        applied_model(settings)
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

/// The policy files the last apply recorded, and their model.
fn applied_policies(
    settings: &Settings,
) -> Option<(Vec<crate::counters::PolicyFile>, crate::model::Model)> {
    let files = applied_files(settings)?;
    let model = validated_applied(files.clone())?;
    Some((files, model))
}

/// The policy files the last apply recorded; `None` when none was recorded.
fn applied_files(settings: &Settings) -> Option<Vec<crate::counters::PolicyFile>> {
    let files = StateDir::new(&settings.state_dir)
        .applied_policy_files()
        .ok()??;
    (!files.is_empty()).then_some(files)
}

/// The recorded policy files, validated; `None` when they are not valid. A command asks for
/// them up to three times (to name deleted chains' policies, for what a change cuts off, and
/// for the established connections it cuts), so the model of the last files validated is
/// kept, keyed by their content: validating 1,000 policies again costs 100 ms each time.
fn validated_applied(files: Vec<crate::counters::PolicyFile>) -> Option<crate::model::Model> {
    static LAST: std::sync::Mutex<Option<(Vec<crate::counters::PolicyFile>, crate::model::Model)>> =
        std::sync::Mutex::new(None);
    let mut last = LAST
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some((validated, model)) = last.as_ref()
        && *validated == files
    {
        return Some(model.clone());
    }
    let set = policy_set::from_files(&files);
    if !set.is_valid() {
        return None;
    }
    *last = Some((files, set.model.clone()));
    Some(set.model)
}

/// Validates the policies last applied ahead of the warning about what a change cuts off,
/// while the kernel is read and the policies to apply compile ([`validated_applied`] keeps the
/// result for that warning): only when the policy directory no longer holds exactly the files
/// last applied, since a plan with nothing to change needs none of it. Reading the files
/// twice costs a millisecond; validating 1,000 policies costs 100.
fn validate_applied_ahead(settings: &Settings) {
    let Some(files) = applied_files(settings) else {
        return;
    };
    let unchanged =
        crate::load::list_policy_files(&settings.config.policies_dir).is_ok_and(|paths| {
            paths.len() == files.len()
                && paths.iter().zip(&files).all(|(path, file)| {
                    *path == file.path
                        && crate::load::read_source(path).is_ok_and(|text| text == file.text)
                })
        });
    if !unchanged {
        validated_applied(files);
    }
}

/// The established connections the change would cut, counted (read from the conntrack
/// table; `None` when it cannot be read).
fn established_cuts(
    settings: &Settings,
    runner: &dyn Runner,
    prepared: &Prepared,
) -> Option<crate::revocation::Report> {
    if !runner.exists(crate::dataplane::conntrack::CONNTRACK) {
        return None;
    }
    let before = applied_model(settings);
    crate::revocation::revoke(
        runner,
        before.as_ref(),
        &prepared.model,
        &settings.config,
        &prepared.facts,
        false,
    )
    .map_err(|error| tracing::debug!("cannot count established connections: {error}"))
    .ok()
}

impl Prepared {
    /// Which kernel rules carry which policy rule's verdict.
    pub fn index(&self) -> AppliedIndex {
        let mut index = counters::origin_index(&self.compiled.ruleset, self.backend, now_seconds())
            .of_desired(&self.desired);
        index.policy_files = self.policy_files.clone();
        index
    }
}

fn prepare_for(
    settings: &Settings,
    backend: &'static dyn Backend,
    facts: &HostFacts,
) -> Option<Prepared> {
    let (set, compiled) = policy_set::compile_for(settings, facts)?;
    let desired = backend.desired(&compiled.ruleset);
    Some(Prepared {
        compiled,
        policies_fingerprint: set.fingerprint,
        backend,
        desired,
        policy_files: counters::policy_files(&set.sources),
        model: set.model,
        facts: facts.clone(),
    })
}

/// Compiles the policies for this host (printing their diagnostics); `None` when they are
/// invalid.
pub fn prepare(settings: &Settings, runner: &dyn Runner) -> Option<Prepared> {
    let facts = host_facts(&settings.config);
    let backend = settings.backend.resolve(runner);
    prepare_for(settings, backend, &facts)
}

/// Compiles the policies (printing their diagnostics) while another thread reads what the
/// kernel holds: neither needs the other, and together they are most of the time `plan` and
/// `apply` take. The kernel is read from the view the last command kept when the kernel's
/// sign says it is still the kernel's ([`view`]), else whole (keeping a view of it when that is
/// certain). The kernel's answer is only looked at once the policies are known to be valid;
/// `None` when they are not.
pub fn prepare_observing(
    settings: &Settings,
    runner: &dyn Runner,
) -> Option<(Prepared, view::Observation)> {
    let facts = host_facts(&settings.config);
    let backend = settings.backend.resolve(runner);
    let dataplane = Dataplane::new(backend, runner, facts.families(), &settings.state_dir);
    let state_dir = StateDir::new(&settings.state_dir);
    std::thread::scope(|scope| {
        let observing = scope.spawn(|| {
            let mut observed = view::observe(&dataplane, state_dir.view());
            match observed.read {
                Read::Cached => tracing::debug!(
                    "the kernel's sign is the one of the view the last command kept: planning against that view"
                ),
                Read::Whole => tracing::debug!("read every rule of ours in the kernel"),
            }
            if let Some(saved) = observed.save.take() {
                state_dir.set_view(&saved);
            }
            observed
        });
        let validating = scope.spawn(|| validate_applied_ahead(settings));
        let prepared = prepare_for(settings, backend, &facts);
        let observed = observing
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        validating
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        prepared.map(|prepared| (prepared, observed))
    })
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

/// The published (DNATed) ports the policies last applied guarded and the policies to apply
/// leave open to anyone, in words (`exposure::newly_open`); none when nothing was applied.
fn opened_published_ports(
    settings: &Settings,
    runner: &dyn Runner,
    prepared: &Prepared,
) -> Vec<String> {
    let Some(before) = applied_model(settings) else {
        return Vec::new();
    };
    let (dnat, _) = crate::exposure::scan::published(runner);
    crate::exposure::newly_open(
        &dnat,
        &before,
        &prepared.model,
        &settings.config,
        &prepared.facts,
    )
}

/// `plan [--detailed-exitcode] [--json] [--out FILE]`.
pub fn run(
    settings: &Settings,
    runner: &dyn Runner,
    detailed: bool,
    json: bool,
    out: Option<&Path>,
    full: bool,
) -> Result<ExitCode> {
    let Some((prepared, observed)) = prepare_observing(settings, runner) else {
        return Ok(ExitCode::from(1));
    };
    let observed = observed.state?;
    let mut changes = plan::plan(&prepared.desired, &observed);
    name_policies(&mut changes, settings, Some(&prepared.model));
    let cut_off = prepared.cut_off(settings);
    let established = if changes.is_empty() {
        None
    } else {
        established_cuts(settings, runner, &prepared)
    };
    let promotions = promotions(&prepared.compiled.names, &prepared.desired, &observed);
    let opened = if changes.is_empty() {
        Vec::new()
    } else {
        opened_published_ports(settings, runner, &prepared)
    };
    if json {
        let warnings: Vec<String> = prepared
            .compiled
            .warnings
            .iter()
            .map(|warning| warning.message.clone())
            .collect();
        let value = super::output::json_document(
            "Plan",
            serde_json::json!({
                "backend": prepared.backend.name(),
                "summary": changes.summary(),
                "changes": !changes.is_empty(),
                "warnings": warnings,
                "cutOff": cut_off.as_ref().map(|impact| &impact.cuts),
                "established": established.as_ref().map(|report| established_json(report, settings.config.revoke_established)),
                "promotions": promotions,
                "openedPublishedPorts": opened,
                "plan": changes,
            }),
        );
        println!("{}", serde_json::to_string_pretty(&value)?);
    } else if changes.is_empty() {
        println!("No changes: the kernel holds exactly what the policies say.");
    } else {
        for line in &promotions {
            println!("{line}");
        }
        print_plan(&changes, full);
        if let Some(impact) = &cut_off {
            print_cuts(impact);
        }
        if let Some(report) = &established {
            print_established(report, settings.config.revoke_established);
        }
        for line in &opened {
            println!("warning: {line}");
        }
    }
    if let Some(path) = out {
        let saved = SavedPlan {
            format: 1,
            backend: prepared.backend,
            families: prepared.compiled.ruleset.ip_families(),
            observed: observed.fingerprint(),
            index: prepared.index(),
            policies: prepared.policies_fingerprint,
            desired: prepared.desired,
            policies_dir: settings.config.policies_dir.display().to_string(),
        };
        fs_err::write(path, serde_json::to_vec_pretty(&saved)?)?;
        eprintln!(
            "Saved the plan to `{}`; apply it with `nodeport-guard apply {}`.",
            path.display(),
            path.display()
        );
    }
    Ok(if detailed && !changes.is_empty() {
        ExitCode::from(2)
    } else {
        ExitCode::SUCCESS
    })
}
