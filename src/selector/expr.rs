//! The syntax tree of a selector, and its evaluation against labels.

use std::collections::{BTreeMap, BTreeSet};

/// The syntax tree of a selector.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(super) enum Expr {
    /// `all()`, and the empty selector.
    All,
    /// `global()`.
    Global,
    /// `has(key)`.
    Has(String),
    /// A test of one label's value, such as `key == 'value'`.
    Label { key: String, test: Test },
    /// `!expr`. The parser never puts a `Not` directly inside another, so that `!!x` and `x`
    /// are the same selector.
    Not(Box<Expr>),
    /// `a && b && ...`, with at least two operands.
    And(Vec<Expr>),
    /// `a || b || ...`, with at least two operands.
    Or(Vec<Expr>),
}

impl Expr {
    pub(super) fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        match self {
            Expr::All | Expr::Global => true,
            Expr::Has(key) => labels.contains_key(key),
            Expr::Label { key, test } => test.matches(labels.get(key).map(String::as_str)),
            Expr::Not(inner) => !inner.matches(labels),
            Expr::And(operands) => operands.iter().all(|operand| operand.matches(labels)),
            Expr::Or(operands) => operands.iter().any(|operand| operand.matches(labels)),
        }
    }

    pub(super) fn collect_keys<'a>(&'a self, keys: &mut BTreeSet<&'a str>) {
        match self {
            Expr::All | Expr::Global => {}
            Expr::Has(key) | Expr::Label { key, .. } => {
                keys.insert(key);
            }
            Expr::Not(inner) => inner.collect_keys(keys),
            Expr::And(operands) | Expr::Or(operands) => {
                for operand in operands {
                    operand.collect_keys(keys);
                }
            }
        }
    }

    /// `!self`, cancelling a `!` already there.
    pub(super) fn negated(self) -> Expr {
        match self {
            Expr::Not(inner) => *inner,
            other => Expr::Not(Box::new(other)),
        }
    }
}

/// What a comparison requires of one label's value.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(super) enum Test {
    Equals(String),
    NotEquals(String),
    Contains(String),
    StartsWith(String),
    EndsWith(String),
    In(BTreeSet<String>),
    NotIn(BTreeSet<String>),
}

impl Test {
    /// Whether a label with this `value` (`None` when the label is absent) passes.
    ///
    /// The negative tests, `!=` and `not in`, pass for an absent label, as in Calico.
    fn matches(&self, value: Option<&str>) -> bool {
        match self {
            Test::Equals(wanted) => value == Some(wanted.as_str()),
            Test::NotEquals(unwanted) => value != Some(unwanted.as_str()),
            Test::Contains(part) => value.is_some_and(|value| value.contains(part.as_str())),
            Test::StartsWith(prefix) => {
                value.is_some_and(|value| value.starts_with(prefix.as_str()))
            }
            Test::EndsWith(suffix) => value.is_some_and(|value| value.ends_with(suffix.as_str())),
            Test::In(set) => value.is_some_and(|value| set.contains(value)),
            Test::NotIn(set) => !value.is_some_and(|value| set.contains(value)),
        }
    }
}
