//! Shared document types: a parsed document's normalised text, its format, and the page map that
//! turns a character offset into a 1-based page number.
//!
//! All offsets in docqa's indexer are character offsets (Unicode scalar values) into
//! [`ParsedDocument::text`], so `text.chars().skip(start).take(end - start)` is a span's text.

use std::fmt;

/// The formats docqa can parse.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DocumentFormat {
    /// UTF-8 plain text; form feeds (`\f`) separate pages.
    Text,
    /// CommonMark / GitHub-flavoured Markdown.
    Markdown,
    /// HTML or XHTML.
    Html,
    /// PDF with a text layer.
    Pdf,
    /// Office Open XML word-processing document.
    Docx,
}

impl DocumentFormat {
    /// Stable lower-case name (`"text"`, `"markdown"`, `"html"`, `"pdf"`, `"docx"`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Text => "text",
            Self::Markdown => "markdown",
            Self::Html => "html",
            Self::Pdf => "pdf",
            Self::Docx => "docx",
        }
    }
}

impl fmt::Display for DocumentFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Where each page starts, as a character offset into the document text.
///
/// Page numbers are 1-based. An empty page starts where the next one starts; a character at such
/// an offset belongs to the later page.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PageMap {
    starts: Vec<usize>,
}

impl PageMap {
    /// A document of one page.
    pub fn single() -> Self {
        Self { starts: vec![0] }
    }

    /// A page map from page start offsets. The list is made non-empty, starting at 0 and
    /// non-decreasing (out-of-order entries are raised to their predecessor).
    pub fn from_starts(mut starts: Vec<usize>) -> Self {
        if starts.first() != Some(&0) {
            starts.insert(0, 0);
        }
        for i in 1..starts.len() {
            starts[i] = starts[i].max(starts[i - 1]);
        }
        Self { starts }
    }

    /// Number of pages.
    pub fn page_count(&self) -> u32 {
        u32::try_from(self.starts.len()).unwrap_or(u32::MAX)
    }

    /// Character offset at which each page starts (page 1 first).
    pub fn page_starts(&self) -> &[usize] {
        &self.starts
    }

    /// The 1-based page that holds the character at `char_offset`.
    pub fn page_of(&self, char_offset: usize) -> u32 {
        let idx = self.starts.partition_point(|&s| s <= char_offset);
        u32::try_from(idx.max(1)).unwrap_or(u32::MAX)
    }
}

impl Default for PageMap {
    fn default() -> Self {
        Self::single()
    }
}

/// A document turned into normalised text (Unicode NFC, `\n` newlines, single spaces, paragraphs
/// separated by one blank line) with its title, page map and source format.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ParsedDocument {
    /// Title from the document's metadata, its first heading, or the file name.
    pub title: String,
    /// The visible text, normalised.
    pub text: String,
    /// Page of every character of `text`.
    pub pages: PageMap,
    /// The format the document was parsed as.
    pub format: DocumentFormat,
}

impl ParsedDocument {
    /// Longest title a parse gives, in characters; longer ones are cut.
    pub const MAX_TITLE_CHARS: usize = 200;

    /// A document of one page, for text that did not come from a file (tests, API uploads of raw
    /// text). The text is used as is: call the parser to normalise it.
    pub fn from_text(title: impl Into<String>, text: impl Into<String>) -> Self {
        Self {
            title: title.into(),
            text: text.into(),
            pages: PageMap::single(),
            format: DocumentFormat::Text,
        }
    }

    /// Number of characters (Unicode scalar values) of `text`.
    pub fn char_len(&self) -> usize {
        self.text.chars().count()
    }
}
