//! Shared helpers of the chunking tests: the token counter and the real documents.
//!
//! Token counter, first match wins:
//! 1. the generator's tokenizer, `$DOCQA_MODELS_DIR/smollm2-135m-instruct/tokenizer.json`
//!    (default base directory `~/.cache/docqa/models`);
//! 2. any `tokenizer.json` named by `$DOCQA_TEST_TOKENIZER` (padding and truncation turned off);
//! 3. [`ApproxCounter`], a documented stand-in: one token per CJK character, per punctuation
//!    mark, and per started group of 4 characters of each run of letters and digits.
//!
//! Documents come from the QA fixtures (`tests/fixtures/qa/`), or from the full QA files of the
//! evaluation data for the tests that read every document (see [`test_data`]).

#![allow(dead_code)]

pub use crate::common::test_data;

use std::path::{Path, PathBuf};

use docqa_indexer::{ParsedDocument, TokenCounter, parse_document};

/// A Hugging Face tokenizer counting tokens without special tokens.
pub struct HfCounter(tokenizers::Tokenizer);

impl TokenCounter for HfCounter {
    fn count_tokens(&self, text: &str) -> usize {
        self.0.encode(text, false).map_or(0, |e| e.len())
    }
}

/// The documented fallback counter (see the module header).
pub struct ApproxCounter;

impl TokenCounter for ApproxCounter {
    fn count_tokens(&self, text: &str) -> usize {
        let mut tokens = 0;
        let mut run = 0usize;
        for c in text.chars() {
            if c.is_alphanumeric() && !is_cjk(c) {
                run += 1;
                continue;
            }
            tokens += run.div_ceil(4);
            run = 0;
            if !c.is_whitespace() {
                tokens += 1;
            }
        }
        tokens + run.div_ceil(4)
    }
}

fn is_cjk(c: char) -> bool {
    matches!(c as u32, 0x3000..=0x30FF | 0x3400..=0x9FFF | 0xAC00..=0xD7AF | 0xF900..=0xFAFF | 0xFF00..=0xFFEF)
}

/// The generator's tokenizer file, if present.
fn generator_tokenizer_path() -> Option<PathBuf> {
    let base = std::env::var_os("DOCQA_MODELS_DIR")
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/docqa/models"))
        })?;
    let path = base.join("smollm2-135m-instruct/tokenizer.json");
    path.is_file().then_some(path)
}

/// Loads a tokenizer with padding and truncation off.
fn load(path: &PathBuf) -> Option<HfCounter> {
    let mut tok = tokenizers::Tokenizer::from_file(path).ok()?;
    tok.with_padding(None);
    tok.with_truncation(None).ok()?;
    Some(HfCounter(tok))
}

/// The counter the tests use, and its name (printed by the tests).
pub fn counter() -> (Box<dyn TokenCounter>, String) {
    if let Some(path) = generator_tokenizer_path()
        && let Some(c) = load(&path)
    {
        return (
            Box::new(c),
            format!("generator tokenizer {}", path.display()),
        );
    }
    if let Some(path) = std::env::var_os("DOCQA_TEST_TOKENIZER").map(PathBuf::from)
        && let Some(c) = load(&path)
    {
        return (
            Box::new(c),
            format!("DOCQA_TEST_TOKENIZER {}", path.display()),
        );
    }
    (
        Box::new(ApproxCounter),
        "ApproxCounter (no tokenizer.json found)".to_owned(),
    )
}

/// The `i`-th document of a QA file (fixture or evaluation data), parsed as a plain-text upload.
pub fn qa_document(path: &Path, i: usize) -> ParsedDocument {
    let content =
        std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let line = content
        .lines()
        .nth(i)
        .expect("document index within the file");
    let record: serde_json::Value = serde_json::from_str(line).expect("a JSON record");
    let text = record["text"].as_str().expect("a text field");
    let title = record["title"].as_str().unwrap_or("doc");
    let name = format!("{title}.txt");
    parse_document(text.as_bytes(), Some(&name), Some("text/plain")).expect("parses")
}

/// The `i`-th document of a QA fixture, `tests/fixtures/qa/<file>`.
pub fn fixture_document(file: &str, i: usize) -> ParsedDocument {
    qa_document(&test_data::fixture(&format!("qa/{file}")), i)
}

/// Number of documents in a QA file.
pub fn qa_len(path: &Path) -> usize {
    std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .lines()
        .count()
}
