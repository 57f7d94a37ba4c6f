//! Validation: raw resources in, a [`Model`] and every diagnostic out.
//!
//! Architecture invariant: validation never stops at the first error, and it never asks the
//! system anything (no files, no kernel): it is a pure function of the parsed files.

use ipnet::IpNet;

use crate::diagnostic::Diagnostic;
use crate::model::Model;
use crate::source::{FileId, Sources};
use crate::spec::RawResource;

/// Checks every resource and builds the model. The model is only meaningful when no
/// diagnostic is an error.
pub fn validate(
    _sources: &Sources,
    _resources: &[(FileId, RawResource)],
) -> (Model, Vec<Diagnostic>) {
    (Model::default(), Vec::new())
}

/// Whether `name` is an RFC 1123 subdomain: at most 253 characters of lowercase letters,
/// digits, `-` and `.`, in labels that start and end with a letter or digit.
pub fn is_subdomain(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
}

/// What is wrong with a label key (Kubernetes qualified name), if anything.
pub fn label_key_problem(key: &str) -> Option<String> {
    let (prefix, name) = match key.rsplit_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    if let Some(prefix) = prefix {
        if !is_subdomain(prefix) {
            return Some(format!(
                "label key `{key}` has an invalid prefix `{prefix}`: it must be a DNS subdomain"
            ));
        }
    }
    if !is_label_name(name) {
        return Some(format!(
            "label key `{key}` is invalid: the name part must be 1-63 letters, digits, `-`, `_` or `.`, starting and ending with a letter or digit"
        ));
    }
    None
}

/// What is wrong with a label value, if anything.
pub fn label_value_problem(value: &str) -> Option<String> {
    if value.is_empty() || is_label_name(value) {
        None
    } else {
        Some(format!(
            "label value `{value}` is invalid: it must be empty or 1-63 letters, digits, `-`, `_` or `.`, starting and ending with a letter or digit"
        ))
    }
}

fn is_label_name(name: &str) -> bool {
    let bytes = name.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= 63
        && bytes[0].is_ascii_alphanumeric()
        && bytes[bytes.len() - 1].is_ascii_alphanumeric()
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// Parses a CIDR with an explicit prefix length and no host bits set.
pub fn parse_cidr(text: &str) -> Result<IpNet, String> {
    let net: IpNet = text.parse().map_err(|_| {
        if text.parse::<std::net::IpAddr>().is_ok() {
            format!("`{text}` is an address, not a CIDR")
        } else {
            format!("`{text}` is not a CIDR")
        }
    })?;
    if net.trunc() != net {
        return Err(format!(
            "`{text}` has host bits set; the network is `{}`",
            net.trunc()
        ));
    }
    Ok(net)
}
