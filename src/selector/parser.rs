//! The grammar: a recursive-descent parser over the tokens that `lexer` makes on demand.

use std::collections::BTreeSet;

use super::errors::{describe, example_quote, snippet, too_deep};
use super::expr::{Expr, Test};
use super::lexer::{Kind, Operator, Token};
use super::{MAX_DEPTH, SelectorError};

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
