//! Greedy packing of units into chunks with whole-sentence overlap, and the conversion of byte
//! ranges to the character spans, pages and texts of [`Chunk`]s.

use super::units::Unit;
use super::{Chunk, TokenCounter};
use crate::document::ParsedDocument;

/// A planned chunk: units `first..end` and their token count.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Planned {
    first: usize,
    end: usize,
    tokens: usize,
}

/// Plans chunks of at most `max` tokens; each chunk after the first starts with the longest run
/// of whole sentences from the end of the previous chunk that fits in `overlap` tokens and still
/// leaves room for at least one new unit.
pub(crate) fn pack(
    text: &str,
    units: &mut [Unit],
    counter: &dyn TokenCounter,
    max: usize,
    overlap: usize,
) -> Vec<Planned> {
    let mut plan = Vec::new();
    let mut first = 0;
    while first < units.len() {
        let mut tokens = units[first].bare(text, counter);
        let mut end = first + 1;
        while end < units.len() && tokens + units[end].tokens <= max {
            tokens += units[end].tokens;
            end += 1;
        }
        plan.push(Planned { first, end, tokens });
        if end == units.len() {
            break;
        }
        first = overlap_start(text, units, counter, first, end, max, overlap);
    }
    plan
}

/// Where the chunk after `first..end` starts: whole sentences (no oversize pieces) from the end
/// of `first..end` worth at most `overlap` tokens, shortened until unit `end` fits after them.
fn overlap_start(
    text: &str,
    units: &mut [Unit],
    counter: &dyn TokenCounter,
    first: usize,
    end: usize,
    max: usize,
    overlap: usize,
) -> usize {
    let mut start = end;
    let mut repeated = 0;
    while start > first + 1
        && !units[start - 1].oversize
        && repeated + units[start - 1].tokens <= overlap
    {
        start -= 1;
        repeated += units[start].tokens;
    }
    while start < end {
        let rest: usize = units[start + 1..=end].iter().map(|u| u.tokens).sum();
        if units[start].bare(text, counter) + rest <= max {
            break;
        }
        start += 1;
    }
    start
}

/// Turns planned chunks into [`Chunk`]s with character spans, pages and text.
pub(crate) fn materialise(doc: &ParsedDocument, units: &[Unit], plan: &[Planned]) -> Vec<Chunk> {
    let text = doc.text.as_str();
    let mut starts = CharCursor::default();
    let mut ends = CharCursor::default();
    plan.iter()
        .enumerate()
        .map(|(ordinal, p)| {
            let byte_start = units[p.first].range.start;
            let byte_end = units[p.end - 1].range.end;
            let char_start = starts.advance(text, byte_start);
            let char_end = ends.advance(text, byte_end);
            Chunk {
                ordinal: u32::try_from(ordinal).unwrap_or(u32::MAX),
                text: text[byte_start..byte_end].to_owned(),
                char_start,
                char_end,
                page_start: doc.pages.page_of(char_start),
                page_end: doc
                    .pages
                    .page_of(char_end.saturating_sub(1).max(char_start)),
                token_count: u32::try_from(p.tokens).unwrap_or(u32::MAX),
                oversize_split: units[p.first..p.end].iter().any(|u| u.oversize),
            }
        })
        .collect()
}

/// Converts increasing byte offsets to character offsets in one forward pass.
#[derive(Debug, Default)]
struct CharCursor {
    byte: usize,
    chars: usize,
}

impl CharCursor {
    fn advance(&mut self, text: &str, byte: usize) -> usize {
        if byte < self.byte {
            self.byte = 0;
            self.chars = 0;
        }
        self.chars += text[self.byte..byte].chars().count();
        self.byte = byte;
        self.chars
    }
}
