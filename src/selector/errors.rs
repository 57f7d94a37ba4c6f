//! Error messages. Their texts name what was found with `rough_token`, which never fails or
//! recurses, so that describing a mistake cannot itself go wrong.

use super::lexer::{Kind, Token, is_label, is_label_byte, label_prefix};
use super::parser::Parser;
use super::{MAX_DEPTH, SelectorError};

/// The operators that may follow a label, for help texts.
const OPERATOR_LIST: &str = "`==`, `!=`, `in`, `not in`, `contains`, `starts with` or `ends with`";

impl<'a> Parser<'a> {
    /// The token-like text at `at`, for naming it in a message; empty at the end.
    pub(super) fn rough_token(&self, at: usize) -> &'a str {
        let rest = &self.text[at..];
        let len = match rest.as_bytes().first() {
            None => 0,
            Some(&quote @ (b'\'' | b'"')) => rest[1..]
                .find(char::from(quote))
                .map_or(1, |body_len| body_len + 2),
            Some(&byte) if is_label_byte(byte) => label_prefix(rest).len(),
            Some(_)
                if ["==", "!=", "&&", "||"]
                    .iter()
                    .any(|op| rest.starts_with(op)) =>
            {
                2
            }
            Some(_) => rest.chars().next().map_or(0, char::len_utf8),
        };
        &rest[..len]
    }

    /// A value someone forgot to quote: everything up to a blank or punctuation.
    pub(super) fn unquoted_word(&self, at: usize) -> &'a str {
        let rest = &self.text[at..];
        let end = rest
            .find([
                ' ', '\t', '\n', '\r', '(', ')', '{', '}', ',', '&', '|', '\'', '"',
            ])
            .unwrap_or(rest.len());
        &rest[..end]
    }

    pub(super) fn expected_expression(&self, token: Token<'a>) -> SelectorError {
        let found = &self.text[token.start..token.end];
        let after_open = self.last.filter(|last| last.kind == Kind::LParen);
        if let (Kind::RParen, Some(open)) = (token.kind, after_open) {
            return SelectorError::new(open.start, token.end - open.start, "empty parentheses")
                .with_help("put an expression inside, or write `all()` to select everything");
        }
        let after = match self.last {
            Some(last) => format!(" after `{}`", &self.text[last.start..last.end]),
            None => String::new(),
        };
        let error = SelectorError::new(
            token.start,
            token.end - token.start,
            format!("expected an expression{after}, found {}", describe(found)),
        );
        match token.kind {
            Kind::Str(_) => error
                .with_help("the label comes first and the quoted value second: `role == 'web'`"),
            _ => error.with_help(
                "write a test such as `role == 'web'`, `role in {'a', 'b'}`, `has(role)` \
                 or `all()`",
            ),
        }
    }

    /// A token after a complete expression that cannot continue it.
    pub(super) fn unexpected_after_expression(
        &self,
        token: Token<'a>,
        expected: &str,
    ) -> SelectorError {
        let found = &self.text[token.start..token.end];
        let error = SelectorError::new(
            token.start,
            token.end - token.start,
            format!("expected {expected}, found {}", describe(found)),
        );
        match token.kind {
            Kind::Label(word) if word.eq_ignore_ascii_case("and") => {
                error.with_help(format!("write `&&` instead of `{word}`"))
            }
            Kind::Label(word) if word.eq_ignore_ascii_case("or") => {
                error.with_help(format!("write `||` instead of `{word}`"))
            }
            _ => error.with_help("combine expressions with `&&` (and) or `||` (or)"),
        }
    }

    /// A single `=` after the label `key`, at `at`.
    pub(super) fn single_equals(&self, key: &str, at: usize) -> SelectorError {
        // Show the whole corrected comparison when the value is easy to find. A quoted
        // token of two or more bytes has its closing quote.
        let value = self
            .blanks_end(at + 1)
            .map(|value_start| self.rough_token(value_start))
            .unwrap_or("");
        let example = if value.len() >= 2 && value.starts_with(['\'', '"']) {
            snippet(value)
        } else if is_label(value) {
            example_quote(value)
        } else {
            "'value'".to_owned()
        };
        SelectorError::new(at, 1, format!("expected `==` after `{key}`, found `=`"))
            .with_help(format!("selectors compare with `==`: `{key} == {example}`"))
    }

    /// Something after the label `key`, at `at`, that is not an operator.
    pub(super) fn expected_operator(&self, key: &str, at: usize) -> SelectorError {
        let found = self.rough_token(at);
        let error = SelectorError::new(
            at,
            found.len(),
            format!(
                "expected operator after label `{key}`, found {}",
                describe(found)
            ),
        );
        if key == "not" {
            error.with_help("negate with `!`, for example `!has(role)` or `!(role == 'web')`")
        } else {
            error.with_help(format!(
                "after a label write one of {OPERATOR_LIST} and a quoted value; \
                 to test only that the label exists, write `has({key})`"
            ))
        }
    }

    /// Something other than `{` after `key in` or `key not in`, at `at`.
    pub(super) fn missing_brace(&self, key: &str, op: &str, at: usize) -> SelectorError {
        let word = self.unquoted_word(at);
        let found = if word.is_empty() {
            self.rough_token(at)
        } else {
            word
        };
        let example = if self.starts_with_quote(at) && found.len() >= 2 {
            format!("{{{}}}", snippet(found))
        } else if !word.is_empty() {
            format!("{{{}}}", example_quote(word))
        } else {
            "{'a', 'b'}".to_owned()
        };
        SelectorError::new(
            at,
            found.len(),
            format!("expected `{{` after `{op}`, found {}", describe(found)),
        )
        .with_help(format!("list the values in braces: `{key} {op} {example}`"))
    }

    /// Something other than a quoted value or `}` inside a set, at `at`.
    pub(super) fn bad_set_value(&self, at: usize) -> SelectorError {
        let word = self.unquoted_word(at);
        if word.is_empty() {
            let found = self.rough_token(at);
            let error = SelectorError::new(
                at,
                found.len(),
                format!(
                    "expected a quoted value or `}}` in set, found {}",
                    describe(found)
                ),
            );
            if found.is_empty() {
                error.with_help("close the set with `}`")
            } else {
                error.with_help("a set lists quoted values separated by commas: `{'a', 'b'}`")
            }
        } else {
            SelectorError::new(
                at,
                word.len(),
                format!(
                    "expected a quoted value or `}}` in set, found `{}`",
                    snippet(word)
                ),
            )
            .with_help(format!(
                "quote each value in a set: `{}`",
                example_quote(word)
            ))
        }
    }
}

pub(super) fn too_deep(token: Token<'_>) -> SelectorError {
    SelectorError::new(
        token.start,
        token.end - token.start,
        format!("selector nested too deeply: more than {MAX_DEPTH} levels of `(` and `!`"),
    )
    .with_help("simplify the selector")
}

pub(super) fn unexpected_character(text: &str, at: usize) -> SelectorError {
    let found = text[at..].chars().next().map_or(0, char::len_utf8);
    SelectorError::new(
        at,
        found,
        format!("unexpected character `{}`", snippet(&text[at..at + found])),
    )
    .with_help(
        "label names use only letters, digits, `_`, `.`, `/` and `-`, and values must be quoted",
    )
}

/// Names what was found in a message: `` `text` ``, or "end of input" for nothing.
pub(super) fn describe(found: &str) -> String {
    if found.is_empty() {
        "end of input".to_owned()
    } else {
        format!("`{}`", snippet(found))
    }
}

/// `text` shortened and with control characters escaped, to quote it in a one-line message.
pub(super) fn snippet(text: &str) -> String {
    const MAX_CHARS: usize = 40;
    let mut out = String::new();
    for (index, c) in text.chars().enumerate() {
        if index == MAX_CHARS {
            out.push_str("...");
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

/// `value` in quotes for an example in a help text; single quotes read best inside the
/// double-quoted YAML strings selectors usually live in.
pub(super) fn example_quote(value: &str) -> String {
    let value = snippet(value);
    if value.contains('\'') {
        format!("\"{value}\"")
    } else {
        format!("'{value}'")
    }
}
