//! Validation: raw resources in, a [`Model`] and every diagnostic out.
//!
//! The rules are calicoctl's (Calico v3.30's validator) for `GlobalNetworkPolicy` (and
//! `StagedGlobalNetworkPolicy`, in `staged`),
//! `GlobalNetworkSet` and `HostEndpoint`, plus the rejection of fields that only make sense for
//! workloads. Messages are this tool's own: each points at the offending value, says what is
//! wrong in one sentence and, where it can, what to write instead. Where the checks differ from
//! Calico, a comment next to the check says why.
//!
//! The work is split the way the input is: `envelope` checks what every resource has
//! (`apiVersion`, metadata, labels, annotations, duplicate names); `policy`, `network_set` and
//! `host_endpoint` check one resource kind each; `rules` checks a policy's rules and `entity`
//! their `source` / `destination`. `values` holds the small pure functions (`parse_port`,
//! `parse_protocol`, `parse_rule_net`, the name checks…) that say what is wrong with a single
//! value and are unit-tested on their own; `checker` turns what they say into diagnostics.
//!
//! Architecture invariant: validation never stops at the first error, and it never asks the
//! system anything (no files, no kernel): it is a pure function of the parsed files. It does
//! not panic on any input either: every slice of user text is taken with checked access.

use std::cmp::Ordering;
use std::collections::HashMap;
use std::sync::Arc;

use crate::diagnostic::Diagnostic;
use crate::model::{
    BUILTIN_TIERS, HostEndpoint, Model, NetworkSet, Origin, Policy, StagedDeletion, Tier,
};
use crate::source::{FileId, Sources};
use crate::spec::{
    Kind, RawHostEndpointSpec, RawNetworkSetSpec, RawPolicySpec, RawResource, RawSpec, RawTierSpec,
};

mod checker;
mod entity;
mod envelope;
pub mod expiry;
mod host_endpoint;
mod network_set;
mod policy;
mod rules;
mod staged;
#[cfg(test)]
mod tests;
mod tier;
mod values;

pub use values::{
    LABEL_VALUE_RULE, QUALIFIED_NAME_RULE, is_subdomain, label_key_problem, label_value_problem,
    parse_cidr,
};

use checker::Checker;
use envelope::{NameKey, check_api_version, check_duplicate, check_metadata, name_key};
use host_endpoint::check_host_endpoint;
use network_set::check_network_set;
use policy::check_policy;
use staged::{Staged, check_staged_policy};
use tier::check_tier;

/// Longest resource name, node name or label-key prefix (RFC 1123 subdomain), in bytes.
pub const MAX_NAME_BYTES: usize = 253;

/// Longest selector, in characters (the limit of Calico's CRDs).
pub const MAX_SELECTOR_CHARS: usize = 1024;

/// Most bytes the annotations of one object may hold, keys and values together (Kubernetes'
/// limit).
pub const MAX_ANNOTATION_BYTES: usize = 256 * 1024;

/// Calico's allow-all profile, the only profile that exists here.
pub const DEFAULT_ALLOW_PROFILE: &str = "projectcalico-default-allow";

/// Checks every resource and builds the model.
///
/// Every problem of every resource is reported; nothing stops at the first error. The model
/// holds every resource whose name is valid and not a duplicate, without the pieces (rules,
/// nets, ports, labels…) that are invalid: it is only meaningful when no diagnostic is an
/// error. Policies come in evaluation order (by `order`, none last, then by name); network
/// sets and host endpoints are sorted by name. The implicit host endpoint is not created here.
/// Diagnostics come sorted by file and position.
///
/// # Panics
/// If a [`FileId`] in `resources` does not belong to `sources`.
pub fn validate(
    sources: &Sources,
    resources: &[(FileId, RawResource)],
) -> (Model, Vec<Diagnostic>) {
    let files: Vec<FileInput<'_>> = resources
        .chunk_by(|a, b| a.0 == b.0)
        .map(|chunk| FileInput {
            file: chunk[0].0,
            resources: Resources::Raw(chunk),
        })
        .collect();
    let validated = validate_files(sources, &files);
    (validated.model, validated.diagnostics)
}

/// One file's resources, as [`validate_files`] takes them.
#[derive(Clone, Debug)]
pub struct FileInput<'a> {
    /// The file, for diagnostics' positions.
    pub file: FileId,
    /// Its resources, in document order.
    pub resources: Resources<'a>,
}

/// A file's resources: parsed, or as an earlier validation left them.
#[derive(Clone, Debug)]
pub enum Resources<'a> {
    /// Parsed and not yet checked (each paired with its file, which is this input's file).
    Raw(&'a [(FileId, RawResource)]),
    /// Checked by an earlier [`validate_files`] of the same text under the same [`FileId`],
    /// without any diagnostic.
    Checked(Arc<[CheckedResource]>),
}

/// One resource as validation left it: what the checks of the resource alone made of it, and
/// the name the checks across resources (duplicates, tiers) need. A long-running reader keeps
/// these for the files that had no diagnostic, so that an unchanged file is not checked again.
#[derive(Clone, Debug)]
pub struct CheckedResource {
    name: Option<NameKey>,
    checked: Option<Checked>,
}

/// What [`validate_files`] found.
#[derive(Debug)]
pub struct Validated {
    /// The model (meaningful only when `diagnostics` hold no error).
    pub model: Model,
    /// Every problem found, sorted by file and position.
    pub diagnostics: Vec<Diagnostic>,
    /// For each input file, in order, its checked resources when checking them alone found
    /// nothing to say (what may be given again as [`Resources::Checked`] while its text and
    /// [`FileId`] stay the same); `None` for a file that had diagnostics.
    pub reusable: Vec<Option<Arc<[CheckedResource]>>>,
}

/// [`validate`], taking for each file either its parsed resources or what an earlier
/// validation of the same text checked. The model and diagnostics are the same as
/// [`validate`]'s of every file parsed: the checks across resources run over all of them
/// every time, and those of one resource depend on nothing but its file's text.
///
/// # Panics
/// If a [`FileId`] in `files` does not belong to `sources`.
pub fn validate_files(sources: &Sources, files: &[FileInput<'_>]) -> Validated {
    let mut diagnostics = Vec::new();
    let mut reusable = Vec::with_capacity(files.len());
    let mut kept = Kept::default();
    for input in files {
        match &input.resources {
            Resources::Checked(checked) => {
                for resource in checked.iter() {
                    kept.keep(resource, input.file, sources, &mut diagnostics);
                }
                reusable.push(Some(checked.clone()));
            }
            Resources::Raw(resources) => {
                let mut clean = true;
                let mut checked = Vec::with_capacity(resources.len());
                for (file, resource) in resources.iter() {
                    let before = diagnostics.len();
                    let mut checker = Checker {
                        file: *file,
                        resource,
                        text: &sources.get(*file).text,
                        diagnostics: &mut diagnostics,
                        errors: 0,
                    };
                    let resource_checked = CheckedResource {
                        name: name_key(resource),
                        checked: check_resource(&mut checker),
                    };
                    clean &= diagnostics.len() == before;
                    // What is wrong with a resource stops mattering when it expires: from then
                    // on it is as if no file held it, so a stale grant cannot block a reload.
                    if let Some(at) = expiry::declared_expiry(resource) {
                        for diagnostic in &mut diagnostics[before..] {
                            diagnostic.moot_after.get_or_insert(at);
                        }
                    }
                    // The duplicate check needs the resource's expiry; its message is sorted
                    // into place with the others by position.
                    kept.keep(&resource_checked, *file, sources, &mut diagnostics);
                    checked.push(resource_checked);
                }
                reusable.push(clean.then(|| Arc::from(checked)));
            }
        }
    }
    let kept = kept.checked;
    let (model, diagnostics) = assemble(kept, diagnostics);
    Validated {
        model,
        diagnostics,
        reusable,
    }
}

/// The resources kept so far for the model, and the first definition of every name.
#[derive(Default)]
struct Kept {
    first_definitions: HashMap<(Kind, String), envelope::FirstDefinition>,
    checked: Vec<Checked>,
}

impl Kept {
    /// Keeps what checking `resource` (of `file`) made of it, unless it is a duplicate (which
    /// gets its error). A duplicate where either of the two expires is kept as well: once one
    /// has expired, the other stands alone (the error is moot then), so the model must hold it.
    fn keep(
        &mut self,
        resource: &CheckedResource,
        file: FileId,
        sources: &Sources,
        diagnostics: &mut Vec<Diagnostic>,
    ) {
        let expires = resource.checked.as_ref().and_then(Checked::expires);
        let keep = resource.name.as_ref().is_none_or(|name| {
            check_duplicate(
                name,
                expires,
                file,
                sources,
                &mut self.first_definitions,
                diagnostics,
            )
        });
        if keep {
            self.checked.extend(resource.checked.clone());
        }
    }
}

/// The model of the checked resources that are not duplicates, with the checks across them.
fn assemble(kept: Vec<Checked>, mut diagnostics: Vec<Diagnostic>) -> (Model, Vec<Diagnostic>) {
    let (mut policies, mut network_sets, mut host_endpoints) = (Vec::new(), Vec::new(), Vec::new());
    let mut tiers = Vec::new();
    let (mut staged, mut staged_deletions) = (Vec::new(), Vec::new());
    for checked in kept {
        match checked {
            Checked::Policy(policy) => policies.push(policy),
            Checked::NetworkSet(set) => network_sets.push(set),
            Checked::HostEndpoint(endpoint) => host_endpoints.push(endpoint),
            Checked::Tier(tier) => tiers.push(tier),
            Checked::Staged(Staged::Set(policy)) => staged.push(policy),
            Checked::Staged(Staged::Delete(deletion)) => staged_deletions.push(deletion),
        }
    }
    // Calico creates its built-in tiers in every cluster; a file may declare them too.
    for (name, _, _) in BUILTIN_TIERS {
        if !tiers.iter().any(|tier| tier.name == name) {
            tiers.extend(Tier::builtin(name));
        }
    }
    sort_tiers(&mut tiers);
    check_policy_tiers(&policies, &tiers, &mut diagnostics);
    check_policy_tiers(&staged, &tiers, &mut diagnostics);
    check_deletion_tiers(&staged_deletions, &tiers, &mut diagnostics);
    sort_resources(
        &tiers,
        &mut policies,
        &mut network_sets,
        &mut host_endpoints,
    );
    sort_resources(&tiers, &mut staged, &mut [], &mut []);
    staged_deletions.sort_by(|a, b| a.name.cmp(&b.name));
    crate::diagnostic::sort(&mut diagnostics);
    let model = Model::from_checked(tiers, policies, network_sets, host_endpoints)
        .with_staged(staged, staged_deletions);
    (model, diagnostics)
}

/// Tiers in evaluation order: by `order`, then by name (Felix's `TierLess`).
fn sort_tiers(tiers: &mut [Tier]) {
    tiers.sort_by(|a, b| {
        a.order
            .partial_cmp(&b.order)
            .unwrap_or(Ordering::Equal)
            .then_with(|| a.name.as_bytes().cmp(b.name.as_bytes()))
    });
}

/// A policy's tier must exist: declared by a `Tier` of the policy files, or `default`.
fn check_policy_tiers(policies: &[Arc<Policy>], tiers: &[Tier], diagnostics: &mut Vec<Diagnostic>) {
    for policy in policies {
        let origin = policy.tier_origin.unwrap_or(policy.origin);
        let expires = policy.expires.as_ref().map(|expiry| expiry.at);
        check_tier_exists(
            &policy.name,
            &policy.tier,
            origin,
            expires,
            tiers,
            diagnostics,
        );
    }
}

/// A staged deletion's tier must exist too, as Calico's does.
fn check_deletion_tiers(
    deletions: &[StagedDeletion],
    tiers: &[Tier],
    diagnostics: &mut Vec<Diagnostic>,
) {
    for deletion in deletions {
        check_tier_exists(
            &deletion.name,
            &deletion.tier,
            deletion.origin,
            deletion.expires.as_ref().map(|expiry| expiry.at),
            tiers,
            diagnostics,
        );
    }
}

/// A policy (or staged deletion) that `expires` needs its tier only until then.
fn check_tier_exists(
    name: &str,
    tier: &str,
    origin: Origin,
    expires: Option<jiff::Timestamp>,
    tiers: &[Tier],
    diagnostics: &mut Vec<Diagnostic>,
) {
    if tiers.iter().any(|known| known.name == tier) {
        return;
    }
    diagnostics.push(
            Diagnostic::error(
                origin.file,
                origin.span,
                format!(
                    "the policy `{name}` is in tier `{}`, which no `Tier` of the policy files declares",
                    values::shown(tier)
                ),
            )
            .with_help(format!(
                "add a `kind: Tier` named `{}` (with its `order`), or write the policy's tier as it is declared",
                values::shown(tier)
            ))
            .moot_after(expires),
        );
}

/// Puts policies in evaluation order (tier by tier) and the other resources in name order.
fn sort_resources(
    tiers: &[Tier],
    policies: &mut [Arc<Policy>],
    network_sets: &mut [Arc<NetworkSet>],
    host_endpoints: &mut [Arc<HostEndpoint>],
) {
    // Calico treats a missing order as +infinity and breaks ties by name, byte-wise. Orders are
    // finite (checked), so `partial_cmp` is a total order here.
    let order_key = |order: Option<f64>| order.unwrap_or(f64::INFINITY);
    let rank = |policy: &Policy| {
        tiers
            .iter()
            .position(|tier| tier.name == policy.tier)
            .unwrap_or(tiers.len())
    };
    policies.sort_by(|a, b| {
        rank(a)
            .cmp(&rank(b))
            .then_with(|| {
                order_key(a.order)
                    .partial_cmp(&order_key(b.order))
                    .unwrap_or(Ordering::Equal)
            })
            .then_with(|| a.name.as_bytes().cmp(b.name.as_bytes()))
    });
    network_sets.sort_by(|a, b| a.name.cmp(&b.name));
    host_endpoints.sort_by(|a, b| a.name.cmp(&b.name));
}

/// A checked resource, ready for the model.
#[derive(Clone, Debug)]
enum Checked {
    Policy(Arc<Policy>),
    NetworkSet(Arc<NetworkSet>),
    HostEndpoint(Arc<HostEndpoint>),
    Tier(Tier),
    Staged(Staged),
}

impl Checked {
    /// When the resource stops counting, if it carries an expiry.
    fn expires(&self) -> Option<jiff::Timestamp> {
        let expiry = match self {
            Checked::Policy(policy) | Checked::Staged(Staged::Set(policy)) => &policy.expires,
            Checked::NetworkSet(set) => &set.expires,
            Checked::Staged(Staged::Delete(deletion)) => &deletion.expires,
            Checked::HostEndpoint(_) | Checked::Tier(_) => return None,
        };
        expiry.as_ref().map(|expiry| expiry.at)
    }
}

// Checked values are shared (the daemon's cache of validated files and the model hold the same
// ones): each is put behind its `Arc` once, here.
impl From<Policy> for Checked {
    fn from(policy: Policy) -> Checked {
        Checked::Policy(Arc::new(policy))
    }
}

impl From<NetworkSet> for Checked {
    fn from(set: NetworkSet) -> Checked {
        Checked::NetworkSet(Arc::new(set))
    }
}

impl From<HostEndpoint> for Checked {
    fn from(endpoint: HostEndpoint) -> Checked {
        Checked::HostEndpoint(Arc::new(endpoint))
    }
}

fn check_resource(checker: &mut Checker<'_>) -> Option<Checked> {
    let resource = checker.resource;
    check_api_version(checker);
    let identity = check_metadata(checker);
    let spec = resource.spec.as_ref().map(|spec| (&spec.value, spec.span));
    match (resource.kind.value, spec) {
        (Kind::GlobalNetworkPolicy, Some((RawSpec::Policy(spec), _))) => {
            check_policy(checker, identity, spec).map(Checked::from)
        }
        (Kind::GlobalNetworkPolicy, _) => {
            // Calico's defaults: all(), `types: [Ingress]`, no rules.
            check_policy(checker, identity, &RawPolicySpec::default()).map(Checked::from)
        }
        (Kind::StagedGlobalNetworkPolicy, Some((RawSpec::Policy(spec), _))) => {
            check_staged_policy(checker, identity, spec).map(Checked::Staged)
        }
        (Kind::StagedGlobalNetworkPolicy, _) => {
            check_staged_policy(checker, identity, &RawPolicySpec::default()).map(Checked::Staged)
        }
        (Kind::GlobalNetworkSet, Some((RawSpec::NetworkSet(spec), _))) => {
            check_network_set(checker, identity, spec).map(Checked::from)
        }
        (Kind::GlobalNetworkSet, _) => {
            check_network_set(checker, identity, &RawNetworkSetSpec::default()).map(Checked::from)
        }
        (Kind::HostEndpoint, Some((RawSpec::HostEndpoint(spec), span))) => {
            check_host_endpoint(checker, identity, spec, span).map(Checked::from)
        }
        (Kind::HostEndpoint, _) => check_host_endpoint(
            checker,
            identity,
            &RawHostEndpointSpec::default(),
            resource.span,
        )
        .map(Checked::from),
        (Kind::Tier, Some((RawSpec::Tier(spec), _))) => {
            check_tier(checker, identity, spec).map(Checked::Tier)
        }
        (Kind::Tier, _) => {
            check_tier(checker, identity, &RawTierSpec::default()).map(Checked::Tier)
        }
        // The loader flattens list kinds into their items, so none reaches this point.
        _ => None,
    }
}

/// A model of resources built by hand, in the order given, for the unit tests of what reads
/// models (the compiler): only `validate` builds models, and this is its door for those tests.
#[cfg(test)]
pub(crate) fn model_for_tests(
    policies: Vec<Policy>,
    network_sets: Vec<NetworkSet>,
    host_endpoints: Vec<HostEndpoint>,
) -> Model {
    Model::from_checked(
        vec![Tier::implicit_default()],
        policies.into_iter().map(Arc::new).collect(),
        network_sets.into_iter().map(Arc::new).collect(),
        host_endpoints.into_iter().map(Arc::new).collect(),
    )
}
