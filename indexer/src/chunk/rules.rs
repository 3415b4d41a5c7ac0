//! docqa's sentence rules on top of UAX #29: which characters end a sentence, which words end in
//! a period without ending a sentence, what starts a transcript turn or a list item, and whether
//! a document is hard-wrapped (line breaks inside sentences).

/// Characters that close a quotation or bracket and stay with the sentence they follow.
pub(crate) fn is_closing(c: char) -> bool {
    matches!(
        c,
        '"' | '\''
            | ')'
            | ']'
            | '}'
            | '’'
            | '”'
            | '»'
            | '›'
            | '」'
            | '』'
            | '）'
            | '】'
            | '》'
            | '〉'
            | '〕'
            | '］'
            | '｝'
            | '〗'
            | '〙'
            | '＂'
            | '＇'
    )
}

/// Opening brackets and quotes: UAX #29 lets them trail a sentence that ends without a space
/// (`。（`, `。“`); docqa moves them to the sentence they open.
pub(crate) fn is_opening(c: char) -> bool {
    matches!(
        c,
        '(' | '['
            | '{'
            | '‘'
            | '“'
            | '«'
            | '‹'
            | '「'
            | '『'
            | '（'
            | '【'
            | '《'
            | '〈'
            | '〔'
            | '［'
            | '｛'
            | '〖'
            | '〘'
    )
}

/// Characters that end a sentence (before any closing quotes or brackets).
pub(crate) fn is_terminal(c: char) -> bool {
    matches!(
        c,
        '.' | '?' | '!' | '。' | '！' | '？' | '；' | '…' | '．' | '｡' | '‼' | '⁇' | '⁈' | '⁉'
    )
}

/// True for Han ideographs, kana, Hangul and CJK punctuation.
pub(crate) fn is_cjk(c: char) -> bool {
    matches!(c as u32,
        0x3000..=0x303F | 0x3040..=0x30FF | 0x3400..=0x4DBF | 0x4E00..=0x9FFF | 0xAC00..=0xD7AF
            | 0xF900..=0xFAFF | 0xFF00..=0xFFEF | 0x20000..=0x2FA1F)
}

/// True when `s`, without trailing closing characters, ends with sentence-final punctuation.
pub(crate) fn ends_terminal(s: &str) -> bool {
    s.trim_end_matches(is_closing)
        .chars()
        .next_back()
        .is_some_and(is_terminal)
}

/// Abbreviations that precede a name or a number and almost never end a sentence.
const PREFIX_ABBREVIATIONS: &[&str] = &[
    "mr", "mrs", "ms", "messrs", "mme", "mlle", "dr", "prof", "st", "rev", "gen", "col", "capt",
    "lt", "sgt", "gov", "sen", "rep", "hon", "pres", "mt", "ft", "no", "nos", "fig", "figs", "eq",
    "eqs", "vol", "vols", "pp", "p", "ch", "sec", "art", "cf", "viz", "vs", "v", "e.g", "i.e",
    "approx", "ca", "jan", "feb", "mar", "apr", "jun", "jul", "aug", "sep", "sept", "oct", "nov",
    "dec", "dept", "est", "op", "ref", "resp",
];

/// Abbreviations that may also end a sentence: joined to the next sentence unless that starts
/// with a word that usually opens one (see [`starts_new_sentence`]).
const SUFFIX_ABBREVIATIONS: &[&str] = &[
    "etc", "inc", "ltd", "co", "corp", "jr", "sr", "bros", "al", "esq", "llc", "plc", "a.m", "p.m",
    "ph.d", "u.s", "u.k", "u.n", "e.u", "u.s.a", "d.c", "b.c", "a.d", "m.d", "b.a", "m.a", "ms.c",
];

/// Words that, capitalised after an ambiguous abbreviation, mean a new sentence has begun.
const SENTENCE_STARTERS: &[&str] = &[
    "The", "A", "An", "It", "He", "She", "They", "We", "I", "You", "In", "On", "At", "This",
    "That", "These", "Those", "There", "But", "And", "Or", "So", "However", "His", "Her", "Their",
    "Its", "Our", "My", "As", "After", "Before", "When", "While", "If", "For", "Since", "Although",
    "Then", "Thus", "Yet", "What", "Why", "How", "Who", "Where", "Some", "Many", "Most", "All",
    "Each", "No", "Not", "One", "Two", "During", "Because", "Also", "Today", "Later",
];

/// The word before a final period: the run of letters and inner periods (`"U.S."` → `"U.S"`).
fn word_before_period(s: &str) -> Option<&str> {
    let body = s.strip_suffix('.')?;
    let start = body
        .char_indices()
        .rev()
        .find(|&(_, c)| !(c.is_alphabetic() || c == '.'))
        .map_or(0, |(i, c)| i + c.len_utf8());
    let word = &body[start..];
    (!word.is_empty()).then_some(word)
}

/// How a period after the last word of `before` relates to the next sentence `next`.
pub(crate) fn abbreviation_joins(before: &str, next: &str) -> bool {
    let Some(word) = word_before_period(before.trim_end()) else {
        return false;
    };
    let lower = word.to_lowercase();
    if PREFIX_ABBREVIATIONS.contains(&lower.as_str()) {
        return true;
    }
    let initial = word.chars().count() == 1 && word.chars().all(char::is_uppercase);
    let dotted = word.contains('.') && word.split('.').all(|p| p.chars().count() <= 2);
    if initial || dotted || SUFFIX_ABBREVIATIONS.contains(&lower.as_str()) {
        return !starts_new_sentence(next);
    }
    false
}

/// True when `next` opens with a capitalised word that usually starts a sentence.
fn starts_new_sentence(next: &str) -> bool {
    let word: &str = next
        .trim_start_matches(|c: char| c.is_whitespace() || is_closing(c))
        .split(|c: char| !c.is_alphanumeric())
        .next()
        .unwrap_or("");
    SENTENCE_STARTERS.contains(&word)
}

/// True when `s` starts with a lowercase letter (after opening punctuation).
pub(crate) fn starts_lowercase(s: &str) -> bool {
    s.trim_start_matches(|c: char| c.is_whitespace() || matches!(c, '(' | '"' | '\'' | '‘' | '“'))
        .chars()
        .next()
        .is_some_and(char::is_lowercase)
}

/// True when a line is a bare enumerator such as `1.`, `iv.` or `a)`.
pub(crate) fn is_enumerator(s: &str) -> bool {
    let s = s.trim();
    let Some(body) = s.strip_suffix(['.', ')']) else {
        return false;
    };
    let body = body.trim_start_matches('(');
    !body.is_empty()
        && body.chars().count() <= 4
        && (body.chars().all(|c| c.is_ascii_digit())
            || body
                .chars()
                .all(|c| matches!(c, 'i' | 'v' | 'x' | 'I' | 'V' | 'X'))
            || (body.chars().count() == 1 && body.chars().all(char::is_alphabetic)))
}

/// True when a line opens a transcript turn (`Speaker: …`, `PhD A: …`, `张三：…`) or a list item.
pub(crate) fn starts_turn_or_item(line: &str) -> bool {
    let line = line.trim_start();
    if ["- ", "* ", "• ", "– ", "· "]
        .iter()
        .any(|m| line.starts_with(m))
    {
        return true;
    }
    let head = line.split_whitespace().next().unwrap_or("");
    if is_enumerator(head) && head.len() < line.len() {
        return true;
    }
    is_speaker_label(line)
}

/// `Name:` at the start of a line: at most 80 characters before the colon, the part before any
/// parenthesis at most 6 words, each capitalised (or a number); or up to 10 CJK characters
/// before a full-width colon.
fn is_speaker_label(line: &str) -> bool {
    if let Some((label, _)) = line.split_once('：') {
        let n = label.chars().count();
        if (1..=10).contains(&n) && label.chars().all(|c| is_cjk(c) || c.is_alphanumeric()) {
            return true;
        }
    }
    let Some(colon) = line.find(": ") else {
        return false;
    };
    let label = &line[..colon];
    if label.is_empty() || label.len() > 80 {
        return false;
    }
    let name = label.split('(').next().unwrap_or("");
    let words: Vec<&str> = name.split_whitespace().collect();
    !words.is_empty()
        && words.len() <= 6
        && words.iter().all(|w| {
            w.chars()
                .next()
                .is_some_and(|c| c.is_uppercase() || c.is_ascii_digit())
        })
}

/// Whether a document is hard-wrapped, judged from its lines: among lines that end without
/// sentence-final punctuation and are followed by another line, the share whose next line
/// continues the sentence (starts lowercase, or CJK runs on from CJK). `median_width` is the
/// median length of those lines, used to tell headings (short) from wrapped lines.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct WrapProfile {
    pub wrapped: bool,
    pub median_width: usize,
}

impl WrapProfile {
    /// At least this many candidate lines before calling a document wrapped.
    const MIN_CANDIDATES: usize = 4;
    /// Share of continuing lines from which a document counts as wrapped.
    const MIN_SHARE: f64 = 0.3;

    pub(crate) fn of(text: &str) -> Self {
        let mut widths = Vec::new();
        let mut continuing = 0usize;
        let mut lines = text.split('\n').peekable();
        while let Some(line) = lines.next() {
            let Some(next) = lines.peek() else { break };
            if line.is_empty() || next.is_empty() || ends_terminal(line) {
                continue;
            }
            widths.push(line.chars().count());
            let cjk_run = line.chars().next_back().is_some_and(is_cjk)
                && next.chars().next().is_some_and(is_cjk);
            if starts_lowercase(next) || cjk_run {
                continuing += 1;
            }
        }
        if widths.len() < Self::MIN_CANDIDATES {
            return Self::default();
        }
        widths.sort_unstable();
        Self {
            wrapped: continuing as f64 >= Self::MIN_SHARE * widths.len() as f64,
            median_width: widths[widths.len() / 2],
        }
    }
}
