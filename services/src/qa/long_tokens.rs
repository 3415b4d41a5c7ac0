//! Tokens of the long path's prompts, with the document part tokenized once. A long prompt is the chat
//! template around the scope's documents and then the question; the part up to `Question:` is the same
//! for every question on those documents, so its tokens are kept (a small LRU keyed by the SHA-256 of
//! the documents' ids and the text) and a question on a document read before tokenizes only itself.
//! This matters once the document's KV is cached: tokenizing a 6,000-token document took as long as
//! computing the question. Document ids belong to one tenant, so, like the KV prefix cache, no tenant
//! can tell from timing what another has read.
//!
//! The split is at a pre-token boundary: the byte-level pre-tokenizer starts a new piece at `:` and at
//! the space before the question's first word, so the two parts' tokens are exactly the whole prompt's
//! tokens (tested against the real tokenizer on the questions of the QA fixtures and, when it is there,
//! of the evaluation data). A SentencePiece tokenizer has no pre-tokenizer and puts a `▁` before every
//! text it encodes, so the question is tokenized after the prefix's last line and that line's tokens
//! are taken off ([`continuation`]); tested the same way with a trained SentencePiece vocabulary.

use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex};

use docqa_engine::text::{ChatMessage, TextTokenizer};

use super::conversation::Turn;
use lru::LruCache;
use sha2::{Digest, Sha256};

/// The long path's chat: the system message, then `documents` followed by a space and the first
/// question (the conversation's first, else `question`), then each earlier answer and the question after
/// it.
fn long_chat(system: &str, documents: &str, turns: &[Turn], question: &str) -> Vec<ChatMessage> {
    let mut chat = vec![ChatMessage::new("system", system)];
    let first = turns.first().map_or(question, |t| t.question.as_str());
    chat.push(ChatMessage::new("user", format!("{documents} {first}")));
    for (i, t) in turns.iter().enumerate() {
        chat.push(ChatMessage::new("assistant", t.answer.as_str()));
        let next = turns.get(i + 1).map_or(question, |n| n.question.as_str());
        chat.push(ChatMessage::new("user", next));
    }
    chat
}

/// Document prefixes kept.
const CAPACITY: usize = 32;

/// Bytes of the prefix's end that [`continuation`] tokenizes again before the rest.
const TAIL_BYTES: usize = 64;

/// The tokens of `rest` as they follow `prefix` in the whole text: `rest` is tokenized after the end of
/// `prefix` (its last line, at most [`TAIL_BYTES`]) and that end's own tokens are taken off again, so a
/// tokenizer that puts something before every text it encodes (SentencePiece's `▁`) puts it only once,
/// before the prefix. Where a token spans the seam, `rest` is tokenized alone.
fn continuation(
    tokenizer: &TextTokenizer,
    prefix: &str,
    rest: &str,
) -> docqa_engine::Result<Vec<u32>> {
    let mut start = prefix.len().saturating_sub(TAIL_BYTES);
    while !prefix.is_char_boundary(start) {
        start += 1;
    }
    let tail = &prefix[start..];
    let tail = tail.rsplit_once('\n').map_or(tail, |(_, line)| line);
    if tail.is_empty() {
        return tokenizer.encode(rest, false);
    }
    let head = tokenizer.encode(tail, false)?;
    let joined = tokenizer.encode(&format!("{tail}{rest}"), false)?;
    match joined.strip_prefix(head.as_slice()) {
        Some(after) => Ok(after.to_vec()),
        None => tokenizer.encode(rest, false),
    }
}

/// Marks where the question goes while the template is rendered (no document or question holds it).
const QUESTION_MARK: &str = "\u{0}docqa-question\u{0}";

/// The cache of document-prefix tokens.
pub struct LongPromptTokens {
    prefixes: Mutex<LruCache<[u8; 32], Arc<Vec<u32>>>>,
}

impl Default for LongPromptTokens {
    fn default() -> Self {
        let capacity = NonZeroUsize::new(CAPACITY).unwrap_or(NonZeroUsize::MIN);
        LongPromptTokens {
            prefixes: Mutex::new(LruCache::new(capacity)),
        }
    }
}

impl LongPromptTokens {
    /// The tokens of the chat prompt whose system message is `system` and whose user message is
    /// `documents` (ending in `Question:`), a space and `question`; the documents' tokens come from
    /// the cache when the documents with ids `document_ids` were read before. After earlier `turns`,
    /// the first turn's question follows the documents, and each answer and next question follow as
    /// chat messages, so the document part is the same.
    pub fn encode(
        &self,
        tokenizer: &TextTokenizer,
        document_ids: &[&str],
        system: &str,
        documents: &str,
        turns: &[Turn],
        question: &str,
    ) -> docqa_engine::Result<Vec<u32>> {
        let text = tokenizer.apply_chat_template(
            &long_chat(
                system,
                &format!("{documents}{QUESTION_MARK}"),
                turns,
                question,
            ),
            true,
        )?;
        let Some(at) = text.find(QUESTION_MARK) else {
            // A template that rewrites the message: tokenize the whole prompt, uncached.
            let whole = long_chat(system, documents, turns, question);
            return tokenizer.encode(&tokenizer.apply_chat_template(&whole, true)?, false);
        };
        let (prefix, rest) = (&text[..at], &text[at + QUESTION_MARK.len()..]);
        let mut tokens = self
            .prefix_tokens(tokenizer, document_ids, prefix)?
            .as_ref()
            .clone();
        tokens.extend(continuation(tokenizer, prefix, rest)?);
        Ok(tokens)
    }

    fn prefix_tokens(
        &self,
        tokenizer: &TextTokenizer,
        document_ids: &[&str],
        prefix: &str,
    ) -> docqa_engine::Result<Arc<Vec<u32>>> {
        let mut hasher = Sha256::new();
        for id in document_ids {
            hasher.update(id.as_bytes());
            hasher.update([0]);
        }
        hasher.update(prefix.as_bytes());
        let key: [u8; 32] = hasher.finalize().into();
        if let Some(hit) = self.lock().get(&key) {
            return Ok(Arc::clone(hit));
        }
        let tokens = Arc::new(tokenizer.encode(prefix, false)?);
        self.lock().put(key, Arc::clone(&tokens));
        Ok(tokens)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, LruCache<[u8; 32], Arc<Vec<u32>>>> {
        self.prefixes.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Document prefixes held now.
    #[cfg(test)]
    fn held(&self) -> usize {
        self.lock().len()
    }
}

#[cfg(test)]
#[path = "../../../tests/support/test_data.rs"]
mod test_data;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::qa::test_tokenizers::{generator as tokenizer, sentencepiece};

    fn whole(t: &TextTokenizer, system: &str, documents: &str, question: &str) -> Vec<u32> {
        let messages = [
            ChatMessage::new("system", system),
            ChatMessage::new("user", format!("{documents} {question}")),
        ];
        t.encode(&t.apply_chat_template(&messages, true).unwrap(), false)
            .unwrap()
    }

    /// Every document and question of the QA files in `qa_dir`.
    fn datasets(qa_dir: &std::path::Path) -> Vec<(String, Vec<String>)> {
        let mut out = Vec::new();
        for entry in std::fs::read_dir(qa_dir).expect("the QA files") {
            let text = std::fs::read_to_string(entry.unwrap().path()).unwrap();
            for line in text.lines() {
                let doc: serde_json::Value = serde_json::from_str(line).unwrap();
                let questions = doc["questions"].as_array().unwrap();
                let qs = questions
                    .iter()
                    .map(|q| q["question"].as_str().unwrap().trim().to_string());
                out.push((doc["text"].as_str().unwrap().to_string(), qs.collect()));
            }
        }
        out
    }

    /// Checks the split against the whole prompt for each document's first 40 questions and a few
    /// unusual ones; returns how many were checked.
    fn check_every_question(t: &TextTokenizer, qa_dir: &std::path::Path) -> usize {
        let cache = LongPromptTokens::default();
        let system = "Answer from the document.";
        let mut checked = 0;
        for (text, questions) in datasets(qa_dir) {
            // The document's start and end are enough to exercise the boundary, and keep this quick.
            let excerpt: String = text.chars().take(400).collect();
            let documents = format!("Document: a title\n\n{}\n\nQuestion:", excerpt.trim());
            let unusual = [
                "",
                "2010年？",
                "(a) or (b)?",
                "\"Quoted\" start",
                "\nnewline first",
            ];
            for q in questions.iter().take(40).map(String::as_str).chain(unusual) {
                assert_eq!(
                    cache.encode(t, &["d"], system, &documents, &[], q).unwrap(),
                    whole(t, system, &documents, q),
                    "{q:?}"
                );
                checked += 1;
            }
        }
        checked
    }

    #[test]
    fn the_split_prompt_tokenizes_exactly_like_the_whole_prompt_for_every_fixture_question() {
        let checked = check_every_question(&tokenizer(), &super::test_data::fixture("qa"));
        assert!(checked > 150, "{checked} questions checked");
    }

    #[test]
    fn with_a_sentencepiece_tokenizer_the_split_prompt_tokenizes_like_the_whole_prompt_too() {
        let t = sentencepiece();
        let checked = check_every_question(&t, &super::test_data::fixture("qa"));
        assert!(checked > 150, "{checked} questions checked");
    }

    #[test]
    fn the_split_prompt_tokenizes_exactly_like_the_whole_prompt_for_every_dataset_question() {
        if let Some(qa_dir) = super::test_data::evaluation_data("qa") {
            let checked = check_every_question(&tokenizer(), &qa_dir);
            assert!(checked > 1000, "{checked} questions checked");
        }
    }

    #[test]
    fn a_second_question_on_the_same_documents_reuses_their_tokens_and_other_documents_do_not() {
        let t = tokenizer();
        let cache = LongPromptTokens::default();
        let documents = "Document: Paris\n\nParis is the capital of France.\n\nQuestion:";
        let first = cache
            .encode(&t, &["a"], "S", documents, &[], "What is Paris?")
            .unwrap();
        let second = cache
            .encode(&t, &["a"], "S", documents, &[], "Which country?")
            .unwrap();
        assert_eq!(cache.held(), 1);
        let shared = first
            .iter()
            .zip(&second)
            .take_while(|(a, b)| a == b)
            .count();
        assert!(
            shared > 10 && shared < first.len(),
            "{shared} of {}",
            first.len()
        );
        let rome = "Document: Rome\n\nRome.\n\nQuestion:";
        cache.encode(&t, &["b"], "S", rome, &[], "Where?").unwrap();
        assert_eq!(cache.held(), 2);
        // The same text under another tenant's document id is tokenized for that document anew.
        let other = cache
            .encode(&t, &["c"], "S", documents, &[], "Which country?")
            .unwrap();
        assert_eq!(other, second);
        assert_eq!(cache.held(), 3);
    }

    #[test]
    fn a_follow_up_keeps_the_document_tokens_and_tokenizes_like_the_whole_conversation() {
        let t = tokenizer();
        let cache = LongPromptTokens::default();
        let documents =
            "Document: Lease\n\nThe lease ends in 2031. The rent is 4,100 euros.\n\nQuestion:";
        let first = cache
            .encode(&t, &["a"], "S", documents, &[], "When does it end?")
            .unwrap();
        let turns = [Turn {
            question: "When does it end?".into(),
            answer: "In 2031.".into(),
        }];
        let follow_up = cache
            .encode(&t, &["a"], "S", documents, &turns, "And the rent?")
            .unwrap();
        assert_eq!(cache.held(), 1);
        assert_eq!(follow_up[..first.len() - 3], first[..first.len() - 3]);
        let chat = long_chat("S", documents, &turns, "And the rent?");
        let whole = t
            .encode(&t.apply_chat_template(&chat, true).unwrap(), false)
            .unwrap();
        assert_eq!(follow_up, whole);
        let text = t.decode(&follow_up).unwrap();
        let (answer, question) = (
            text.find("In 2031.").unwrap(),
            text.find("And the rent?").unwrap(),
        );
        assert!(answer < question, "{text}");
    }
}
