//! Calico label selectors: parsing, matching and canonical printing.
//!
//! Policies choose the endpoints, namespaces and host interfaces they apply to with Calico's
//! selector language, for example `role == 'web' && !has(canary)`. This module reads that
//! language the way Calico does, so that a policy means the same thing here as in a cluster;
//! it evaluates a selector against a set of labels; and it prints a selector in one canonical
//! form, so that generated rules and diffs do not change with the author's quoting or spacing.
//!
//! Errors carry a byte span into the selector text, a one-sentence message and, for the usual
//! mistakes, a help text saying what to write instead. The caller knows where the selector
//! sits in the policy file and turns the span into a line and column.
//!
//! The parser reads the text in one pass, tokenizing on demand: `lexer` makes the tokens,
//! `parser` the tree (`expr`, which also evaluates it), `errors` the messages for every kind of
//! mistake, and `printer` the canonical form.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::str::FromStr;

mod expr;
mod parser;
mod printer;
#[cfg(test)]
mod tests;

use expr::Expr;
use parser::Parser;

/// Longest label key accepted, in bytes; the same limit as Calico's tokenizer.
const MAX_LABEL_LEN: usize = 512;

/// Deepest nesting of `(` and `!` accepted.
///
/// The parser recurses once per level, so the bound keeps hostile input from exhausting the
/// stack, and it also bounds the depth of every later walk over the tree. Real selectors nest
/// a handful of levels.
const MAX_DEPTH: usize = 100;

/// A parsed label selector.
///
/// Selectors compare equal when they have the same structure: whitespace, quote style,
/// redundant parentheses, pairs of `!` and the order or repetition of set values make no
/// difference. The [`Display`](fmt::Display) form is canonical and parses back to an equal
/// selector.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Selector {
    root: Expr,
}

impl Selector {
    /// Parses a selector, such as `role == 'web' && env in {'prod', 'staging'}`.
    ///
    /// An empty (or all-blank) selector is the same as `all()`.
    ///
    /// # Errors
    ///
    /// Fails on the first token that does not fit the language, with the error pointing at
    /// that token (or at the end of the text when the selector stops early), and when
    /// `(` and `!` nest more than 100 levels deep.
    pub fn parse(text: &str) -> Result<Selector, SelectorError> {
        Parser::new(text).selector().map(|root| Selector { root })
    }

    /// The selector that matches everything: `all()`, which is also what an empty selector
    /// means.
    pub fn all() -> Selector {
        Selector { root: Expr::All }
    }

    /// Whether this is `all()` or the empty selector.
    ///
    /// This looks at the form only; a selector such as `all() && all()` also matches
    /// everything but is not reported here.
    pub fn is_all(&self) -> bool {
        self.root == Expr::All
    }

    /// Whether an object carrying `labels` is selected.
    ///
    /// Label keys and values compare exactly and case-sensitively. `global()` counts as
    /// true, as it does for label matching in Calico.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.root.matches(labels)
    }

    /// Every label key the selector mentions, in `has(...)` or in a comparison.
    pub fn label_keys(&self) -> BTreeSet<&str> {
        let mut keys = BTreeSet::new();
        self.root.collect_keys(&mut keys);
        keys
    }
}

impl Default for Selector {
    /// The selector that matches everything, like an omitted selector in a policy.
    fn default() -> Self {
        Selector::all()
    }
}

impl fmt::Display for Selector {
    /// Writes the canonical form: values in double quotes (single quotes when the value
    /// contains a double quote), sets sorted without repeats, and every `&&` or `||` group in
    /// parentheses.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.root)
    }
}

impl FromStr for Selector {
    type Err = SelectorError;

    /// Same as [`Selector::parse`].
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Selector::parse(text)
    }
}

/// A selector is kept (in the command line's cache of validated files) as its canonical text,
/// which parses back to an equal selector.
impl serde::Serialize for Selector {
    fn serialize<S: serde::Serializer>(&self, out: S) -> Result<S::Ok, S::Error> {
        out.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for Selector {
    fn deserialize<D: serde::Deserializer<'de>>(input: D) -> Result<Selector, D::Error> {
        let text = std::borrow::Cow::<str>::deserialize(input)?;
        Selector::parse(&text).map_err(serde::de::Error::custom)
    }
}

/// Why a selector could not be parsed, and where.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SelectorError {
    /// Byte offset into the selector text of the offending token; the text's length when the
    /// selector ended too early.
    pub offset: usize,
    /// Byte length of the offending token; 0 at the end of the text.
    pub len: usize,
    /// One sentence, no final period, values in backticks.
    pub message: String,
    /// What to write instead, when there is something useful to say.
    pub help: Option<String>,
}

impl SelectorError {
    fn new(offset: usize, len: usize, message: impl Into<String>) -> Self {
        SelectorError {
            offset,
            len,
            message: message.into(),
            help: None,
        }
    }

    fn with_help(mut self, help: impl Into<String>) -> Self {
        self.help = Some(help.into());
        self
    }

    /// The byte range of the offending token in the selector text.
    pub fn span(&self) -> std::ops::Range<usize> {
        self.offset..self.offset + self.len
    }
}

impl fmt::Display for SelectorError {
    /// Writes `byte N: message`. Diagnostics that show the position themselves use
    /// [`message`](SelectorError::message) and [`help`](SelectorError::help) directly.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "byte {}: {}", self.offset, self.message)
    }
}

impl std::error::Error for SelectorError {}
