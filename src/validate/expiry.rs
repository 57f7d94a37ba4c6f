//! Time-boxed resources: the `nodeport-guard.io/expires` annotation read and checked, and a
//! model seen at an instant, without what has expired by then.
//!
//! Validation itself knows no clock: it records each expiry in the model. [`at`] is the one
//! step that takes the time, as a value its caller read (the commands once at start, the
//! daemon at each reload, the tests whatever they like), so the pure core stays a function of
//! its inputs.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::diagnostic::Diagnostic;
use crate::model::{
    EXPIRES_ANNOTATION, Expiry, GRANTED_BY_ANNOTATION, Model, Origin, REASON_ANNOTATION,
};
use crate::spec::{Kind, Sp};

use super::checker::Checker;
use super::values::shown;

/// A valid expiry, shown in the help of an invalid one.
const EXAMPLE: &str = "2026-12-05T18:00:00Z";

/// Reads the expiry annotations of a resource; an expiry that is not an RFC 3339 time with an
/// offset, or one on a kind that cannot expire, is an error.
pub(super) fn check_expiry(
    checker: &mut Checker<'_>,
    annotations: &BTreeMap<Sp<String>, Sp<String>>,
) -> Option<Expiry> {
    let value = |wanted: &str| {
        annotations
            .iter()
            .find(|(key, _)| key.value == wanted)
            .map(|(_, value)| value)
    };
    let expires = value(EXPIRES_ANNOTATION)?;
    let kind = checker.resource.kind.value;
    if !matches!(
        kind,
        Kind::GlobalNetworkPolicy | Kind::StagedGlobalNetworkPolicy | Kind::GlobalNetworkSet
    ) {
        checker.error_help(
            expires.span,
            format!("a `{kind}` cannot expire"),
            format!(
                "remove `{EXPIRES_ANNOTATION}`; only a GlobalNetworkPolicy, a StagedGlobalNetworkPolicy or a GlobalNetworkSet expires"
            ),
        );
        return None;
    }
    let Some(at) = parse_time(&expires.value) else {
        checker.error_help(
            expires.span,
            format!(
                "`{}` is not an RFC 3339 time with an offset",
                shown(&expires.value)
            ),
            time_help(&expires.value),
        );
        return None;
    };
    Some(Expiry {
        at,
        origin: checker.origin(expires.span),
        granted_by: value(GRANTED_BY_ANNOTATION).map(|value| value.value.clone()),
        reason: value(REASON_ANNOTATION).map(|value| value.value.clone()),
    })
}

/// An RFC 3339 time with an offset (`Z` or `±hh:mm`), and nothing more: RFC 3339's
/// `date-time` shape exactly (`YYYY-MM-DDThh:mm:ss`, an optional `.` fraction, the offset), so
/// none of the other ISO 8601 forms jiff also reads (no seconds, `+0100`, basic format, a
/// comma fraction, a time zone name in brackets); then jiff checks the values.
///
/// A valid time after the last instant jiff holds (`9999-12-30T22:00:00Z`, so that every
/// offset of it is still a date of year 9999) is that last instant: `9999-12-31T23:59:59Z`,
/// written to mean "never", is a time, not an error.
pub fn parse_time(text: &str) -> Option<jiff::Timestamp> {
    if !is_rfc3339_shape(text) {
        return None;
    }
    if let Ok(at) = text.parse() {
        return Some(at);
    }
    // The date and time without the offset, checked on their own (the offset's digits are
    // already within range): valid, they can only be beyond the last instant.
    let civil = &text[..text.len() - if text.ends_with(['Z', 'z']) { 1 } else { 6 }];
    let date_time: jiff::civil::DateTime = civil.parse().ok()?;
    (date_time.year() == 9999).then_some(jiff::Timestamp::MAX)
}

/// Whether `text` has the shape of RFC 3339's `date-time` (section 5.6).
fn is_rfc3339_shape(text: &str) -> bool {
    let bytes = text.as_bytes();
    let digits = |range: std::ops::Range<usize>| {
        bytes
            .get(range)
            .is_some_and(|part| part.iter().all(u8::is_ascii_digit))
    };
    let at = |index: usize, allowed: &[u8]| bytes.get(index).is_some_and(|b| allowed.contains(b));
    // full-date "T" partial-time, without the fraction: `2026-12-05T18:00:00`.
    let date_time = digits(0..4)
        && at(4, b"-")
        && digits(5..7)
        && at(7, b"-")
        && digits(8..10)
        && at(10, b"Tt")
        && digits(11..13)
        && at(13, b":")
        && digits(14..16)
        && at(16, b":")
        && digits(17..19);
    if !date_time {
        return false;
    }
    let mut rest = &bytes[19..];
    if let Some(fraction) = rest.strip_prefix(b".") {
        let count = fraction.iter().take_while(|b| b.is_ascii_digit()).count();
        if count == 0 {
            return false;
        }
        rest = &fraction[count..];
    }
    match rest {
        [b'Z' | b'z'] => true,
        // time-numoffset: hours 00-23, minutes 00-59 (jiff alone would take `+24:00`).
        [b'+' | b'-', h1, h2, b':', m1, m2] => {
            [h1, h2, m1, m2].iter().all(|b| b.is_ascii_digit())
                && (*h1 - b'0') * 10 + (*h2 - b'0') <= 23
                && *m1 <= b'5'
        }
        _ => false,
    }
}

/// The expiry `resource` says it has, read from its annotations without checking anything
/// else: `None` when it has none, or none that is valid on its kind.
pub(super) fn declared_expiry(resource: &crate::spec::RawResource) -> Option<jiff::Timestamp> {
    if !matches!(
        resource.kind.value,
        Kind::GlobalNetworkPolicy | Kind::StagedGlobalNetworkPolicy | Kind::GlobalNetworkSet
    ) {
        return None;
    }
    let annotations = resource.metadata.as_ref()?.value.annotations.as_ref()?;
    let (_, value) = annotations
        .value
        .iter()
        .find(|(key, _)| key.value == EXPIRES_ANNOTATION)?;
    parse_time(&value.value)
}

fn time_help(text: &str) -> String {
    match text.trim().parse::<jiff::civil::DateTime>() {
        Ok(civil) if !text.contains('[') => format!(
            "add the offset: `{}Z` for UTC, or for example `{}+02:00`",
            civil.strftime("%Y-%m-%dT%H:%M:%S"),
            civil.strftime("%Y-%m-%dT%H:%M:%S")
        ),
        _ => format!("write a time with its offset, for example `{EXAMPLE}`"),
    }
}

/// `model` as it stands at `now`: every policy, staged policy, staged deletion and network set
/// whose expiry has passed is left out, each with a warning that points at its annotation.
/// The order of what remains is kept. A model without expired resources comes back as it was.
pub fn at(model: &Model, now: jiff::Timestamp) -> (Model, Vec<Diagnostic>) {
    let mut warnings = Vec::new();
    let mut live = |kind: &str, name: &str, expires: Option<&Expiry>| match expires {
        Some(expiry) if expiry.has_passed(now) => {
            warnings.push(expired_warning(kind, name, expiry, now));
            false
        }
        _ => true,
    };
    let policies = kept(
        model.policies(),
        |p| ("GlobalNetworkPolicy", &p.name, p.expires.as_ref()),
        &mut live,
    );
    let staged = kept(
        model.staged_policies(),
        |p| ("StagedGlobalNetworkPolicy", &p.name, p.expires.as_ref()),
        &mut live,
    );
    let deletions = kept(
        model.staged_deletions(),
        |d| ("StagedGlobalNetworkPolicy", &d.name, d.expires.as_ref()),
        &mut live,
    );
    let network_sets = kept(
        model.network_sets(),
        |s| ("GlobalNetworkSet", &s.name, s.expires.as_ref()),
        &mut live,
    );
    if warnings.is_empty() {
        return (model.clone(), warnings);
    }
    let model = Model::from_checked(
        model.tiers().to_vec(),
        policies,
        network_sets,
        model.host_endpoints().iter().map(Arc::clone).collect(),
    )
    .with_staged(staged, deletions);
    (model, warnings)
}

/// The items `live` keeps, by the kind, name and expiry `describe` reads from each.
fn kept<T: Clone>(
    items: &[T],
    describe: impl Fn(&T) -> (&'static str, &String, Option<&Expiry>),
    live: &mut impl FnMut(&str, &str, Option<&Expiry>) -> bool,
) -> Vec<T> {
    items
        .iter()
        .filter(|item| {
            let (kind, name, expires) = describe(item);
            live(kind, name, expires)
        })
        .cloned()
        .collect()
}

fn expired_warning(kind: &str, name: &str, expiry: &Expiry, now: jiff::Timestamp) -> Diagnostic {
    let Origin { file, span } = expiry.origin;
    Diagnostic::warning(
        file,
        span,
        format!(
            "the {kind} `{name}` expired at {} ({} ago): it is left out, as if no file held it",
            expiry.at,
            human_duration(now.duration_since(expiry.at))
        ),
    )
    .with_help("delete its file (`nodeport-guard grants --prune` deletes the files that hold only expired resources), or move the expiry forward")
}

/// The earliest expiry still to come after `now` among the resources of `model`.
pub fn next_expiry(model: &Model, now: jiff::Timestamp) -> Option<jiff::Timestamp> {
    expiries(model)
        .map(|expiry| expiry.at)
        .filter(|at| *at > now)
        .min()
}

/// Every expiry written on a resource of `model`.
pub fn expiries(model: &Model) -> impl Iterator<Item = &Expiry> {
    let policies = model
        .policies()
        .iter()
        .chain(model.staged_policies())
        .filter_map(|policy| policy.expires.as_ref());
    let deletions = model
        .staged_deletions()
        .iter()
        .filter_map(|deletion| deletion.expires.as_ref());
    let sets = model
        .network_sets()
        .iter()
        .filter_map(|set| set.expires.as_ref());
    policies.chain(deletions).chain(sets)
}

/// A duration in words for "expires in …" and "… ago": its two largest units, rounded down
/// (`2d 3h`, `45m 10s`, `12s`); negative durations are shown as their size.
pub fn human_duration(duration: jiff::SignedDuration) -> String {
    let seconds = duration.as_secs().unsigned_abs();
    let units = [("d", 86_400), ("h", 3_600), ("m", 60), ("s", 1)];
    let mut parts = Vec::new();
    let mut rest = seconds;
    for (unit, size) in units {
        if rest >= size || (parts.is_empty() && size == 1) {
            parts.push(format!("{}{unit}", rest / size));
            rest %= size;
        } else if !parts.is_empty() {
            // A zero between two shown units would say nothing; stop at the second unit.
            break;
        }
        if parts.len() == 2 {
            break;
        }
    }
    parts.join(" ")
}

#[cfg(test)]
mod tests {
    use super::parse_time;

    #[test]
    fn only_rfc_3339_times_with_an_offset_are_read() {
        for good in [
            "2027-12-05T18:00:00Z",
            "2027-12-05T18:00:00+01:00",
            "2027-12-05t18:00:00.250-05:30",
            "2027-12-05T18:00:00.5z",
        ] {
            assert!(parse_time(good).is_some(), "{good}");
        }
        assert_eq!(
            parse_time("2027-12-05T18:00:00+01:00"),
            parse_time("2027-12-05T17:00:00Z")
        );
        for bad in [
            "2027-12-05T18:00:00+0100",
            "2027-12-05T18:00:00+01",
            "2027-12-05T18:00Z",
            "2027-12-05T1800Z",
            "20271205T180000Z",
            "2027-12-05T18:00:00,5Z",
            "2027-12-05T18:00:00.Z",
            "2027-12-05T18:00:00",
            "2027-12-05 18:00:00Z",
            "2027-12-05",
            "2027-12-05T18:00:00Z[Europe/Paris]",
            "2027-13-05T18:00:00Z",
            "2027-12-05T18:00:00Z ",
            "2027-12-05T18:00:00+24:00",
            "2027-12-05T18:00:00-25:00",
            "2027-12-05T18:00:00+01:60",
            "9999-12-31T24:00:00Z",
            "9999-02-30T00:00:00Z",
            "",
        ] {
            assert!(parse_time(bad).is_none(), "{bad}");
        }
        assert!(parse_time("2027-12-05T18:00:00+23:59").is_some());
    }

    #[test]
    fn a_valid_time_beyond_the_last_instant_is_the_last_instant() {
        for never in [
            "9999-12-31T23:59:59Z",
            "9999-12-31T00:00:00-05:00",
            "9999-12-30T22:00:01Z",
        ] {
            assert_eq!(parse_time(never), Some(jiff::Timestamp::MAX), "{never}");
        }
        assert!(parse_time("9999-12-30T21:59:59Z").is_some_and(|at| at < jiff::Timestamp::MAX));
    }
}
