//! Reporting: the problem with one value, and the checker that turns it into a diagnostic of
//! the resource's file.

use crate::diagnostic::Diagnostic;
use crate::model::Origin;
use crate::source::{FileId, Span};
use crate::spec::{RawResource, Sp};

/// What is wrong with one value: a one-sentence message and, when there is something useful to
/// say, what to write instead.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Problem {
    pub(super) message: String,
    pub(super) help: Option<String>,
}

impl Problem {
    pub(super) fn new(message: impl Into<String>) -> Self {
        Problem {
            message: message.into(),
            help: None,
        }
    }

    pub(super) fn help(mut self, help: impl Into<String>) -> Self {
        self.help = Some(help.into());
        self
    }
}

/// Reports the diagnostics of one resource, turning its document-relative spans into spans of
/// the file.
pub(super) struct Checker<'a> {
    pub(super) file: FileId,
    pub(super) resource: &'a RawResource,
    /// The whole text of the resource's file, to find positions inside quoted values.
    pub(super) text: &'a str,
    pub(super) diagnostics: &'a mut Vec<Diagnostic>,
    /// How many errors this resource has had so far, so a piece can tell whether it was valid.
    pub(super) errors: usize,
}

impl Checker<'_> {
    /// Reports an error with a help line at `span` (relative to the resource's document).
    pub(super) fn error_help(
        &mut self,
        span: Span,
        message: impl Into<String>,
        help: impl Into<String>,
    ) {
        self.report(span, Problem::new(message).help(help));
    }

    /// Reports a problem as an error.
    pub(super) fn report(&mut self, span: Span, problem: Problem) {
        let diagnostic = Diagnostic::error(self.file, self.resource.at(span), problem.message);
        self.errors += 1;
        self.diagnostics.push(match problem.help {
            Some(help) => diagnostic.with_help(help),
            None => diagnostic,
        });
    }

    /// Reports a warning with a help line.
    pub(super) fn warning_help(
        &mut self,
        span: Span,
        message: impl Into<String>,
        help: impl Into<String>,
    ) {
        let diagnostic = Diagnostic::warning(self.file, self.resource.at(span), message);
        self.diagnostics.push(diagnostic.with_help(help));
    }

    /// Where something of this resource was written, for the model.
    pub(super) fn origin(&self, span: Span) -> Origin {
        Origin {
            file: self.file,
            span: self.resource.at(span),
        }
    }

    /// The span of `len` bytes at byte `offset` of a scalar's value, when the value can be found
    /// in the source as written; otherwise the span of the whole scalar.
    pub(super) fn inside(&self, scalar: &Sp<String>, offset: usize, len: usize) -> Span {
        let file_span = self.resource.at(scalar.span);
        self.text
            .get(file_span.start..file_span.end)
            .and_then(|written| locate_in_scalar(written, &scalar.value, offset, len))
            .map_or(scalar.span, |(start, len)| {
                Span::new(scalar.span.start + start, len)
            })
    }
}

/// Where bytes `offset..offset + len` of a scalar's `value` stand in `written`, the scalar's
/// source text, as (start, length) relative to `written`. Only plain scalars and quoted scalars
/// without escapes before the wanted text qualify: elsewhere (folded lines, block scalars,
/// escape sequences) the value's bytes are not the source's bytes, and `None` says so.
pub(super) fn locate_in_scalar(
    written: &str,
    value: &str,
    offset: usize,
    len: usize,
) -> Option<(usize, usize)> {
    let end = offset.checked_add(len)?.min(value.len());
    let wanted = value.get(..end)?;
    value.get(..offset)?;
    let (body_start, escape_free) = match written.as_bytes().first() {
        Some(b'"') => (1, !written.get(1..1 + end)?.contains('\\')),
        Some(b'\'') => (1, !wanted.contains('\'')),
        _ => (0, true),
    };
    let body = written.get(body_start..)?;
    (escape_free && body.starts_with(wanted)).then(|| (body_start + offset, end - offset))
}
