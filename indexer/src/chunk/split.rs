//! Splitting a sentence longer than the token budget: at clause punctuation
//! (`, ; : ， ； ： 、`) first, then at whitespace, then anywhere between characters. Pieces are
//! packed greedily up to the budget at each level; the result is marked `oversize`.

use std::ops::Range;

use super::TokenCounter;
use super::units::Unit;

/// The levels at which a too-long span is cut, coarsest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Level {
    Clause,
    Whitespace,
    Char,
}

impl Level {
    fn finer(self) -> Self {
        match self {
            Self::Clause => Self::Whitespace,
            Self::Whitespace | Self::Char => Self::Char,
        }
    }
}

/// Most characters one token is assumed to span when bounding the hard split's search.
const MAX_CHARS_PER_TOKEN: usize = 32;

/// Splits `range` of `text` (a sentence of more than `max` tokens) into pieces of at most `max`
/// tokens each, appended to `out` in order.
pub(crate) fn split_oversize(
    text: &str,
    range: Range<usize>,
    counter: &dyn TokenCounter,
    max: usize,
    out: &mut Vec<Unit>,
) {
    split_at(text, range, Level::Clause, counter, max, out);
}

fn split_at(
    text: &str,
    range: Range<usize>,
    level: Level,
    counter: &dyn TokenCounter,
    max: usize,
    out: &mut Vec<Unit>,
) {
    if level == Level::Char {
        return hard_split(text, range, counter, max, out);
    }
    let segments = cut(text, range.clone(), level);
    if segments.len() <= 1 {
        return split_at(text, range, level.finer(), counter, max, out);
    }
    let mut piece = range.start..range.start;
    let mut acc = 0usize;
    for seg in segments {
        let tokens = counter.count_tokens(&text[seg.clone()]);
        if acc + tokens <= max {
            piece.end = seg.end;
            acc += tokens;
            continue;
        }
        emit(text, piece.clone(), level, counter, max, out);
        if tokens > max {
            split_at(text, seg.clone(), level.finer(), counter, max, out);
            piece = seg.end..seg.end;
            acc = 0;
        } else {
            piece = seg;
            acc = tokens;
        }
    }
    emit(text, piece, level, counter, max, out);
}

/// Pushes a packed piece (trimmed), or splits it further if its own count exceeds the budget.
fn emit(
    text: &str,
    range: Range<usize>,
    level: Level,
    counter: &dyn TokenCounter,
    max: usize,
    out: &mut Vec<Unit>,
) {
    let Some(range) = trim(text, range) else {
        return;
    };
    let tokens = counter.count_tokens(&text[range.clone()]);
    if tokens > max && level != Level::Char {
        split_at(text, range, level.finer(), counter, max, out);
    } else {
        out.push(Unit::piece(range, tokens));
    }
}

/// Contiguous segments covering `range`, each ending after a cut point of `level`.
fn cut(text: &str, range: Range<usize>, level: Level) -> Vec<Range<usize>> {
    let s = &text[range.clone()];
    let mut segments = Vec::new();
    let mut start = 0;
    let mut chars = s.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        let next = chars.peek().map(|&(_, d)| d);
        let cut_after = match level {
            Level::Clause => is_clause_end(c, next),
            Level::Whitespace => c.is_whitespace() && next.is_some_and(|d| !d.is_whitespace()),
            Level::Char => false,
        };
        if cut_after {
            let mut end = i + c.len_utf8();
            while let Some(&(j, d)) = chars.peek() {
                if level == Level::Clause && (d.is_whitespace() || super::rules::is_closing(d)) {
                    end = j + d.len_utf8();
                    chars.next();
                } else {
                    break;
                }
            }
            if end < s.len() {
                segments.push(range.start + start..range.start + end);
                start = end;
            }
        }
    }
    segments.push(range.start + start..range.end);
    segments
}

/// Clause punctuation: full-width marks always; ASCII ones only before whitespace (so `1,000`
/// and `10:30` stay whole).
fn is_clause_end(c: char, next: Option<char>) -> bool {
    match c {
        '，' | '；' | '：' | '、' => true,
        ',' | ';' | ':' => next.is_some_and(char::is_whitespace),
        _ => false,
    }
}

/// Cuts between characters: each piece is the longest prefix (at least one character) whose
/// count fits the budget, found by binary search.
fn hard_split(
    text: &str,
    range: Range<usize>,
    counter: &dyn TokenCounter,
    max: usize,
    out: &mut Vec<Unit>,
) {
    let bounds: Vec<usize> = text[range.clone()]
        .char_indices()
        .map(|(i, _)| range.start + i)
        .chain(std::iter::once(range.end))
        .collect();
    let n = bounds.len() - 1;
    let cap = max.saturating_mul(MAX_CHARS_PER_TOKEN).max(1);
    let mut pos = 0;
    while pos < n {
        let count = |k: usize| counter.count_tokens(&text[bounds[pos]..bounds[k]]);
        let (mut lo, mut hi) = (pos + 1, (pos + cap).min(n));
        if count(hi) <= max {
            lo = hi;
        }
        while lo < hi {
            let mid = lo + (hi - lo).div_ceil(2);
            if count(mid) <= max {
                lo = mid;
            } else {
                hi = mid - 1;
            }
        }
        if let Some(piece) = trim(text, bounds[pos]..bounds[lo]) {
            let tokens = counter.count_tokens(&text[piece.clone()]);
            out.push(Unit::piece(piece, tokens));
        }
        pos = lo;
    }
}

/// The range without surrounding whitespace; `None` when nothing is left.
fn trim(text: &str, range: Range<usize>) -> Option<Range<usize>> {
    let s = &text[range.clone()];
    let start = range.start + (s.len() - s.trim_start().len());
    let end = range.start + s.trim_end().len();
    (start < end).then_some(start..end)
}
