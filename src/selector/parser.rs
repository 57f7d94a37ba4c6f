//! The grammar: a recursive-descent parser that tokenizes on demand, and its error messages.
//!
//! Three parts, one type: the grammar (`Parser`'s rules), the tokens (the general tokenizer,
//! and the context-dependent lexing of operators, strings and blanks that the parser asks for
//! where it knows what is due), and the error messages. Their texts name what was found with
//! `rough_token`, which never fails or recurses, so that describing a mistake cannot itself go
//! wrong.

use std::collections::BTreeSet;

use super::expr::{Expr, Test};
use super::{MAX_DEPTH, MAX_LABEL_LEN, SelectorError};

// ---------------------------------------------------------------------------------------------
// The grammar
// ---------------------------------------------------------------------------------------------

/// A recursive-descent parser that tokenizes on demand.
///
/// Tokenizing lazily means errors come out in text order, and lets the parser lex the few
/// context-dependent parts (operators after a label, values, sets) in their context.
pub(super) struct Parser<'a> {
    pub(super) text: &'a str,
    /// Byte offset of the next unread character.
    pub(super) pos: usize,
    /// The last token consumed, named in "expected an expression after ..." messages.
    pub(super) last: Option<Token<'a>>,
}

impl<'a> Parser<'a> {
    pub(super) fn new(text: &'a str) -> Self {
        Parser {
            text,
            pos: 0,
            last: None,
        }
    }

    // Grammar. Each level passes down `depth`, the number of `(` and `!` around it.

    /// `selector := blank* END | or_expr END`
    pub(super) fn selector(&mut self) -> Result<Expr, SelectorError> {
        if self.peek()?.kind == Kind::End {
            return Ok(Expr::All);
        }
        let expr = self.or_expr(0)?;
        let token = self.peek()?;
        match token.kind {
            Kind::End => Ok(expr),
            Kind::RParen => Err(SelectorError::new(token.start, 1, "unmatched `)`")
                .with_help("remove it, or add the `(` it is meant to close")),
            _ => Err(self.unexpected_after_expression(token, "`&&`, `||` or end of selector")),
        }
    }

    /// `or_expr := and_expr ("||" and_expr)*`
    fn or_expr(&mut self, depth: usize) -> Result<Expr, SelectorError> {
        let first = self.and_expr(depth)?;
        if self.peek()?.kind != Kind::Or {
            return Ok(first);
        }
        let mut operands = vec![first];
        while self.eat(Kind::Or)? {
            operands.push(self.and_expr(depth)?);
        }
        Ok(Expr::Or(operands))
    }

    /// `and_expr := unary ("&&" unary)*`
    fn and_expr(&mut self, depth: usize) -> Result<Expr, SelectorError> {
        let first = self.unary(depth)?;
        if self.peek()?.kind != Kind::And {
            return Ok(first);
        }
        let mut operands = vec![first];
        while self.eat(Kind::And)? {
            operands.push(self.unary(depth)?);
        }
        Ok(Expr::And(operands))
    }

    /// `unary := "!"* primary`
    fn unary(&mut self, depth: usize) -> Result<Expr, SelectorError> {
        let mut depth = depth;
        let mut negate = false;
        loop {
            let token = self.peek()?;
            if token.kind != Kind::Not {
                break;
            }
            depth += 1;
            if depth > MAX_DEPTH {
                return Err(too_deep(token));
            }
            self.bump(token);
            negate = !negate;
        }
        let expr = self.primary(depth)?;
        Ok(if negate { expr.negated() } else { expr })
    }

    /// `primary := has(key) | all() | global() | "(" or_expr ")" | key operator ...`
    fn primary(&mut self, depth: usize) -> Result<Expr, SelectorError> {
        let token = self.peek()?;
        let expr = match token.kind {
            Kind::Has(key) => Expr::Has(key.to_owned()),
            Kind::All => Expr::All,
            Kind::Global => Expr::Global,
            Kind::LParen => return self.parenthesised(token, depth),
            Kind::Label(key) => {
                self.bump(token);
                return self.label_test(key);
            }
            _ => return Err(self.expected_expression(token)),
        };
        self.bump(token);
        Ok(expr)
    }

    /// `"(" or_expr ")"`, where `open` is the `(`.
    fn parenthesised(&mut self, open: Token<'a>, depth: usize) -> Result<Expr, SelectorError> {
        let depth = depth + 1;
        if depth > MAX_DEPTH {
            return Err(too_deep(open));
        }
        self.bump(open);
        let inner = self.or_expr(depth)?;
        let close = self.peek()?;
        match close.kind {
            Kind::RParen => {
                self.bump(close);
                Ok(inner)
            }
            Kind::End => Err(SelectorError::new(
                close.start,
                0,
                "expected `)` to close `(`, found end of input",
            )
            .with_help("add the missing `)`; every `(` needs a matching `)`")),
            _ => Err(self.unexpected_after_expression(close, "`)`, `&&` or `||`")),
        }
    }

    /// The rest of a comparison, after its label `key`.
    fn label_test(&mut self, key: &'a str) -> Result<Expr, SelectorError> {
        let operator = self.operator(key)?;
        let test = match operator {
            Operator::Equals => Test::Equals(self.value(key, operator)?),
            Operator::NotEquals => Test::NotEquals(self.value(key, operator)?),
            Operator::Contains => Test::Contains(self.value(key, operator)?),
            Operator::StartsWith => Test::StartsWith(self.value(key, operator)?),
            Operator::EndsWith => Test::EndsWith(self.value(key, operator)?),
            Operator::In => Test::In(self.set(key, operator)?),
            Operator::NotIn => Test::NotIn(self.set(key, operator)?),
        };
        Ok(Expr::Label {
            key: key.to_owned(),
            test,
        })
    }

    /// The quoted value after `key operator`.
    fn value(&mut self, key: &str, operator: Operator) -> Result<String, SelectorError> {
        let start = self.skip_blanks()?;
        if self.starts_with_quote(start) {
            let (value, end) = self.string_at(start)?;
            self.pos = end;
            return Ok(value.to_owned());
        }
        let op = operator.text();
        let word = self.unquoted_word(start);
        if word.is_empty() {
            let found = self.rough_token(start);
            Err(SelectorError::new(
                start,
                found.len(),
                format!(
                    "expected a quoted value after `{op}`, found {}",
                    describe(found)
                ),
            )
            .with_help(format!("write `{key} {op} 'value'`")))
        } else {
            Err(SelectorError::new(
                start,
                word.len(),
                format!(
                    "expected a quoted value after `{op}`, found `{}`",
                    snippet(word)
                ),
            )
            .with_help(format!(
                "quote the value: `{key} {op} {}`",
                example_quote(word)
            )))
        }
    }

    /// `set := "{" [string ("," string)* [","]] "}"`, after `key operator`.
    fn set(&mut self, key: &str, operator: Operator) -> Result<BTreeSet<String>, SelectorError> {
        let op = operator.text();
        let open = self.skip_blanks()?;
        if self.text[open..].starts_with('{') {
            self.pos = open + 1;
        } else {
            return Err(self.missing_brace(key, op, open));
        }
        let mut values = BTreeSet::new();
        loop {
            // Here a value or the closing brace is due; the latter covers `{}` and a
            // trailing comma.
            let at = self.skip_blanks()?;
            if self.text[at..].starts_with('}') {
                self.pos = at + 1;
                return Ok(values);
            }
            if !self.starts_with_quote(at) {
                return Err(self.bad_set_value(at));
            }
            let (value, end) = self.string_at(at)?;
            values.insert(value.to_owned());
            self.pos = end;

            let at = self.skip_blanks()?;
            let rest = &self.text[at..];
            if rest.starts_with(',') {
                self.pos = at + 1;
            } else if rest.starts_with('}') {
                self.pos = at + 1;
                return Ok(values);
            } else {
                let found = self.rough_token(at);
                let error = SelectorError::new(
                    at,
                    found.len(),
                    format!("expected `,` or `}}` in set, found {}", describe(found)),
                );
                return Err(if found.is_empty() {
                    error.with_help("close the set with `}`")
                } else {
                    error.with_help("separate set values with commas: `{'a', 'b'}`")
                });
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Tokens
// ---------------------------------------------------------------------------------------------

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

// ---------------------------------------------------------------------------------------------
// Error messages
// ---------------------------------------------------------------------------------------------

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
