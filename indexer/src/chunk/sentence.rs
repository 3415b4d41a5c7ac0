//! Sentence segmentation for English, Chinese and mixed text.
//!
//! The base is the Unicode sentence-boundary algorithm (UAX #29, `unicode-segmentation`). On top
//! of it docqa splits after Chinese `；` and `……`, and joins pieces back together where UAX #29
//! breaks too eagerly: after abbreviations (`Dr.`, `e.g.`, `U.S.`), after `?`/`!` followed by a
//! lowercase word, inside URLs (no space after the punctuation), after bare enumerators (`1.`),
//! and at line breaks that only wrap a line. A line break ends a sentence when the next line
//! starts a transcript turn (`Speaker: …`) or a list item, when the line ends with sentence-final
//! punctuation, or when the document is not hard-wrapped and the next line starts capitalised.
//! A blank line always ends a sentence.

use std::ops::Range;

use unicode_segmentation::UnicodeSegmentation;

use super::rules::{
    WrapProfile, abbreviation_joins, ends_terminal, is_cjk, is_closing, is_enumerator, is_opening,
    starts_lowercase, starts_turn_or_item,
};

/// Byte ranges of the sentences of `text`, in order, without surrounding whitespace. Everything
/// between two consecutive ranges is whitespace.
pub fn sentence_spans(text: &str) -> Vec<Range<usize>> {
    let profile = WrapProfile::of(text);
    let mut spans = Vec::new();
    let mut current: Option<Range<usize>> = None;
    for piece in base_pieces(text) {
        current = Some(match current {
            None => piece,
            Some(cur) if joins(text, &cur, &piece, profile) => cur.start..piece.end,
            Some(cur) => {
                push_trimmed(text, cur, &mut spans);
                piece
            }
        });
    }
    if let Some(cur) = current {
        push_trimmed(text, cur, &mut spans);
    }
    spans
}

/// The sentences of `text` as string slices (see [`sentence_spans`]).
pub fn sentences(text: &str) -> Vec<&str> {
    sentence_spans(text).into_iter().map(|r| &text[r]).collect()
}

/// UAX #29 pieces (each with its trailing whitespace), further split after `；` and CJK `……`.
fn base_pieces(text: &str) -> impl Iterator<Item = Range<usize>> + '_ {
    text.split_sentence_bound_indices()
        .flat_map(|(start, piece)| {
            cjk_cuts(piece)
                .into_iter()
                .map(move |r| start + r.start..start + r.end)
        })
        .flat_map(|r| detach_openers(text, r))
}

/// Cuts trailing opening brackets and quotes off a piece so they start the next one.
fn detach_openers(text: &str, range: Range<usize>) -> Vec<Range<usize>> {
    let piece = &text[range.clone()];
    let body = piece.trim_end();
    let head = body.trim_end_matches(is_opening);
    if head.len() == body.len() || head.trim().is_empty() || !piece[body.len()..].is_empty() {
        return vec![range];
    }
    let cut = range.start + head.len();
    vec![range.start..cut, cut..range.end]
}

/// Splits a piece after `；` and after a run of `…` that follows CJK text, keeping closing
/// quotes and brackets and the following whitespace with the left part.
fn cjk_cuts(piece: &str) -> Vec<Range<usize>> {
    let mut cuts = Vec::new();
    let mut start = 0;
    let mut prev: Option<char> = None;
    let mut iter = piece.char_indices().peekable();
    while let Some((i, c)) = iter.next() {
        let cut_here = c == '；' || (c == '…' && prev.is_some_and(is_cjk));
        prev = Some(c);
        if !cut_here {
            continue;
        }
        let mut end = i + c.len_utf8();
        while let Some(&(j, d)) = iter.peek() {
            if d == '…' || d == '；' || is_closing(d) || d.is_whitespace() {
                end = j + d.len_utf8();
                iter.next();
            } else {
                break;
            }
        }
        if end < piece.len() {
            cuts.push(start..end);
            start = end;
        }
    }
    cuts.push(start..piece.len());
    cuts
}

/// Whether the sentence so far (`cur`) continues into the next piece.
fn joins(text: &str, cur: &Range<usize>, next: &Range<usize>, profile: WrapProfile) -> bool {
    let cur_text = &text[cur.clone()];
    let body = cur_text.trim_end();
    if body.is_empty() {
        return true;
    }
    if body.chars().all(is_opening) {
        return !cur_text.contains('\n');
    }
    let next_text = &text[next.clone()];
    match cur_text[body.len()..].matches('\n').count() {
        0 => space_joins(body, next_text, cur_text.len() == body.len()),
        1 => {
            let body_end = cur.start + body.len();
            let line_start = text[..body_end].rfind('\n').map_or(0, |i| i + 1);
            let next_line = text[next.start..].split('\n').next().unwrap_or(next_text);
            line_break_joins(&text[line_start..body_end], next_line, profile)
        }
        _ => false,
    }
}

/// A break after punctuation followed by spaces (or nothing, `tight`).
fn space_joins(body: &str, next: &str, tight: bool) -> bool {
    if is_enumerator(last_line_tail(body)) {
        return true;
    }
    let last = body.chars().next_back();
    if tight && last.is_some_and(|c| c.is_ascii_punctuation()) {
        // `example.com/a?B`, `Yahoo!Inc`: a sentence does not end without a space in Latin text.
        return next
            .chars()
            .next()
            .is_some_and(|c| c.is_alphanumeric() && !is_cjk(c));
    }
    if body.ends_with('.') && abbreviation_joins(body, next) {
        return true;
    }
    let latin_end = last.is_some_and(|c| !is_cjk(c));
    latin_end && ends_terminal(body) && starts_lowercase(next)
}

/// The end of the last line of `s`, at most 16 bytes long (enough for an enumerator), found
/// without scanning a long sentence from its start.
fn last_line_tail(s: &str) -> &str {
    let mut start = s.len().saturating_sub(16);
    while !s.is_char_boundary(start) {
        start -= 1;
    }
    let tail = &s[start..];
    match tail.rfind('\n') {
        Some(i) => &tail[i + 1..],
        None if start == 0 => tail,
        None => "",
    }
}

/// A break at a single line break between the whole `line` before it and the whole `next` line.
fn line_break_joins(line: &str, next: &str, profile: WrapProfile) -> bool {
    if starts_turn_or_item(next) {
        return false;
    }
    if ends_terminal(line) {
        return profile.wrapped && space_joins(line, next, false);
    }
    if starts_lowercase(next) {
        return true;
    }
    // In wrapped text a line much shorter than the wrap width is a heading or a last line.
    profile.wrapped && 2 * line.chars().count() >= profile.median_width
}

/// Pushes the range without its leading and trailing whitespace, if anything is left.
fn push_trimmed(text: &str, range: Range<usize>, spans: &mut Vec<Range<usize>>) {
    let s = &text[range.clone()];
    let lead = s.len() - s.trim_start().len();
    let trimmed = s.trim();
    if !trimmed.is_empty() {
        let start = range.start + lead;
        spans.push(start..start + trimmed.len());
    }
}
