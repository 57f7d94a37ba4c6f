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

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::str::FromStr;

/// Longest label key accepted, in bytes; the same limit as Calico's tokenizer.
const MAX_LABEL_LEN: usize = 512;

/// Deepest nesting of `(` and `!` accepted.
///
/// The parser recurses once per level, so the bound keeps hostile input from exhausting the
/// stack, and it also bounds the depth of every later walk over the tree. Real selectors nest
/// a handful of levels.
const MAX_DEPTH: usize = 100;

/// The operators that may follow a label, for help texts.
const OPERATOR_LIST: &str = "`==`, `!=`, `in`, `not in`, `contains`, `starts with` or `ends with`";

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

/// The syntax tree of a selector.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Expr {
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
    fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        match self {
            Expr::All | Expr::Global => true,
            Expr::Has(key) => labels.contains_key(key),
            Expr::Label { key, test } => test.matches(labels.get(key).map(String::as_str)),
            Expr::Not(inner) => !inner.matches(labels),
            Expr::And(operands) => operands.iter().all(|operand| operand.matches(labels)),
            Expr::Or(operands) => operands.iter().any(|operand| operand.matches(labels)),
        }
    }

    fn collect_keys<'a>(&'a self, keys: &mut BTreeSet<&'a str>) {
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
    fn negated(self) -> Expr {
        match self {
            Expr::Not(inner) => *inner,
            other => Expr::Not(Box::new(other)),
        }
    }
}

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

/// What a comparison requires of one label's value.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Test {
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

/// The operators that can follow a label.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Operator {
    Equals,
    NotEquals,
    Contains,
    StartsWith,
    EndsWith,
    In,
    NotIn,
}

impl Operator {
    fn text(self) -> &'static str {
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
enum Kind<'a> {
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
struct Token<'a> {
    kind: Kind<'a>,
    start: usize,
    end: usize,
}

/// A recursive-descent parser that tokenizes on demand.
///
/// Tokenizing lazily means errors come out in text order, and lets the parser lex the few
/// context-dependent parts (operators after a label, values, sets) in their context.
struct Parser<'a> {
    text: &'a str,
    /// Byte offset of the next unread character.
    pos: usize,
    /// The last token consumed, named in "expected an expression after ..." messages.
    last: Option<Token<'a>>,
}

impl<'a> Parser<'a> {
    fn new(text: &'a str) -> Self {
        Parser {
            text,
            pos: 0,
            last: None,
        }
    }

    // Grammar. Each level passes down `depth`, the number of `(` and `!` around it.

    /// `selector := blank* END | or_expr END`
    fn selector(&mut self) -> Result<Expr, SelectorError> {
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

    // Tokens.

    /// The next token, without consuming it.
    fn peek(&self) -> Result<Token<'a>, SelectorError> {
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
    fn bump(&mut self, token: Token<'a>) {
        self.pos = token.end;
        self.last = Some(token);
    }

    /// Consumes the next token if it is of `kind`.
    fn eat(&mut self, kind: Kind<'a>) -> Result<bool, SelectorError> {
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
    fn operator(&mut self, key: &str) -> Result<Operator, SelectorError> {
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
    fn string_at(&self, start: usize) -> Result<(&'a str, usize), SelectorError> {
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

    fn starts_with_quote(&self, at: usize) -> bool {
        matches!(self.text.as_bytes().get(at), Some(b'\'' | b'"'))
    }

    /// Where the spaces and tabs from `at` end; a line break there is an error, since a
    /// selector is one line.
    fn blanks_end(&self, at: usize) -> Result<usize, SelectorError> {
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
    fn skip_blanks(&mut self) -> Result<usize, SelectorError> {
        self.pos = self.blanks_end(self.pos)?;
        Ok(self.pos)
    }

    // Errors. Their texts name what was found with `rough_token`, which never fails or
    // recurses, so that describing a mistake cannot itself go wrong.

    /// The token-like text at `at`, for naming it in a message; empty at the end.
    fn rough_token(&self, at: usize) -> &'a str {
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
    fn unquoted_word(&self, at: usize) -> &'a str {
        let rest = &self.text[at..];
        let end = rest
            .find([
                ' ', '\t', '\n', '\r', '(', ')', '{', '}', ',', '&', '|', '\'', '"',
            ])
            .unwrap_or(rest.len());
        &rest[..end]
    }

    fn expected_expression(&self, token: Token<'a>) -> SelectorError {
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
    fn unexpected_after_expression(&self, token: Token<'a>, expected: &str) -> SelectorError {
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
    fn single_equals(&self, key: &str, at: usize) -> SelectorError {
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
    fn expected_operator(&self, key: &str, at: usize) -> SelectorError {
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
    fn missing_brace(&self, key: &str, op: &str, at: usize) -> SelectorError {
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
    fn bad_set_value(&self, at: usize) -> SelectorError {
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

fn too_deep(token: Token<'_>) -> SelectorError {
    SelectorError::new(
        token.start,
        token.end - token.start,
        format!("selector nested too deeply: more than {MAX_DEPTH} levels of `(` and `!`"),
    )
    .with_help("simplify the selector")
}

fn unexpected_character(text: &str, at: usize) -> SelectorError {
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

/// Whether `byte` can be part of a label key: `[a-zA-Z0-9_./-]`.
fn is_label_byte(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || matches!(byte, b'_' | b'.' | b'/' | b'-')
}

/// The longest prefix of `text` made of label characters.
fn label_prefix(text: &str) -> &str {
    let len = text.bytes().take_while(|&byte| is_label_byte(byte)).count();
    &text[..len]
}

/// Whether `text` is a complete, non-empty label key.
fn is_label(text: &str) -> bool {
    !text.is_empty() && label_prefix(text).len() == text.len()
}

/// Names what was found in a message: `` `text` ``, or "end of input" for nothing.
fn describe(found: &str) -> String {
    if found.is_empty() {
        "end of input".to_owned()
    } else {
        format!("`{}`", snippet(found))
    }
}

/// `text` shortened and with control characters escaped, to quote it in a one-line message.
fn snippet(text: &str) -> String {
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
fn example_quote(value: &str) -> String {
    let value = snippet(value);
    if value.contains('\'') {
        format!("\"{value}\"")
    } else {
        format!("'{value}'")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn label_map(labels: &[(&str, &str)]) -> BTreeMap<String, String> {
        labels
            .iter()
            .map(|&(key, value)| (key.to_owned(), value.to_owned()))
            .collect()
    }

    fn parse_ok(text: &str) -> Selector {
        Selector::parse(text).unwrap_or_else(|error| panic!("`{text}` failed: {error:?}"))
    }

    /// The canonical form parses back to an equal selector and prints identically.
    fn assert_round_trip(selector: &Selector) {
        let printed = selector.to_string();
        let reparsed = Selector::parse(&printed)
            .unwrap_or_else(|error| panic!("canonical `{printed}` failed: {error:?}"));
        assert_eq!(&reparsed, selector, "round trip of `{printed}`");
        assert_eq!(reparsed.to_string(), printed, "printing `{printed}` again");
    }

    /// The error span lies inside the text, on character boundaries.
    fn assert_valid_span(text: &str, error: &SelectorError) {
        assert!(
            error.offset + error.len <= text.len(),
            "{error:?} in {text:?}"
        );
        assert!(text.is_char_boundary(error.offset), "{error:?} in {text:?}");
        assert!(text.is_char_boundary(error.offset + error.len), "{error:?}");
        assert!(!error.message.ends_with('.'), "{error:?}");
        assert!(!error.message.contains('\n'), "{error:?}");
    }

    /// Parses `selector`, matches it against `labels`, and checks that it round-trips, so
    /// that every matching case is a printing case too.
    fn check(selector: &str, labels: &[(&str, &str)], expected: bool) {
        let parsed = parse_ok(selector);
        assert_eq!(
            parsed.matches(&label_map(labels)),
            expected,
            "`{selector}` (parsed as `{parsed}`) on {labels:?}"
        );
        assert_round_trip(&parsed);
    }

    fn parse_error(text: &str) -> SelectorError {
        match Selector::parse(text) {
            Ok(parsed) => panic!("`{text}` parsed as `{parsed}`, expected an error"),
            Err(error) => {
                assert_valid_span(text, &error);
                error
            }
        }
    }

    /// Labels as written in a test table.
    type Labels = &'static [(&'static str, &'static str)];

    /// A selector, the labels it is matched against, and whether it should match.
    type MatchCase = (&'static str, Labels, bool);

    const WEB: &[(&str, &str)] = &[("role", "web"), ("env", "prod")];
    const DB: &[(&str, &str)] = &[("role", "db"), ("env", "prod")];
    const EMPTY_ROLE: &[(&str, &str)] = &[("role", "")];
    const NONE: &[(&str, &str)] = &[];

    #[test]
    fn operators() {
        let cases: &[MatchCase] = &[
            ("", NONE, true),
            ("   ", WEB, true),
            ("all()", NONE, true),
            ("all( )", WEB, true),
            ("global()", NONE, true),
            ("has(role)", WEB, true),
            ("has(role)", NONE, false),
            ("has(role)", EMPTY_ROLE, true),
            ("has( role )", WEB, true),
            ("has(Role)", WEB, false),
            ("role == 'web'", WEB, true),
            ("role == 'db'", WEB, false),
            ("role == 'web'", NONE, false),
            ("role == 'Web'", WEB, false),
            ("Role == 'web'", WEB, false),
            ("role == ''", EMPTY_ROLE, true),
            ("role == ''", NONE, false),
            ("role != 'web'", WEB, false),
            ("role != 'db'", WEB, true),
            ("role != 'web'", NONE, true),
            ("role != ''", EMPTY_ROLE, false),
            ("role in {'web', 'db'}", WEB, true),
            ("role in {'db'}", WEB, false),
            ("role in {'web'}", NONE, false),
            ("role in {}", WEB, false),
            ("role in {}", NONE, false),
            ("role in {''}", EMPTY_ROLE, true),
            ("role not in {'web'}", WEB, false),
            ("role not in {'db', 'cache'}", WEB, true),
            ("role not in {'web'}", NONE, true),
            ("role not in {}", WEB, true),
            ("role not in {}", NONE, true),
            ("role contains 'e'", WEB, true),
            ("role contains 'web'", WEB, true),
            ("role contains 'x'", WEB, false),
            ("role contains ''", WEB, true),
            ("role contains ''", EMPTY_ROLE, true),
            ("role contains ''", NONE, false),
            ("role starts with 'we'", WEB, true),
            ("role starts with 'eb'", WEB, false),
            ("role starts with ''", WEB, true),
            ("role starts with ''", NONE, false),
            ("role ends with 'eb'", WEB, true),
            ("role ends with 'we'", WEB, false),
            ("role ends with 'b'", NONE, false),
        ];
        for &(selector, labels, expected) in cases {
            check(selector, labels, expected);
        }
    }

    #[test]
    fn glued_and_spaced_operators() {
        let cases: &[MatchCase] = &[
            ("role=='web'", WEB, true),
            ("role!='web'", WEB, false),
            ("role notin {'db'}", WEB, true),
            ("role notin{'web'}", WEB, false),
            ("role not  in {'web'}", WEB, false),
            ("role not\tin {'db'}", WEB, true),
            ("role startswith 'w'", WEB, true),
            ("role starts\twith 'w'", WEB, true),
            ("role endswith 'b'", WEB, true),
            ("role ends   with 'x'", WEB, false),
            ("role in{'web'}", WEB, true),
            ("role contains'e'", WEB, true),
            ("role in {'web',}", WEB, true),
            ("role in { 'db' , 'web' , }", WEB, true),
        ];
        for &(selector, labels, expected) in cases {
            check(selector, labels, expected);
        }
    }

    #[test]
    fn keywords_as_label_names() {
        let cases: &[MatchCase] = &[
            ("in == 'x'", &[("in", "x")], true),
            ("in in {'x'}", &[("in", "x")], true),
            ("all == 'x'", &[("all", "x")], true),
            ("has == 'x'", &[("has", "x")], true),
            ("has(has)", &[("has", "")], true),
            ("global != 'x'", &[("global", "x")], false),
            ("contains contains 'x'", &[("contains", "axb")], true),
            ("not in {'x'}", &[("not", "x")], true),
            ("not not in {'x'}", &[("not", "y")], true),
            ("starts starts with 's'", &[("starts", "sx")], true),
            ("with == 'w'", &[("with", "w")], true),
            ("hasx == 'y'", &[("hasx", "y")], true),
            ("-a == 'x'", &[("-a", "x")], true),
            ("/a == 'x'", &[("/a", "x")], true),
            ("1a/b.c_d-e == 'x'", &[("1a/b.c_d-e", "x")], true),
            (
                "app.kubernetes.io/name in {'nginx'}",
                &[("app.kubernetes.io/name", "nginx")],
                true,
            ),
        ];
        for &(selector, labels, expected) in cases {
            check(selector, labels, expected);
        }
    }

    #[test]
    fn precedence() {
        let cases: &[MatchCase] = &[
            // `!` applies to one comparison, not to what follows it.
            ("!role == 'web'", WEB, false),
            ("!role == 'web'", DB, true),
            ("!role == 'web' && env == 'prod'", DB, true),
            ("!role == 'web' && env == 'dev'", DB, false),
            ("!role == 'web' || env == 'prod'", WEB, true),
            // `&&` binds tighter than `||`.
            ("role == 'web' || role == 'db' && env == 'dev'", WEB, true),
            (
                "(role == 'web' || role == 'db') && env == 'dev'",
                WEB,
                false,
            ),
            ("has(c) || has(a) && has(b)", &[("c", "")], true),
            ("has(a) && has(b) || has(c)", &[("c", "")], true),
            ("has(a) && (has(b) || has(c))", &[("c", "")], false),
            ("!has(a) || has(b)", NONE, true),
            ("!(has(a) || has(b))", &[("b", "")], false),
            ("!(role == 'web' || role == 'db')", DB, false),
            ("!(role == 'web' || role == 'db')", EMPTY_ROLE, true),
            // Any number of `!`, folded by parity.
            ("!!has(role)", WEB, true),
            ("!!!has(role)", WEB, false),
            ("! ! has(role)", WEB, true),
            ("!(!has(role))", WEB, true),
            ("!(!(!has(role)))", NONE, true),
            ("((((has(role)))))", WEB, true),
            ("!all()", WEB, false),
            ("!global()", WEB, false),
            ("global() && has(role)", WEB, true),
            ("all() && role == 'db'", WEB, false),
            ("has(a) && has(b) && has(c)", &[("a", ""), ("b", "")], false),
            ("has(a) || has(b) || has(c)", &[("c", "")], true),
        ];
        for &(selector, labels, expected) in cases {
            check(selector, labels, expected);
        }
    }

    #[test]
    fn quoting_and_whitespace() {
        let cases: &[MatchCase] = &[
            ("v == \"x\"", &[("v", "x")], true),
            ("v == \"it's\"", &[("v", "it's")], true),
            ("v == 'say \"hi\"'", &[("v", "say \"hi\"")], true),
            ("v == \"\"", &[("v", "")], true),
            ("v == 'a\nb'", &[("v", "a\nb")], true),
            ("v == 'a\r\nb'", &[("v", "a\r\nb")], true),
            ("v == 'a\tb'", &[("v", "a\tb")], true),
            ("v == 'a && b || (c)'", &[("v", "a && b || (c)")], true),
            ("v == '\\n'", &[("v", "\\n")], true),
            ("v == 'grüße'", &[("v", "grüße")], true),
            ("v in {\"a'b\", 'c\"d'}", &[("v", "c\"d")], true),
            ("v in {'a', \"b\"}", &[("v", "b")], true),
            ("\tv\t==\t'x'\t", &[("v", "x")], true),
            ("  has(v)  ", &[("v", "x")], true),
            ("has(\tv\t)", &[("v", "x")], true),
            ("(  has(v)  )", &[("v", "x")], true),
        ];
        for &(selector, labels, expected) in cases {
            check(selector, labels, expected);
        }
    }

    #[test]
    fn canonical_form() {
        let cases = [
            ("", "all()"),
            (" \t ", "all()"),
            ("all(  )", "all()"),
            ("global( )", "global()"),
            ("has( a )", "has(a)"),
            ("a=='x'", r#"a == "x""#),
            ("a != 'x'", r#"a != "x""#),
            ("a contains 'x'", r#"a contains "x""#),
            ("a startswith 'x'", r#"a starts with "x""#),
            ("a ends  with'x'", r#"a ends with "x""#),
            ("a notin {'b','a','b'}", r#"a not in {"a", "b"}"#),
            ("a in {'x',}", r#"a in {"x"}"#),
            ("a in {}", "a in {}"),
            ("a in { }", "a in {}"),
            ("a == ''", r#"a == """#),
            ("a == 'say \"hi\"'", r#"a == 'say "hi"'"#),
            ("a == \"it's\"", r#"a == "it's""#),
            ("a in {'x\"y', \"it's\"}", r#"a in {"it's", 'x"y'}"#),
            ("a == 'b' && c == 'd'", r#"(a == "b" && c == "d")"#),
            (
                "a == 'b' || c == 'd' && e == 'f'",
                r#"(a == "b" || (c == "d" && e == "f"))"#,
            ),
            (
                "(a == 'b' || c == 'd') && e == 'f'",
                r#"((a == "b" || c == "d") && e == "f")"#,
            ),
            ("((has(a)))", "has(a)"),
            ("!has(a)", "!has(a)"),
            ("! ! has(a)", "has(a)"),
            ("!!!has(a)", "!has(a)"),
            ("!(!has(a))", "has(a)"),
            ("!(has(a) && has(b))", "!(has(a) && has(b))"),
            ("!a == 'x'", r#"!a == "x""#),
            ("!(a == 'x')", r#"!a == "x""#),
            ("has(a)&&has(b)&&has(c)", "(has(a) && has(b) && has(c))"),
            (
                "(has(a) && has(b)) && has(c)",
                "((has(a) && has(b)) && has(c))",
            ),
            ("in == 'x' || all()", r#"(in == "x" || all())"#),
        ];
        for (input, canonical) in cases {
            let parsed = parse_ok(input);
            assert_eq!(parsed.to_string(), canonical, "canonical form of `{input}`");
            assert_round_trip(&parsed);
        }
    }

    #[test]
    fn equality_ignores_spelling() {
        let same = [
            ("a in {'y', 'x', 'x'}", "a in {\"x\", \"y\"}"),
            ("!!has(a)", "has(a)"),
            ("((a == 'x'))", "a == \"x\""),
            ("", "all()"),
            ("a notin {}", "a not in { }"),
        ];
        for (left, right) in same {
            assert_eq!(parse_ok(left), parse_ok(right), "`{left}` vs `{right}`");
        }
        assert_ne!(parse_ok("a == 'x'"), parse_ok("a != 'x'"));
        assert_ne!(parse_ok("has(a)"), parse_ok("has(b)"));
    }

    #[test]
    fn api_helpers() {
        for text in ["", "  ", "all()", " all( ) ", "((all()))", "!!all()"] {
            assert!(parse_ok(text).is_all(), "`{text}`");
        }
        for text in ["global()", "!all()", "has(a)", "all() && all()"] {
            assert!(!parse_ok(text).is_all(), "`{text}`");
        }
        assert_eq!(Selector::all(), parse_ok(""));
        assert_eq!(Selector::default(), Selector::all());
        assert_eq!(Selector::all().to_string(), "all()");
        assert_eq!("has(a)".parse::<Selector>(), Selector::parse("has(a)"));

        let keys = parse_ok("has(a) && b == 'x' || !(c in {'y'}) && all() || has(a)");
        assert_eq!(keys.label_keys(), BTreeSet::from(["a", "b", "c"]));
        assert!(parse_ok("all() || global()").label_keys().is_empty());

        let error = parse_error("a = 'x'");
        assert_eq!(
            error.to_string(),
            "byte 2: expected `==` after `a`, found `=`"
        );
        assert_eq!(error.span(), 2..3);
    }

    #[test]
    fn errors() {
        let long_label = "k".repeat(MAX_LABEL_LEN + 1);
        let longest_label = format!("{} == 'x'", "k".repeat(MAX_LABEL_LEN));
        assert!(Selector::parse(&longest_label).is_ok());
        let long_key = format!("{long_label} == 'x'");
        let long_has = format!("has({long_label})");
        let cases: &[(&str, usize, &str)] = &[
            ("a = 'x'", 2, "expected `==` after `a`, found `=`"),
            ("a =", 2, "expected `==` after `a`, found `=`"),
            ("= 'x'", 0, "expected `==`, found `=`"),
            ("a == 'x' & b == 'y'", 9, "expected `&&`, found `&`"),
            ("a == 'x' | b == 'y'", 9, "expected `||`, found `|`"),
            ("a == x", 5, "expected a quoted value after `==`, found `x`"),
            (
                "a != x-1.2",
                5,
                "expected a quoted value after `!=`, found `x-1.2`",
            ),
            (
                "a contains *x",
                11,
                "expected a quoted value after `contains`, found `*x`",
            ),
            (
                "a == ",
                5,
                "expected a quoted value after `==`, found end of input",
            ),
            ("a == (", 5, "expected a quoted value after `==`, found `(`"),
            ("a in 'x'", 5, "expected `{` after `in`, found `'x'`"),
            ("a not in x", 9, "expected `{` after `not in`, found `x`"),
            ("a in", 4, "expected `{` after `in`, found end of input"),
            (
                "a in {'x' 'y'}",
                10,
                "expected `,` or `}` in set, found `'y'`",
            ),
            (
                "a in {'x'",
                9,
                "expected `,` or `}` in set, found end of input",
            ),
            ("a in {'x')", 9, "expected `,` or `}` in set, found `)`"),
            (
                "a in {x}",
                6,
                "expected a quoted value or `}` in set, found `x`",
            ),
            (
                "a in {,}",
                6,
                "expected a quoted value or `}` in set, found `,`",
            ),
            (
                "a in {'x',,}",
                10,
                "expected a quoted value or `}` in set, found `,`",
            ),
            (
                "a in {",
                6,
                "expected a quoted value or `}` in set, found end of input",
            ),
            ("a == 'x", 5, "unterminated string: no closing `'`"),
            ("a == \"x'", 5, "unterminated string: no closing `\"`"),
            ("a in {'x', 'y}", 11, "unterminated string"),
            ("'x", 0, "unterminated string"),
            (
                "has(a",
                5,
                "expected `)` to close `has(`, found end of input",
            ),
            ("has(a b)", 6, "expected `)` to close `has(`, found `b`"),
            ("has()", 4, "expected a label name after `has(`, found `)`"),
            (
                "has('a')",
                4,
                "expected a label name after `has(`, found `'a'`",
            ),
            (
                "has(",
                4,
                "expected a label name after `has(`, found end of input",
            ),
            ("has (a)", 3, "unexpected space between `has` and `(`"),
            ("all\t()", 3, "unexpected space between `all` and `(`"),
            ("global ()", 6, "unexpected space between `global` and `(`"),
            ("all(x)", 4, "expected `)` after `all(`, found `x`"),
            (
                "global(",
                7,
                "expected `)` after `global(`, found end of input",
            ),
            (
                "(a == 'x'",
                9,
                "expected `)` to close `(`, found end of input",
            ),
            (
                "((has(a))",
                9,
                "expected `)` to close `(`, found end of input",
            ),
            ("(a == 'x' b", 10, "expected `)`, `&&` or `||`, found `b`"),
            ("a == 'x')", 8, "unmatched `)`"),
            ("()", 0, "empty parentheses"),
            ("has(a) && ( )", 10, "empty parentheses"),
            (
                "a",
                1,
                "expected operator after label `a`, found end of input",
            ),
            ("a b", 2, "expected operator after label `a`, found `b`"),
            (
                "a && b == 'x'",
                2,
                "expected operator after label `a`, found `&&`",
            ),
            (
                "a is 'x'",
                2,
                "expected operator after label `a`, found `is`",
            ),
            (
                "a in-x {}",
                2,
                "expected operator after label `a`, found `in-x`",
            ),
            ("a containsx 'y'", 2, "found `containsx`"),
            ("a IN {'x'}", 2, "found `IN`"),
            (
                "a ! = 'x'",
                2,
                "expected operator after label `a`, found `!`",
            ),
            ("a < 'x'", 2, "expected operator after label `a`, found `<`"),
            (
                "not has(a)",
                4,
                "expected operator after label `not`, found `has`",
            ),
            (
                "a starts 'x'",
                9,
                "expected `with` after `starts`, found `'x'`",
            ),
            (
                "a ends",
                6,
                "expected `with` after `ends`, found end of input",
            ),
            ("a not {'x'}", 6, "expected `in` after `not`, found `{`"),
            (
                "a not inside {'x'}",
                6,
                "expected `in` after `not`, found `inside`",
            ),
            ("'x' == a", 0, "expected an expression, found `'x'`"),
            ("== 'x'", 0, "expected an expression, found `==`"),
            (
                "a == 'x' &&",
                11,
                "expected an expression after `&&`, found end of input",
            ),
            (
                "a == 'x' ||  ",
                13,
                "expected an expression after `||`, found end of input",
            ),
            (
                "!",
                1,
                "expected an expression after `!`, found end of input",
            ),
            (
                "(",
                1,
                "expected an expression after `(`, found end of input",
            ),
            (
                "a == 'x' && {",
                12,
                "expected an expression after `&&`, found `{`",
            ),
            (
                "has(a) && && has(b)",
                10,
                "expected an expression after `&&`, found `&&`",
            ),
            (
                "a == 'x' b == 'y'",
                9,
                "expected `&&`, `||` or end of selector, found `b`",
            ),
            ("has(a) has(b)", 7, "found `has(b)`"),
            (
                "has(a) == 'x'",
                7,
                "expected `&&`, `||` or end of selector, found `==`",
            ),
            ("a == 'x' and b == 'y'", 9, "found `and`"),
            (
                "a == 'x' ,",
                9,
                "expected `&&`, `||` or end of selector, found `,`",
            ),
            ("a == 'x'\n&& b == 'y'", 8, "line break in selector"),
            ("a == 'x' \r\n", 9, "line break in selector"),
            ("\n", 0, "line break in selector"),
            ("a\n== 'x'", 1, "line break in selector"),
            ("a ==\n'x'", 4, "line break in selector"),
            ("has(\na)", 4, "line break in selector"),
            ("has(a\n)", 5, "line break in selector"),
            ("a not\nin {}", 5, "line break in selector"),
            ("a in {'x',\n'y'}", 10, "line break in selector"),
            ("a in {'x'\n}", 9, "line break in selector"),
            ("a == 'x' ; b", 9, "unexpected character `;`"),
            ("a == 'x' && é == 'y'", 12, "unexpected character `é`"),
            (
                "a == 'x' && \u{0} == 'y'",
                12,
                "unexpected character `\\u{0}`",
            ),
            ("\u{a0}has(a)", 0, "unexpected character"),
            (&long_key, 0, "label too long: 513 bytes, at most 512"),
            (&long_has, 4, "label too long"),
        ];
        for &(text, offset, message) in cases {
            let error = parse_error(text);
            assert!(
                error.message.contains(message),
                "`{text}`: message {:?} does not contain {message:?}",
                error.message
            );
            assert_eq!(
                error.offset, offset,
                "`{text}`: offset of {:?}",
                error.message
            );
        }
    }

    #[test]
    fn error_lengths() {
        let cases = [
            ("a = 'x'", 1),
            ("a == x-1", 3),
            ("a == ", 0),
            ("a is 'x'", 2),
            ("has (a)", 1),
            ("a == 'x' b", 1),
            ("a == 'x' 'yy'", 4),
            ("()", 2),
            ("(a == 'x'", 0),
            ("a == 'x' ; b", 1),
            ("é", 2),
        ];
        for (text, len) in cases {
            assert_eq!(parse_error(text).len, len, "`{text}`");
        }
    }

    #[test]
    fn error_help() {
        let cases = [
            (
                "role = 'web'",
                "selectors compare with `==`: `role == 'web'`",
            ),
            ("role = \"it's\"", "`role == \"it's\"`"),
            ("role = web", "`role == 'web'`"),
            ("role =", "`role == 'value'`"),
            ("role == web", "quote the value: `role == 'web'`"),
            (
                "role contains web",
                "quote the value: `role contains 'web'`",
            ),
            ("role ==", "write `role == 'value'`"),
            (
                "role in web",
                "list the values in braces: `role in {'web'}`",
            ),
            ("role not in 'web'", "`role not in {'web'}`"),
            ("role in (", "`role in {'a', 'b'}`"),
            ("role in {web}", "quote each value in a set: `'web'`"),
            ("has (role)", "remove the space: `has(role)`"),
            ("all  ( )", "remove the space: `all( )`"),
            ("global (", "remove the space between `global` and `(`"),
            ("role", "write `has(role)`"),
            (
                "role is 'x'",
                "`==`, `!=`, `in`, `not in`, `contains`, `starts with` or `ends with`",
            ),
            ("not has(role)", "negate with `!`"),
            (
                "role starts 'x'",
                "the operator is `starts with`: `role starts with 'x'`",
            ),
            ("role not {'x'}", "`role not in {'a', 'b'}`"),
            ("a == 'x'\n", "YAML folded scalar (`selector: >-`)"),
            ("(a == 'x'", "add the missing `)`"),
            ("a in {'x'", "close the set with `}`"),
            ("a in {'x' 'y'}", "separate set values with commas"),
            ("a == 'x' and b == 'y'", "write `&&` instead of `and`"),
            ("a == 'x' OR b == 'y'", "write `||` instead of `OR`"),
            (
                "a == 'x' b",
                "combine expressions with `&&` (and) or `||` (or)",
            ),
            ("a == 'x' | b", "combine expressions"),
            (
                "has('role')",
                "write the label name without quotes: `has(role)`",
            ),
            ("has()", "`has(role)`"),
            ("all(x)", "`all()` takes no arguments"),
            ("'web' == role", "the label comes first"),
            ("()", "`all()`"),
            ("a == 'x", "no escapes"),
            ("a == 'x' ; b", "values must be quoted"),
        ];
        let too_deep = "(".repeat(200);
        let cases = cases.into_iter().chain([(too_deep.as_str(), "simplify")]);
        for (text, help) in cases {
            let error = parse_error(text);
            let actual = error.help.unwrap_or_default();
            assert!(
                actual.contains(help),
                "`{text}`: help {actual:?} lacks {help:?}"
            );
        }
    }

    #[test]
    fn nesting_is_bounded() {
        let at_limit = [
            format!("{}has(a){}", "(".repeat(MAX_DEPTH), ")".repeat(MAX_DEPTH)),
            format!("{}has(a)", "!".repeat(MAX_DEPTH)),
            format!(
                "{}has(a){}",
                "!(".repeat(MAX_DEPTH / 2),
                ")".repeat(MAX_DEPTH / 2)
            ),
        ];
        for text in &at_limit {
            let parsed = parse_ok(text);
            assert!(parsed.matches(&label_map(&[("a", "")])));
            assert_round_trip(&parsed);
        }
        let too_deep = [
            "(".repeat(10_000),
            format!("{}has(a){}", "(".repeat(10_000), ")".repeat(10_000)),
            format!("{}has(a)", "!".repeat(10_000)),
            format!("{}has(a)", "!(".repeat(10_000)),
            format!("{}has(a)", "! ".repeat(MAX_DEPTH + 1)),
        ];
        for text in &too_deep {
            let error = parse_error(text);
            assert!(error.message.contains("nested too deeply"), "{error:?}");
            assert!(error.offset <= 2 * MAX_DEPTH, "{error:?}");
        }
        assert_eq!(parse_error(&"(".repeat(10_000)).offset, MAX_DEPTH);
        assert_eq!(parse_error(&"!".repeat(10_000)).offset, MAX_DEPTH);
    }

    #[test]
    fn long_input_does_not_recurse() {
        // Chains of `&&` and `||` are flat, so their length is not nesting.
        let chain = format!("{}has(a)", "has(a) && has(b) || ".repeat(20_000));
        let parsed = parse_ok(&chain);
        assert!(parsed.matches(&label_map(&[("a", "")])));
        assert_round_trip(&parsed);
        // Lexing never recurses either, even while describing an error.
        let error = parse_error(&"has(".repeat(50_000));
        assert_eq!(error.offset, 7, "{error:?}");
        let big_set = format!("a in {{{}}}", "'x', ".repeat(50_000));
        assert!(parse_ok(&big_set).matches(&label_map(&[("a", "x")])));
    }

    /// A small deterministic generator (xorshift), so the tests need no crates.
    struct Rng(u64);

    impl Rng {
        fn below(&mut self, bound: usize) -> usize {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            // The bound is small, so the modulo bias is irrelevant here.
            usize::try_from(self.0 % u64::try_from(bound).unwrap_or(u64::MAX)).unwrap_or(0)
        }

        fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
            items[self.below(items.len())]
        }

        fn blank(&mut self) -> &'static str {
            self.pick(&["", "", " ", "  ", "\t"])
        }

        fn some_blank(&mut self) -> &'static str {
            self.pick(&[" ", " ", "  ", "\t", " \t"])
        }
    }

    const KEYS: &[&str] = &["a", "b", "in", "all", "has", "not", "x.io/y-1"];
    const VALUES: &[&str] = &["", "x", "y", "xy", "it's", "say \"hi\"", "a b", "l\nm"];

    /// `value` as a string literal, in either quote style when both can hold it.
    fn quote(rng: &mut Rng, value: &str) -> String {
        if value.contains('\'') || (!value.contains('"') && rng.below(2) == 0) {
            format!("\"{value}\"")
        } else {
            format!("'{value}'")
        }
    }

    /// A random selector written with the grammar's precedence, and whether it matches
    /// `labels` computed independently of the parser.
    fn generate_or(
        rng: &mut Rng,
        labels: &BTreeMap<String, String>,
        depth: usize,
    ) -> (String, bool) {
        let (mut text, mut result) = generate_and(rng, labels, depth);
        for _ in 0..rng.below(3) {
            let (next, value) = generate_and(rng, labels, depth);
            text = format!("{text}{}||{}{next}", rng.blank(), rng.blank());
            result = result || value;
        }
        (text, result)
    }

    fn generate_and(
        rng: &mut Rng,
        labels: &BTreeMap<String, String>,
        depth: usize,
    ) -> (String, bool) {
        let (mut text, mut result) = generate_unary(rng, labels, depth);
        for _ in 0..rng.below(3) {
            let (next, value) = generate_unary(rng, labels, depth);
            text = format!("{text}{}&&{}{next}", rng.blank(), rng.blank());
            result = result && value;
        }
        (text, result)
    }

    fn generate_unary(
        rng: &mut Rng,
        labels: &BTreeMap<String, String>,
        depth: usize,
    ) -> (String, bool) {
        let mut text = String::new();
        let mut negate = false;
        for _ in 0..rng.below(4).saturating_sub(1) {
            text.push('!');
            text.push_str(rng.blank());
            negate = !negate;
        }
        let (primary, value) = generate_primary(rng, labels, depth);
        (text + &primary, value != negate)
    }

    fn generate_primary(
        rng: &mut Rng,
        labels: &BTreeMap<String, String>,
        depth: usize,
    ) -> (String, bool) {
        let key = rng.pick(KEYS);
        let actual = labels.get(key).map(String::as_str);
        let choices = if depth == 0 { 5 } else { 6 };
        match rng.below(choices) {
            0 => {
                let (open, close) = (rng.blank(), rng.blank());
                (format!("has({open}{key}{close})"), actual.is_some())
            }
            1 => {
                let inner = rng.blank();
                let call = rng.pick(&["all", "global"]);
                (format!("{call}({inner})"), true)
            }
            2 | 3 => {
                let wanted = rng.pick(VALUES);
                let (operator, result) = match rng.below(8) {
                    0 => ("==", actual == Some(wanted)),
                    1 => ("!=", actual != Some(wanted)),
                    2 => ("contains", actual.is_some_and(|v| v.contains(wanted))),
                    3 => ("starts with", actual.is_some_and(|v| v.starts_with(wanted))),
                    4 => ("startswith", actual.is_some_and(|v| v.starts_with(wanted))),
                    5 => ("ends with", actual.is_some_and(|v| v.ends_with(wanted))),
                    6 => ("ends\twith", actual.is_some_and(|v| v.ends_with(wanted))),
                    _ => ("endswith", actual.is_some_and(|v| v.ends_with(wanted))),
                };
                let before = if operator.starts_with(['=', '!']) {
                    rng.blank()
                } else {
                    rng.some_blank()
                };
                let value = quote(rng, wanted);
                (
                    format!("{key}{before}{operator}{}{value}", rng.blank()),
                    result,
                )
            }
            4 => {
                let mut set = Vec::new();
                let mut members = Vec::new();
                for _ in 0..rng.below(4) {
                    let value = rng.pick(VALUES);
                    members.push(value);
                    set.push(format!(
                        "{}{}{}",
                        rng.blank(),
                        quote(rng, value),
                        rng.blank()
                    ));
                }
                let trailing = if !set.is_empty() && rng.below(2) == 0 {
                    ","
                } else {
                    ""
                };
                let inside = actual.is_some_and(|v| members.contains(&v));
                let (operator, result) = match rng.below(3) {
                    0 => ("in", inside),
                    1 => ("not in", !inside),
                    _ => ("notin", !inside),
                };
                let text = format!(
                    "{key}{}{operator}{}{{{}{trailing}{}}}",
                    rng.some_blank(),
                    rng.blank(),
                    set.join(","),
                    rng.blank()
                );
                (text, result)
            }
            _ => {
                let (inner, value) = generate_or(rng, labels, depth - 1);
                (format!("({}{inner}{})", rng.blank(), rng.blank()), value)
            }
        }
    }

    fn random_labels(rng: &mut Rng) -> BTreeMap<String, String> {
        let mut labels = BTreeMap::new();
        for key in KEYS {
            if rng.below(3) > 0 {
                labels.insert(key.to_string(), rng.pick(VALUES).to_owned());
            }
        }
        labels
    }

    #[test]
    fn generated_selectors_match_and_round_trip() {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        for _ in 0..3_000 {
            let labels = random_labels(&mut rng);
            let (text, expected) = generate_or(&mut rng, &labels, 3);
            let parsed = parse_ok(&text);
            assert_eq!(parsed.matches(&labels), expected, "`{text}` on {labels:?}");
            assert_round_trip(&parsed);
            let reparsed = parse_ok(&parsed.to_string());
            for _ in 0..4 {
                let other = random_labels(&mut rng);
                assert_eq!(parsed.matches(&other), reparsed.matches(&other), "`{text}`");
            }
        }
    }

    #[test]
    fn garbage_never_panics() {
        let pieces = [
            "a", "b", "in", "not", "has(", "all(", "global(", "(", ")", "{", "}", ",", "=", "==",
            "!", "!=", "&", "&&", "|", "||", "'", "\"", "'x'", " ", "\t", "\n", "é", "contains",
            "starts", "with", "-", ";",
        ];
        let mut rng = Rng(12345);
        for _ in 0..20_000 {
            let text: String = (0..rng.below(12)).map(|_| rng.pick(&pieces)).collect();
            match Selector::parse(&text) {
                Ok(parsed) => assert_round_trip(&parsed),
                Err(error) => assert_valid_span(&text, &error),
            }
        }
    }
}
