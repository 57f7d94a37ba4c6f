//! `Tier`: a group of policies that runs as one, and what becomes of a packet none of them
//! decided.

use crate::model::{DEFAULT_TIER, DEFAULT_TIER_ORDER, Tier, TierAction};
use crate::spec::RawTierSpec;

use super::checker::Checker;
use super::envelope::Identity;
use super::policy::check_order;
use super::values::{MAX_LABEL_BYTES, NameShape, shown, suggest_name};

pub(super) fn check_tier(
    checker: &mut Checker<'_>,
    identity: Option<Identity>,
    spec: &RawTierSpec,
) -> Option<Tier> {
    let default_tier = identity
        .as_ref()
        .is_some_and(|identity| identity.name == DEFAULT_TIER);
    // Policies outside `default` are named `<tier>.<name>`, and a policy name has one dot at
    // most: a tier's name is one label ("Tier: disallow dot in name"), and at most 63
    // characters long ("Tier: disallow a name of 64 chars"), as it must fit in a label.
    if let Some(identity) = &identity {
        let name = identity.name.as_str();
        let span = checker
            .resource
            .name()
            .map_or(checker.resource.span, |name| name.span);
        let help = |fallback: &str| {
            suggest_name(name, NameShape::Label)
                .map_or_else(|| fallback.to_owned(), |better| format!("write `{better}`"))
        };
        if name.contains('.') {
            checker.error_help(
                span,
                format!(
                    "the tier name `{name}` has a `.`: policies in a tier are named `<tier>.<name>`, so a tier's name is one label"
                ),
                help("write the name without `.`"),
            );
        } else if name.len() > MAX_LABEL_BYTES {
            checker.error_help(
                span,
                format!(
                    "the tier name `{}` is {} characters long, {} more than Calico allows: a tier's name must fit in a label ({MAX_LABEL_BYTES} characters)",
                    shown(name),
                    name.len(),
                    name.len() - MAX_LABEL_BYTES
                ),
                format!("write a name of at most {MAX_LABEL_BYTES} characters"),
            );
        }
    }
    // A tier without `order` gets the default tier's (`DefaultTierFields`, v3.29 on); then a
    // built-in tier must have Calico's order (`validateTier`: "default tier order must be
    // 1e+06", and the same for the two admin network policy tiers), so only `default` may
    // leave it out.
    let order = match &spec.order {
        Some(order) => check_order(checker, order),
        None => Some(DEFAULT_TIER_ORDER),
    };
    let builtin = identity
        .as_ref()
        .and_then(|identity| Tier::builtin(&identity.name));
    let order = match (builtin, order) {
        (Some(builtin), Some(order_value)) if order_value != builtin.order => {
            let span = spec.order.as_ref().map_or_else(
                || {
                    checker
                        .resource
                        .name()
                        .map_or(checker.resource.span, |name| name.span)
                },
                |order| order.span,
            );
            let message = if spec.order.is_some() {
                format!(
                    "the `{}` tier's order is {}, as in Calico",
                    builtin.name, builtin.order
                )
            } else {
                format!(
                    "the `{}` tier's order is {}, as in Calico, and a `Tier` without `order` has {DEFAULT_TIER_ORDER}",
                    builtin.name, builtin.order
                )
            };
            checker.error_help(span, message, format!("write `order: {}`", builtin.order));
            None
        }
        _ => order,
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
        order: order?,
        default_action: default_action?,
        origin: Some(identity.origin),
    })
}
