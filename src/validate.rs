//! Validation: raw resources in, a [`Model`] and every diagnostic out.
//!
//! The rules are calicoctl's (Calico v3.30's validator) for `GlobalNetworkPolicy`,
//! `GlobalNetworkSet` and `HostEndpoint`, plus the rejection of fields that only make sense for
//! workloads. Messages are this tool's own: each points at the offending value, says what is
//! wrong in one sentence and, where it can, what to write instead. Where the checks differ from
//! Calico, a comment next to the check says why.
//!
//! The work is split the way the input is: one function per resource kind, one for rules, one
//! for entity rules (`source` / `destination`), and small pure functions (`parse_port`,
//! `parse_protocol`, `parse_rule_net`, the name checks…) that say what is wrong with a single
//! value and are unit-tested on their own.
//!
//! Architecture invariant: validation never stops at the first error, and it never asks the
//! system anything (no files, no kernel): it is a pure function of the parsed files. It does
//! not panic on any input either: every slice of user text is taken with checked access.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::IpAddr;

use ipnet::IpNet;

use crate::diagnostic::Diagnostic;
use crate::model::{
    Action, EndpointInterface, EntityRule, HostEndpoint, IcmpMatch, IpFamily, Labels, Model,
    NamedPort, NetworkSet, Origin, Policy, PolicyKind, Port, Protocol, Rule,
};
use crate::selector::Selector;
use crate::source::{FileId, Sources, Span};
use crate::spec::{
    API_VERSION, Kind, RawEndpointPort, RawEntityRule, RawHostEndpointSpec, RawIcmp,
    RawNetworkSetSpec, RawPolicySpec, RawPort, RawProtocol, RawResource, RawRule, RawSpec, Sp,
};

/// Longest resource name, node name or label-key prefix (RFC 1123 subdomain), in bytes.
pub const MAX_NAME_BYTES: usize = 253;

/// Longest selector, in characters (the limit of Calico's CRDs).
pub const MAX_SELECTOR_CHARS: usize = 1024;

/// Most bytes the annotations of one object may hold, keys and values together (Kubernetes'
/// limit).
pub const MAX_ANNOTATION_BYTES: usize = 256 * 1024;

/// Longest label value, and longest name part of a label or annotation key.
const MAX_LABEL_NAME_CHARS: usize = 63;

/// Longest named port (Kubernetes' `IANA_SVC_NAME`).
const MAX_PORT_NAME_CHARS: usize = 15;

/// Longest Linux interface name.
const MAX_INTERFACE_NAME_CHARS: usize = 15;

/// Calico's allow-all profile, the only profile that exists here.
pub const DEFAULT_ALLOW_PROFILE: &str = "projectcalico-default-allow";

/// The only performance hint Calico knows.
const PERFORMANCE_HINT: &str = "AssumeNeededOnEveryNode";

/// Protocol names as Calico spells them (exact case).
const PROTOCOL_NAMES: [(&str, Protocol); 6] = [
    ("TCP", Protocol::Tcp),
    ("UDP", Protocol::Udp),
    ("ICMP", Protocol::Icmp),
    ("ICMPv6", Protocol::Icmpv6),
    ("SCTP", Protocol::Sctp),
    ("UDPLite", Protocol::UdpLite),
];

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
    let mut diagnostics = Vec::new();
    let mut model = Model::default();
    let mut first_definitions = HashMap::new();
    for (file, resource) in resources {
        let mut checker = Checker {
            file: *file,
            resource,
            text: &sources.get(*file).text,
            diagnostics: &mut diagnostics,
            errors: 0,
        };
        let duplicate = check_duplicate(&mut checker, sources, &mut first_definitions);
        let checked = check_resource(&mut checker);
        if duplicate {
            continue;
        }
        match checked {
            Some(Checked::Policy(policy)) => model.policies.push(policy),
            Some(Checked::NetworkSet(set)) => model.network_sets.push(set),
            Some(Checked::HostEndpoint(endpoint)) => model.host_endpoints.push(endpoint),
            None => {}
        }
    }
    sort_model(&mut model);
    crate::diagnostic::sort(&mut diagnostics);
    (model, diagnostics)
}

/// Puts policies in evaluation order and the other resources in name order.
fn sort_model(model: &mut Model) {
    // Calico treats a missing order as +infinity and breaks ties by name, byte-wise. Orders are
    // finite (checked), so `partial_cmp` is a total order here.
    let order_key = |order: Option<f64>| order.unwrap_or(f64::INFINITY);
    model.policies.sort_by(|a, b| {
        order_key(a.order)
            .partial_cmp(&order_key(b.order))
            .unwrap_or(Ordering::Equal)
            .then_with(|| a.name.as_bytes().cmp(b.name.as_bytes()))
    });
    model.network_sets.sort_by(|a, b| a.name.cmp(&b.name));
    model.host_endpoints.sort_by(|a, b| a.name.cmp(&b.name));
}

/// What is wrong with one value: a one-sentence message and, when there is something useful to
/// say, what to write instead.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Problem {
    message: String,
    help: Option<String>,
}

impl Problem {
    fn new(message: impl Into<String>) -> Self {
        Problem {
            message: message.into(),
            help: None,
        }
    }

    fn help(mut self, help: impl Into<String>) -> Self {
        self.help = Some(help.into());
        self
    }
}

/// Reports the diagnostics of one resource, turning its document-relative spans into spans of
/// the file.
struct Checker<'a> {
    file: FileId,
    resource: &'a RawResource,
    /// The whole text of the resource's file, to find positions inside quoted values.
    text: &'a str,
    diagnostics: &'a mut Vec<Diagnostic>,
    /// How many errors this resource has had so far, so a piece can tell whether it was valid.
    errors: usize,
}

impl Checker<'_> {
    /// Reports an error with a help line at `span` (relative to the resource's document).
    fn error_help(&mut self, span: Span, message: impl Into<String>, help: impl Into<String>) {
        self.report(span, Problem::new(message).help(help));
    }

    /// Reports a problem as an error.
    fn report(&mut self, span: Span, problem: Problem) {
        let diagnostic = Diagnostic::error(self.file, self.resource.at(span), problem.message);
        self.errors += 1;
        self.diagnostics.push(match problem.help {
            Some(help) => diagnostic.with_help(help),
            None => diagnostic,
        });
    }

    /// Reports a warning with a help line.
    fn warning_help(&mut self, span: Span, message: impl Into<String>, help: impl Into<String>) {
        let diagnostic = Diagnostic::warning(self.file, self.resource.at(span), message);
        self.diagnostics.push(diagnostic.with_help(help));
    }

    /// Where something of this resource was written, for the model.
    fn origin(&self, span: Span) -> Origin {
        Origin {
            file: self.file,
            span: self.resource.at(span),
        }
    }

    /// The span of `len` bytes at byte `offset` of a scalar's value, when the value can be found
    /// in the source as written; otherwise the span of the whole scalar.
    fn inside(&self, scalar: &Sp<String>, offset: usize, len: usize) -> Span {
        let file_span = self.resource.at(scalar.span);
        self.text
            .get(file_span.start..file_span.end)
            .and_then(|written| locate_in_scalar(written, &scalar.value, offset, len))
            .map_or(scalar.span, |(start, len)| {
                Span::new(scalar.span.start + start, len)
            })
    }
}

/// Where bytes `offset..offset + len` of a scalar's `value` stand in `written`, the scalar's
/// source text, as (start, length) relative to `written`. Only plain scalars and quoted scalars
/// without escapes before the wanted text qualify: elsewhere (folded lines, block scalars,
/// escape sequences) the value's bytes are not the source's bytes, and `None` says so.
fn locate_in_scalar(
    written: &str,
    value: &str,
    offset: usize,
    len: usize,
) -> Option<(usize, usize)> {
    let end = offset.checked_add(len)?.min(value.len());
    let wanted = value.get(..end)?;
    value.get(..offset)?;
    let (body_start, escape_free) = match written.as_bytes().first() {
        Some(b'"') => (1, !written.get(1..1 + end)?.contains('\\')),
        Some(b'\'') => (1, !wanted.contains('\'')),
        _ => (0, true),
    };
    let body = written.get(body_start..)?;
    (escape_free && body.starts_with(wanted)).then(|| (body_start + offset, end - offset))
}

/// A checked resource, ready for the model.
enum Checked {
    Policy(Policy),
    NetworkSet(NetworkSet),
    HostEndpoint(HostEndpoint),
}

/// What every resource has once its metadata is valid.
struct Identity {
    name: String,
    labels: Labels,
    origin: Origin,
}

fn check_resource(checker: &mut Checker<'_>) -> Option<Checked> {
    let resource = checker.resource;
    check_api_version(checker);
    let identity = check_metadata(checker);
    let spec = resource.spec.as_ref().map(|spec| (&spec.value, spec.span));
    match (resource.kind.value, spec) {
        (Kind::GlobalNetworkPolicy, Some((RawSpec::Policy(spec), _))) => {
            check_policy(checker, identity, spec).map(Checked::Policy)
        }
        (Kind::GlobalNetworkPolicy, _) => {
            // Calico's defaults: all(), `types: [Ingress]`, no rules.
            check_policy(checker, identity, &RawPolicySpec::default()).map(Checked::Policy)
        }
        (Kind::GlobalNetworkSet, Some((RawSpec::NetworkSet(spec), _))) => {
            check_network_set(checker, identity, spec).map(Checked::NetworkSet)
        }
        (Kind::GlobalNetworkSet, _) => {
            check_network_set(checker, identity, &RawNetworkSetSpec::default())
                .map(Checked::NetworkSet)
        }
        (Kind::HostEndpoint, Some((RawSpec::HostEndpoint(spec), span))) => {
            check_host_endpoint(checker, identity, spec, span).map(Checked::HostEndpoint)
        }
        (Kind::HostEndpoint, _) => check_host_endpoint(
            checker,
            identity,
            &RawHostEndpointSpec::default(),
            resource.span,
        )
        .map(Checked::HostEndpoint),
        // The loader flattens list kinds into their items, so none reaches this point.
        _ => None,
    }
}

/// Reports a second (or later) resource of the same kind and name, and says whether this one
/// is such a duplicate.
fn check_duplicate(
    checker: &mut Checker<'_>,
    sources: &Sources,
    first_definitions: &mut HashMap<(Kind, String), (FileId, Span)>,
) -> bool {
    let Some(name) = checker.resource.name() else {
        return false;
    };
    if name.value.is_empty() {
        return false;
    }
    let kind = checker.resource.kind.value;
    let key = (kind, name.value.clone());
    if let Some(&(file, span)) = first_definitions.get(&key) {
        let source = sources.get(file);
        checker.error_help(
            name.span,
            format!("another `{kind}` is already named `{}`", shown(&name.value)),
            format!(
                "`{}` is also defined at {}:{}",
                shown(&name.value),
                source.path.display(),
                source.line_column(span.start)
            ),
        );
        return true;
    }
    first_definitions.insert(key, (checker.file, checker.resource.at(name.span)));
    false
}

fn check_api_version(checker: &mut Checker<'_>) {
    let resource = checker.resource;
    let right_line = format!("write `apiVersion: {API_VERSION}`");
    match &resource.api_version {
        None => checker.error_help(
            resource.span,
            format!("the `{}` has no `apiVersion`", resource.kind.value),
            format!("add `apiVersion: {API_VERSION}`"),
        ),
        Some(version) if version.value == API_VERSION => {}
        Some(version) => {
            let help = if version.value == "crd.projectcalico.org/v1" {
                format!(
                    "`crd.projectcalico.org/v1` is Calico's internal storage form, which skips validation; {right_line}"
                )
            } else {
                right_line
            };
            checker.error_help(
                version.span,
                format!("`{}` is not a supported apiVersion", shown(&version.value)),
                help,
            );
        }
    }
}

/// Checks `metadata`; returns the resource's identity when its name is valid.
fn check_metadata(checker: &mut Checker<'_>) -> Option<Identity> {
    let resource = checker.resource;
    let kind = resource.kind.value;
    let Some(metadata) = &resource.metadata else {
        checker.error_help(
            resource.span,
            format!("the `{kind}` has no `metadata`"),
            "add `metadata:` with a `name:`",
        );
        return None;
    };
    let span = metadata.span;
    let metadata = &metadata.value;
    if let Some(namespace) = &metadata.namespace {
        checker.error_help(
            namespace.span,
            format!("`{kind}` is a cluster-wide resource, so it has no namespace"),
            "remove `namespace`",
        );
    }
    let labels = metadata
        .labels
        .as_ref()
        .map(|labels| check_labels(checker, &labels.value))
        .unwrap_or_default();
    if let Some(annotations) = &metadata.annotations {
        check_annotations(checker, annotations);
    }
    let Some(name) = &metadata.name else {
        checker.error_help(
            span,
            format!("the `{kind}` has no `name`"),
            "add `name:` with lowercase letters, digits, `-` and `.`",
        );
        return None;
    };
    if let Some(problem) = name_problem(&name.value, "name") {
        checker.report(name.span, problem);
        return None;
    }
    Some(Identity {
        name: name.value.clone(),
        labels,
        origin: checker.origin(name.span),
    })
}

/// Checks labels; returns the valid ones.
fn check_labels(checker: &mut Checker<'_>, labels: &BTreeMap<Sp<String>, Sp<String>>) -> Labels {
    let mut valid = Labels::new();
    for (key, value) in labels {
        let mut ok = true;
        if let Some(message) = label_key_problem(&key.value) {
            checker.error_help(key.span, message, QUALIFIED_NAME_RULE);
            ok = false;
        }
        if let Some(message) = label_value_problem(&value.value) {
            checker.error_help(value.span, message, LABEL_VALUE_RULE);
            ok = false;
        }
        if ok {
            valid.insert(key.value.clone(), value.value.clone());
        }
    }
    valid
}

/// Checks annotations (of a resource or of a rule); returns the valid ones.
fn check_annotations(
    checker: &mut Checker<'_>,
    annotations: &Sp<BTreeMap<Sp<String>, Sp<String>>>,
) -> BTreeMap<String, String> {
    let mut valid = BTreeMap::new();
    let mut total: usize = 0;
    for (key, value) in &annotations.value {
        total = total.saturating_add(key.value.len().saturating_add(value.value.len()));
        let mut ok = true;
        // Kubernetes lower-cases annotation keys before checking them.
        if let Some(reason) = qualified_name_reason(&key.value.to_lowercase()) {
            checker.error_help(
                key.span,
                subject_reason("annotation key", &key.value, &reason),
                QUALIFIED_NAME_RULE,
            );
            ok = false;
        }
        if let Some(problem) = annotation_value_problem(&value.value) {
            checker.report(value.span, problem);
            ok = false;
        }
        if ok {
            valid.insert(key.value.clone(), value.value.clone());
        }
    }
    if total > MAX_ANNOTATION_BYTES {
        checker.error_help(
            annotations.span,
            format!(
                "the annotations hold {total} bytes, more than the {MAX_ANNOTATION_BYTES} (256 KiB) allowed"
            ),
            "shorten them; keep long documents outside the policy files",
        );
    }
    valid
}

/// What is wrong with an annotation value: it may be any text but control characters, which
/// could break the line-oriented kernel input formats that rule comments end up in.
fn annotation_value_problem(value: &str) -> Option<Problem> {
    let control = value.chars().find(|c| c.is_control())?;
    let problem = Problem::new(format!(
        "the annotation holds the control character `{}`",
        control.escape_default()
    ));
    let trailing_newline_only = value
        .strip_suffix('\n')
        .is_some_and(|rest| !rest.contains(|c: char| c.is_control()));
    Some(if trailing_newline_only {
        problem.help("write the value with `>-` or `|-`, or as a quoted string, so it does not end with a newline")
    } else {
        problem.help("annotations are shown in rule comments, which are one line of printable text; remove the control characters")
    })
}

// ---------------------------------------------------------------------------------------------
// GlobalNetworkPolicy
// ---------------------------------------------------------------------------------------------

/// Which directions a policy governs, after Calico's defaulting of `types`.
struct PolicyTypes {
    ingress: bool,
    egress: bool,
    /// Whether `types` was written (a non-empty list), as opposed to derived from the rules.
    written: bool,
    /// Where `Egress` was written in `types`.
    egress_span: Option<Span>,
}

fn check_policy(
    checker: &mut Checker<'_>,
    identity: Option<Identity>,
    spec: &RawPolicySpec,
) -> Option<Policy> {
    if let Some(tier) = &spec.tier {
        check_tier(checker, tier);
    }
    let order = spec
        .order
        .as_ref()
        .and_then(|order| check_order(checker, order));
    let selector = match &spec.selector {
        Some(selector) => check_selector(checker, selector),
        None => Some(Selector::all()),
    };
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
        order,
        selector: selector?,
        ingress: types.ingress.then_some(ingress),
        egress: types.egress.then_some(egress),
        kind,
        apply_on_forward: spec
            .apply_on_forward
            .as_ref()
            .is_some_and(|flag| flag.value),
        origin: identity.origin,
    })
}

fn check_tier(checker: &mut Checker<'_>, tier: &Sp<String>) {
    if tier.value != "default" {
        checker.error_help(
            tier.span,
            format!(
                "tier `{}` does not exist here: tiers other than `default` are not supported",
                shown(&tier.value)
            ),
            "remove `tier` (or write `tier: default`) and order policies with `order`",
        );
    }
}

fn check_order(checker: &mut Checker<'_>, order: &Sp<f64>) -> Option<f64> {
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

// ---------------------------------------------------------------------------------------------
// Rules
// ---------------------------------------------------------------------------------------------

fn check_rules(checker: &mut Checker<'_>, rules: &[Sp<RawRule>]) -> Vec<Rule> {
    rules
        .iter()
        .filter_map(|rule| check_rule(checker, rule))
        .collect()
}

/// Checks one rule; returns it when it is entirely valid.
fn check_rule(checker: &mut Checker<'_>, rule: &Sp<RawRule>) -> Option<Rule> {
    let errors_before = checker.errors;
    let raw = &rule.value;
    let action = check_action(checker, rule);
    let protocol = raw
        .protocol
        .as_ref()
        .and_then(|protocol| check_protocol(checker, protocol));
    let not_protocol = raw
        .not_protocol
        .as_ref()
        .and_then(|protocol| check_protocol(checker, protocol));
    // A protocol that is written but wrong is reported once; checks that depend on it are
    // skipped rather than repeated.
    let protocol_known = raw.protocol.is_none() || protocol.is_some();
    let ip_version = raw
        .ip_version
        .as_ref()
        .and_then(|version| check_ip_version(checker, version));
    if let (Some(version), Some(written)) = (ip_version, &raw.ip_version) {
        for (field, checked) in [("protocol", protocol), ("notProtocol", not_protocol)] {
            if let Some(protocol) = checked {
                check_protocol_family(checker, field, protocol, version, written.span);
            }
        }
    }
    let icmp = raw
        .icmp
        .as_ref()
        .and_then(|icmp| check_icmp(checker, icmp, "icmp", protocol, protocol_known));
    // Calico v3.30 does not check `notICMP` against the protocol, newer Calico does: an ICMP
    // type means nothing for another protocol.
    let not_icmp = raw
        .not_icmp
        .as_ref()
        .and_then(|icmp| check_icmp(checker, icmp, "notICMP", protocol, protocol_known));
    if let Some(http) = &raw.http {
        checker.error_help(
            http.span,
            "`http` matches HTTP requests of workloads, which does not apply to host endpoints",
            "remove `http`; match the port with `destination.ports` instead",
        );
    }
    let source = raw
        .source
        .as_ref()
        .map(|entity| check_entity_rule(checker, entity))
        .unwrap_or_default();
    let destination = raw
        .destination
        .as_ref()
        .map(|entity| check_entity_rule(checker, entity))
        .unwrap_or_default();
    check_rule_families(checker, raw, ip_version, protocol, &source, &destination);
    if protocol_known {
        check_ports_have_protocol(checker, raw, protocol);
    }
    let annotations = raw
        .metadata
        .as_ref()
        .and_then(|metadata| metadata.value.annotations.as_ref())
        .map(|annotations| check_annotations(checker, annotations))
        .unwrap_or_default();
    if checker.errors > errors_before {
        return None;
    }
    Some(Rule {
        action: action?,
        protocol,
        not_protocol,
        icmp,
        not_icmp,
        ip_version,
        source: source.rule,
        destination: destination.rule,
        annotations,
        origin: checker.origin(rule.span),
    })
}

fn check_action(checker: &mut Checker<'_>, rule: &Sp<RawRule>) -> Option<Action> {
    let Some(action) = &rule.value.action else {
        checker.error_help(
            rule.span,
            "the rule has no `action`",
            "add `action: Allow` (or `Deny`, `Pass`, `Log`)",
        );
        return None;
    };
    match parse_action(&action.value) {
        Ok(parsed) => Some(parsed),
        Err(problem) => {
            checker.report(action.span, problem);
            None
        }
    }
}

/// Parses an action as Calico spells it.
fn parse_action(text: &str) -> Result<Action, Problem> {
    const ACTIONS: [Action; 4] = [Action::Allow, Action::Deny, Action::Pass, Action::Log];
    if let Some(action) = ACTIONS.into_iter().find(|action| action.as_str() == text) {
        return Ok(action);
    }
    let problem = Problem::new(format!("`{}` is not an action", shown(text)));
    let lower = text.to_ascii_lowercase();
    let suggestion = ACTIONS
        .into_iter()
        .find(|action| action.as_str().eq_ignore_ascii_case(text))
        .or(match lower.as_str() {
            "accept" | "permit" => Some(Action::Allow),
            "drop" | "reject" | "block" => Some(Action::Deny),
            _ => None,
        });
    Err(match suggestion {
        Some(action) => problem.help(format!("write `{action}`")),
        None => problem.help("write `Allow`, `Deny`, `Pass` or `Log`"),
    })
}

fn check_protocol(checker: &mut Checker<'_>, protocol: &Sp<RawProtocol>) -> Option<Protocol> {
    match parse_protocol(&protocol.value) {
        Ok(parsed) => Some(parsed),
        Err(problem) => {
            checker.report(protocol.span, problem);
            None
        }
    }
}

/// Parses a protocol: one of Calico's names in exact case, or a number 1–255.
fn parse_protocol(raw: &RawProtocol) -> Result<Protocol, Problem> {
    match raw {
        RawProtocol::Number(number) => match u8::try_from(*number) {
            Ok(number) if number > 0 => Ok(Protocol::from_number(number)),
            _ if *number == 0 => Err(Problem::new("protocol number 0 is not a protocol")
                .help("leave `protocol` out to match every protocol, or write a number 1-255")),
            _ => Err(
                Problem::new(format!("protocol number {number} is not between 1 and 255"))
                    .help("write a protocol name such as `TCP`, or a number 1-255"),
            ),
        },
        RawProtocol::Name(name) => {
            if let Some(&(_, protocol)) = PROTOCOL_NAMES.iter().find(|(known, _)| known == name) {
                return Ok(protocol);
            }
            let alias = match name.to_ascii_lowercase().as_str() {
                "icmp6" | "ipv6-icmp" => Some("ICMPv6"),
                "udp-lite" => Some("UDPLite"),
                _ => None,
            };
            let right_case = PROTOCOL_NAMES
                .iter()
                .map(|(known, _)| *known)
                .find(|known| known.eq_ignore_ascii_case(name))
                .or(alias);
            Err(match right_case {
                Some(known) => Problem::new(format!(
                    "`{}` is not a protocol name: names are case-sensitive",
                    shown(name)
                ))
                .help(format!("write `{known}`")),
                None => Problem::new(format!("`{}` is not a protocol", shown(name))).help(
                    "write `TCP`, `UDP`, `ICMP`, `ICMPv6`, `SCTP`, `UDPLite` or a protocol number 1-255",
                ),
            })
        }
    }
}

fn check_ip_version(checker: &mut Checker<'_>, version: &Sp<i64>) -> Option<IpFamily> {
    match version.value {
        4 => Some(IpFamily::V4),
        6 => Some(IpFamily::V6),
        other => {
            checker.error_help(
                version.span,
                format!("`ipVersion` must be 4 or 6, not {other}"),
                "write `ipVersion: 4` or `ipVersion: 6`, or leave it out for both",
            );
            None
        }
    }
}

/// ICMP exists only in IPv4 and ICMPv6 only in IPv6: Calico refuses either with the other
/// `ipVersion`, in `protocol` and in `notProtocol`.
fn check_protocol_family(
    checker: &mut Checker<'_>,
    field: &str,
    protocol: Protocol,
    version: IpFamily,
    version_span: Span,
) {
    let Some(family) = protocol.family() else {
        return;
    };
    if family == version {
        return;
    }
    let other = match protocol {
        Protocol::Icmp => "ICMPv6",
        _ => "ICMP",
    };
    checker.error_help(
        version_span,
        format!(
            "`{field}: {protocol}` exists only in {family}, so it cannot go with `ipVersion: {}`",
            version.number()
        ),
        format!(
            "write `ipVersion: {}`, or use `{other}` for {version}",
            family.number()
        ),
    );
}

/// Checks `icmp` / `notICMP`; returns the match when it has a type.
fn check_icmp(
    checker: &mut Checker<'_>,
    icmp: &Sp<RawIcmp>,
    field: &str,
    protocol: Option<Protocol>,
    protocol_known: bool,
) -> Option<IcmpMatch> {
    // Calico v3.30 demands the protocol *name*; `1` and `58` are accepted as well, as newer
    // Calico does, since they mean the same protocols.
    if protocol_known && !matches!(protocol, Some(Protocol::Icmp | Protocol::Icmpv6)) {
        let message = match protocol {
            Some(other) => {
                format!("`{field}` needs `protocol: ICMP` or `protocol: ICMPv6`, not `{other}`")
            }
            None => format!("`{field}` needs `protocol: ICMP` or `protocol: ICMPv6`"),
        };
        checker.error_help(
            icmp.span,
            message,
            "add `protocol: ICMP` (IPv4) or `protocol: ICMPv6` (IPv6) to the rule",
        );
    }
    let icmp_type = icmp.value.icmp_type.as_ref().and_then(|icmp_type| {
        let valid = u8::try_from(icmp_type.value)
            .ok()
            .filter(|&value| value <= 254);
        if valid.is_none() {
            checker.error_help(
                icmp_type.span,
                format!("ICMP type {} is not between 0 and 254", icmp_type.value),
                "write a type such as `8` (echo request) or `3` (destination unreachable)",
            );
        }
        valid
    });
    let code = icmp.value.code.as_ref().and_then(|code| {
        let valid = u8::try_from(code.value).ok();
        if valid.is_none() {
            checker.error_help(
                code.span,
                format!("ICMP code {} is not between 0 and 255", code.value),
                "write a code such as `0`",
            );
        }
        if icmp.value.icmp_type.is_none() {
            checker.error_help(
                code.span,
                "an ICMP code needs an ICMP type",
                "add the `type` the code belongs to, for example `type: 3` for destination unreachable",
            );
        }
        valid
    });
    Some(IcmpMatch {
        icmp_type: icmp_type?,
        code,
    })
}

/// Checks the IP families of a rule's nets against each other and against `ipVersion`.
/// Calico scans the four lists in this order (source nets, source notNets, destination nets,
/// destination notNets) and reports the net that introduced a mix.
fn check_rule_families(
    checker: &mut Checker<'_>,
    raw: &RawRule,
    ip_version: Option<IpFamily>,
    protocol: Option<Protocol>,
    source: &CheckedEntity,
    destination: &CheckedEntity,
) {
    let mut first: Option<IpFamily> = None;
    let mut mixed = false;
    for net in source.nets.iter().chain(&destination.nets) {
        let family = IpFamily::of_net(&net.value);
        if let Some(version) = ip_version {
            if family != version {
                checker.error_help(
                    net.span,
                    format!(
                        "`{}` is an {family} network, but `ipVersion` is {}",
                        net.value,
                        version.number()
                    ),
                    format!(
                        "write an {version} network, or `ipVersion: {}`",
                        family.number()
                    ),
                );
            }
            continue;
        }
        match first {
            None => first = Some(family),
            Some(earlier) if earlier != family && !mixed => {
                mixed = true;
                checker.error_help(
                    net.span,
                    format!(
                        "`{}` is an {family} network, but this rule already has {earlier} networks",
                        net.value
                    ),
                    "split the rule into one rule per IP family (each may set `ipVersion`)",
                );
            }
            Some(_) => {}
        }
    }
    // Calico accepts this, but such a rule can never match: worth a word.
    if let (Some(protocol), Some(family), false) = (protocol, first, mixed)
        && let (Some(only), Some(written)) = (protocol.family(), &raw.protocol)
        && only != family
    {
        let matching = if family == IpFamily::V4 {
            "ICMP"
        } else {
            "ICMPv6"
        };
        checker.warning_help(
            written.span,
            format!(
                "the rule never matches: `{protocol}` exists only in {only}, and its networks are {family}"
            ),
            format!("write `protocol: {matching}` for {family} networks"),
        );
    }
}

/// Ports exist only for TCP, UDP and SCTP (numbers 6, 17, 132); as in Calico, `notProtocol`
/// never tells which protocol a packet has, and named ports need a protocol too.
fn check_ports_have_protocol(checker: &mut Checker<'_>, raw: &RawRule, protocol: Option<Protocol>) {
    if protocol.is_some_and(Protocol::has_ports) {
        return;
    }
    let sides = [raw.source.as_ref(), raw.destination.as_ref()];
    for entity in sides.into_iter().flatten() {
        let lists = [entity.value.ports.as_ref(), entity.value.not_ports.as_ref()];
        for list in lists.into_iter().flatten() {
            if list.value.is_empty() {
                continue;
            }
            match protocol {
                Some(other) => checker.error_help(
                    list.span,
                    format!("ports can only be matched with `TCP`, `UDP` or `SCTP`, not `{other}`"),
                    "write `protocol: TCP` (or `UDP`, `SCTP`), or remove the ports",
                ),
                None if raw.not_protocol.is_some() => checker.error_help(
                    list.span,
                    "ports need a protocol that has ports",
                    "add `protocol: TCP` (or `UDP`, `SCTP`) to the rule; `notProtocol` does not say which protocol a packet has",
                ),
                None => checker.error_help(
                    list.span,
                    "ports need a protocol that has ports",
                    "add `protocol: TCP` (or `UDP`, `SCTP`) to the rule",
                ),
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Entity rules (source / destination)
// ---------------------------------------------------------------------------------------------

/// A checked `source` or `destination`, with the positions of its nets for the rule-level
/// family checks.
#[derive(Default)]
struct CheckedEntity {
    rule: EntityRule,
    /// `nets` then `notNets`, each with where it was written.
    nets: Vec<Sp<IpNet>>,
}

fn check_entity_rule(checker: &mut Checker<'_>, entity: &Sp<RawEntityRule>) -> CheckedEntity {
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
fn check_selector(checker: &mut Checker<'_>, selector: &Sp<String>) -> Option<Selector> {
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

// ---------------------------------------------------------------------------------------------
// GlobalNetworkSet
// ---------------------------------------------------------------------------------------------

fn check_network_set(
    checker: &mut Checker<'_>,
    identity: Option<Identity>,
    spec: &RawNetworkSetSpec,
) -> Option<NetworkSet> {
    let mut nets: Vec<IpNet> = Vec::new();
    for net in spec.nets.iter().flat_map(|nets| &nets.value) {
        match parse_set_member(&net.value) {
            // The same network twice would make `ipset restore` fail; it means nothing more.
            Ok(parsed) if nets.contains(&parsed) => {}
            Ok(parsed) => nets.push(parsed),
            Err(problem) => checker.report(net.span, problem),
        }
    }
    let identity = identity?;
    Some(NetworkSet {
        name: identity.name,
        labels: identity.labels,
        nets,
        origin: identity.origin,
    })
}

// ---------------------------------------------------------------------------------------------
// HostEndpoint
// ---------------------------------------------------------------------------------------------

fn check_host_endpoint(
    checker: &mut Checker<'_>,
    identity: Option<Identity>,
    spec: &RawHostEndpointSpec,
    spec_span: Span,
) -> Option<HostEndpoint> {
    let node = match &spec.node {
        None => {
            checker.error_help(
                spec_span,
                "the host endpoint has no `node`",
                "add `node:` with the name of the node it belongs to (`nodeName` in the config, by default the hostname)",
            );
            None
        }
        Some(node) => match name_problem(&node.value, "node name") {
            Some(problem) => {
                checker.report(node.span, problem);
                None
            }
            None => Some(node.value.clone()),
        },
    };
    let interface = match &spec.interface_name {
        None => Some(EndpointInterface::ByAddress),
        Some(name) => check_interface_name(checker, name),
    };
    let expected_ips = spec
        .expected_ips
        .as_ref()
        .map(|ips| check_expected_ips(checker, &ips.value))
        .unwrap_or_default();
    let has_interface = spec
        .interface_name
        .as_ref()
        .is_some_and(|name| !name.value.is_empty());
    let has_ips = spec
        .expected_ips
        .as_ref()
        .is_some_and(|ips| !ips.value.is_empty());
    if !has_interface && !has_ips {
        let span = spec
            .interface_name
            .as_ref()
            .map_or(spec_span, |name| name.span);
        checker.error_help(
            span,
            "the host endpoint has neither an `interfaceName` nor `expectedIPs`",
            "add `interfaceName: eth0` (or `\"*\"` for every interface), or the endpoint's `expectedIPs`",
        );
    }
    let ports = spec
        .ports
        .as_ref()
        .map(|ports| check_endpoint_ports(checker, &ports.value))
        .unwrap_or_default();
    let default_allow = spec
        .profiles
        .as_ref()
        .is_some_and(|profiles| check_profiles(checker, &profiles.value));
    let identity = identity?;
    Some(HostEndpoint {
        name: identity.name,
        labels: identity.labels,
        node: node?,
        interface: interface?,
        expected_ips,
        ports,
        default_allow,
        origin: Some(identity.origin),
    })
}

fn check_interface_name(checker: &mut Checker<'_>, name: &Sp<String>) -> Option<EndpointInterface> {
    match name.value.as_str() {
        "*" => Some(EndpointInterface::All),
        "" => Some(EndpointInterface::ByAddress),
        text => match interface_name_problem(text) {
            Some(problem) => {
                checker.report(name.span, problem);
                None
            }
            None => Some(EndpointInterface::Named(text.to_owned())),
        },
    }
}

/// What is wrong with an interface name (Calico: `^[a-zA-Z0-9_.-]{1,15}$`), if anything.
fn interface_name_problem(name: &str) -> Option<Problem> {
    let help = "interface names are 1-15 letters, digits, `_`, `.` and `-`; `\"*\"` stands for every interface";
    if let Some(bad) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-')))
    {
        let help = if matches!(bad, '*' | '+') {
            "only `\"*\"` on its own stands for every interface; write one HostEndpoint per interface otherwise"
        } else {
            help
        };
        return Some(
            Problem::new(format!(
                "interface name `{}` contains {}, which interface names cannot hold",
                shown(name),
                describe_char(bad)
            ))
            .help(help),
        );
    }
    let length = name.chars().count();
    (length > MAX_INTERFACE_NAME_CHARS).then(|| {
        Problem::new(format!(
            "interface name `{}` is {length} characters long, more than the {MAX_INTERFACE_NAME_CHARS} Linux allows",
            shown(name)
        ))
        .help(help)
    })
}

fn check_expected_ips(checker: &mut Checker<'_>, ips: &[Sp<String>]) -> Vec<IpAddr> {
    let mut valid: Vec<IpAddr> = Vec::new();
    for ip in ips {
        match parse_expected_ip(&ip.value) {
            Ok(addr) if valid.contains(&addr) => {}
            Ok(addr) => valid.push(addr),
            Err(problem) => checker.report(ip.span, problem),
        }
    }
    valid
}

/// Parses an entry of `expectedIPs`: a single address.
fn parse_expected_ip(text: &str) -> Result<IpAddr, Problem> {
    if let Ok(addr) = text.parse::<IpAddr>() {
        return Ok(addr);
    }
    Err(match text.parse::<IpNet>() {
        Ok(net) => Problem::new(format!(
            "`{text}` is a network, but `expectedIPs` holds single addresses"
        ))
        .help(format!(
            "write the address without `/{}`: `{}`",
            net.prefix_len(),
            net.addr()
        )),
        Err(_) => Problem::new(format!("`{}` is not an IP address", shown(text)))
            .help("write an address such as `192.0.2.10` or `2001:db8::10`"),
    })
}

fn check_endpoint_ports(
    checker: &mut Checker<'_>,
    ports: &[Sp<RawEndpointPort>],
) -> Vec<NamedPort> {
    let mut valid = Vec::new();
    let mut names = BTreeSet::new();
    for port in ports {
        if let Some(checked) = check_endpoint_port(checker, port, &mut names) {
            valid.push(checked);
        }
    }
    valid
}

/// Checks one named port of a host endpoint; `names` collects the names seen so far, to catch
/// duplicates.
fn check_endpoint_port(
    checker: &mut Checker<'_>,
    port: &Sp<RawEndpointPort>,
    names: &mut BTreeSet<String>,
) -> Option<NamedPort> {
    let raw = &port.value;
    let name = check_endpoint_port_name(checker, port, names);
    let number = match &raw.port {
        None => {
            checker.error_help(
                port.span,
                "the port has no `port` number",
                "add `port:` with a number 1-65535",
            );
            None
        }
        Some(number) => port_number(number.value)
            .map_err(|problem| checker.report(number.span, problem))
            .ok(),
    };
    let protocol = check_endpoint_port_protocol(checker, port);
    Some(NamedPort {
        name: name?,
        port: number?,
        protocol: protocol?,
    })
}

fn check_endpoint_port_name(
    checker: &mut Checker<'_>,
    port: &Sp<RawEndpointPort>,
    names: &mut BTreeSet<String>,
) -> Option<String> {
    let Some(name) = &port.value.name else {
        checker.error_help(
            port.span,
            "the port has no `name`",
            "add `name:` with the name rules use, for example `name: web`",
        );
        return None;
    };
    if let Some(problem) = port_name_problem(&name.value) {
        checker.report(name.span, problem);
        return None;
    }
    // Rules refer to ports by name, so a name must mean one port.
    if !names.insert(name.value.clone()) {
        checker.error_help(
            name.span,
            format!(
                "port name `{}` is used twice in this host endpoint",
                name.value
            ),
            "give each port its own name",
        );
        return None;
    }
    Some(name.value.clone())
}

fn check_endpoint_port_protocol(
    checker: &mut Checker<'_>,
    port: &Sp<RawEndpointPort>,
) -> Option<Protocol> {
    let Some(protocol) = &port.value.protocol else {
        checker.error_help(
            port.span,
            "the port has no `protocol`",
            "add `protocol: TCP` (or `UDP`, `SCTP`)",
        );
        return None;
    };
    match parse_protocol(&protocol.value) {
        Ok(parsed) if parsed.has_ports() => Some(parsed),
        Ok(parsed) => {
            checker.error_help(
                protocol.span,
                format!("a named port needs `TCP`, `UDP` or `SCTP`, not `{parsed}`"),
                "write `protocol: TCP` (or `UDP`, `SCTP`)",
            );
            None
        }
        Err(problem) => {
            checker.report(protocol.span, problem);
            None
        }
    }
}

/// Checks `profiles`; returns whether Calico's allow-all profile is among them.
fn check_profiles(checker: &mut Checker<'_>, profiles: &[Sp<String>]) -> bool {
    let mut default_allow = false;
    for profile in profiles {
        if profile.value == DEFAULT_ALLOW_PROFILE {
            default_allow = true;
        } else {
            checker.error_help(
                profile.span,
                format!("profile `{}` does not exist here", shown(&profile.value)),
                format!(
                    "the only profile is Calico's allow-all `{DEFAULT_ALLOW_PROFILE}`; write the profile's rules as a GlobalNetworkPolicy"
                ),
            );
        }
    }
    default_allow
}

// ---------------------------------------------------------------------------------------------
// Single values: pure functions that say what is wrong
// ---------------------------------------------------------------------------------------------

/// Parses one entry of `ports` / `notPorts`: a number, a string of digits, a `first:last`
/// range, or else a named port.
fn parse_port(raw: &RawPort) -> Result<Port, Problem> {
    let text = match raw {
        RawPort::Number(number) => return port_number(*number).map(Port::Single),
        RawPort::Text(text) => text,
    };
    let is_number = |part: &str| !part.is_empty() && part.bytes().all(|b| b.is_ascii_digit());
    if is_number(text) {
        return port_digits(text).map(Port::Single);
    }
    if let Some((first, last)) = text.split_once(':')
        && is_number(first)
        && is_number(last)
    {
        return parse_port_range(first, last);
    }
    match port_name_problem(text) {
        None => Ok(Port::Named(text.clone())),
        // Calico reads `80-90` as a port *name*; it is a range written the wrong way.
        Some(problem) => Err(match text.split_once('-') {
            Some((first, last)) if is_number(first) && is_number(last) => {
                problem.help(format!("ranges are written with a colon: `{first}:{last}`"))
            }
            _ if text.contains(':') => problem
                .help("ranges are written `first:last` with two port numbers, such as `80:90`"),
            _ => problem,
        }),
    }
}

/// Parses `first:last` (both strings of digits) into a range.
fn parse_port_range(first: &str, last: &str) -> Result<Port, Problem> {
    let low = port_digits(first);
    let high = port_digits(last);
    match (low, high) {
        (Ok(low), Ok(high)) if low > high => Err(Problem::new(format!(
            "the range `{first}:{last}` starts after it ends"
        ))
        .help(format!("write `{high}:{low}`"))),
        (Ok(low), Ok(high)) => Ok(Port::Range(low, high)),
        (Err(problem), Ok(high)) => Err(Problem {
            help: Some(format!("ranges lie within 1-65535: write `1:{high}`")),
            ..problem
        }),
        (Ok(low), Err(problem)) => Err(Problem {
            help: Some(format!("ranges lie within 1-65535: write `{low}:65535`")),
            ..problem
        }),
        (Err(problem), Err(_)) => Err(problem),
    }
}

/// A port number 1–65535 written as digits.
fn port_digits(text: &str) -> Result<u16, Problem> {
    match text.parse::<i64>() {
        Ok(number) => port_number(number),
        // More digits than an i64 holds.
        Err(_) => Err(Problem::new(format!(
            "`{}` is not a port: ports are 1-65535",
            shown(text)
        ))),
    }
}

/// A port number 1–65535.
fn port_number(number: i64) -> Result<u16, Problem> {
    match u16::try_from(number) {
        Ok(port) if port > 0 => Ok(port),
        _ if number == 0 => Err(Problem::new("port 0 is not a port: ports are 1-65535")
            .help("remove it; a rule without ports matches every port")),
        _ => Err(Problem::new(format!(
            "`{number}` is not a port: ports are 1-65535"
        ))),
    }
}

/// What is wrong with a port name (Kubernetes' `IANA_SVC_NAME`: 1–15 lowercase letters, digits
/// and `-`, at least one letter, no `-` at either end, no `--`), if anything.
fn port_name_problem(name: &str) -> Option<Problem> {
    let rule = "port names are 1-15 lowercase letters, digits and `-`, with at least one letter";
    let problem = |reason: String| Some(Problem::new(reason).help(rule));
    if name.is_empty() {
        return problem("a port name cannot be empty".to_owned());
    }
    let quoted = shown(name);
    if name.chars().any(|c| c.is_ascii_uppercase())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
    {
        return Some(
            Problem::new(format!("port name `{quoted}` has uppercase letters"))
                .help(format!("write `{}`", name.to_ascii_lowercase())),
        );
    }
    if let Some(bad) = name
        .chars()
        .find(|c| !(c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '-'))
    {
        return problem(format!(
            "port name `{quoted}` contains {}, which port names cannot hold",
            describe_char(bad)
        ));
    }
    let length = name.chars().count();
    if length > MAX_PORT_NAME_CHARS {
        return problem(format!(
            "port name `{quoted}` is {length} characters long, more than the {MAX_PORT_NAME_CHARS} allowed"
        ));
    }
    if !name.chars().any(|c| c.is_ascii_lowercase()) {
        return problem(format!("port name `{quoted}` has no letter"));
    }
    if name.starts_with('-') || name.ends_with('-') {
        return problem(format!("port name `{quoted}` starts or ends with `-`"));
    }
    if name.contains("--") {
        return problem(format!("port name `{quoted}` contains `--`"));
    }
    None
}

/// Parses an entry of a rule's `nets` / `notNets`: a CIDR with an explicit prefix length and no
/// host bits set.
fn parse_rule_net(text: &str) -> Result<IpNet, Problem> {
    match text.parse::<IpNet>() {
        Ok(net) if net.trunc() == net => Ok(net),
        Ok(net) => Err(
            Problem::new(format!("`{text}` has host bits set")).help(format!(
                "write the network `{}`, or `{}/{}` for the single address",
                net.trunc(),
                net.addr(),
                net.max_prefix_len()
            )),
        ),
        Err(_) => Err(match text.parse::<IpAddr>() {
            Ok(addr) => Problem::new(format!("`{text}` is an address, not a CIDR"))
                .help(format!("write `{text}/{}`", IpNet::from(addr).prefix_len())),
            Err(_) => Problem::new(format!("`{}` is not a CIDR", shown(text)))
                .help("write a network such as `192.0.2.0/24` or `2001:db8::/32`"),
        }),
    }
}

/// Parses an entry of a GlobalNetworkSet's `nets`: a CIDR without host bits, or a single address
/// (meaning `/32` or `/128`).
fn parse_set_member(text: &str) -> Result<IpNet, Problem> {
    if let Ok(addr) = text.parse::<IpAddr>() {
        return Ok(IpNet::from(addr));
    }
    parse_rule_net(text).map_err(|problem| {
        if text.parse::<IpNet>().is_ok() {
            problem
        } else {
            Problem::new(format!("`{}` is not an address or a CIDR", shown(text)))
                .help("write an address such as `192.0.2.1` or a network such as `192.0.2.0/24`")
        }
    })
}

/// Parses a CIDR with an explicit prefix length and no host bits set.
pub fn parse_cidr(text: &str) -> Result<IpNet, String> {
    parse_rule_net(text).map_err(|problem| match problem.help {
        Some(help) => format!("{}; {help}", problem.message),
        None => problem.message,
    })
}

/// What to write in a name, said once for every name check.
const NAME_RULE: &str = "names are lowercase letters, digits, `-` and `.`, at most 253 characters, each dot-separated part starting and ending with a letter or digit";

/// What to write in a label or annotation key.
const QUALIFIED_NAME_RULE: &str = "keys are an optional DNS-subdomain prefix and `/`, then 1-63 letters, digits, `-`, `_` or `.`, starting and ending with a letter or digit";

/// What to write in a label value.
const LABEL_VALUE_RULE: &str = "label values are empty or 1-63 letters, digits, `-`, `_` or `.`, starting and ending with a letter or digit";

/// What is wrong with a resource or node name (`what` says which), if anything.
///
/// Calico v3.29–v3.31 allows at most one dot in a policy name, because a dot there separates a
/// tier prefix; only the `default` tier exists here, so every name is simply an RFC 1123
/// subdomain, as for other cluster-wide Kubernetes names.
fn name_problem(name: &str, what: &str) -> Option<Problem> {
    if name.is_empty() {
        return Some(Problem::new(format!("the {what} is empty")).help(NAME_RULE));
    }
    let reason = subdomain_reason(name)?;
    let problem = Problem::new(format!("the {what} `{}` {reason}", shown(name)));
    let suggestion = suggest_subdomain(name);
    Some(match suggestion {
        Some(better) if better != name => problem.help(format!("write `{better}`")),
        _ => problem.help(NAME_RULE),
    })
}

/// A valid name close to `name` (lowercase, `-` for characters names cannot hold), if there is
/// one.
fn suggest_subdomain(name: &str) -> Option<String> {
    let replaced: String = name
        .chars()
        .map(|c| match c.to_ascii_lowercase() {
            c @ ('a'..='z' | '0'..='9' | '.' | '-') => c,
            _ => '-',
        })
        .collect();
    let trimmed = replaced.trim_matches(['-', '.']).to_owned();
    is_subdomain(&trimmed).then_some(trimmed)
}

/// Why `name` is not an RFC 1123 subdomain, as words that follow the name ("has uppercase
/// letters"), or `None` if it is one.
fn subdomain_reason(name: &str) -> Option<String> {
    if name.is_empty() {
        return Some("is empty".to_owned());
    }
    if name.len() > MAX_NAME_BYTES {
        return Some(format!(
            "is {} bytes long, more than the {MAX_NAME_BYTES} allowed",
            name.len()
        ));
    }
    if name.bytes().any(|b| b.is_ascii_uppercase()) {
        return Some("has uppercase letters".to_owned());
    }
    if let Some(bad) = name
        .chars()
        .find(|c| !(c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '-' | '.')))
    {
        return Some(format!("contains {}", describe_char(bad)));
    }
    if name.starts_with(['.', '-']) {
        return Some("does not start with a letter or digit".to_owned());
    }
    if name.ends_with(['.', '-']) {
        return Some("does not end with a letter or digit".to_owned());
    }
    if name.contains("..") {
        return Some("has two dots in a row".to_owned());
    }
    if name.contains("-.") || name.contains(".-") {
        return Some("has `-` next to `.`".to_owned());
    }
    None
}

/// Whether `name` is an RFC 1123 subdomain, as Kubernetes checks it: at most 253 characters of
/// lowercase letters, digits, `-` and `.`, in dot-separated parts that start and end with a
/// letter or digit. Like Kubernetes (and Calico), it sets no length limit on a single part.
pub fn is_subdomain(name: &str) -> bool {
    subdomain_reason(name).is_none()
}

/// Why `key` is not a Kubernetes qualified name (an optional DNS-subdomain prefix and `/`, then
/// 1–63 letters, digits, `-`, `_`, `.`, starting and ending with a letter or digit), as words
/// that follow the key, or `None` if it is one.
fn qualified_name_reason(key: &str) -> Option<String> {
    if key.is_empty() {
        return Some("is empty".to_owned());
    }
    let (prefix, name) = match key.split_once('/') {
        Some((_, rest)) if rest.contains('/') => {
            return Some("has more than one `/`".to_owned());
        }
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    if let Some(prefix) = prefix {
        if prefix.is_empty() {
            return Some("has nothing before `/`".to_owned());
        }
        if let Some(reason) = subdomain_reason(prefix) {
            return Some(format!("has a prefix `{}` that {reason}", shown(prefix)));
        }
        if name.is_empty() {
            return Some("has nothing after `/`".to_owned());
        }
    }
    let length = name.chars().count();
    if length > MAX_LABEL_NAME_CHARS {
        return Some(match prefix {
            Some(_) => format!(
                "has a part after `/` of {length} characters, more than the {MAX_LABEL_NAME_CHARS} allowed"
            ),
            None => {
                format!("is {length} characters long, more than the {MAX_LABEL_NAME_CHARS} allowed")
            }
        });
    }
    let reason = label_text_reason(name)?;
    Some(match prefix {
        Some(_) => format!("has a part after `/` that {reason}"),
        None => reason,
    })
}

/// Why `text` is not 1–63 letters, digits, `-`, `_` or `.` starting and ending with a letter or
/// digit, as words that follow it. Length is checked by the callers, which word it differently.
fn label_text_reason(text: &str) -> Option<String> {
    if let Some(bad) = text
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')))
    {
        return Some(format!("contains {}", describe_char(bad)));
    }
    if !text.starts_with(|c: char| c.is_ascii_alphanumeric()) {
        return Some("does not start with a letter or digit".to_owned());
    }
    if !text.ends_with(|c: char| c.is_ascii_alphanumeric()) {
        return Some("does not end with a letter or digit".to_owned());
    }
    None
}

/// A message about a key or value: "label key `x` has …", or "the label key is empty".
fn subject_reason(subject: &str, text: &str, reason: &str) -> String {
    if text.is_empty() {
        format!("the {subject} is empty")
    } else {
        format!("{subject} `{}` {reason}", shown(text))
    }
}

/// What is wrong with a label key (Kubernetes qualified name), if anything.
pub fn label_key_problem(key: &str) -> Option<String> {
    qualified_name_reason(key).map(|reason| subject_reason("label key", key, &reason))
}

/// What is wrong with a label value, if anything.
pub fn label_value_problem(value: &str) -> Option<String> {
    if value.is_empty() {
        return None;
    }
    let length = value.chars().count();
    if length > MAX_LABEL_NAME_CHARS {
        return Some(format!(
            "label value `{}` is {length} characters long, more than the {MAX_LABEL_NAME_CHARS} allowed",
            shown(value)
        ));
    }
    label_text_reason(value).map(|reason| subject_reason("label value", value, &reason))
}

/// A user's text made safe to quote in a one-line message: control characters escaped, long
/// text shortened.
fn shown(text: &str) -> String {
    const LIMIT: usize = 64;
    let mut out = String::new();
    for (count, c) in text.chars().enumerate() {
        if count == LIMIT {
            out.push('…');
            break;
        }
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

/// A character as a message names it: "a space", or the character in backticks.
fn describe_char(c: char) -> String {
    match c {
        ' ' => "a space".to_owned(),
        '`' => "a backtick".to_owned(),
        _ => format!("`{}`", shown(c.encode_utf8(&mut [0; 4]))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diagnostic::Severity;
    use crate::source::SourceFile;

    /// What validating some files gave.
    struct Outcome {
        sources: Sources,
        model: Model,
        diagnostics: Vec<Diagnostic>,
    }

    impl Outcome {
        /// `path:line:col: error|warning: message` for every diagnostic, in order.
        fn headlines(&self) -> Vec<String> {
            self.diagnostics
                .iter()
                .map(|diagnostic| diagnostic.headline(&self.sources))
                .collect()
        }

        /// The help of the first diagnostic whose message contains `text`.
        fn help(&self, text: &str) -> String {
            self.diagnostics
                .iter()
                .find(|diagnostic| diagnostic.message.contains(text))
                .and_then(|diagnostic| diagnostic.help.clone())
                .unwrap_or_else(|| panic!("no help for {text:?} in {:?}", self.headlines()))
        }

        fn policy(&self, name: &str) -> &Policy {
            self.model
                .policies
                .iter()
                .find(|policy| policy.name == name)
                .unwrap_or_else(|| panic!("no policy {name}"))
        }
    }

    /// Loads each file with the real loader, then validates them together. The inputs must
    /// parse: these tests are about validation.
    fn run(files: &[(&str, &str)]) -> Outcome {
        let mut sources = Sources::new();
        let mut resources = Vec::new();
        for (path, text) in files {
            let id = sources.add(SourceFile::new(*path, *text));
            let (parsed, problems) = crate::load::parse_file(id, sources.get(id));
            let rendered: Vec<_> = problems.iter().map(|d| d.headline(&sources)).collect();
            assert!(rendered.is_empty(), "{path} does not load: {rendered:?}");
            resources.extend(parsed.into_iter().map(|resource| (id, resource)));
        }
        let (model, diagnostics) = validate(&sources, &resources);
        Outcome {
            sources,
            model,
            diagnostics,
        }
    }

    fn run_one(text: &str) -> Outcome {
        run(&[("p.yaml", text)])
    }

    /// Asserts that `text` gives exactly the diagnostics `expected`, each given as the start of
    /// its headline after `p.yaml:` (`"8:17: error: `tcp` is not"`).
    #[track_caller]
    fn expect(text: &str, expected: &[&str]) -> Outcome {
        let outcome = run_one(text);
        let headlines = outcome.headlines();
        let matches = headlines.len() == expected.len()
            && headlines
                .iter()
                .zip(expected)
                .all(|(headline, prefix)| headline.starts_with(&format!("p.yaml:{prefix}")));
        assert!(
            matches,
            "\nexpected: {expected:#?}\n     got: {headlines:#?}\nfor:\n{text}"
        );
        outcome
    }

    /// A policy named `p` with `spec` (indented by two spaces) starting on line 6.
    fn policy(spec: &str) -> String {
        format!(
            "apiVersion: projectcalico.org/v3\nkind: GlobalNetworkPolicy\nmetadata:\n  name: p\nspec:\n{spec}"
        )
    }

    /// A policy whose one ingress rule (keys indented by six spaces) starts on line 7.
    fn rule(body: &str) -> String {
        policy(&format!("  ingress:\n    - {}", body.trim_start()))
    }

    /// A network set named `s` with `spec` starting on line 6.
    fn network_set(spec: &str) -> String {
        format!(
            "apiVersion: projectcalico.org/v3\nkind: GlobalNetworkSet\nmetadata:\n  name: s\nspec:\n{spec}"
        )
    }

    /// A host endpoint named `h` with `spec` starting on line 6.
    fn host_endpoint(spec: &str) -> String {
        format!(
            "apiVersion: projectcalico.org/v3\nkind: HostEndpoint\nmetadata:\n  name: h\nspec:\n{spec}"
        )
    }

    /// Whether the selector module is the real parser (the placeholder accepts everything).
    fn real_selector_parser() -> bool {
        Selector::parse("role = 'x'").is_err()
    }

    // --- envelope and metadata -----------------------------------------------------------

    #[test]
    fn api_version_must_be_projectcalico_v3() {
        let text = "kind: GlobalNetworkSet\nmetadata:\n  name: s\n";
        let outcome = expect(
            text,
            &["1:1: error: the `GlobalNetworkSet` has no `apiVersion`"],
        );
        assert_eq!(
            outcome.help("no `apiVersion`"),
            "add `apiVersion: projectcalico.org/v3`"
        );

        let text =
            "apiVersion: projectcalico.org/v1\nkind: GlobalNetworkSet\nmetadata:\n  name: s\n";
        let outcome = expect(
            text,
            &["1:13: error: `projectcalico.org/v1` is not a supported apiVersion"],
        );
        assert_eq!(
            outcome.help("apiVersion"),
            "write `apiVersion: projectcalico.org/v3`"
        );

        let text =
            "apiVersion: crd.projectcalico.org/v1\nkind: GlobalNetworkSet\nmetadata:\n  name: s\n";
        let outcome = expect(text, &["1:13: error: `crd.projectcalico.org/v1` is not"]);
        assert!(outcome.help("apiVersion").contains("skips validation"));
    }

    #[test]
    fn metadata_and_name_are_required() {
        expect(
            "apiVersion: projectcalico.org/v3\nkind: GlobalNetworkSet\nspec: {}\n",
            &["1:1: error: the `GlobalNetworkSet` has no `metadata`"],
        );
        expect(
            "apiVersion: projectcalico.org/v3\nkind: GlobalNetworkSet\nmetadata:\n  labels: {a: b}\n",
            &["4:3: error: the `GlobalNetworkSet` has no `name`"],
        );
    }

    #[test]
    fn names_are_rfc_1123_subdomains_and_the_message_says_what_is_wrong() {
        let named =
            |name: &str| network_set("  nets: []\n").replace("name: s", &format!("name: {name}"));
        let cases: &[(&str, &str, &str)] = &[
            (
                "Web",
                "4:9: error: the name `Web` has uppercase letters",
                "write `web`",
            ),
            (
                "web_server",
                "4:9: error: the name `web_server` contains `_`",
                "write `web-server`",
            ),
            (
                "'a b'",
                "4:9: error: the name `a b` contains a space",
                "write `a-b`",
            ),
            (
                "-web",
                "4:9: error: the name `-web` does not start with a letter or digit",
                "write `web`",
            ),
            (
                "web.",
                "4:9: error: the name `web.` does not end with a letter or digit",
                "write `web`",
            ),
            (
                "a..b",
                "4:9: error: the name `a..b` has two dots in a row",
                "names are lowercase",
            ),
            (
                "a-.b",
                "4:9: error: the name `a-.b` has `-` next to `.`",
                "names are lowercase",
            ),
            ("''", "4:9: error: the name is empty", "names are lowercase"),
            (
                "'é'",
                "4:9: error: the name `é` contains `é`",
                "names are lowercase",
            ),
        ];
        for (name, headline, help) in cases {
            let outcome = expect(&named(name), &[headline]);
            assert!(
                outcome.help("name").starts_with(help),
                "{name}: {}",
                outcome.help("name")
            );
        }
        let long = "a".repeat(254);
        expect(&named(&long), &["4:9: error: the name `aaaa"]);
        let outcome = run_one(&named(&long));
        assert!(outcome.headlines()[0].ends_with("is 254 bytes long, more than the 253 allowed"));
        // Dots are fine (Calico v3.29+ allows one in policy names; see the module notes).
        expect(&named(&format!("{}.b.c", "a".repeat(100))), &[]);
        expect(&named(&"a".repeat(253)), &[]);
    }

    #[test]
    fn namespace_is_refused_on_cluster_wide_resources() {
        let text =
            network_set("  nets: []\n").replace("  name: s\n", "  name: s\n  namespace: default\n");
        let outcome = expect(
            &text,
            &["5:14: error: `GlobalNetworkSet` is a cluster-wide resource, so it has no namespace"],
        );
        assert_eq!(outcome.help("namespace"), "remove `namespace`");
    }

    #[test]
    fn labels_follow_kubernetes_rules() {
        let text = "apiVersion: projectcalico.org/v3\nkind: GlobalNetworkSet\nmetadata:\n  name: s\n  labels:\n    good: yes-1\n    example.com/role: edge\n    Example.com/x: a\n    -bad: a\n    a/b/c: a\n    /x: a\n    ok: -bad\n    fine: 'a b'\n    long: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\n    empty: ''\n";
        let outcome = expect(
            text,
            &[
                "8:5: error: label key `Example.com/x` has a prefix `Example.com` that has uppercase letters",
                "9:5: error: label key `-bad` does not start with a letter or digit",
                "10:5: error: label key `a/b/c` has more than one `/`",
                "11:5: error: label key `/x` has nothing before `/`",
                "12:9: error: label value `-bad` does not start with a letter or digit",
                "13:11: error: label value `a b` contains a space",
                "14:11: error: label value `aaaa",
            ],
        );
        assert!(
            outcome.headlines()[6].ends_with("is 68 characters long, more than the 63 allowed")
        );
        // Invalid labels are left out of the model; valid ones are kept.
        let labels = &outcome.model.network_sets[0].labels;
        assert_eq!(
            labels.keys().map(String::as_str).collect::<Vec<_>>(),
            ["empty", "example.com/role", "good"]
        );
    }

    #[test]
    fn label_helpers_used_by_the_config_say_what_is_wrong() {
        assert_eq!(label_key_problem("kubernetes.io/hostname"), None);
        assert_eq!(label_key_problem("a_b.c-d"), None);
        assert_eq!(
            label_key_problem("a/"),
            Some("label key `a/` has nothing after `/`".to_owned())
        );
        assert_eq!(
            label_key_problem(&format!("x/{}", "a".repeat(64))),
            Some(format!(
                "label key `x/{}…` has a part after `/` of 64 characters, more than the 63 allowed",
                "a".repeat(62)
            ))
        );
        assert_eq!(
            label_key_problem("a/b_"),
            Some(
                "label key `a/b_` has a part after `/` that does not end with a letter or digit"
                    .to_owned()
            )
        );
        assert_eq!(
            label_key_problem(""),
            Some("the label key is empty".to_owned())
        );
        assert_eq!(label_value_problem(""), None);
        assert_eq!(
            label_value_problem("a\nb"),
            Some("label value `a\\nb` contains `\\n`".to_owned())
        );
        assert!(is_subdomain("node-1.example.com"));
        assert!(!is_subdomain("Node"));
        assert!(!is_subdomain(""));
    }

    #[test]
    fn annotations_are_qualified_keys_and_one_line_values() {
        let text = "apiVersion: projectcalico.org/v3\nkind: GlobalNetworkSet\nmetadata:\n  name: s\n  annotations:\n    Example.COM/Owner: team\n    bad key: x\n    newline: \"a\\nb\"\n    nul: \"a\\0b\"\n    bell: \"\\a\"\n    del: \"\\x7f\"\n    tab: \"a\\tb\"\n    block: |\n      text\n    unicode: \"héllo → ok\"\n";
        let outcome = expect(
            text,
            &[
                "7:5: error: annotation key `bad key` contains a space",
                "8:14: error: the annotation holds the control character `\\n`",
                "9:10: error: the annotation holds the control character `\\u{0}`",
                "10:11: error: the annotation holds the control character `\\u{7}`",
                "11:10: error: the annotation holds the control character `\\u{7f}`",
                "12:10: error: the annotation holds the control character `\\t`",
                "14:7: error: the annotation holds the control character `\\n`",
            ],
        );
        let block = &outcome.diagnostics[6];
        assert!(
            block
                .help
                .as_deref()
                .is_some_and(|help| help.contains("`>-` or `|-`"))
        );
    }

    #[test]
    fn annotations_may_hold_at_most_256_kib() {
        let big = "a".repeat(MAX_ANNOTATION_BYTES);
        let text = format!(
            "apiVersion: projectcalico.org/v3\nkind: GlobalNetworkSet\nmetadata:\n  name: s\n  annotations:\n    k: {big}\n"
        );
        expect(
            &text,
            &[
                "6:5: error: the annotations hold 262145 bytes, more than the 262144 (256 KiB) allowed",
            ],
        );
    }

    #[test]
    fn duplicate_names_of_one_kind_are_errors_at_the_second_definition() {
        let first = policy("  selector: all()\n");
        let second = format!(
            "# the same name again\n{first}---\n{}",
            network_set("  nets: []\n").replace("name: s", "name: p")
        );
        let outcome = run(&[("a.yaml", &first), ("b.yaml", &second)]);
        assert_eq!(
            outcome.headlines(),
            ["b.yaml:5:9: error: another `GlobalNetworkPolicy` is already named `p`"]
        );
        assert_eq!(
            outcome.help("already named"),
            "`p` is also defined at a.yaml:4:9"
        );
        // The first definition is the one in the model; a set may share the policy's name.
        assert_eq!(outcome.model.policies.len(), 1);
        assert_eq!(outcome.model.policies[0].origin.file, FileId(0));
        assert_eq!(outcome.model.network_sets.len(), 1);

        let third = format!("{first}---\n{first}---\n{first}");
        let outcome = run_one(&third);
        assert_eq!(outcome.headlines().len(), 2, "{:?}", outcome.headlines());
        assert_eq!(
            outcome.help("already named"),
            "`p` is also defined at p.yaml:4:9"
        );
    }

    #[test]
    fn every_error_of_every_resource_is_reported() {
        let text = format!(
            "{}---\n{}---\n{}",
            rule("action: allow\n      protocol: tcp\n      destination:\n        ports: [0]\n"),
            network_set("  nets: [10.0.0.1/8, nope]\n"),
            host_endpoint("  interfaceName: eth0\n  profiles: [kns.default]\n")
        );
        let outcome = expect(
            &text,
            &[
                "7:15: error: `allow` is not an action",
                "8:17: error: `tcp` is not a protocol name",
                "10:17: error: port 0 is not a port",
                "17:10: error: `10.0.0.1/8` has host bits set",
                "17:22: error: `nope` is not an address or a CIDR",
                "24:3: error: the host endpoint has no `node`",
                "25:14: error: profile `kns.default` does not exist here",
            ],
        );
        // The valid parts stay in the model: the policy without its rule, the set without its
        // nets; the endpoint, which has no node, is left out.
        assert_eq!(outcome.policy("p").ingress.as_ref().map(Vec::len), Some(0));
        assert!(outcome.model.network_sets[0].nets.is_empty());
        assert!(outcome.model.host_endpoints.is_empty());
    }

    // --- GlobalNetworkPolicy spec ----------------------------------------------------------

    #[test]
    fn only_the_default_tier_exists() {
        expect(&policy("  tier: default\n"), &[]);
        let outcome = expect(
            &policy("  tier: security\n"),
            &[
                "6:9: error: tier `security` does not exist here: tiers other than `default` are not supported",
            ],
        );
        assert!(outcome.help("tier").contains("`tier: default`"));
    }

    #[test]
    fn order_must_be_finite() {
        // YAML's `.inf` and `.nan` are refused by the loader already; a resource built in code
        // shows the check.
        let text = policy("  order: 1\n");
        let mut sources = Sources::new();
        let id = sources.add(SourceFile::new("p.yaml", text.as_str()));
        let (mut resources, _) = crate::load::parse_file(id, sources.get(id));
        if let Some(Sp {
            value: RawSpec::Policy(spec),
            ..
        }) = resources[0].spec.as_mut()
            && let Some(order) = spec.order.as_mut()
        {
            order.value = f64::NAN;
        }
        let (model, diagnostics) = validate(&sources, &[(id, resources.remove(0))]);
        let headlines: Vec<_> = diagnostics.iter().map(|d| d.headline(&sources)).collect();
        assert_eq!(
            headlines,
            ["p.yaml:6:10: error: `order` must be a finite number"]
        );
        assert_eq!(model.policies[0].order, None);
    }

    #[test]
    fn policy_selectors_are_limited_and_refuse_global() {
        let outcome = expect(
            &policy("  selector: has(a) && global()\n"),
            &[
                "6:23: error: `global()` can only be used in a namespaceSelector, which does not apply to host endpoints",
            ],
        );
        assert!(outcome.help("global()").starts_with("remove it"));
        // Inside double quotes the column moves by one.
        expect(
            &policy("  selector: \"has(a) && global()\"\n"),
            &["6:24: error: `global()` can only be used"],
        );
        // Calico rejects the substring anywhere, even inside a value.
        expect(
            &policy("  selector: \"a == 'global('\"\n"),
            &["6:20: error: `global()` can only be used"],
        );
        let long = format!(
            "  selector: \"{}\"\n",
            "a == 'b' && ".repeat(90) + "c == 'd'"
        );
        expect(
            &policy(&long),
            &["6:13: error: the selector is 1088 characters long, more than the 1024 allowed"],
        );
        // Exactly at the limit: 84 terms of ten characters joined by `||` (1006), and one of
        // sixteen.
        let terms = vec!["has(abcde)"; 84].join("||") + "||has(abcdefghijk)";
        assert_eq!(terms.chars().count(), MAX_SELECTOR_CHARS);
        let exact = format!("  selector: \"{terms}\"\n");
        expect(&policy(&exact), &[]);
    }

    #[test]
    fn selector_errors_point_into_the_selector() {
        if !real_selector_parser() {
            eprintln!("skipped: the selector module is still the placeholder");
            return;
        }
        // The `=` of `role = 'x'`: plain, double-quoted and single-quoted scalars.
        expect(
            &policy("  selector: role = 'x'\n"),
            &["6:18: error: expected `==` after `role`, found `=`"],
        );
        expect(&policy("  selector: \"role = 'x'\"\n"), &["6:19: error: "]);
        expect(
            &policy("  selector: 'a == \"b\" && role = \"x\"'\n"),
            &["6:31: error: "],
        );
        // The same in a rule's source selector.
        expect(
            &rule("action: Allow\n      source:\n        selector: role = 'x'\n"),
            &["9:24: error: "],
        );
        // A folded selector keeps its final line break: the error points at it, and the
        // help says how to write the selector instead.
        let outcome = expect(
            &policy("  selector: >\n    role == 'x'\n"),
            &["7:16: error: "],
        );
        assert!(outcome.diagnostics[0].help.is_some());
        // Folded over two lines, the value's bytes differ from the source's after the fold: an
        // error past the fold points at the whole value.
        expect(
            &policy("  selector: >-\n    role == 'x' &&\n    a = 'b'\n"),
            &["7:5: error: "],
        );
        // An error before the fold is still exact.
        expect(
            &policy("  selector: >-\n    a = 'b' &&\n    role == 'x'\n"),
            &["7:7: error: "],
        );
    }

    #[test]
    fn selector_positions_are_found_only_where_the_source_spells_the_value() {
        // Plain and quoted scalars without escapes: exact.
        assert_eq!(
            locate_in_scalar("role = 'x'", "role = 'x'", 5, 1),
            Some((5, 1))
        );
        assert_eq!(
            locate_in_scalar("\"role = 'x'\"", "role = 'x'", 5, 1),
            Some((6, 1))
        );
        assert_eq!(
            locate_in_scalar("'a = \"x\"'", "a = \"x\"", 2, 1),
            Some((3, 1))
        );
        // An escape before the error: the source and the value differ, so no position.
        assert_eq!(locate_in_scalar("\"a\\u0020= 'x'\"", "a = 'x'", 2, 1), None);
        assert_eq!(locate_in_scalar("'a == ''x'' &'", "a == 'x' &", 9, 1), None);
        // An escape after the error does not matter.
        assert_eq!(
            locate_in_scalar("\"a = '\\t'\"", "a = '\t'", 2, 1),
            Some((3, 1))
        );
        // Errors at the end of the text, and offsets that are not character boundaries.
        assert_eq!(locate_in_scalar("has(a", "has(a", 5, 1), Some((5, 0)));
        assert_eq!(locate_in_scalar("é", "é", 1, 1), None);
        assert_eq!(locate_in_scalar("a", "a", 7, 1), None);
        assert_eq!(
            locate_in_scalar(">\n  a == 'b'\n", "a == 'b'\n", 2, 1),
            None
        );
    }

    #[test]
    fn types_are_ingress_or_egress_once_each() {
        let outcome = expect(
            &policy("  types: [ingress, Egress, Egress, Both]\n"),
            &[
                "6:11: error: `ingress` is not a policy type",
                "6:28: error: `Egress` is listed twice in `types`",
                "6:36: error: `Both` is not a policy type",
            ],
        );
        assert_eq!(
            outcome.help("`ingress`"),
            "types are case-sensitive: write `Ingress`"
        );
        assert_eq!(outcome.help("`Both`"), "write `Ingress` or `Egress`");
    }

    #[test]
    fn types_default_from_the_rules_as_in_calico() {
        let cases: &[(&str, bool, bool)] = &[
            ("  selector: all()\n", true, false),
            ("  ingress: [{action: Allow}]\n", true, false),
            ("  egress: [{action: Allow}]\n", false, true),
            (
                "  ingress: [{action: Allow}]\n  egress: [{action: Allow}]\n",
                true,
                true,
            ),
            ("  types: []\n  egress: [{action: Allow}]\n", false, true),
            ("  types: [Egress]\n", false, true),
            ("  types: [Ingress, Egress]\n", true, true),
        ];
        for (spec, ingress, egress) in cases {
            let outcome = expect(&policy(spec), &[]);
            let policy = outcome.policy("p");
            assert_eq!(policy.ingress.is_some(), *ingress, "{spec}");
            assert_eq!(policy.egress.is_some(), *egress, "{spec}");
        }
        // No spec at all: Calico's defaults.
        let outcome = expect(
            "apiVersion: projectcalico.org/v3\nkind: GlobalNetworkPolicy\nmetadata:\n  name: p\n",
            &[],
        );
        let policy = outcome.policy("p");
        assert!(policy.selector.is_all());
        assert_eq!(policy.ingress.as_ref().map(Vec::len), Some(0));
        assert!(policy.egress.is_none());
        assert_eq!(policy.kind, PolicyKind::Normal);
        let origin = policy.origin;
        let position = outcome
            .sources
            .get(origin.file)
            .line_column(origin.span.start);
        assert_eq!(position.to_string(), "4:9");
    }

    #[test]
    fn rules_of_a_direction_that_types_leaves_out_are_a_warning() {
        let outcome = expect(
            &policy(
                "  types: [Ingress]\n  ingress: [{action: Allow}]\n  egress:\n    - action: Deny\n",
            ),
            &["9:5: warning: egress rules are ignored because `types` does not include `Egress`"],
        );
        assert!(outcome.policy("p").egress.is_none());
        expect(
            &policy("  types: [Egress]\n  ingress:\n    - action: Deny\n"),
            &["8:5: warning: ingress rules are ignored because `types` does not include `Ingress`"],
        );
    }

    #[test]
    fn pre_dnat_and_do_not_track_combinations() {
        // Valid: pre-DNAT ingress with applyOnForward.
        let outcome = expect(
            &policy("  preDNAT: true\n  applyOnForward: true\n  ingress: [{action: Deny}]\n"),
            &[],
        );
        assert_eq!(outcome.policy("p").kind, PolicyKind::PreDnat);
        assert!(outcome.policy("p").apply_on_forward);
        let outcome = expect(
            &policy("  doNotTrack: true\n  applyOnForward: true\n  egress: [{action: Allow}]\n"),
            &[],
        );
        assert_eq!(outcome.policy("p").kind, PolicyKind::Untracked);

        // Without applyOnForward, or with it false.
        let outcome = expect(
            &policy("  preDNAT: true\n"),
            &["6:12: error: a `preDNAT` policy must also apply to forwarded traffic"],
        );
        assert_eq!(outcome.help("forwarded"), "add `applyOnForward: true`");
        let outcome = expect(
            &policy("  preDNAT: true\n  applyOnForward: false\n"),
            &["7:19: error: a `preDNAT` policy must also apply to forwarded traffic"],
        );
        assert_eq!(outcome.help("forwarded"), "write `applyOnForward: true`");
        expect(
            &policy("  doNotTrack: true\n"),
            &["6:15: error: a `doNotTrack` policy must also apply to forwarded traffic"],
        );

        // Both flags.
        expect(
            &policy("  preDNAT: true\n  doNotTrack: true\n  applyOnForward: true\n"),
            &["6:12: error: a policy cannot be both `preDNAT` and `doNotTrack`"],
        );

        // Egress rules and no types: `types` defaults to include Egress, so both errors, as
        // Calico reports them.
        expect(
            &policy(
                "  preDNAT: true\n  applyOnForward: true\n  ingress: [{action: Deny}]\n  egress:\n    - action: Allow\n",
            ),
            &[
                "6:12: error: a `preDNAT` policy cannot have the `Egress` type, which `types` defaults to",
                "10:5: error: a `preDNAT` policy cannot have egress rules",
            ],
        );
        // `Egress` written in types, no egress rules.
        expect(
            &policy("  preDNAT: true\n  applyOnForward: true\n  types: [Ingress, Egress]\n"),
            &["8:20: error: a `preDNAT` policy cannot have the `Egress` type"],
        );
        // Egress rules with `types: [Ingress]`: the rules are the error (and no warning).
        expect(
            &policy(
                "  preDNAT: true\n  applyOnForward: true\n  types: [Ingress]\n  egress:\n    - action: Allow\n",
            ),
            &["10:5: error: a `preDNAT` policy cannot have egress rules"],
        );
        // Everything wrong at once.
        expect(
            &policy("  preDNAT: true\n  doNotTrack: true\n  egress: [{action: Allow}]\n"),
            &[
                "6:12: error: a policy cannot be both",
                "6:12: error: a `preDNAT` policy cannot have the `Egress` type",
                "6:12: error: a `preDNAT` policy must also apply to forwarded traffic",
                "8:11: error: a `preDNAT` policy cannot have egress rules",
            ],
        );
    }

    #[test]
    fn performance_hints_and_workload_fields_of_the_spec() {
        let outcome = expect(
            &policy(
                "  performanceHints: [AssumeNeededOnEveryNode, AssumeNeededOnEveryNode, Fast]\n  namespaceSelector: all()\n  serviceAccountSelector: all()\n",
            ),
            &[
                "6:47: error: `AssumeNeededOnEveryNode` is listed twice",
                "6:72: error: `Fast` is not a performance hint",
                "7:22: error: `namespaceSelector` selects workloads by namespace, which does not apply to host endpoints",
                "8:27: error: `serviceAccountSelector` selects workloads by service account",
            ],
        );
        assert_eq!(
            outcome.help("`Fast`"),
            "the only hint is `AssumeNeededOnEveryNode`"
        );
    }

    // --- rules -----------------------------------------------------------------------------

    #[test]
    fn actions_are_required_and_case_sensitive() {
        let outcome = expect(
            &rule("protocol: TCP\n"),
            &["7:7: error: the rule has no `action`"],
        );
        assert_eq!(
            outcome.help("action"),
            "add `action: Allow` (or `Deny`, `Pass`, `Log`)"
        );
        for (written, help) in [
            ("allow", "write `Allow`"),
            ("Accept", "write `Allow`"),
            ("DROP", "write `Deny`"),
            ("Jump", "write `Allow`, `Deny`, `Pass` or `Log`"),
        ] {
            let outcome = expect(
                &rule(&format!("action: {written}\n")),
                &[&format!("7:15: error: `{written}` is not an action")],
            );
            assert_eq!(outcome.help("action"), help);
        }
        for action in ["Allow", "Deny", "Pass", "Log"] {
            expect(&rule(&format!("action: {action}\n")), &[]);
        }
    }

    #[test]
    fn protocols_are_exact_names_or_numbers_from_1_to_255() {
        let cases: &[(&str, &str, &str)] = &[
            (
                "tcp",
                "8:17: error: `tcp` is not a protocol name: names are case-sensitive",
                "write `TCP`",
            ),
            (
                "icmpv6",
                "8:17: error: `icmpv6` is not a protocol name",
                "write `ICMPv6`",
            ),
            (
                "ipv6-icmp",
                "8:17: error: `ipv6-icmp` is not a protocol name",
                "write `ICMPv6`",
            ),
            (
                "GRE",
                "8:17: error: `GRE` is not a protocol",
                "write `TCP`, `UDP`, `ICMP`, `ICMPv6`, `SCTP`, `UDPLite` or a protocol number 1-255",
            ),
            (
                "0",
                "8:17: error: protocol number 0 is not a protocol",
                "leave `protocol` out",
            ),
            (
                "'0'",
                "8:17: error: protocol number 0 is not a protocol",
                "leave `protocol` out",
            ),
            (
                "256",
                "8:17: error: protocol number 256 is not between 1 and 255",
                "write a protocol name",
            ),
            (
                "-1",
                "8:17: error: protocol number -1 is not between 1 and 255",
                "write a protocol name",
            ),
        ];
        for (written, headline, help) in cases {
            let outcome = expect(
                &rule(&format!("action: Allow\n      protocol: {written}\n")),
                &[headline],
            );
            assert!(
                outcome.help("protocol").starts_with(help),
                "{written}: {}",
                outcome.help("protocol")
            );
        }
        expect(
            &rule("action: Allow\n      notProtocol: udp\n"),
            &["8:20: error: `udp` is not a protocol name"],
        );
        for (written, parsed) in [
            ("TCP", Protocol::Tcp),
            ("UDPLite", Protocol::UdpLite),
            ("6", Protocol::Tcp),
            ("'17'", Protocol::Udp),
            ("47", Protocol::Number(47)),
            ("255", Protocol::Number(255)),
        ] {
            let outcome = expect(
                &rule(&format!("action: Allow\n      protocol: {written}\n")),
                &[],
            );
            let rules = outcome.policy("p").ingress.clone().unwrap_or_default();
            assert_eq!(rules[0].protocol, Some(parsed), "{written}");
        }
    }

    #[test]
    fn ports_need_tcp_udp_or_sctp() {
        let outcome = expect(
            &rule("action: Allow\n      destination:\n        ports: [80]\n"),
            &["9:16: error: ports need a protocol that has ports"],
        );
        assert_eq!(
            outcome.help("ports need"),
            "add `protocol: TCP` (or `UDP`, `SCTP`) to the rule"
        );
        // Named ports too (Calico v3.30), and every list is reported.
        expect(
            &rule(
                "action: Allow\n      source:\n        notPorts: [web]\n      destination:\n        ports: [80]\n        notPorts: ['1:2']\n",
            ),
            &[
                "9:19: error: ports need a protocol that has ports",
                "11:16: error: ports need a protocol that has ports",
                "12:19: error: ports need a protocol that has ports",
            ],
        );
        // `notProtocol` never says which protocol a packet has.
        let outcome = expect(
            &rule(
                "action: Allow\n      notProtocol: UDP\n      destination:\n        ports: [80]\n",
            ),
            &["10:16: error: ports need a protocol that has ports"],
        );
        assert!(
            outcome
                .help("ports need")
                .contains("`notProtocol` does not say")
        );
        // A protocol without ports, UDPLite included (as in Calico).
        for written in ["ICMP", "UDPLite", "47"] {
            expect(
                &rule(&format!(
                    "action: Allow\n      protocol: {written}\n      destination:\n        ports: [80]\n"
                )),
                &["10:16: error: ports can only be matched with `TCP`, `UDP` or `SCTP`, not"],
            );
        }
        for written in ["TCP", "UDP", "SCTP", "6", "17", "132"] {
            expect(
                &rule(&format!(
                    "action: Allow\n      protocol: {written}\n      destination:\n        ports: [80]\n"
                )),
                &[],
            );
        }
        // An empty list is no condition; a wrong protocol is reported once, not again here.
        expect(
            &rule("action: Allow\n      destination:\n        ports: []\n"),
            &[],
        );
        expect(
            &rule("action: Allow\n      protocol: tcp\n      destination:\n        ports: [80]\n"),
            &["8:17: error: `tcp` is not a protocol name"],
        );
    }

    #[test]
    fn ports_are_numbers_ranges_or_kubernetes_port_names() {
        let cases: &[(&str, &str, Option<&str>)] = &[
            (
                "0",
                "port 0 is not a port: ports are 1-65535",
                Some("remove it; a rule without ports matches every port"),
            ),
            ("'0'", "port 0 is not a port: ports are 1-65535", None),
            ("65536", "`65536` is not a port: ports are 1-65535", None),
            ("-1", "`-1` is not a port: ports are 1-65535", None),
            (
                "'99999999999999999999999'",
                "`99999999999999999999999` is not a port",
                None,
            ),
            (
                "'90:80'",
                "the range `90:80` starts after it ends",
                Some("write `80:90`"),
            ),
            (
                "'0:80'",
                "port 0 is not a port",
                Some("ranges lie within 1-65535: write `1:80`"),
            ),
            (
                "'80:70000'",
                "`70000` is not a port",
                Some("ranges lie within 1-65535: write `80:65535`"),
            ),
            (
                "80-90",
                "port name `80-90` has no letter",
                Some("ranges are written with a colon: `80:90`"),
            ),
            (
                "'80:'",
                "port name `80:` contains `:`",
                Some("ranges are written `first:last`"),
            ),
            (
                "Web",
                "port name `Web` has uppercase letters",
                Some("write `web`"),
            ),
            ("my_port", "port name `my_port` contains `_`", None),
            ("a--b", "port name `a--b` contains `--`", None),
            ("-web", "port name `-web` starts or ends with `-`", None),
            ("web-", "port name `web-` starts or ends with `-`", None),
            (
                "abcdefghijklmnop",
                "port name `abcdefghijklmnop` is 16 characters long, more than the 15 allowed",
                None,
            ),
            ("''", "a port name cannot be empty", None),
        ];
        for (written, message, help) in cases {
            let outcome = expect(
                &rule(&format!(
                    "action: Allow\n      protocol: TCP\n      destination:\n        ports: [{written}]\n"
                )),
                &[&format!("10:17: error: {message}")],
            );
            if let Some(help) = help {
                assert!(
                    outcome.help(message).starts_with(help),
                    "{written}: {}",
                    outcome.help(message)
                );
            }
        }
        let outcome = expect(
            &rule(
                "action: Allow\n      protocol: TCP\n      destination:\n        ports: [1, 65535, '80', '8000:8080', '5:5', http, web-1]\n",
            ),
            &[],
        );
        let rules = outcome.policy("p").ingress.clone().unwrap_or_default();
        assert_eq!(
            rules[0].destination.ports,
            [
                Port::Single(1),
                Port::Single(65535),
                Port::Single(80),
                Port::Range(8000, 8080),
                Port::Range(5, 5),
                Port::Named("http".into()),
                Port::Named("web-1".into()),
            ]
        );
    }

    #[test]
    fn icmp_fields_need_an_icmp_protocol_and_valid_numbers() {
        let outcome = expect(
            &rule("action: Allow\n      icmp: {type: 8}\n"),
            &["8:13: error: `icmp` needs `protocol: ICMP` or `protocol: ICMPv6`"],
        );
        assert!(outcome.help("`icmp`").contains("`protocol: ICMPv6` (IPv6)"));
        expect(
            &rule("action: Allow\n      protocol: TCP\n      notICMP: {type: 8}\n"),
            &["9:16: error: `notICMP` needs `protocol: ICMP` or `protocol: ICMPv6`, not `TCP`"],
        );
        expect(
            &rule("action: Allow\n      protocol: ICMP\n      icmp: {type: 255, code: 256}\n"),
            &[
                "9:20: error: ICMP type 255 is not between 0 and 254",
                "9:31: error: ICMP code 256 is not between 0 and 255",
            ],
        );
        expect(
            &rule("action: Allow\n      protocol: ICMP\n      icmp: {code: 1}\n"),
            &["9:20: error: an ICMP code needs an ICMP type"],
        );
        // Numbers 1 and 58 are the ICMP protocols too.
        for protocol in ["ICMP", "ICMPv6", "1", "58"] {
            let outcome = expect(
                &rule(&format!(
                    "action: Allow\n      protocol: {protocol}\n      icmp: {{type: 3, code: 1}}\n      notICMP: {{type: 0}}\n"
                )),
                &[],
            );
            let rules = outcome.policy("p").ingress.clone().unwrap_or_default();
            assert_eq!(
                rules[0].icmp,
                Some(IcmpMatch {
                    icmp_type: 3,
                    code: Some(1)
                })
            );
            assert_eq!(
                rules[0].not_icmp,
                Some(IcmpMatch {
                    icmp_type: 0,
                    code: None
                })
            );
        }
    }

    #[test]
    fn ip_version_is_4_or_6_and_fits_icmp() {
        expect(
            &rule("action: Allow\n      ipVersion: 5\n"),
            &["8:18: error: `ipVersion` must be 4 or 6, not 5"],
        );
        let outcome = expect(
            &rule("action: Allow\n      protocol: ICMP\n      ipVersion: 6\n"),
            &[
                "9:18: error: `protocol: ICMP` exists only in IPv4, so it cannot go with `ipVersion: 6`",
            ],
        );
        assert_eq!(
            outcome.help("exists only"),
            "write `ipVersion: 4`, or use `ICMPv6` for IPv6"
        );
        expect(
            &rule("action: Allow\n      protocol: 58\n      ipVersion: 4\n"),
            &[
                "9:18: error: `protocol: ICMPv6` exists only in IPv6, so it cannot go with `ipVersion: 4`",
            ],
        );
        expect(
            &rule("action: Allow\n      notProtocol: ICMP\n      ipVersion: 6\n"),
            &["9:18: error: `notProtocol: ICMP` exists only in IPv4"],
        );
        let outcome = expect(
            &rule("action: Allow\n      protocol: ICMPv6\n      ipVersion: 6\n"),
            &[],
        );
        let rules = outcome.policy("p").ingress.clone().unwrap_or_default();
        assert_eq!(rules[0].ip_version, Some(IpFamily::V6));
    }

    #[test]
    fn rule_nets_are_strict_cidrs() {
        let cases: &[(&str, &str, &str)] = &[
            (
                "10.0.0.1",
                "`10.0.0.1` is an address, not a CIDR",
                "write `10.0.0.1/32`",
            ),
            (
                "'2001:db8::1'",
                "`2001:db8::1` is an address, not a CIDR",
                "write `2001:db8::1/128`",
            ),
            (
                "10.1.2.3/8",
                "`10.1.2.3/8` has host bits set",
                "write the network `10.0.0.0/8`, or `10.1.2.3/32` for the single address",
            ),
            (
                "10.0.0.0/33",
                "`10.0.0.0/33` is not a CIDR",
                "write a network such as",
            ),
            (
                "example.com",
                "`example.com` is not a CIDR",
                "write a network such as",
            ),
        ];
        for (written, message, help) in cases {
            let outcome = expect(
                &rule(&format!(
                    "action: Allow\n      source:\n        nets: [{written}]\n"
                )),
                &[&format!("9:16: error: {message}")],
            );
            assert!(
                outcome.help(message).starts_with(help),
                "{written}: {}",
                outcome.help(message)
            );
        }
    }

    #[test]
    fn rule_nets_agree_with_ip_version_and_with_each_other() {
        let outcome = expect(
            &rule(
                "action: Allow\n      ipVersion: 4\n      source:\n        nets: [10.0.0.0/8, 'fd00::/8']\n",
            ),
            &["10:28: error: `fd00::/8` is an IPv6 network, but `ipVersion` is 4"],
        );
        assert_eq!(
            outcome.help("ipVersion"),
            "write an IPv4 network, or `ipVersion: 6`"
        );
        // The mix is reported on the net that introduced it, in Calico's scan order.
        let outcome = expect(
            &rule(
                "action: Allow\n      source:\n        notNets: ['fd00::/8']\n      destination:\n        nets: [10.0.0.0/8, 192.0.2.0/24]\n        notNets: ['fd01::/16']\n",
            ),
            &[
                "11:16: error: `10.0.0.0/8` is an IPv4 network, but this rule already has IPv6 networks",
            ],
        );
        assert_eq!(
            outcome.help("already has"),
            "split the rule into one rule per IP family (each may set `ipVersion`)"
        );
        let outcome = expect(
            &rule(
                "action: Allow\n      source:\n        nets: ['::/0', 'fd00::/8']\n      destination:\n        notNets: ['fd00::/16']\n",
            ),
            &[],
        );
        let rules = outcome.policy("p").ingress.clone().unwrap_or_default();
        assert_eq!(rules[0].families(), [IpFamily::V6]);
    }

    #[test]
    fn catch_all_not_nets_match_nothing() {
        let outcome = expect(
            &rule(
                "action: Allow\n      source:\n        notNets: [0.0.0.0/0]\n      destination:\n        notNets: ['::/0']\n",
            ),
            &[
                "9:19: error: `0.0.0.0/0` in `notNets` excludes every address, so the rule matches nothing",
                "11:19: error: `::/0` in `notNets` excludes every address",
            ],
        );
        assert!(outcome.help("excludes").starts_with("remove the entry"));
        expect(
            &rule("action: Allow\n      source:\n        nets: [0.0.0.0/0]\n"),
            &[],
        );
    }

    #[test]
    fn icmp_with_networks_of_the_other_family_never_matches() {
        let outcome = expect(
            &rule(
                "action: Allow\n      protocol: ICMP\n      source:\n        nets: ['fd00::/8']\n",
            ),
            &[
                "8:17: warning: the rule never matches: `ICMP` exists only in IPv4, and its networks are IPv6",
            ],
        );
        assert_eq!(
            outcome.help("never matches"),
            "write `protocol: ICMPv6` for IPv6 networks"
        );
    }

    #[test]
    fn rule_selectors_are_checked_like_policy_selectors() {
        expect(
            &rule(
                "action: Allow\n      source:\n        selector: global()\n      destination:\n        notSelector: \"has(x) || global()\"\n",
            ),
            &[
                "9:19: error: `global()` can only be used in a namespaceSelector",
                "11:33: error: `global()` can only be used in a namespaceSelector",
            ],
        );
        let outcome = expect(
            &rule(
                "action: Allow\n      source:\n        selector: has(a)\n        notSelector: ''\n",
            ),
            &[],
        );
        let rules = outcome.policy("p").ingress.clone().unwrap_or_default();
        assert!(rules[0].source.selector.is_some());
        assert!(
            rules[0]
                .source
                .not_selector
                .as_ref()
                .is_some_and(Selector::is_all)
        );
    }

    #[test]
    fn workload_only_fields_are_refused() {
        let outcome = expect(
            &rule(
                "action: Allow\n      http: {methods: [GET]}\n      source:\n        namespaceSelector: all()\n        serviceAccounts: {names: [a]}\n      destination:\n        services: {name: web, namespace: default}\n",
            ),
            &[
                "8:13: error: `http` matches HTTP requests of workloads, which does not apply to host endpoints",
                "10:28: error: `namespaceSelector` selects workloads by namespace",
                "11:26: error: `serviceAccounts` selects workloads by service account",
                "13:19: error: `services` selects Kubernetes services, which do not apply to host endpoints",
            ],
        );
        assert_eq!(
            outcome.help("`services`"),
            "remove `services`; match the service's addresses with `nets` or a GlobalNetworkSet"
        );
    }

    #[test]
    fn rule_annotations_are_checked_and_kept() {
        expect(
            &rule(
                "action: Allow\n      metadata:\n        annotations:\n          'bad key': x\n          why: \"two\\nlines\"\n",
            ),
            &[
                "10:11: error: annotation key `bad key` contains a space",
                "11:16: error: the annotation holds the control character `\\n`",
            ],
        );
        let outcome = expect(
            &rule(
                "action: Allow\n      metadata:\n        annotations: {why: \"ticket #42: let the LB in\"}\n",
            ),
            &[],
        );
        let rules = outcome.policy("p").ingress.clone().unwrap_or_default();
        assert_eq!(
            rules[0].annotations.get("why").map(String::as_str),
            Some("ticket #42: let the LB in")
        );
        let origin = rules[0].origin;
        let position = outcome
            .sources
            .get(origin.file)
            .line_column(origin.span.start);
        assert_eq!(position.to_string(), "7:7");
    }

    #[test]
    fn invalid_rules_are_left_out_of_the_model() {
        let outcome = run_one(&policy(
            "  ingress:\n    - action: Allow\n    - action: Nope\n    - action: Deny\n",
        ));
        let actions: Vec<_> = outcome
            .policy("p")
            .ingress
            .iter()
            .flatten()
            .map(|rule| rule.action)
            .collect();
        assert_eq!(actions, [Action::Allow, Action::Deny]);
    }

    // --- GlobalNetworkSet ------------------------------------------------------------------

    #[test]
    fn network_sets_take_cidrs_and_addresses() {
        let outcome = expect(
            &network_set(
                "  nets: [192.0.2.0/24, 198.51.100.7, '2001:db8::1', '2001:db8::/32', 192.0.2.0/24]\n",
            ),
            &[],
        );
        let nets: Vec<String> = outcome.model.network_sets[0]
            .nets
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            nets,
            [
                "192.0.2.0/24",
                "198.51.100.7/32",
                "2001:db8::1/128",
                "2001:db8::/32"
            ]
        );
        let outcome = expect(
            &network_set("  nets: [192.0.2.1/24, not-an-ip, '2001:db8::1/32']\n"),
            &[
                "6:10: error: `192.0.2.1/24` has host bits set",
                "6:24: error: `not-an-ip` is not an address or a CIDR",
                "6:35: error: `2001:db8::1/32` has host bits set",
            ],
        );
        assert!(
            outcome
                .help("192.0.2.1/24")
                .starts_with("write the network `192.0.2.0/24`")
        );
        expect(&network_set("  nets: []\n"), &[]);
        expect(&network_set("  {}\n"), &[]);
        let outcome = expect(
            "apiVersion: projectcalico.org/v3\nkind: GlobalNetworkSet\nmetadata:\n  name: s\n  labels: {role: lb}\n",
            &[],
        );
        assert!(outcome.model.network_sets[0].nets.is_empty());
        assert_eq!(
            outcome.model.network_sets[0]
                .labels
                .get("role")
                .map(String::as_str),
            Some("lb")
        );
    }

    // --- HostEndpoint ----------------------------------------------------------------------

    #[test]
    fn host_endpoints_need_a_node_and_an_interface_or_addresses() {
        let outcome = expect(
            &host_endpoint("  interfaceName: eth0\n"),
            &["6:3: error: the host endpoint has no `node`"],
        );
        assert!(outcome.help("`node`").contains("`nodeName`"));
        expect(
            &host_endpoint("  node: Node_1\n  interfaceName: eth0\n"),
            &["6:9: error: the node name `Node_1` has uppercase letters"],
        );
        expect(
            &host_endpoint("  node: n1\n"),
            &["6:3: error: the host endpoint has neither an `interfaceName` nor `expectedIPs`"],
        );
        expect(
            &host_endpoint("  node: n1\n  interfaceName: ''\n  expectedIPs: []\n"),
            &["7:18: error: the host endpoint has neither an `interfaceName` nor `expectedIPs`"],
        );
        // No spec at all.
        expect(
            "apiVersion: projectcalico.org/v3\nkind: HostEndpoint\nmetadata:\n  name: h\n",
            &[
                "1:1: error: the host endpoint has no `node`",
                "1:1: error: the host endpoint has neither",
            ],
        );
    }

    #[test]
    fn interface_names_are_star_empty_or_linux_names() {
        for (written, interface) in [
            ("'*'", EndpointInterface::All),
            ("eth0", EndpointInterface::Named("eth0".into())),
            (
                "br-lan_1.10",
                EndpointInterface::Named("br-lan_1.10".into()),
            ),
            (
                "abcdefghijklmno",
                EndpointInterface::Named("abcdefghijklmno".into()),
            ),
            ("''", EndpointInterface::ByAddress),
        ] {
            let outcome = expect(
                &host_endpoint(&format!(
                    "  node: n1\n  interfaceName: {written}\n  expectedIPs: [192.0.2.1]\n"
                )),
                &[],
            );
            assert_eq!(outcome.model.host_endpoints[0].interface, interface);
        }
        expect(
            &host_endpoint("  node: n1\n  interfaceName: abcdefghijklmnop\n"),
            &[
                "7:18: error: interface name `abcdefghijklmnop` is 16 characters long, more than the 15 Linux allows",
            ],
        );
        let outcome = expect(
            &host_endpoint("  node: n1\n  interfaceName: 'eth*'\n"),
            &["7:18: error: interface name `eth*` contains `*`, which interface names cannot hold"],
        );
        assert!(
            outcome
                .help("interface name")
                .starts_with("only `\"*\"` on its own")
        );
        expect(
            &host_endpoint("  node: n1\n  interfaceName: 'eth 0'\n"),
            &["7:18: error: interface name `eth 0` contains a space"],
        );
    }

    #[test]
    fn expected_ips_are_plain_addresses() {
        let outcome = expect(
            &host_endpoint(
                "  node: n1\n  expectedIPs: [192.0.2.1/24, nope, '2001:db8::1', 192.0.2.1]\n",
            ),
            &[
                "7:17: error: `192.0.2.1/24` is a network, but `expectedIPs` holds single addresses",
                "7:31: error: `nope` is not an IP address",
            ],
        );
        assert_eq!(
            outcome.help("is a network"),
            "write the address without `/24`: `192.0.2.1`"
        );
        let outcome = expect(
            &host_endpoint("  node: n1\n  expectedIPs: [192.0.2.1, '2001:db8::1', 192.0.2.1]\n"),
            &[],
        );
        let endpoint = &outcome.model.host_endpoints[0];
        assert_eq!(endpoint.interface, EndpointInterface::ByAddress);
        assert_eq!(endpoint.expected_ips.len(), 2);
    }

    #[test]
    fn endpoint_ports_are_named_numbered_and_have_a_port_protocol() {
        expect(
            &host_endpoint(
                "  node: n1\n  interfaceName: eth0\n  ports:\n    - {port: 80, protocol: TCP}\n    - {name: Web, port: 0, protocol: ICMP}\n    - {name: api, port: 70000}\n    - {name: web, port: 81, protocol: tcp}\n    - {name: web, port: 82, protocol: UDP}\n",
            ),
            &[
                "9:7: error: the port has no `name`",
                "10:14: error: port name `Web` has uppercase letters",
                "10:25: error: port 0 is not a port",
                "10:38: error: a named port needs `TCP`, `UDP` or `SCTP`, not `ICMP`",
                "11:7: error: the port has no `protocol`",
                "11:25: error: `70000` is not a port",
                "12:39: error: `tcp` is not a protocol name",
                "13:14: error: port name `web` is used twice in this host endpoint",
            ],
        );
        let outcome = expect(
            &host_endpoint(
                "  node: n1\n  interfaceName: eth0\n  ports:\n    - {name: web, port: 8080, protocol: TCP}\n    - {name: dns, port: 53, protocol: 17}\n",
            ),
            &[],
        );
        assert_eq!(
            outcome.model.host_endpoints[0].ports,
            [
                NamedPort {
                    name: "web".into(),
                    port: 8080,
                    protocol: Protocol::Tcp
                },
                NamedPort {
                    name: "dns".into(),
                    port: 53,
                    protocol: Protocol::Udp
                },
            ]
        );
    }

    #[test]
    fn only_the_allow_all_profile_exists() {
        let outcome = expect(
            &host_endpoint(
                "  node: n1\n  interfaceName: eth0\n  profiles: [projectcalico-default-allow, kns.default]\n",
            ),
            &["8:43: error: profile `kns.default` does not exist here"],
        );
        assert!(
            outcome
                .help("profile")
                .contains("`projectcalico-default-allow`")
        );
        let outcome = expect(
            &host_endpoint(
                "  node: n1\n  interfaceName: '*'\n  profiles: [projectcalico-default-allow]\n",
            ),
            &[],
        );
        assert!(outcome.model.host_endpoints[0].default_allow);
        let outcome = expect(&host_endpoint("  node: n1\n  interfaceName: eth0\n"), &[]);
        let endpoint = &outcome.model.host_endpoints[0];
        assert!(!endpoint.default_allow);
        assert_eq!(endpoint.node, "n1");
        assert!(endpoint.origin.is_some());
    }

    // --- the reference fixtures and ordering -----------------------------------------------

    const V1_TO_V4: &str = "# V1\napiVersion: projectcalico.org/v3\nkind: GlobalNetworkPolicy\nmetadata:\n  name: allow-cluster-internal-ingress-only\nspec:\n  order: 20\n  preDNAT: true\n  applyOnForward: true\n  selector: has(kubernetes-host)\n  ingress:\n    - action: Allow\n      source:\n        nets: [10.240.0.0/16, 192.168.0.0/16]\n    - action: Deny\n---\n# V2\napiVersion: projectcalico.org/v3\nkind: GlobalNetworkPolicy\nmetadata:\n  name: allow-outbound-external\nspec:\n  order: 10\n  selector: has(kubernetes-host)\n  egress:\n    - action: Allow\n---\n# V3\napiVersion: projectcalico.org/v3\nkind: GlobalNetworkPolicy\nmetadata:\n  name: allow-nodeport\nspec:\n  preDNAT: true\n  applyOnForward: true\n  order: 10\n  selector: has(kubernetes-host)\n  ingress:\n    - action: Allow\n      protocol: TCP\n      destination:\n        selector: has(kubernetes-host)\n        ports: [31852]\n---\n# V4\napiVersion: projectcalico.org/v3\nkind: GlobalNetworkPolicy\nmetadata:\n  name: drop-other-ingress\nspec:\n  order: 20\n  preDNAT: true\n  applyOnForward: true\n  selector: has(host-endpoint)\n  ingress:\n    - action: Deny\n";

    const V5_V6: &str = "apiVersion: projectcalico.org/v3\nkind: GlobalNetworkPolicy\nmetadata:\n  name: ingress-k8s-masters\nspec:\n  selector: has(node-role.kubernetes.io/control-plane)\n  ingress:\n    - action: Allow\n      protocol: TCP\n      destination:\n        ports: [6443]\n    - action: Allow\n      destination:\n        nets: [127.0.0.0/8]\n    - action: Allow\n      protocol: TCP\n      source:\n        selector: has(node-role.kubernetes.io/control-plane)\n      destination:\n        ports: [2380, 10250]\n---\napiVersion: projectcalico.org/v3\nkind: GlobalNetworkPolicy\nmetadata:\n  name: ingress-k8s-workers\nspec:\n  selector: has(kubernetes-worker)\n  ingress:\n    - action: Allow\n      destination:\n        nets: [127.0.0.0/8]\n    - action: Allow\n      protocol: TCP\n      source:\n        selector: has(node-role.kubernetes.io/control-plane)\n      destination:\n        ports: [10250]\n";

    const V7_V8: &str = "- apiVersion: projectcalico.org/v3\n  kind: GlobalNetworkPolicy\n  metadata:\n    name: failsafe\n  spec:\n    selector: \"all()\"\n    order: 0\n    ingress:\n      - action: Allow\n        protocol: TCP\n        source:\n          nets: [192.0.2.0/24]\n        destination:\n          ports: [22]\n      - action: Allow\n        protocol: ICMP\n    egress:\n      - action: Allow\n        protocol: TCP\n        destination:\n          nets: [198.51.100.10/32]\n          ports: [2379, 2380]\n      - action: Allow\n        protocol: UDP\n        destination:\n          ports: [67]\n- apiVersion: projectcalico.org/v3\n  kind: GlobalNetworkPolicy\n  metadata:\n    name: empty-default-deny\n  spec:\n    types: [Ingress, Egress]\n    selector: has(host-endpoint)\n    applyOnForward: true\n";

    const V9_V10: &str = "apiVersion: projectcalico.org/v3\nkind: GlobalNetworkPolicy\nmetadata:\n  name: k8s-worker\nspec:\n  selector: \"role == 'k8s-worker'\"\n  order: 0\n  ingress:\n    - action: Allow\n      protocol: TCP\n      source:\n        nets: ['10.0.0.0/24']\n      destination:\n        ports: [22]\n    - action: Allow\n      protocol: ICMP\n    - action: Allow\n      protocol: TCP\n      destination:\n        ports: [10250]\n  egress:\n    - action: Allow\n      protocol: TCP\n      destination:\n        nets: ['10.0.0.5/32']\n        ports: [2379]\n    - action: Allow\n      protocol: UDP\n      destination:\n        ports: [53, 67]\n---\napiVersion: projectcalico.org/v3\nkind: GlobalNetworkPolicyList\nitems:\n  - apiVersion: projectcalico.org/v3\n    kind: GlobalNetworkPolicy\n    metadata:\n      name: memcached-untracked\n    spec:\n      selector: role == 'memcached'\n      order: 5\n      doNotTrack: true\n      applyOnForward: true\n      ingress:\n        - action: Allow\n          protocol: TCP\n          destination:\n            ports: [11211]\n      egress:\n        - action: Allow\n          protocol: TCP\n          source:\n            ports: [11211]\n---\napiVersion: projectcalico.org/v3\nkind: HostEndpoint\nmetadata:\n  name: node1-eth0\n  labels:\n    kubernetes-host: ingress\nspec:\n  interfaceName: eth0\n  node: node1\n  expectedIPs: [10.240.0.11]\n  ports:\n    - name: web\n      port: 8080\n      protocol: TCP\n---\napiVersion: projectcalico.org/v3\nkind: HostEndpoint\nmetadata:\n  name: node2-auto-hep\n  labels:\n    kubernetes-host: \"\"\n    projectcalico.org/created-by: calico-kube-controllers\nspec:\n  interfaceName: \"*\"\n  node: node2\n  expectedIPs: [10.240.0.12]\n  profiles: [projectcalico-default-allow]\n";

    #[test]
    fn the_reference_fixtures_are_valid_with_calicos_derived_values() {
        let outcome = run(&[
            ("v1-v4.yaml", V1_TO_V4),
            ("v5-v6.yaml", V5_V6),
            ("v7-v8.yaml", V7_V8),
            ("v9-v10.yaml", V9_V10),
        ]);
        assert_eq!(outcome.headlines(), Vec::<String>::new());
        let types = |name: &str| {
            let policy = outcome.policy(name);
            (policy.ingress.is_some(), policy.egress.is_some())
        };
        let ingress = (true, false);
        let egress = (false, true);
        let both = (true, true);
        for (name, expected) in [
            ("allow-cluster-internal-ingress-only", ingress),
            ("allow-outbound-external", egress),
            ("allow-nodeport", ingress),
            ("drop-other-ingress", ingress),
            ("ingress-k8s-masters", ingress),
            ("ingress-k8s-workers", ingress),
            ("failsafe", both),
            ("empty-default-deny", both),
            ("k8s-worker", both),
            ("memcached-untracked", both),
        ] {
            assert_eq!(types(name), expected, "{name}");
        }
        let order: Vec<&str> = outcome
            .model
            .policies
            .iter()
            .map(|p| p.name.as_str())
            .collect();
        assert_eq!(
            order,
            [
                "failsafe",
                "k8s-worker",
                "memcached-untracked",
                "allow-nodeport",
                "allow-outbound-external",
                "allow-cluster-internal-ingress-only",
                "drop-other-ingress",
                "empty-default-deny",
                "ingress-k8s-masters",
                "ingress-k8s-workers",
            ]
        );
        assert_eq!(outcome.policy("allow-nodeport").kind, PolicyKind::PreDnat);
        assert_eq!(
            outcome.policy("memcached-untracked").kind,
            PolicyKind::Untracked
        );
        assert_eq!(outcome.policy("failsafe").kind, PolicyKind::Normal);
        assert_eq!(
            outcome.policy("failsafe").ingress.as_ref().map(Vec::len),
            Some(2)
        );
        let endpoints: Vec<(&str, bool)> = outcome
            .model
            .host_endpoints
            .iter()
            .map(|endpoint| (endpoint.name.as_str(), endpoint.default_allow))
            .collect();
        assert_eq!(endpoints, [("node1-eth0", false), ("node2-auto-hep", true)]);
        // Origins are file-relative: the second policy of the first file starts in its second
        // document.
        let origin = outcome.policy("allow-outbound-external").origin;
        assert_eq!(origin.file, FileId(0));
        assert_eq!(
            outcome
                .sources
                .get(origin.file)
                .line_column(origin.span.start)
                .to_string(),
            "21:9"
        );
    }

    #[test]
    fn policies_are_ordered_by_order_then_name_with_no_order_last() {
        let named = |name: &str, order: &str| {
            format!(
                "apiVersion: projectcalico.org/v3\nkind: GlobalNetworkPolicy\nmetadata:\n  name: {name}\nspec:\n{order}  selector: all()\n---\n"
            )
        };
        let text = [
            named("z-none", ""),
            named("b-ten", "  order: 10\n"),
            named("a-none", ""),
            named("c-minus", "  order: -5.5\n"),
            named("a-ten", "  order: 10\n"),
            named("b-half", "  order: 0.5\n"),
            named("big", "  order: 1e300\n"),
            named("a-zero", "  order: 0\n"),
        ]
        .concat();
        let outcome = expect(&text, &[]);
        let order: Vec<&str> = outcome
            .model
            .policies
            .iter()
            .map(|p| p.name.as_str())
            .collect();
        assert_eq!(
            order,
            [
                "c-minus", "a-zero", "b-half", "a-ten", "b-ten", "big", "a-none", "z-none"
            ]
        );
        // Sets and endpoints come sorted by name.
        let sets = format!(
            "{}---\n{}",
            network_set("  nets: []\n").replace("name: s", "name: zz"),
            network_set("  nets: []\n")
        );
        let outcome = expect(&sets, &[]);
        let names: Vec<&str> = outcome
            .model
            .network_sets
            .iter()
            .map(|s| s.name.as_str())
            .collect();
        assert_eq!(names, ["s", "zz"]);
    }

    #[test]
    fn pure_value_checks() {
        assert_eq!(parse_port(&RawPort::Number(443)), Ok(Port::Single(443)));
        assert_eq!(
            parse_port(&RawPort::Text("1:65535".into())),
            Ok(Port::Range(1, 65535))
        );
        assert!(parse_port(&RawPort::Text("1:65536".into())).is_err());
        assert!(parse_port(&RawPort::Text(":".into())).is_err());
        assert_eq!(
            parse_protocol(&RawProtocol::Name("SCTP".into())),
            Ok(Protocol::Sctp)
        );
        assert_eq!(
            parse_protocol(&RawProtocol::Number(132)),
            Ok(Protocol::Sctp)
        );
        assert_eq!(
            parse_cidr("10.0.0.0/8").map(|net| net.to_string()),
            Ok("10.0.0.0/8".to_owned())
        );
        assert_eq!(
            parse_cidr("10.0.0.1"),
            Err("`10.0.0.1` is an address, not a CIDR; write `10.0.0.1/32`".to_owned())
        );
        assert_eq!(
            parse_set_member("::1").map(|net| net.to_string()),
            Ok("::1/128".to_owned())
        );
        assert_eq!(parse_action("Pass"), Ok(Action::Pass));
        assert_eq!(shown(&"é".repeat(100)).chars().count(), 65);
        assert_eq!(shown("a\u{0}\u{85}"), "a\\u{0}\\u{85}");
    }

    // --- robustness ------------------------------------------------------------------------

    /// A valid file that uses nearly every field, one scalar per line so each can be replaced.
    const EVERYTHING: &str = "apiVersion: projectcalico.org/v3\nkind: GlobalNetworkPolicy\nmetadata:\n  name: every-field\n  labels:\n    role: edge\n  annotations:\n    note: hello\nspec:\n  tier: default\n  order: 10\n  selector: has(kubernetes-host)\n  preDNAT: true\n  applyOnForward: true\n  types:\n    - Ingress\n  performanceHints:\n    - AssumeNeededOnEveryNode\n  ingress:\n    - action: Allow\n      protocol: TCP\n      notProtocol: UDP\n      ipVersion: 4\n      metadata:\n        annotations:\n          why: because\n      source:\n        nets:\n          - 10.0.0.0/8\n        notNets:\n          - 10.1.0.0/16\n        selector: role == 'lb'\n        notSelector: has(x)\n        ports:\n          - 80\n          - '8000:8080'\n        notPorts:\n          - web\n    - action: Allow\n      protocol: ICMP\n      icmp:\n        type: 8\n        code: 0\n      notICMP:\n        type: 3\n---\napiVersion: projectcalico.org/v3\nkind: GlobalNetworkSet\nmetadata:\n  name: set\n  labels:\n    role: lb\nspec:\n  nets:\n    - 192.0.2.0/24\n    - 198.51.100.1\n---\napiVersion: projectcalico.org/v3\nkind: HostEndpoint\nmetadata:\n  name: hep\nspec:\n  node: node1\n  interfaceName: eth0\n  expectedIPs:\n    - 10.0.0.1\n  ports:\n    - name: web\n      port: 8080\n      protocol: TCP\n  profiles:\n    - projectcalico-default-allow\n";

    #[test]
    fn the_robustness_template_is_valid() {
        expect(EVERYTHING, &[]);
    }

    /// Replaces every scalar of the template, one at a time, with awkward values; validation
    /// must neither panic nor produce a diagnostic that breaks the one-line output format.
    #[test]
    fn validation_never_panics_and_messages_stay_on_one_line() {
        let long_ascii = "a".repeat(5000);
        let long_unicode = "é".repeat(3000);
        let tricky: Vec<String> = [
            "''",
            "0",
            "-1",
            "99999999999",
            "99999999999999999999999",
            "-99999999999999999999999",
            "\"\\0\"",
            "\"\\n\"",
            "\"a\\nb\"",
            "\"\\u0007\\u007f\\u0085\"",
            "\"\\t\"",
            "\"ü€𝔘\"",
            "'é:é'",
            "\"global(\"",
            "'has('",
            "'!'",
            "\"'\"",
            "'80:'",
            "':'",
            "'0:0'",
            "'65535:1'",
            "'1-2'",
            "'::/0'",
            "'0.0.0.0/0'",
            "'10.0.0.1/33'",
            "'*'",
            "'--'",
            "'a/b/c'",
            "'/'",
            "~",
            "[]",
            "{}",
            "true",
            "1.5",
            "-0.0",
            "1e308",
            "Ingress",
            "Egress",
        ]
        .iter()
        .map(|value| (*value).to_owned())
        .chain([
            long_ascii.clone(),
            long_unicode.clone(),
            format!("'{long_unicode}:{long_ascii}'"),
            format!("\"{}\"", "\\n".repeat(100)),
        ])
        .collect();
        let scalar = regex::Regex::new(r"^(\s*(?:- )?(?:[A-Za-z]+: )?)(.+)$")
            .unwrap_or_else(|e| panic!("{e}"));
        let lines: Vec<&str> = EVERYTHING.lines().collect();
        let mut runs = 0;
        for (index, line) in lines.iter().enumerate() {
            let Some(captures) = scalar.captures(line) else {
                continue;
            };
            let (prefix, value) = (&captures[1], &captures[2]);
            if value.ends_with(':') || value == "---" {
                continue;
            }
            for replacement in &tricky {
                let mut mutated: Vec<String> = lines.iter().map(|l| (*l).to_owned()).collect();
                mutated[index] = format!("{prefix}{replacement}");
                let text = mutated.join("\n") + "\n";
                let mut sources = Sources::new();
                let id = sources.add(SourceFile::new("p.yaml", text.as_str()));
                let (resources, _) = crate::load::parse_file(id, sources.get(id));
                let resources: Vec<_> = resources.into_iter().map(|r| (id, r)).collect();
                let (_, diagnostics) = validate(&sources, &resources);
                for diagnostic in &diagnostics {
                    let rendered = diagnostic.render(&sources);
                    assert!(!diagnostic.message.contains(['\n', '\r']), "{rendered}");
                    assert!(!diagnostic.message.ends_with('.'), "{rendered}");
                    let help = diagnostic.help.as_deref().unwrap_or("");
                    assert!(!help.contains(['\n', '\r']), "{rendered}");
                    assert!(
                        diagnostic
                            .span
                            .is_some_and(|span| span.end <= text.len() && span.start <= span.end),
                        "{rendered}"
                    );
                    assert!(diagnostic.message.chars().count() < 400, "{rendered}");
                }
                runs += 1;
            }
        }
        assert!(runs > 1000, "only {runs} variants ran");
    }

    #[test]
    fn severities_are_errors_except_the_documented_warnings() {
        let outcome = run_one(&policy("  types: [Ingress]\n  egress: [{action: Allow}]\n"));
        assert_eq!(outcome.diagnostics[0].severity, Severity::Warning);
        assert!(!crate::diagnostic::has_errors(&outcome.diagnostics));
    }
}
