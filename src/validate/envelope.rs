//! What every resource has: `apiVersion`, `metadata` (name, namespace, labels, annotations),
//! and a name no other resource of its kind has.

use std::collections::{BTreeMap, HashMap};

use crate::diagnostic::Diagnostic;
use crate::model::{DEFAULT_TIER, Labels, Origin};
use crate::source::{FileId, Sources, Span};
use crate::spec::{API_VERSION, Kind, RawResource, RawSpec, Sp};

use super::MAX_ANNOTATION_BYTES;
use super::checker::{Checker, Problem};
use super::values::{
    LABEL_VALUE_RULE, NameShape, QUALIFIED_NAME_RULE, label_key_problem, label_value_problem,
    name_problem, qualified_name_reason, shown, subject_reason,
};

/// What every resource has once its metadata is valid.
pub(super) struct Identity {
    pub(super) name: String,
    pub(super) labels: Labels,
    /// `nodeport-guard.io/expires`, when written and valid.
    pub(super) expires: Option<crate::model::Expiry>,
    pub(super) origin: Origin,
}

/// A resource's name as the duplicate check knows it: kept with a validated file, so that an
/// unchanged file is checked against the others without being validated again.
#[derive(Clone, Debug)]
pub(super) struct NameKey {
    kind: Kind,
    /// The name as Calico stores it (a default-tier policy without its `default.` prefix).
    stored: String,
    /// The name as written.
    written: String,
    /// Where the name stands in its file.
    span: Span,
}

/// The name under which the duplicate check knows the resource, if it has one.
pub(super) fn name_key(resource: &RawResource) -> Option<NameKey> {
    let name = resource.name()?;
    if name.value.is_empty() {
        return None;
    }
    let kind = resource.kind.value;
    let stored = match kind {
        Kind::GlobalNetworkPolicy | Kind::StagedGlobalNetworkPolicy => {
            name.value.strip_prefix("default.").unwrap_or(&name.value)
        }
        _ => name.value.as_str(),
    };
    Some(NameKey {
        kind,
        stored: stored.to_owned(),
        written: name.value.clone(),
        span: resource.at(name.span),
    })
}

/// The first resource of a name: where, as written, and when it expires.
#[derive(Clone, Debug)]
pub(super) struct FirstDefinition {
    file: FileId,
    span: Span,
    written: String,
    expires: Option<jiff::Timestamp>,
}

/// Reports a second (or later) resource of the same kind and name, and says whether to keep
/// this one in the model: yes when it is the first, or when either of the two expires (the
/// error is moot once one has: see [`Diagnostic::moot_after`]). A policy `<name>` in the
/// default tier is the one Calico stores as `default.<name>` (`names.TieredPolicyName`), so
/// the two spellings are one name.
pub(super) fn check_duplicate(
    key: &NameKey,
    expires: Option<jiff::Timestamp>,
    file: FileId,
    sources: &Sources,
    first_definitions: &mut HashMap<(Kind, String), FirstDefinition>,
    diagnostics: &mut Vec<Diagnostic>,
) -> bool {
    let kind = key.kind;
    let lookup = (kind, key.stored.clone());
    if let Some(first) = first_definitions.get(&lookup) {
        let source = sources.get(first.file);
        let message = if first.written == key.written {
            format!(
                "another `{kind}` is already named `{}`",
                shown(&key.written)
            )
        } else {
            format!(
                "another `{kind}` is already named `{}`, which is the same policy: Calico stores a policy of the default tier as `default.{}`",
                shown(&first.written),
                key.stored
            )
        };
        let moot = match (first.expires, expires) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        diagnostics.push(
            Diagnostic::error(file, key.span, message)
                .with_help(format!(
                    "`{}` is also defined at {}:{}",
                    shown(&first.written),
                    source.path.display(),
                    source.line_column(first.span.start)
                ))
                .moot_after(moot),
        );
        return moot.is_some();
    }
    first_definitions.insert(
        lookup,
        FirstDefinition {
            file,
            span: key.span,
            written: key.written.clone(),
            expires,
        },
    );
    true
}

pub(super) fn check_api_version(checker: &mut Checker<'_>) {
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
pub(super) fn check_metadata(checker: &mut Checker<'_>) -> Option<Identity> {
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
    let expires = metadata.annotations.as_ref().and_then(|annotations| {
        check_annotations(checker, annotations);
        super::expiry::check_expiry(checker, &annotations.value)
    });
    let Some(name) = &metadata.name else {
        checker.error_help(
            span,
            format!("the `{kind}` has no `name`"),
            "add `name:` with lowercase letters, digits, `-` and `.`",
        );
        return None;
    };
    if let Some(problem) = name_problem(&name.value, "name", name_shape(resource)) {
        checker.report(name.span, problem);
        return None;
    }
    Some(Identity {
        name: name.value.clone(),
        labels,
        expires,
        origin: checker.origin(name.span),
    })
}

/// What `resource`'s name must look like, for the name suggested in place of an invalid one.
fn name_shape(resource: &RawResource) -> NameShape<'_> {
    match resource.kind.value {
        Kind::Tier => NameShape::Label,
        Kind::GlobalNetworkPolicy | Kind::StagedGlobalNetworkPolicy => {
            let tier = match resource.spec.as_ref().map(|spec| &spec.value) {
                Some(RawSpec::Policy(spec)) => spec.tier.as_ref().map(|tier| tier.value.as_str()),
                _ => None,
            };
            NameShape::Policy(tier.unwrap_or(DEFAULT_TIER))
        }
        _ => NameShape::Subdomain,
    }
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
        // Calico: "should reject GlobalNetworkSet with reserved labels". The namespace label
        // is Calico's own, for namespaced network sets.
        if checker.resource.kind.value == Kind::GlobalNetworkSet
            && key.value == "projectcalico.org/namespace"
        {
            checker.error_help(
                key.span,
                "`projectcalico.org/namespace` is a label Calico reserves: a GlobalNetworkSet belongs to no namespace",
                "remove the label, or use a label of your own to select the set",
            );
            ok = false;
        }
        if ok {
            valid.insert(key.value.clone(), value.value.clone());
        }
    }
    valid
}

/// Checks annotations (of a resource or of a rule); returns the valid ones.
pub(super) fn check_annotations(
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
