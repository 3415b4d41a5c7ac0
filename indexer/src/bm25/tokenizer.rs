//! Mixed-script tokenisation for BM25: Latin-like text as words, CJK text segmented.
//!
//! The text is cut into runs of one script class. Runs of letters and digits that are not CJK
//! become one token each (as tantivy's `SimpleTokenizer` does); runs of CJK characters are
//! segmented either by jieba (dictionary + HMM, search mode) or into overlapping character
//! bigrams (Lucene's `CJKBigramFilter` scheme: bigrams only, a lone character as a unigram).
//! Lower-casing, English stop words and Snowball stemming are applied afterwards as tantivy
//! filters; they leave CJK tokens untouched.

use std::sync::OnceLock;

use jieba_rs::{Jieba, TokenizeMode};
use serde::{Deserialize, Serialize};
use tantivy::tokenizer::{
    Language, LowerCaser, RemoveLongFilter, Stemmer, StopWordFilter, TextAnalyzer, Token,
    TokenStream, Tokenizer,
};

/// How runs of Chinese (CJK) characters are split into index terms.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum ChineseSegmentation {
    /// jieba word segmentation in search mode (words plus their dictionary sub-words).
    #[default]
    Jieba,
    /// Overlapping character bigrams.
    Bigram,
}

impl ChineseSegmentation {
    /// The name under which the analyzer is registered in a tantivy index.
    pub fn tokenizer_name(self) -> &'static str {
        match self {
            ChineseSegmentation::Jieba => "docqa_jieba",
            ChineseSegmentation::Bigram => "docqa_bigram",
        }
    }

    /// The full analyzer: segmentation, then long-token removal, lower-casing, stop words, stemming.
    pub fn analyzer(self) -> TextAnalyzer {
        let mut builder = TextAnalyzer::builder(MixedScriptTokenizer::new(self))
            .filter(RemoveLongFilter::limit(40))
            .filter(LowerCaser)
            .dynamic();
        if let Some(stop) = StopWordFilter::new(Language::English) {
            builder = builder.filter_dynamic(stop);
        }
        builder
            .filter_dynamic(Stemmer::new(Language::English))
            .build()
    }
}

/// The process-wide jieba instance (its dictionary takes a moment to load, so it is shared).
fn jieba() -> &'static Jieba {
    static JIEBA: OnceLock<Jieba> = OnceLock::new();
    JIEBA.get_or_init(Jieba::new)
}

/// Whether `c` belongs to a script written without spaces (Han, kana, Hangul).
pub fn is_cjk(c: char) -> bool {
    matches!(c as u32,
        0x3400..=0x4DBF | 0x4E00..=0x9FFF | 0xF900..=0xFAFF | 0x20000..=0x2FA1F // Han
        | 0x3040..=0x30FF | 0x31F0..=0x31FF // kana
        | 0xAC00..=0xD7AF) // Hangul syllables
}

/// Script class of a character for run splitting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Class {
    Cjk,
    Word,
    Separator,
}

fn class(c: char) -> Class {
    if is_cjk(c) {
        Class::Cjk
    } else if c.is_alphanumeric() {
        Class::Word
    } else {
        Class::Separator
    }
}

/// Tokenizer that routes each run of script to the right segmenter.
#[derive(Clone)]
pub struct MixedScriptTokenizer {
    mode: ChineseSegmentation,
}

impl MixedScriptTokenizer {
    /// A tokenizer segmenting CJK runs with `mode`.
    pub fn new(mode: ChineseSegmentation) -> Self {
        Self { mode }
    }
}

/// Splits `text` into `(byte_start, byte_end, class)` runs, separators dropped.
fn script_runs(text: &str) -> Vec<(usize, usize, Class)> {
    let mut runs = Vec::new();
    let mut current: Option<(usize, Class)> = None;
    for (i, c) in text.char_indices() {
        let cl = class(c);
        match current {
            Some((_, prev)) if prev == cl => {}
            Some((start, prev)) => {
                if prev != Class::Separator {
                    runs.push((start, i, prev));
                }
                current = Some((i, cl));
            }
            None => current = Some((i, cl)),
        }
    }
    if let Some((start, cl)) = current
        && cl != Class::Separator
    {
        runs.push((start, text.len(), cl));
    }
    runs
}

/// Segments one CJK run starting at byte `base`, pushing `(start, end)` byte spans.
fn segment_cjk(run: &str, base: usize, mode: ChineseSegmentation, out: &mut Vec<(usize, usize)>) {
    match mode {
        ChineseSegmentation::Jieba => {
            for t in jieba().tokenize(run, TokenizeMode::Search, true) {
                out.push((base + t.byte_start, base + t.byte_end));
            }
        }
        ChineseSegmentation::Bigram => {
            let starts: Vec<usize> = run.char_indices().map(|(i, _)| i).collect();
            if starts.len() == 1 {
                out.push((base, base + run.len()));
                return;
            }
            for w in 0..starts.len() - 1 {
                let end = starts.get(w + 2).copied().unwrap_or(run.len());
                out.push((base + starts[w], base + end));
            }
        }
    }
}

/// All token spans of `text`, in order.
pub fn token_spans(text: &str, mode: ChineseSegmentation) -> Vec<(usize, usize)> {
    let mut spans = Vec::new();
    for (start, end, cl) in script_runs(text) {
        match cl {
            Class::Cjk => segment_cjk(&text[start..end], start, mode, &mut spans),
            _ => spans.push((start, end)),
        }
    }
    spans
}

impl Tokenizer for MixedScriptTokenizer {
    type TokenStream<'a> = VecTokenStream<'a>;

    fn token_stream<'a>(&'a mut self, text: &'a str) -> VecTokenStream<'a> {
        let tokens = token_spans(text, self.mode)
            .into_iter()
            .enumerate()
            .map(|(position, (from, to))| Token {
                offset_from: from,
                offset_to: to,
                position,
                text: text[from..to].to_string(),
                position_length: 1,
            })
            .collect();
        VecTokenStream {
            tokens,
            next: 0,
            _text: std::marker::PhantomData,
        }
    }
}

/// A token stream over tokens computed up front.
pub struct VecTokenStream<'a> {
    tokens: Vec<Token>,
    next: usize,
    _text: std::marker::PhantomData<&'a str>,
}

impl TokenStream for VecTokenStream<'_> {
    fn advance(&mut self) -> bool {
        self.next += 1;
        self.next <= self.tokens.len()
    }

    fn token(&self) -> &Token {
        &self.tokens[self.next - 1]
    }

    fn token_mut(&mut self) -> &mut Token {
        &mut self.tokens[self.next - 1]
    }
}

/// The index terms `analyzer` produces for `text` (used for queries and in tests).
pub fn analyze(analyzer: &mut TextAnalyzer, text: &str) -> Vec<String> {
    let mut stream = analyzer.token_stream(text);
    let mut terms = Vec::new();
    while stream.advance() {
        terms.push(stream.token().text.clone());
    }
    terms
}
