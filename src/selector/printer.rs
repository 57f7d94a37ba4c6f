//! The canonical form of a selector: values in double quotes (single quotes when the value
//! contains a double quote), sets sorted without repeats, and every `&&` or `||` group in
//! parentheses.

use std::collections::BTreeSet;
use std::fmt;

use super::expr::{Expr, Test};

impl fmt::Display for Expr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Expr::All => f.write_str("all()"),
            Expr::Global => f.write_str("global()"),
            Expr::Has(key) => write!(f, "has({key})"),
            Expr::Label { key, test } => write!(f, "{key} {test}"),
            // `!` binds to one primary, and every `&&` or `||` group prints in parentheses,
            // so no extra parentheses are needed here.
            Expr::Not(inner) => write!(f, "!{inner}"),
            Expr::And(operands) => write_group(f, operands, " && "),
            Expr::Or(operands) => write_group(f, operands, " || "),
        }
    }
}

/// Writes `(a op b op ...)`.
fn write_group(f: &mut fmt::Formatter<'_>, operands: &[Expr], separator: &str) -> fmt::Result {
    f.write_str("(")?;
    for (index, operand) in operands.iter().enumerate() {
        if index > 0 {
            f.write_str(separator)?;
        }
        write!(f, "{operand}")?;
    }
    f.write_str(")")
}

impl fmt::Display for Test {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Test::Equals(value) => write!(f, "== {}", Quoted(value)),
            Test::NotEquals(value) => write!(f, "!= {}", Quoted(value)),
            Test::Contains(value) => write!(f, "contains {}", Quoted(value)),
            Test::StartsWith(value) => write!(f, "starts with {}", Quoted(value)),
            Test::EndsWith(value) => write!(f, "ends with {}", Quoted(value)),
            Test::In(set) => write!(f, "in {}", QuotedSet(set)),
            Test::NotIn(set) => write!(f, "not in {}", QuotedSet(set)),
        }
    }
}

/// A value in canonical quotes: double, unless the value itself contains a double quote.
///
/// There are no escapes in the language, so a value holding both kinds of quote cannot be
/// written, and therefore never reaches the printer.
struct Quoted<'a>(&'a str);

impl fmt::Display for Quoted<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.contains('"') {
            write!(f, "'{}'", self.0)
        } else {
            write!(f, "\"{}\"", self.0)
        }
    }
}

/// A set of values as `{"a", "b"}`; the `BTreeSet` already keeps it sorted and unique.
struct QuotedSet<'a>(&'a BTreeSet<String>);

impl fmt::Display for QuotedSet<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("{")?;
        for (index, value) in self.0.iter().enumerate() {
            if index > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{}", Quoted(value))?;
        }
        f.write_str("}")
    }
}
