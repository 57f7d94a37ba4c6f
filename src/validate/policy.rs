//! `GlobalNetworkPolicy` (and a staged one's spec): tier, order, selector, types and the
//! policy kind.

use crate::model::{DEFAULT_TIER, Policy, PolicyKind};
use crate::selector::Selector;
use crate::source::Span;
use crate::spec::{Kind, RawPolicySpec, RawRule, Sp};

use super::checker::{Checker, Problem};
use super::entity::check_selector;
use super::envelope::Identity;
use super::rules::check_rules;
use super::values::{NameShape, shown, suggest_name};

/// The only performance hint Calico knows.
const PERFORMANCE_HINT: &str = "AssumeNeededOnEveryNode";

/// Which directions a policy governs, after Calico's defaulting of `types`.
struct PolicyTypes {
    ingress: bool,
    egress: bool,
    /// Whether `types` was written (a non-empty list), as opposed to derived from the rules.
    written: bool,
    /// Where `Egress` was written in `types`.
    egress_span: Option<Span>,
}

pub(super) fn check_policy(
    checker: &mut Checker<'_>,
    identity: Option<Identity>,
    spec: &RawPolicySpec,
) -> Option<Policy> {
    let tier = spec
        .tier
        .as_ref()
        .map_or(DEFAULT_TIER, |tier| tier.value.as_str());
    if let Some(identity) = &identity {
        check_policy_name(checker, &identity.name, tier);
    }
    let order = spec
        .order
        .as_ref()
        .and_then(|order| check_order(checker, order));
    let selector = match &spec.selector {
        Some(selector) => check_selector(checker, selector),
        None => Some(Selector::all()),
    };
    if let Some(action) = &spec.staged_action
        && checker.resource.kind.value == Kind::GlobalNetworkPolicy
    {
        checker.error_help(
            action.span,
            "`stagedAction` belongs to a `StagedGlobalNetworkPolicy`",
            "remove `stagedAction`, or write `kind: StagedGlobalNetworkPolicy` to audit the policy before enforcing it",
        );
    }
    if let Some(hints) = &spec.performance_hints {
        check_performance_hints(checker, &hints.value);
    }
    if let Some(rejected) = &spec.namespace_selector {
        checker.error_help(
            rejected.span,
            "`namespaceSelector` selects workloads by namespace, which does not apply to host endpoints",
            "remove `namespaceSelector`; `selector` chooses the host endpoints",
        );
    }
    if let Some(rejected) = &spec.service_account_selector {
        checker.error_help(
            rejected.span,
            "`serviceAccountSelector` selects workloads by service account, which does not apply to host endpoints",
            "remove `serviceAccountSelector`; `selector` chooses the host endpoints",
        );
    }
    let ingress = spec
        .ingress
        .as_ref()
        .map(|rules| check_rules(checker, &rules.value))
        .unwrap_or_default();
    let egress = spec
        .egress
        .as_ref()
        .map(|rules| check_rules(checker, &rules.value))
        .unwrap_or_default();
    let types = check_types(checker, spec);
    let kind = check_policy_kind(checker, spec, &types);
    warn_ignored_rules(checker, spec, &types, kind);
    let identity = identity?;
    Some(Policy {
        name: identity.name,
        tier: tier.to_owned(),
        tier_origin: spec.tier.as_ref().map(|tier| checker.origin(tier.span)),
        order,
        selector: selector?,
        ingress: types.ingress.then_some(ingress),
        egress: types.egress.then_some(egress),
        kind,
        apply_on_forward: spec
            .apply_on_forward
            .as_ref()
            .is_some_and(|flag| flag.value),
        expires: identity.expires,
        origin: identity.origin,
    })
}

/// Calico's rules for a policy's name beyond a subdomain's: the shape, then the tier prefix.
pub(super) fn check_policy_name(checker: &mut Checker<'_>, name: &str, tier: &str) {
    match policy_name_problem(name, tier) {
        Some(problem) => {
            let span = checker
                .resource
                .name()
                .map_or(checker.resource.span, |name| name.span);
            checker.report(span, problem);
        }
        None => check_tiered_name(checker, name, tier),
    }
}

/// Calico's rule for GlobalNetworkPolicy names, beyond a subdomain's: at most one `.` (between
/// a tier and a name, `<tier>.<name>`), and not `knp.default.…`, which names Kubernetes
/// network policies ("disallow name with dot", "disallow k8s policy name" in Calico's tests).
/// The help's name is one Calico accepts in `tier`.
fn policy_name_problem(name: &str, tier: &str) -> Option<Problem> {
    let help = |better: Option<String>, otherwise: &str| {
        better.map_or_else(
            || otherwise.to_owned(),
            |better| format!("write `{better}`"),
        )
    };
    if let Some(rest) = name.strip_prefix("knp.default.") {
        return Some(
            Problem::new(format!(
                "the name `{name}` is reserved: `knp.default.` names Kubernetes network policies"
            ))
            .help(help(
                suggest_name(rest, NameShape::Policy(tier)),
                "choose a name without the `knp.default.` prefix",
            )),
        );
    }
    if name.matches('.').count() <= 1 {
        return None;
    }
    Some(
        Problem::new(format!(
            "the name `{name}` has more than one `.`: a GlobalNetworkPolicy name is one label, or a tier and a label (`<tier>.<name>`)"
        ))
        .help(help(
            suggest_name(name, NameShape::Policy(tier)),
            "write the name with one `.` at most",
        )),
    )
}

/// The prefix of the policies Calico's OpenStack driver writes for security groups.
const OPENSTACK_PREFIX: &str = "ossg.";

/// Calico's rule for the names of tiered policies (v3.29–v3.31's
/// `names.ValidateTieredPolicyName`): in the `default` tier a name has no dot or starts with
/// `default.`; in any other tier it starts with `<tier>.`.
fn check_tiered_name(checker: &mut Checker<'_>, name: &str, tier: &str) {
    // Names Calico's own integrations write are formatted already, in any tier
    // (`names.policyNameIsFormatted`); of them only OpenStack's `ossg.<name>` is one a
    // GlobalNetworkPolicy may have (the others have two dots).
    if name.starts_with(OPENSTACK_PREFIX) {
        return;
    }
    let prefix = name.split_once('.').map(|(prefix, _)| prefix);
    let plain = name.split_once('.').map_or(name, |(_, rest)| rest);
    let fine = match prefix {
        None => tier == DEFAULT_TIER,
        Some(prefix) => prefix == tier,
    };
    if fine {
        return;
    }
    let span = checker
        .resource
        .name()
        .map_or(checker.resource.span, |name| name.span);
    let message = match prefix {
        None => format!(
            "the policy `{name}` is in tier `{}`, so its name must start with `{}.`",
            shown(tier),
            shown(tier)
        ),
        Some(prefix) => format!(
            "the name `{name}` starts with tier `{}`, but the policy is in tier `{}`",
            shown(prefix),
            shown(tier)
        ),
    };
    let help = if tier == DEFAULT_TIER {
        format!(
            "name it `{plain}` (or `default.{plain}`); or, if it belongs in tier `{}` (declared by a `Tier`), write `tier: {}`",
            prefix.unwrap_or(DEFAULT_TIER),
            prefix.unwrap_or(DEFAULT_TIER)
        )
    } else {
        format!("name it `{}.{plain}`", shown(tier))
    };
    checker.error_help(span, message, help);
}

pub(super) fn check_order(checker: &mut Checker<'_>, order: &Sp<f64>) -> Option<f64> {
    if order.value.is_finite() {
        Some(order.value)
    } else {
        checker.error_help(
            order.span,
            "`order` must be a finite number",
            "write a number such as `100`, or leave `order` out to run the policy last",
        );
        None
    }
}

fn check_performance_hints(checker: &mut Checker<'_>, hints: &[Sp<String>]) {
    let mut seen = false;
    for hint in hints {
        if hint.value != PERFORMANCE_HINT {
            checker.error_help(
                hint.span,
                format!("`{}` is not a performance hint", shown(&hint.value)),
                format!("the only hint is `{PERFORMANCE_HINT}`"),
            );
        } else if seen {
            checker.error_help(
                hint.span,
                format!("`{PERFORMANCE_HINT}` is listed twice"),
                "remove the second one",
            );
        } else {
            seen = true;
        }
    }
}

/// Checks `types` and applies Calico's defaulting when it is missing or empty: no egress rules
/// gives `[Ingress]`, egress rules only give `[Egress]`, both kinds give both.
fn check_types(checker: &mut Checker<'_>, spec: &RawPolicySpec) -> PolicyTypes {
    let has_ingress_rules = has_rules(spec.ingress.as_ref());
    let has_egress_rules = has_rules(spec.egress.as_ref());
    let Some(written) = spec.types.as_ref().filter(|types| !types.value.is_empty()) else {
        return PolicyTypes {
            ingress: has_ingress_rules || !has_egress_rules,
            egress: has_egress_rules,
            written: false,
            egress_span: None,
        };
    };
    let mut types = PolicyTypes {
        ingress: false,
        egress: false,
        written: true,
        egress_span: None,
    };
    for entry in &written.value {
        let (seen, name) = match entry.value.as_str() {
            "Ingress" => (&mut types.ingress, "Ingress"),
            "Egress" => {
                types.egress_span.get_or_insert(entry.span);
                (&mut types.egress, "Egress")
            }
            other => {
                let help = ["Ingress", "Egress"]
                    .into_iter()
                    .find(|name| name.eq_ignore_ascii_case(other))
                    .map_or_else(
                        || "write `Ingress` or `Egress`".to_owned(),
                        |name| format!("types are case-sensitive: write `{name}`"),
                    );
                checker.error_help(
                    entry.span,
                    format!("`{}` is not a policy type", shown(other)),
                    help,
                );
                continue;
            }
        };
        if *seen {
            checker.error_help(
                entry.span,
                format!("`{name}` is listed twice in `types`"),
                "remove the second one",
            );
        }
        *seen = true;
    }
    types
}

fn has_rules(rules: Option<&Sp<Vec<Sp<RawRule>>>>) -> bool {
    rules.is_some_and(|rules| !rules.value.is_empty())
}

/// Checks the combinations of `preDNAT`, `doNotTrack`, `applyOnForward` and `types` that Calico
/// refuses, and says where the policy runs.
fn check_policy_kind(
    checker: &mut Checker<'_>,
    spec: &RawPolicySpec,
    types: &PolicyTypes,
) -> PolicyKind {
    let pre_dnat = spec.pre_dnat.as_ref().filter(|flag| flag.value);
    let do_not_track = spec.do_not_track.as_ref().filter(|flag| flag.value);
    let apply_on_forward = spec.apply_on_forward.as_ref();
    if let (Some(pre_dnat), Some(_)) = (pre_dnat, do_not_track) {
        checker.error_help(
            pre_dnat.span,
            "a policy cannot be both `preDNAT` and `doNotTrack`",
            "keep one: `preDNAT` runs before DNAT, `doNotTrack` without connection tracking; split the rules into two policies if you need both",
        );
    }
    if let Some(pre_dnat) = pre_dnat {
        if let Some(egress) = spec.egress.as_ref().filter(|rules| !rules.value.is_empty()) {
            checker.error_help(
                egress.span,
                "a `preDNAT` policy cannot have egress rules",
                "move the egress rules to a policy without `preDNAT`",
            );
        }
        if types.egress {
            match types.egress_span {
                Some(span) => checker.error_help(
                    span,
                    "a `preDNAT` policy cannot have the `Egress` type",
                    "write `types: [Ingress]`",
                ),
                None => checker.error_help(
                    pre_dnat.span,
                    "a `preDNAT` policy cannot have the `Egress` type, which `types` defaults to because the policy has egress rules",
                    "move the egress rules to a policy without `preDNAT`",
                ),
            }
        }
    }
    if !apply_on_forward.is_some_and(|flag| flag.value) {
        let flagged = pre_dnat
            .map(|flag| (flag, "preDNAT"))
            .or(do_not_track.map(|flag| (flag, "doNotTrack")));
        if let Some((flag, name)) = flagged {
            let (span, help) = match apply_on_forward {
                Some(written) => (written.span, "write `applyOnForward: true`"),
                None => (flag.span, "add `applyOnForward: true`"),
            };
            checker.error_help(
                span,
                format!("a `{name}` policy must also apply to forwarded traffic"),
                help,
            );
        }
    }
    if pre_dnat.is_some() {
        PolicyKind::PreDnat
    } else if do_not_track.is_some() {
        PolicyKind::Untracked
    } else {
        PolicyKind::Normal
    }
}

/// Warns about rules of a direction that `types` leaves out: Calico accepts them and ignores
/// them silently, which is never what their author meant.
fn warn_ignored_rules(
    checker: &mut Checker<'_>,
    spec: &RawPolicySpec,
    types: &PolicyTypes,
    kind: PolicyKind,
) {
    if !types.written {
        return;
    }
    if let Some(ingress) = spec.ingress.as_ref()
        && !ingress.value.is_empty()
        && !types.ingress
    {
        checker.warning_help(
            ingress.span,
            "ingress rules are ignored because `types` does not include `Ingress`",
            "add `Ingress` to `types`, or remove the ingress rules",
        );
    }
    // A pre-DNAT policy's egress rules are an error already.
    if let Some(egress) = spec.egress.as_ref()
        && !egress.value.is_empty()
        && !types.egress
        && kind != PolicyKind::PreDnat
    {
        checker.warning_help(
            egress.span,
            "egress rules are ignored because `types` does not include `Egress`",
            "add `Egress` to `types`, or remove the egress rules",
        );
    }
}
