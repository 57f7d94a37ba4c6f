//! `Tier`: a group of policies that runs as one, and what becomes of a packet none of them
//! decided.

use crate::model::{DEFAULT_TIER, DEFAULT_TIER_ORDER, Tier, TierAction};
use crate::spec::RawTierSpec;

use super::checker::Checker;
use super::envelope::Identity;
use super::policy::check_order;
use super::values::shown;

pub(super) fn check_tier(
    checker: &mut Checker<'_>,
    identity: Option<Identity>,
    spec: &RawTierSpec,
) -> Option<Tier> {
    let default_tier = identity
        .as_ref()
        .is_some_and(|identity| identity.name == DEFAULT_TIER);
    // Policies outside `default` are named `<tier>.<name>`, and a policy name has one dot at
    // most: a tier's name has none.
    if let Some(identity) = &identity
        && identity.name.contains('.')
    {
        let span = checker
            .resource
            .name()
            .map_or(checker.resource.span, |name| name.span);
        checker.error_help(
            span,
            format!(
                "the tier name `{}` has a `.`: policies in a tier are named `<tier>.<name>`, so a tier's name is one label",
                identity.name
            ),
            format!("write `{}`", identity.name.replace('.', "-")),
        );
    }
    let order = match &spec.order {
        Some(order) => {
            let checked = check_order(checker, order);
            if default_tier && checked.is_some_and(|order| order != DEFAULT_TIER_ORDER) {
                checker.error_help(
                    order.span,
                    format!("the `default` tier's order is {DEFAULT_TIER_ORDER}, as in Calico"),
                    format!("write `order: {DEFAULT_TIER_ORDER}` or leave it out"),
                );
            }
            checked
        }
        None if default_tier => Some(DEFAULT_TIER_ORDER),
        None => None,
    };
    let default_action = match &spec.default_action {
        None => Some(TierAction::Deny),
        Some(action) => match action.value.as_str() {
            "Deny" => Some(TierAction::Deny),
            "Pass" if default_tier => {
                checker.error_help(
                    action.span,
                    "the `default` tier's `defaultAction` is `Deny`, as in Calico",
                    "write `defaultAction: Deny` or leave it out; put policies that should pass in a tier of their own",
                );
                None
            }
            "Pass" => Some(TierAction::Pass),
            other => {
                checker.error_help(
                    action.span,
                    format!("`{}` is not a tier's default action", shown(other)),
                    "write `Deny` (drop what no policy of the tier decided) or `Pass` (on to the next tier)",
                );
                None
            }
        },
    };
    let identity = identity?;
    Some(Tier {
        name: identity.name,
        order,
        default_action: default_action?,
        origin: Some(identity.origin),
    })
}
