//! The budget a parse of untrusted input runs under: input size, bytes inflated from compressed
//! parts (PDF streams, DOCX parts), markup nesting depth, PDF pages, and the size of the extracted
//! text (characters in all, characters on one line). Each bound is checked where the parser can
//! see it, before the expensive work, and a breach is [`IndexerError::LimitExceeded`] naming it.
//!
//! Memory and time are not bounded here: the service runs parsing in a child process with a
//! memory ceiling and a deadline, and reports those breaches with the same error.

use std::fmt;
use std::io::Read;

use crate::error::{IndexerError, Result};

/// Limits applied while parsing untrusted input.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ParseLimits {
    /// Largest input accepted, in bytes.
    pub max_bytes: u64,
    /// Most bytes all compressed parts of one file may inflate to, together (PDF content and font
    /// streams, DOCX parts).
    pub max_inflated_bytes: u64,
    /// Deepest element nesting accepted in HTML.
    pub max_depth: usize,
    /// Most pages a PDF may have.
    pub max_pages: usize,
    /// Most characters of extracted text.
    pub max_text_chars: usize,
    /// Most characters on one line of extracted text (a paragraph without breaks).
    pub max_line_chars: usize,
}

impl ParseLimits {
    /// The default input limit: 64 MiB.
    pub const DEFAULT_MAX_BYTES: u64 = 64 << 20;
}

impl Default for ParseLimits {
    fn default() -> Self {
        Self {
            max_bytes: Self::DEFAULT_MAX_BYTES,
            max_inflated_bytes: 256 << 20,
            max_depth: 512,
            max_pages: 10_000,
            max_text_chars: 16 << 20,
            max_line_chars: 1 << 20,
        }
    }
}

/// Which bound a document broke.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Limit {
    /// [`ParseLimits::max_inflated_bytes`].
    InflatedBytes,
    /// [`ParseLimits::max_depth`].
    NestingDepth,
    /// [`ParseLimits::max_pages`].
    Pages,
    /// [`ParseLimits::max_text_chars`].
    TextChars,
    /// [`ParseLimits::max_line_chars`].
    LineChars,
    /// The memory ceiling of the parsing process.
    Memory,
    /// The deadline of the parse.
    Time,
}

impl Limit {
    /// Stable snake-case name, as the error message and the API report it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::InflatedBytes => "inflated_bytes",
            Self::NestingDepth => "nesting_depth",
            Self::Pages => "pages",
            Self::TextChars => "text_chars",
            Self::LineChars => "line_chars",
            Self::Memory => "memory",
            Self::Time => "time",
        }
    }
}

impl fmt::Display for Limit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The error for a breach of `limit`, with what was seen.
pub fn exceeded(limit: Limit, detail: impl Into<String>) -> IndexerError {
    IndexerError::LimitExceeded {
        limit,
        detail: detail.into(),
    }
}

/// Bytes inflated so far from one file's compressed parts, against
/// [`ParseLimits::max_inflated_bytes`].
#[derive(Debug)]
pub(crate) struct InflateBudget {
    used: u64,
    max: u64,
}

impl InflateBudget {
    pub(crate) fn new(limits: &ParseLimits) -> Self {
        Self {
            used: 0,
            max: limits.max_inflated_bytes,
        }
    }

    /// Refuses at once a part that declares more bytes than the budget has left.
    pub(crate) fn admit(&mut self, declared: u64) -> Result<()> {
        if declared > self.max - self.used {
            return self.charge(declared);
        }
        Ok(())
    }

    /// Reads `reader` to its end into `out`, charging every byte; stops (with the limit's error) as
    /// soon as the budget is spent, so a bomb never inflates beyond it.
    pub(crate) fn read_into(&mut self, reader: impl Read, out: &mut Vec<u8>) -> Result<()> {
        let left = self.max - self.used;
        reader.take(left + 1).read_to_end(out)?;
        self.charge(out.len() as u64)
    }

    /// Inflates `reader` to its end without keeping the bytes, charging every byte.
    pub(crate) fn measure(&mut self, reader: impl Read) -> Result<()> {
        let left = self.max - self.used;
        let n = std::io::copy(&mut reader.take(left + 1), &mut std::io::sink())?;
        self.charge(n)
    }

    fn charge(&mut self, n: u64) -> Result<()> {
        self.used = self.used.saturating_add(n);
        if self.used > self.max {
            return Err(exceeded(
                Limit::InflatedBytes,
                format!("compressed parts inflate to more than {} bytes", self.max),
            ));
        }
        Ok(())
    }
}

/// Checks the extracted text's size: characters in all, and on the longest line.
pub(crate) fn check_text(text: &str, limits: &ParseLimits) -> Result<()> {
    let mut total = 0usize;
    for line in text.split('\n') {
        let chars = line.chars().count();
        if chars > limits.max_line_chars {
            return Err(exceeded(
                Limit::LineChars,
                format!(
                    "a line of {chars} characters is longer than {} characters",
                    limits.max_line_chars
                ),
            ));
        }
        total += chars + 1;
        if total > limits.max_text_chars.saturating_add(1) {
            return Err(exceeded(
                Limit::TextChars,
                format!(
                    "the text is longer than {} characters",
                    limits.max_text_chars
                ),
            ));
        }
    }
    Ok(())
}
