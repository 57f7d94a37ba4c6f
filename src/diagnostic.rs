//! Diagnostics: what is wrong with the input, where, and what to write instead.
//!
//! Diagnostics keep a [`FileId`] and a byte [`Span`]; they are turned into the
//! `path:line:column: error: message` form, with a code frame and a `help:` line, only when
//! printed. Validation collects every diagnostic of a run instead of stopping at the first.

use std::fmt::{self, Write as _};

use crate::source::{FileId, Sources, Span};

/// How bad a diagnostic is.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// Something worth knowing; the input is still used.
    Warning,
    /// The input is invalid; nothing from it reaches the kernel.
    Error,
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Severity::Warning => "warning",
            Severity::Error => "error",
        })
    }
}

/// One finding about the input.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Diagnostic {
    /// Error or warning.
    pub severity: Severity,
    /// The file it is about, if any.
    pub file: Option<FileId>,
    /// Where in that file, if known.
    pub span: Option<Span>,
    /// One sentence, no final period; values and paths in backticks.
    pub message: String,
    /// What to write instead, when there is something useful to say.
    pub help: Option<String>,
    /// When the finding stops holding: a check across resources (a duplicate name, a tier no
    /// file declares) about a resource that expires at this instant means nothing once it has,
    /// as if no file held it. Validation knows no clock; the set read at an instant leaves the
    /// moot ones out ([`Diagnostic::is_moot`]).
    #[serde(skip)]
    pub moot_after: Option<jiff::Timestamp>,
}

impl Diagnostic {
    /// An error about `span` in `file`.
    pub fn error(file: FileId, span: Span, message: impl Into<String>) -> Self {
        Diagnostic {
            severity: Severity::Error,
            file: Some(file),
            span: Some(span),
            message: message.into(),
            help: None,
            moot_after: None,
        }
    }

    /// A warning about `span` in `file`.
    pub fn warning(file: FileId, span: Span, message: impl Into<String>) -> Self {
        Diagnostic {
            severity: Severity::Warning,
            ..Diagnostic::error(file, span, message)
        }
    }

    /// An error about a whole file (for example one that cannot be read).
    pub fn file_error(file: FileId, message: impl Into<String>) -> Self {
        Diagnostic {
            severity: Severity::Error,
            file: Some(file),
            span: None,
            message: message.into(),
            help: None,
            moot_after: None,
        }
    }

    /// An error that belongs to no file.
    pub fn global_error(message: impl Into<String>) -> Self {
        Diagnostic {
            severity: Severity::Error,
            file: None,
            span: None,
            message: message.into(),
            help: None,
            moot_after: None,
        }
    }

    /// A warning that belongs to no file.
    pub fn global_warning(message: impl Into<String>) -> Self {
        Diagnostic {
            severity: Severity::Warning,
            ..Diagnostic::global_error(message)
        }
    }

    /// Says when the finding stops holding (see [`Diagnostic::moot_after`]).
    #[must_use]
    pub fn moot_after(mut self, at: Option<jiff::Timestamp>) -> Self {
        self.moot_after = at;
        self
    }

    /// Whether the finding no longer holds at `now`.
    pub fn is_moot(&self, now: jiff::Timestamp) -> bool {
        self.moot_after.is_some_and(|at| at <= now)
    }

    /// Adds a `help:` line.
    #[must_use]
    pub fn with_help(mut self, help: impl Into<String>) -> Self {
        self.help = Some(help.into());
        self
    }

    /// Whether this is an error.
    pub fn is_error(&self) -> bool {
        self.severity == Severity::Error
    }

    /// The first line of the rendered diagnostic: `path:line:column: error: message`.
    pub fn headline(&self, sources: &Sources) -> String {
        let mut out = String::new();
        if let Some(file) = self.file {
            let source = sources.get(file);
            let _ = write!(out, "{}", source.path.display());
            if let Some(span) = self.span {
                let _ = write!(out, ":{}", source.line_column(span.start));
            }
            out.push_str(": ");
        }
        let _ = write!(out, "{}: {}", self.severity, self.message);
        out
    }

    /// The headline and the help on one line, for a log: `path:line:column: error: message
    /// (help: …)`.
    pub fn one_line(&self, sources: &Sources) -> String {
        let headline = self.headline(sources);
        match &self.help {
            Some(help) => format!("{headline} (help: {help})"),
            None => headline,
        }
    }

    /// The whole diagnostic: the headline, a code frame under the offending text, and the help.
    pub fn render(&self, sources: &Sources) -> String {
        let mut out = self.headline(sources);
        out.push('\n');
        if let (Some(file), Some(span)) = (self.file, self.span) {
            let source = sources.get(file);
            let start = source.line_column(span.start);
            let line_text = source.line_text(start.line);
            if !source.quotable {
                let _ = writeln!(
                    out,
                    "  = note: the line is not shown: not every user may read `{}`",
                    source.path.display()
                );
            } else if !line_text.is_empty() {
                let end = source.line_column(span.end.max(span.start));
                let width = if end.line == start.line {
                    end.column.saturating_sub(start.column).max(1)
                } else {
                    line_text
                        .chars()
                        .count()
                        .saturating_sub(start.column - 1)
                        .max(1)
                };
                let (shown, caret_column, width) = frame_window(line_text, start.column, width);
                let gutter = start.line.to_string().len();
                let _ = writeln!(out, "{:gutter$} |", "");
                let _ = writeln!(out, "{} | {}", start.line, shown);
                let _ = writeln!(
                    out,
                    "{:gutter$} | {}{}",
                    "",
                    " ".repeat(caret_column - 1),
                    "^".repeat(width)
                );
            }
        }
        if let Some(help) = &self.help {
            let _ = writeln!(out, "  = help: {help}");
        }
        out
    }
}

/// Longest stretch of a source line shown in a code frame.
const FRAME_WIDTH: usize = 100;

/// The part of `line` a code frame shows, with the caret's column and width in it: the whole
/// line when it is short, else a window around `column` marked with `…` where it was cut.
/// Tabs become spaces so the caret lines up.
fn frame_window(line: &str, column: usize, width: usize) -> (String, usize, usize) {
    let chars: Vec<char> = line
        .chars()
        .map(|c| if c == '\t' { ' ' } else { c })
        .collect();
    if chars.len() <= FRAME_WIDTH {
        return (chars.into_iter().collect(), column, width);
    }
    let first = column.saturating_sub(1).saturating_sub(FRAME_WIDTH / 3);
    let last = (first + FRAME_WIDTH).min(chars.len());
    let mut shown = String::new();
    let mut caret = column - first;
    if first > 0 {
        shown.push('…');
        caret += 1;
    }
    shown.extend(&chars[first..last]);
    if last < chars.len() {
        shown.push('…');
    }
    let width = width.min(last.saturating_sub(column - 1)).max(1);
    (shown, caret, width)
}

/// Renders every diagnostic, errors and warnings in the order given, separated by blank lines.
pub fn render_all(diagnostics: &[Diagnostic], sources: &Sources) -> String {
    let mut out = String::new();
    for (index, diagnostic) in diagnostics.iter().enumerate() {
        if index > 0 {
            out.push('\n');
        }
        out.push_str(&diagnostic.render(sources));
    }
    out
}

/// Whether any diagnostic is an error.
pub fn has_errors(diagnostics: &[Diagnostic]) -> bool {
    diagnostics.iter().any(Diagnostic::is_error)
}

/// Sorts diagnostics by file, then position, so output is stable whatever order they were found
/// in. Diagnostics without a file come first.
pub fn sort(diagnostics: &mut [Diagnostic]) {
    diagnostics.sort_by(|a, b| {
        (
            a.file,
            a.span.map(|s| s.start),
            a.severity == Severity::Warning,
        )
            .cmp(&(
                b.file,
                b.span.map(|s| s.start),
                b.severity == Severity::Warning,
            ))
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::SourceFile;

    #[test]
    fn renders_path_line_column_frame_and_help() {
        let mut sources = Sources::new();
        let file = sources.add(SourceFile::new(
            "policies/a.yaml",
            "spec:\n  nets: [10.0.0.1]\n",
        ));
        let diagnostic = Diagnostic::error(file, Span::new(15, 8), "`10.0.0.1` is not a CIDR")
            .with_help("write `10.0.0.1/32`");
        assert_eq!(
            diagnostic.render(&sources),
            "policies/a.yaml:2:10: error: `10.0.0.1` is not a CIDR\n  |\n2 |   nets: [10.0.0.1]\n  |          ^^^^^^^^\n  = help: write `10.0.0.1/32`\n"
        );
        // The daemon's log line keeps the help.
        assert_eq!(
            diagnostic.one_line(&sources),
            "policies/a.yaml:2:10: error: `10.0.0.1` is not a CIDR (help: write `10.0.0.1/32`)"
        );
    }

    #[test]
    fn long_lines_are_shown_as_a_window_around_the_problem() {
        let mut sources = Sources::new();
        let line = format!("spec: {}x{}", "[".repeat(500), "]".repeat(500));
        let file = sources.add(SourceFile::new("deep.yaml", line));
        let diagnostic = Diagnostic::error(file, Span::new(506, 1), "too deep");
        let rendered = diagnostic.render(&sources);
        let frame: Vec<&str> = rendered.lines().collect();
        assert!(frame[2].chars().count() < 120, "{}", frame[2]);
        assert!(
            frame[2].starts_with("1 | …") && frame[2].ends_with('…'),
            "{}",
            frame[2]
        );
        let caret = frame[3].find('^').expect("caret");
        assert_eq!(frame[2].chars().nth(caret), Some('x'), "{rendered}");
    }

    #[test]
    fn global_diagnostics_have_no_position() {
        let sources = Sources::new();
        let diagnostic = Diagnostic::global_warning("no policy files in `/x`");
        assert_eq!(
            diagnostic.render(&sources),
            "warning: no policy files in `/x`\n"
        );
    }
}
