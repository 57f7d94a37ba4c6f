//! Tokens: the general tokenizer, and the context-dependent lexing of operators, strings and
//! blanks that the parser asks for where it knows what is due.

use super::errors::{describe, snippet, unexpected_character};
use super::parser::Parser;
use super::{MAX_LABEL_LEN, SelectorError};

/// The operators that can follow a label.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Operator {
    Equals,
    NotEquals,
    Contains,
    StartsWith,
    EndsWith,
    In,
    NotIn,
}

impl Operator {
    pub(super) fn text(self) -> &'static str {
        match self {
            Operator::Equals => "==",
            Operator::NotEquals => "!=",
            Operator::Contains => "contains",
            Operator::StartsWith => "starts with",
            Operator::EndsWith => "ends with",
            Operator::In => "in",
            Operator::NotIn => "not in",
        }
    }
}

/// The kinds of token the general tokenizer produces.
///
/// Word operators such as `in` are missing on purpose: Calico recognises them only right
/// after a label, which is what lets `in` or `contains` be label names, so the parser lexes
/// them separately with [`Parser::operator`]. Set contents and values are also lexed by the
/// parser directly, where it knows a value is due and can explain a missing quote.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Kind<'a> {
    Label(&'a str),
    Str(&'a str),
    Has(&'a str),
    All,
    Global,
    LParen,
    RParen,
    LBrace,
    RBrace,
    Comma,
    Equals,
    NotEquals,
    Not,
    And,
    Or,
    End,
}

/// A token and its byte range in the selector text.
#[derive(Clone, Copy, Debug)]
pub(super) struct Token<'a> {
    pub(super) kind: Kind<'a>,
    pub(super) start: usize,
    pub(super) end: usize,
}

impl<'a> Parser<'a> {
    /// The next token, without consuming it.
    pub(super) fn peek(&self) -> Result<Token<'a>, SelectorError> {
        let start = self.blanks_end(self.pos)?;
        let rest = &self.text[start..];
        let Some(&first) = rest.as_bytes().first() else {
            return Ok(Token {
                kind: Kind::End,
                start,
                end: start,
            });
        };
        let token = |kind, len| {
            Ok(Token {
                kind,
                start,
                end: start + len,
            })
        };
        match first {
            b'(' => token(Kind::LParen, 1),
            b')' => token(Kind::RParen, 1),
            b'{' => token(Kind::LBrace, 1),
            b'}' => token(Kind::RBrace, 1),
            b',' => token(Kind::Comma, 1),
            b'\'' | b'"' => {
                let (value, end) = self.string_at(start)?;
                token(Kind::Str(value), end - start)
            }
            b'=' if rest.starts_with("==") => token(Kind::Equals, 2),
            b'=' => Err(SelectorError::new(start, 1, "expected `==`, found `=`")
                .with_help("selectors compare with `==`, for example `role == 'web'`")),
            b'!' if rest.starts_with("!=") => token(Kind::NotEquals, 2),
            b'!' => token(Kind::Not, 1),
            b'&' if rest.starts_with("&&") => token(Kind::And, 2),
            b'&' => Err(SelectorError::new(start, 1, "expected `&&`, found `&`")
                .with_help("combine expressions with `&&` (and) or `||` (or)")),
            b'|' if rest.starts_with("||") => token(Kind::Or, 2),
            b'|' => Err(SelectorError::new(start, 1, "expected `||`, found `|`")
                .with_help("combine expressions with `&&` (and) or `||` (or)")),
            byte if is_label_byte(byte) => self.word_token(start),
            _ => Err(unexpected_character(self.text, start)),
        }
    }

    /// Consumes `token`, which must be the one [`peek`](Parser::peek) just returned.
    pub(super) fn bump(&mut self, token: Token<'a>) {
        self.pos = token.end;
        self.last = Some(token);
    }

    /// Consumes the next token if it is of `kind`.
    pub(super) fn eat(&mut self, kind: Kind<'a>) -> Result<bool, SelectorError> {
        let token = self.peek()?;
        if token.kind == kind {
            self.bump(token);
            Ok(true)
        } else {
            Ok(false)
        }
    }

    /// A label, or one of `has(...)`, `all()` and `global()`, which count only when `(`
    /// follows the name directly.
    fn word_token(&self, start: usize) -> Result<Token<'a>, SelectorError> {
        let rest = &self.text[start..];
        if rest.starts_with("has(") {
            return self.has_token(start);
        }
        for (call, kind) in [("all(", Kind::All), ("global(", Kind::Global)] {
            if rest.starts_with(call) {
                return self.empty_call_token(start, call, kind);
            }
        }
        let label = self.label_at(start)?;
        Ok(Token {
            kind: Kind::Label(label),
            start,
            end: start + label.len(),
        })
    }

    /// `has( key )`, starting at `start`.
    fn has_token(&self, start: usize) -> Result<Token<'a>, SelectorError> {
        let key_start = self.blanks_end(start + "has(".len())?;
        let key = self.label_at(key_start)?;
        if key.is_empty() {
            let found = self.rough_token(key_start);
            let error = SelectorError::new(
                key_start,
                found.len(),
                format!(
                    "expected a label name after `has(`, found {}",
                    describe(found)
                ),
            );
            // For `has('role')`, suggest the same label without its quotes.
            let unquoted = if found.len() >= 2 && self.starts_with_quote(key_start) {
                &found[1..found.len() - 1]
            } else {
                ""
            };
            return Err(if is_label(unquoted) {
                error.with_help(format!(
                    "write the label name without quotes: `has({unquoted})`"
                ))
            } else {
                error.with_help("write the label name: `has(role)`")
            });
        }
        let close = self.blanks_end(key_start + key.len())?;
        if self.text[close..].starts_with(')') {
            Ok(Token {
                kind: Kind::Has(key),
                start,
                end: close + 1,
            })
        } else {
            let found = self.rough_token(close);
            Err(SelectorError::new(
                close,
                found.len(),
                format!("expected `)` to close `has(`, found {}", describe(found)),
            )
            .with_help(format!("`has` takes one label name: `has({key})`")))
        }
    }

    /// `all( )` or `global( )`, starting at `start`; `call` is the name with its `(`.
    fn empty_call_token(
        &self,
        start: usize,
        call: &str,
        kind: Kind<'a>,
    ) -> Result<Token<'a>, SelectorError> {
        let close = self.blanks_end(start + call.len())?;
        if self.text[close..].starts_with(')') {
            Ok(Token {
                kind,
                start,
                end: close + 1,
            })
        } else {
            let found = self.rough_token(close);
            Err(SelectorError::new(
                close,
                found.len(),
                format!("expected `)` after `{call}`, found {}", describe(found)),
            )
            .with_help(format!("`{call})` takes no arguments")))
        }
    }

    /// The label (possibly empty) starting at `start`, checked against the length limit.
    fn label_at(&self, start: usize) -> Result<&'a str, SelectorError> {
        let label = label_prefix(&self.text[start..]);
        if label.len() > MAX_LABEL_LEN {
            return Err(SelectorError::new(
                start,
                label.len(),
                format!(
                    "label too long: {} bytes, at most {MAX_LABEL_LEN} are allowed",
                    label.len()
                ),
            ));
        }
        Ok(label)
    }

    /// Lexes and consumes the operator after the label `key`, which ends at `self.pos`.
    ///
    /// Multi-word operators may have any blanks between their words, including none, as in
    /// Calico (`notin`, `startswith`).
    pub(super) fn operator(&mut self, key: &str) -> Result<Operator, SelectorError> {
        let key_end = self.pos;
        let start = self.skip_blanks()?;
        let rest = &self.text[start..];
        if rest.starts_with("==") {
            self.pos = start + 2;
            return Ok(Operator::Equals);
        }
        if rest.starts_with("!=") {
            self.pos = start + 2;
            return Ok(Operator::NotEquals);
        }
        if rest.starts_with('=') {
            return Err(self.single_equals(key, start));
        }
        if rest.starts_with('(') && start > key_end && matches!(key, "has" | "all" | "global") {
            return Err(SelectorError::new(
                key_end,
                start - key_end,
                format!("unexpected space between `{key}` and `(`"),
            )
            .with_help(match rest.find(')') {
                Some(close) => format!("remove the space: `{key}{}`", snippet(&rest[..=close])),
                None => format!("remove the space between `{key}` and `(`"),
            }));
        }
        // The word ends at the first character that cannot be part of a label, so an
        // operator counts only when followed by such a character or the end of the text.
        let word = label_prefix(rest);
        let word_end = start + word.len();
        let (operator, end) = match word {
            "contains" => (Operator::Contains, word_end),
            "in" => (Operator::In, word_end),
            "startswith" => (Operator::StartsWith, word_end),
            "endswith" => (Operator::EndsWith, word_end),
            "notin" => (Operator::NotIn, word_end),
            "starts" => self.second_word(key, "starts", word_end, "with", Operator::StartsWith)?,
            "ends" => self.second_word(key, "ends", word_end, "with", Operator::EndsWith)?,
            "not" => self.second_word(key, "not", word_end, "in", Operator::NotIn)?,
            _ => return Err(self.expected_operator(key, start)),
        };
        self.pos = end;
        Ok(operator)
    }

    /// The second word of a two-word operator, which must be `second`; returns the
    /// operator and where it ends.
    fn second_word(
        &self,
        key: &str,
        first: &str,
        first_end: usize,
        second: &str,
        operator: Operator,
    ) -> Result<(Operator, usize), SelectorError> {
        let start = self.blanks_end(first_end)?;
        let word = label_prefix(&self.text[start..]);
        if word == second {
            return Ok((operator, start + word.len()));
        }
        let found = self.rough_token(start);
        let example = match operator {
            Operator::NotIn => "{'a', 'b'}".to_owned(),
            _ if found.len() >= 2 && self.starts_with_quote(start) => snippet(found),
            _ => "'value'".to_owned(),
        };
        Err(SelectorError::new(
            start,
            found.len(),
            format!(
                "expected `{second}` after `{first}`, found {}",
                describe(found)
            ),
        )
        .with_help(format!(
            "the operator is `{op}`: `{key} {op} {example}`",
            op = operator.text()
        )))
    }

    /// The string literal starting with the quote at `start`: its contents, and where it
    /// ends. There are no escapes: the string ends at the next quote of the same kind.
    pub(super) fn string_at(&self, start: usize) -> Result<(&'a str, usize), SelectorError> {
        let quote = if self.text[start..].starts_with('"') {
            '"'
        } else {
            '\''
        };
        let body_start = start + 1;
        match self.text[body_start..].find(quote) {
            Some(body_len) => Ok((
                &self.text[body_start..body_start + body_len],
                body_start + body_len + 1,
            )),
            None => Err(SelectorError::new(
                start,
                1,
                format!("unterminated string: no closing `{quote}`"),
            )
            .with_help(
                "end the value with the same quote it starts with; there are no escapes, \
                 so a value containing `'` must be quoted with `\"` and the other way round",
            )),
        }
    }

    pub(super) fn starts_with_quote(&self, at: usize) -> bool {
        matches!(self.text.as_bytes().get(at), Some(b'\'' | b'"'))
    }

    /// Where the spaces and tabs from `at` end; a line break there is an error, since a
    /// selector is one line.
    pub(super) fn blanks_end(&self, at: usize) -> Result<usize, SelectorError> {
        let rest = &self.text[at..];
        let end = at + (rest.len() - rest.trim_start_matches([' ', '\t']).len());
        if matches!(self.text.as_bytes().get(end), Some(b'\n' | b'\r')) {
            return Err(
                SelectorError::new(end, 1, "line break in selector").with_help(
                    "keep a selector on one line, or write it as a YAML folded scalar \
                 (`selector: >-`) so that line breaks become spaces",
                ),
            );
        }
        Ok(end)
    }

    /// Moves past spaces and tabs and returns the new position.
    pub(super) fn skip_blanks(&mut self) -> Result<usize, SelectorError> {
        self.pos = self.blanks_end(self.pos)?;
        Ok(self.pos)
    }
}

/// Whether `byte` can be part of a label key: `[a-zA-Z0-9_./-]`.
pub(super) fn is_label_byte(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || matches!(byte, b'_' | b'.' | b'/' | b'-')
}

/// The longest prefix of `text` made of label characters.
pub(super) fn label_prefix(text: &str) -> &str {
    let len = text.bytes().take_while(|&byte| is_label_byte(byte)).count();
    &text[..len]
}

/// Whether `text` is a complete, non-empty label key.
pub(super) fn is_label(text: &str) -> bool {
    !text.is_empty() && label_prefix(text).len() == text.len()
}
