//! Entity rules, the `source` and `destination` of a rule: nets, selectors and ports.

use ipnet::IpNet;

use crate::model::{EntityRule, Port};
use crate::selector::Selector;
use crate::spec::{RawEntityRule, RawPort, Sp};

use super::MAX_SELECTOR_CHARS;
use super::checker::{Checker, Problem};
use super::values::{parse_port, parse_rule_net};

/// A checked `source` or `destination`, with the positions of its nets for the rule-level
/// family checks.
#[derive(Default)]
pub(super) struct CheckedEntity {
    pub(super) rule: EntityRule,
    /// `nets` then `notNets`, each with where it was written.
    pub(super) nets: Vec<Sp<IpNet>>,
}

pub(super) fn check_entity_rule(
    checker: &mut Checker<'_>,
    entity: &Sp<RawEntityRule>,
) -> CheckedEntity {
    let raw = &entity.value;
    let mut checked = CheckedEntity::default();
    if let Some(nets) = &raw.nets {
        checked.rule.nets = check_rule_nets(checker, &nets.value, false, &mut checked.nets);
    }
    if let Some(nets) = &raw.not_nets {
        checked.rule.not_nets = check_rule_nets(checker, &nets.value, true, &mut checked.nets);
    }
    checked.rule.selector = raw
        .selector
        .as_ref()
        .and_then(|selector| check_selector(checker, selector));
    checked.rule.not_selector = raw
        .not_selector
        .as_ref()
        .and_then(|selector| check_selector(checker, selector));
    if let Some(ports) = &raw.ports {
        checked.rule.ports = check_ports(checker, &ports.value);
    }
    if let Some(ports) = &raw.not_ports {
        checked.rule.not_ports = check_ports(checker, &ports.value);
    }
    if let Some(rejected) = &raw.namespace_selector {
        checker.error_help(
            rejected.span,
            "`namespaceSelector` selects workloads by namespace, which does not apply to host endpoints",
            "remove `namespaceSelector`; here `selector` matches host endpoints and GlobalNetworkSets",
        );
    }
    if let Some(rejected) = &raw.service_accounts {
        checker.error_help(
            rejected.span,
            "`serviceAccounts` selects workloads by service account, which does not apply to host endpoints",
            "remove `serviceAccounts`; match the workloads' addresses with `nets` or a GlobalNetworkSet",
        );
    }
    if let Some(rejected) = &raw.services {
        checker.error_help(
            rejected.span,
            "`services` selects Kubernetes services, which do not apply to host endpoints",
            "remove `services`; match the service's addresses with `nets` or a GlobalNetworkSet",
        );
    }
    checked
}

/// Checks the entries of `nets` or `notNets`; returns the valid ones and records them, with
/// their spans, in `positions`.
fn check_rule_nets(
    checker: &mut Checker<'_>,
    nets: &[Sp<String>],
    negated: bool,
    positions: &mut Vec<Sp<IpNet>>,
) -> Vec<IpNet> {
    let mut valid = Vec::new();
    for net in nets {
        match parse_rule_net(&net.value) {
            Ok(parsed) if negated && parsed.prefix_len() == 0 => checker.error_help(
                net.span,
                format!(
                    "`{parsed}` in `notNets` excludes every address, so the rule matches nothing"
                ),
                "remove the entry; remove the whole rule if it should never match",
            ),
            Ok(parsed) => {
                positions.push(Sp::new(parsed, net.span));
                valid.push(parsed);
            }
            Err(problem) => checker.report(net.span, problem),
        }
    }
    valid
}

fn check_ports(checker: &mut Checker<'_>, ports: &[Sp<RawPort>]) -> Vec<Port> {
    let mut valid = Vec::new();
    for port in ports {
        match parse_port(&port.value) {
            Ok(parsed) => valid.push(parsed),
            Err(problem) => checker.report(port.span, problem),
        }
    }
    valid
}

/// Checks a selector (of a policy or of an entity rule); returns it parsed. Errors of the
/// selector parser point into the selector text.
pub(super) fn check_selector(checker: &mut Checker<'_>, selector: &Sp<String>) -> Option<Selector> {
    let text = &selector.value;
    if text.is_empty() {
        return Some(Selector::all());
    }
    let length = text.chars().count();
    if length > MAX_SELECTOR_CHARS {
        checker.error_help(
            selector.span,
            format!(
                "the selector is {length} characters long, more than the {MAX_SELECTOR_CHARS} allowed"
            ),
            "give the endpoints or network sets a label and select that instead",
        );
        return None;
    }
    // Calico rejects the substring anywhere, even inside a quoted value.
    if let Some(position) = text.find("global(") {
        let span = checker.inside(selector, position, "global(".len());
        checker.error_help(
            span,
            "`global()` can only be used in a namespaceSelector, which does not apply to host endpoints",
            "remove it: here selectors only match host endpoints and GlobalNetworkSets, which is what `global()` means",
        );
        return None;
    }
    match Selector::parse(text) {
        Ok(parsed) => Some(parsed),
        Err(error) => {
            let span = checker.inside(selector, error.offset, error.len);
            let help = error.help.or_else(|| {
                text.ends_with('\n').then(|| {
                    "the selector ends with a newline: write it with `>-` or `|-`, or quote it on one line".to_owned()
                })
            });
            let problem = Problem {
                message: error.message,
                help,
            };
            checker.report(span, problem);
            None
        }
    }
}
