//! Source files and byte spans: the text every diagnostic points into.
//!
//! A [`SourceFile`] is the text of one input file (a policy file or the config file) together
//! with the path it was read from. Spans are byte ranges into that text; they become
//! `line:column` only when a diagnostic is printed, so the pure code never has to know about
//! lines.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A half-open byte range `[start, end)` into a [`SourceFile`]'s text.
#[derive(
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    serde::Serialize,
    serde::Deserialize,
)]
pub struct Span {
    /// First byte of the range.
    pub start: usize,
    /// One past the last byte of the range.
    pub end: usize,
}

impl Span {
    /// A span from `start` covering `len` bytes.
    pub fn new(start: usize, len: usize) -> Self {
        Span {
            start,
            end: start + len,
        }
    }

    /// An empty span at `offset`.
    pub fn at(offset: usize) -> Self {
        Span {
            start: offset,
            end: offset,
        }
    }
}

/// One input file: where it came from and what it said.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SourceFile {
    /// The path as the user gave it or as it was found in the policy directory.
    pub path: PathBuf,
    /// The whole text of the file.
    pub text: String,
    /// Byte offset of the start of every line, for offset → line:column.
    line_starts: Vec<usize>,
    /// Whether diagnostics may quote its lines (a file not every user may read is named by
    /// position only, so that a message in a log never shows more than its readers could read).
    pub quotable: bool,
}

impl SourceFile {
    /// Wraps `text` read from `path`.
    pub fn new(path: impl Into<PathBuf>, text: impl Into<String>) -> Self {
        let text = text.into();
        let mut line_starts = vec![0];
        line_starts.extend(
            text.bytes()
                .enumerate()
                .filter(|&(_, b)| b == b'\n')
                .map(|(i, _)| i + 1),
        );
        SourceFile {
            path: path.into(),
            text,
            line_starts,
            quotable: true,
        }
    }

    /// The file, marked as one whose lines diagnostics must not quote.
    pub fn unquotable(mut self) -> Self {
        self.quotable = false;
        self
    }

    /// The 1-based line and column (in characters) of a byte offset. Offsets past the end of the
    /// text are clamped to the end.
    pub fn line_column(&self, offset: usize) -> LineColumn {
        let offset = offset.min(self.text.len());
        let line_index = match self.line_starts.binary_search(&offset) {
            Ok(index) => index,
            Err(index) => index - 1,
        };
        let line_start = self.line_starts[line_index];
        let column = self
            .text
            .get(line_start..offset)
            .map_or(offset - line_start, |prefix| prefix.chars().count());
        LineColumn {
            line: line_index + 1,
            column: column + 1,
        }
    }

    /// The text of the 1-based line `line`, without its line terminator.
    pub fn line_text(&self, line: usize) -> &str {
        let Some(&start) = self.line_starts.get(line.saturating_sub(1)) else {
            return "";
        };
        let end = self
            .line_starts
            .get(line)
            .map_or(self.text.len(), |&next| next - 1);
        self.text
            .get(start..end)
            .unwrap_or("")
            .trim_end_matches('\r')
    }

    /// The byte offset where 1-based `line` and `column` (characters) point, if they exist.
    pub fn offset_of(&self, line: usize, column: usize) -> Option<usize> {
        let start = *self.line_starts.get(line.checked_sub(1)?)?;
        let text = self.line_text(line);
        let within = text
            .char_indices()
            .nth(column.saturating_sub(1))
            .map_or(text.len(), |(index, _)| index);
        Some(start + within)
    }
}

/// A 1-based line and column.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct LineColumn {
    /// 1-based line number.
    pub line: usize,
    /// 1-based column, counted in characters.
    pub column: usize,
}

impl fmt::Display for LineColumn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.line, self.column)
    }
}

/// Index of a file in a [`Sources`] collection.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub struct FileId(pub usize);

/// Every source file of one run, so diagnostics can refer to them by [`FileId`].
#[derive(Clone, Debug, Default)]
pub struct Sources {
    files: Vec<Arc<SourceFile>>,
}

impl Sources {
    /// An empty collection.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a file and returns its id.
    pub fn add(&mut self, file: SourceFile) -> FileId {
        self.files.push(Arc::new(file));
        FileId(self.files.len() - 1)
    }

    /// The file with this id.
    ///
    /// # Panics
    /// If the id was not handed out by this collection.
    pub fn get(&self, id: FileId) -> &SourceFile {
        &self.files[id.0]
    }

    /// Every file with its id, in the order they were added.
    pub fn iter(&self) -> impl Iterator<Item = (FileId, &SourceFile)> {
        self.files
            .iter()
            .enumerate()
            .map(|(index, file)| (FileId(index), file.as_ref()))
    }

    /// How many files there are.
    pub fn len(&self) -> usize {
        self.files.len()
    }

    /// Whether there are no files.
    pub fn is_empty(&self) -> bool {
        self.files.is_empty()
    }

    /// The id of the file read from `path`, if there is one.
    pub fn find(&self, path: &Path) -> Option<FileId> {
        self.files
            .iter()
            .position(|file| file.path == path)
            .map(FileId)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_column_counts_lines_and_characters_from_one() {
        let file = SourceFile::new("a.yaml", "ab\ncdé f\n\nx");
        assert_eq!(file.line_column(0), LineColumn { line: 1, column: 1 });
        assert_eq!(file.line_column(1), LineColumn { line: 1, column: 2 });
        assert_eq!(file.line_column(3), LineColumn { line: 2, column: 1 });
        // "é" is two bytes: the space after it is the 4th character.
        assert_eq!(file.line_column(7), LineColumn { line: 2, column: 4 });
        assert_eq!(file.line_column(10), LineColumn { line: 3, column: 1 });
        assert_eq!(file.line_column(11), LineColumn { line: 4, column: 1 });
        assert_eq!(file.line_column(999), LineColumn { line: 4, column: 2 });
    }

    #[test]
    fn line_text_strips_terminators() {
        let file = SourceFile::new("a.yaml", "one\r\ntwo\nthree");
        assert_eq!(file.line_text(1), "one");
        assert_eq!(file.line_text(2), "two");
        assert_eq!(file.line_text(3), "three");
        assert_eq!(file.line_text(4), "");
    }

    #[test]
    fn offset_of_inverts_line_column() {
        let file = SourceFile::new("a.yaml", "ab\ncdé f\n");
        for offset in [0, 1, 3, 4, 5, 7] {
            let position = file.line_column(offset);
            assert_eq!(file.offset_of(position.line, position.column), Some(offset));
        }
    }
}
