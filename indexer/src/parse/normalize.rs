//! Text normalisation shared by every parser: Unicode NFC, `\n` newlines, runs of spaces collapsed
//! to one, no spaces at line ends, at most one blank line between paragraphs; and the assembly of
//! normalised pages into one text with its [`PageMap`].

use unicode_normalization::{IsNormalized, UnicodeNormalization, is_nfc_quick};

use crate::document::{PageMap, ParsedDocument};

/// Longest title kept, in characters.
const MAX_TITLE_CHARS: usize = ParsedDocument::MAX_TITLE_CHARS;

/// What a format parser extracts before normalisation: an optional title and the raw text of each
/// page (one entry for formats without pages).
#[derive(Debug, Default)]
pub(crate) struct Extracted {
    pub title: Option<String>,
    pub pages: Vec<String>,
}

/// Text accumulator for markup walkers: block boundaries request a line break (1) or a blank
/// line (2); adjacent requests merge to the larger, so nested blocks do not pile up newlines.
#[derive(Debug, Default)]
pub(crate) struct BlockText {
    out: String,
    pending: usize,
}

impl BlockText {
    /// Requests a break of `lines` (1: line break, 2: blank line) before the next text.
    pub(crate) fn request_break(&mut self, lines: usize) {
        self.pending = self.pending.max(lines);
    }

    /// Appends inline text (after any pending break).
    pub(crate) fn push_str(&mut self, text: &str) {
        if text.is_empty() {
            return;
        }
        if self.pending > 0 && !self.out.is_empty() {
            self.out
                .push_str(if self.pending > 1 { "\n\n" } else { "\n" });
        }
        self.pending = 0;
        self.out.push_str(text);
    }

    /// The accumulated text.
    pub(crate) fn into_string(self) -> String {
        self.out
    }
}

/// Normalises one page of text (see the module header).
pub(crate) fn normalize(text: &str) -> String {
    let nfc;
    let text = if is_nfc_quick(text.chars()) == IsNormalized::Yes {
        text
    } else {
        nfc = text.nfc().collect::<String>();
        &nfc
    };
    let mut out = String::with_capacity(text.len());
    let mut pending_space = false;
    let mut pending_newlines = 0usize;
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\r' => {
                if chars.peek() != Some(&'\n') {
                    pending_newlines += 1;
                }
            }
            '\n' | '\u{0B}' | '\u{0C}' | '\u{85}' | '\u{2028}' => pending_newlines += 1,
            '\u{2029}' => pending_newlines += 2,
            '\u{AD}' | '\u{200B}' | '\u{2060}' | '\u{FEFF}' => {}
            c if c.is_whitespace() => pending_space = true,
            c if c.is_control() => {}
            c => {
                if !out.is_empty() {
                    if pending_newlines > 0 {
                        out.push_str(if pending_newlines > 1 { "\n\n" } else { "\n" });
                    } else if pending_space {
                        out.push(' ');
                    }
                }
                pending_space = false;
                pending_newlines = 0;
                out.push(c);
            }
        }
    }
    out
}

/// Normalises every page and joins them with a line break, recording where each page starts.
/// Empty pages keep their place in the page map.
pub(crate) fn assemble(pages: &[String]) -> (String, PageMap) {
    let mut text = String::new();
    let mut chars = 0usize;
    let mut starts = Vec::with_capacity(pages.len().max(1));
    let mut empty_pages = 0usize;
    for page in pages {
        let page = normalize(page);
        if page.is_empty() {
            empty_pages += 1;
            continue;
        }
        if !text.is_empty() {
            text.push('\n');
            chars += 1;
        }
        starts.extend(std::iter::repeat_n(chars, empty_pages + 1));
        empty_pages = 0;
        chars += page.chars().count();
        text.push_str(&page);
    }
    starts.extend(std::iter::repeat_n(chars, empty_pages));
    (text, PageMap::from_starts(starts))
}

/// The title: the first non-blank candidate, else the first line of the text, else "Untitled";
/// whitespace collapsed to single spaces, cut at [`MAX_TITLE_CHARS`] characters.
pub(crate) fn pick_title(candidates: &[Option<&str>], text: &str) -> String {
    let first_line = text.lines().find(|l| !l.trim().is_empty());
    candidates
        .iter()
        .flatten()
        .copied()
        .chain(first_line)
        .map(one_line)
        .find(|t| !t.is_empty())
        .unwrap_or_else(|| "Untitled".to_owned())
}

/// Collapses all whitespace to single spaces and cuts to [`MAX_TITLE_CHARS`] characters.
fn one_line(s: &str) -> String {
    let joined = s.split_whitespace().collect::<Vec<_>>().join(" ");
    joined.chars().take(MAX_TITLE_CHARS).collect()
}

/// The file name without directories and without its last extension (`"a/b/report.pdf"` →
/// `"report"`).
pub(crate) fn file_stem(file_name: &str) -> &str {
    let base = file_name.rsplit(['/', '\\']).next().unwrap_or(file_name);
    match base.rfind('.') {
        Some(dot) if dot > 0 => &base[..dot],
        _ => base,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalize_collapses_spaces_and_keeps_one_blank_line() {
        let raw = "  Hello \t world \r\n\r\n\r\n  next\u{a0} line \rlast\n";
        assert_eq!(normalize(raw), "Hello world\n\nnext line\nlast");
    }

    #[test]
    fn normalize_composes_to_nfc() {
        assert_eq!(normalize("Cafe\u{301}"), "Caf\u{e9}");
    }

    #[test]
    fn assemble_records_page_starts_including_empty_pages() {
        let pages = ["One.".to_owned(), " ".to_owned(), "Two.".to_owned()];
        let (text, map) = assemble(&pages);
        assert_eq!(text, "One.\nTwo.");
        assert_eq!(map.page_starts(), &[0, 5, 5]);
        assert_eq!(map.page_of(0), 1);
        assert_eq!(map.page_of(5), 3);
    }

    #[test]
    fn file_stem_drops_directories_and_extension() {
        assert_eq!(file_stem("a/b\\report.final.pdf"), "report.final");
        assert_eq!(file_stem(".bashrc"), ".bashrc");
    }
}
