//! `StagedGlobalNetworkPolicy`: a `GlobalNetworkPolicy` spec plus `stagedAction`, checked as
//! Calico's `validateStagedGlobalNetworkPolicy` does. `Set` (the default) checks the spec
//! exactly as the enforced kind's; `Delete` stages the removal of the enforced policy of its
//! name, and then every spec field but `tier` must be left out ("Spec fields, except Tier,
//! should all be zero-value if stagedAction is Delete").

use crate::model::{DEFAULT_TIER, Policy, StagedDeletion};
use crate::source::Span;
use crate::spec::{RawPolicySpec, Sp};

use super::checker::Checker;
use super::envelope::Identity;
use super::policy::{check_policy, check_policy_name};
use super::values::shown;

/// A checked staged policy.
#[derive(Clone, Debug)]
pub(super) enum Staged {
    /// `stagedAction: Set`: evaluated, logged, never enforced.
    Set(std::sync::Arc<Policy>),
    /// `stagedAction: Delete`: nothing to evaluate.
    Delete(StagedDeletion),
}

/// What `stagedAction` says.
#[derive(Clone, Copy, PartialEq, Eq)]
enum StagedAction {
    Set,
    Delete,
}

pub(super) fn check_staged_policy(
    checker: &mut Checker<'_>,
    identity: Option<Identity>,
    spec: &RawPolicySpec,
) -> Option<Staged> {
    match check_staged_action(checker, spec.staged_action.as_ref()) {
        Some(StagedAction::Delete) => check_deletion(checker, identity, spec).map(Staged::Delete),
        // An invalid `stagedAction` was reported; the rest is checked as a `Set`, so every
        // problem shows at once.
        _ => check_policy(checker, identity, spec)
            .map(|policy| Staged::Set(std::sync::Arc::new(policy))),
    }
}

/// `Set` (also when left out: Calico's default) or `Delete`; `None` when invalid (reported).
fn check_staged_action(
    checker: &mut Checker<'_>,
    action: Option<&Sp<String>>,
) -> Option<StagedAction> {
    let Some(action) = action else {
        return Some(StagedAction::Set);
    };
    match action.value.as_str() {
        // Calico: "should accept an empty StagedAction value" (empty is the default, Set).
        "Set" | "" => Some(StagedAction::Set),
        "Delete" => Some(StagedAction::Delete),
        other => {
            let help = match ["Set", "Delete"]
                .into_iter()
                .find(|name| name.eq_ignore_ascii_case(other))
            {
                Some(name) => format!("staged actions are case-sensitive: write `{name}`"),
                None if matches!(other, "Learn" | "Ignore") => format!(
                    "`{other}` is for Calico Enterprise's policy recommendations; write `Set` (stage this spec) or `Delete` (stage removing the policy)"
                ),
                None => "write `Set` (stage this spec, the default) or `Delete` (stage removing the policy)".to_owned(),
            };
            checker.error_help(
                action.span,
                format!("`{}` is not a staged action", shown(other)),
                help,
            );
            None
        }
    }
}

/// A staged deletion: its name follows the policy name rules, and its spec holds nothing but
/// `tier` (and `stagedAction`).
fn check_deletion(
    checker: &mut Checker<'_>,
    identity: Option<Identity>,
    spec: &RawPolicySpec,
) -> Option<StagedDeletion> {
    let tier = spec
        .tier
        .as_ref()
        .map_or(DEFAULT_TIER, |tier| tier.value.as_str());
    if let Some(identity) = &identity {
        check_policy_name(checker, &identity.name, tier);
    }
    for (field, span) in set_fields(spec) {
        checker.error_help(
            span,
            format!(
                "a staged policy with `stagedAction: Delete` has nothing to evaluate, so it cannot have `{field}`"
            ),
            format!(
                "remove `{field}` (only `tier` may stay), or write `stagedAction: Set` to stage this spec"
            ),
        );
    }
    let identity = identity?;
    Some(StagedDeletion {
        name: identity.name,
        tier: tier.to_owned(),
        expires: identity.expires,
        origin: identity.origin,
    })
}

/// The spec fields, `tier` and `stagedAction` aside, that are written with a value other than
/// their zero value (Calico compares the spec with an empty one).
fn set_fields(spec: &RawPolicySpec) -> Vec<(&'static str, Span)> {
    let mut fields = Vec::new();
    let mut push = |field, span: Option<Span>| {
        if let Some(span) = span {
            fields.push((field, span));
        }
    };
    push("order", spec.order.as_ref().map(|order| order.span));
    push(
        "selector",
        spec.selector
            .as_ref()
            .filter(|selector| !selector.value.is_empty())
            .map(|selector| selector.span),
    );
    push(
        "types",
        spec.types
            .as_ref()
            .filter(|types| !types.value.is_empty())
            .map(|types| types.span),
    );
    for (field, rules) in [("ingress", &spec.ingress), ("egress", &spec.egress)] {
        push(
            field,
            rules
                .as_ref()
                .filter(|rules| !rules.value.is_empty())
                .map(|rules| rules.span),
        );
    }
    for (field, flag) in [
        ("preDNAT", &spec.pre_dnat),
        ("applyOnForward", &spec.apply_on_forward),
        ("doNotTrack", &spec.do_not_track),
    ] {
        push(
            field,
            flag.as_ref()
                .filter(|flag| flag.value)
                .map(|flag| flag.span),
        );
    }
    push(
        "performanceHints",
        spec.performance_hints
            .as_ref()
            .filter(|hints| !hints.value.is_empty())
            .map(|hints| hints.span),
    );
    push(
        "namespaceSelector",
        spec.namespace_selector.as_ref().map(|field| field.span),
    );
    push(
        "serviceAccountSelector",
        spec.service_account_selector
            .as_ref()
            .map(|field| field.span),
    );
    fields
}
