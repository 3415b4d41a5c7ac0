//! Chunking real documents from the QA fixtures (`tests/fixtures/qa/`): a QMSum meeting transcript, a
//! FairytaleQA story (hard-wrapped lines), a SQuAD article and two Chinese 《三国演义》 needle documents;
//! and, when the evaluation data is there, all 30 needle documents of its full file.
//!
//! For every chunk: its span maps back to exactly its text; it starts and ends on sentence
//! boundaries (unless marked as an oversize split), which an independent check confirms (ends on
//! sentence-final punctuation or a line end, starts after one); its token count, recounted from
//! scratch with the test tokenizer, is within the budget; consecutive chunks leave no gap and
//! overlap by whole sentences within the overlap budget. See `chunk_support` for the tokenizer.

use crate::chunk_support;

use std::path::Path;

use docqa_indexer::chunk::sentence_spans;
use docqa_indexer::{Chunk, ChunkerConfig, ParsedDocument, TokenCounter, chunk_document};

/// Sentence-final punctuation, and closing quotes/brackets that may follow it.
const FINAL: &[char] = &['.', '?', '!', '。', '！', '？', '；', '…'];
const CLOSING: &[char] = &['"', '\'', ')', ']', '’', '”', '」', '』', '）', '】', '》'];

/// Figures gathered over the chunks of one document.
#[derive(Debug, Default)]
struct Stats {
    chunks: usize,
    oversize: usize,
    overlapping: usize,
    count_mismatches: usize,
    max_fresh: usize,
}

/// Byte offset of every character offset (plus the end).
fn char_to_byte(text: &str) -> Vec<usize> {
    text.char_indices()
        .map(|(i, _)| i)
        .chain([text.len()])
        .collect()
}

fn ends_sentence_independently(text: &str, byte_end: usize) -> bool {
    let before = text[..byte_end].trim_end_matches(CLOSING);
    before.ends_with(FINAL) || text[byte_end..].starts_with('\n') || byte_end == text.len()
}

fn starts_sentence_independently(text: &str, byte_start: usize) -> bool {
    let before = &text[..byte_start];
    let trimmed = before.trim_end();
    trimmed.is_empty()
        || before[trimmed.len()..].contains('\n')
        || trimmed.trim_end_matches(CLOSING).ends_with(FINAL)
}

/// Checks every invariant of the module header and returns the figures.
fn check(
    doc: &ParsedDocument,
    chunks: &[Chunk],
    counter: &dyn TokenCounter,
    cfg: &ChunkerConfig,
) -> Stats {
    let text = doc.text.as_str();
    let bytes = char_to_byte(text);
    let spans = sentence_spans(text);
    let starts: std::collections::HashSet<usize> = spans.iter().map(|r| r.start).collect();
    let ends: std::collections::HashSet<usize> = spans.iter().map(|r| r.end).collect();
    let mut stats = Stats {
        chunks: chunks.len(),
        ..Stats::default()
    };
    assert!(!chunks.is_empty());
    for (i, c) in chunks.iter().enumerate() {
        let (bs, be) = (bytes[c.char_start], bytes[c.char_end]);
        assert_eq!(c.ordinal as usize, i);
        assert_eq!(
            &text[bs..be],
            c.text,
            "chunk {i}: span does not map back to its text"
        );
        let via_chars: String = text
            .chars()
            .skip(c.char_start)
            .take(c.char_end - c.char_start)
            .collect();
        assert_eq!(via_chars, c.text);
        assert_eq!(c.page_start, doc.pages.page_of(c.char_start));
        assert_eq!(c.page_end, doc.pages.page_of(c.char_end - 1));
        let fresh = counter.count_tokens(&c.text);
        stats.max_fresh = stats.max_fresh.max(fresh);
        assert!(
            fresh <= cfg.max_tokens,
            "chunk {i} has {fresh} tokens: {:?}",
            c.text
        );
        assert!(c.token_count as usize <= cfg.max_tokens);
        if fresh != c.token_count as usize {
            stats.count_mismatches += 1;
            assert!(
                fresh.abs_diff(c.token_count as usize) <= 3,
                "chunk {i}: counted {} vs fresh {fresh}",
                c.token_count
            );
        }
        if c.oversize_split {
            stats.oversize += 1;
        } else {
            assert!(
                starts.contains(&bs) && ends.contains(&be),
                "chunk {i} cuts a sentence: {:?}",
                c.text
            );
            assert!(
                ends_sentence_independently(text, be),
                "chunk {i} ends mid-sentence: {:?}",
                c.text
            );
            assert!(
                starts_sentence_independently(text, bs),
                "chunk {i} starts mid-sentence: {:?}",
                c.text
            );
        }
        if i > 0 {
            check_pair(
                text,
                &bytes,
                &chunks[i - 1],
                c,
                &starts,
                counter,
                cfg,
                &mut stats,
            );
        }
    }
    assert_eq!(chunks[0].char_start, text[..spans[0].start].chars().count());
    assert_eq!(
        bytes[chunks[chunks.len() - 1].char_end],
        spans[spans.len() - 1].end
    );
    stats
}

/// Two consecutive chunks: progress, no gap, overlap of whole sentences within budget.
#[allow(clippy::too_many_arguments)]
fn check_pair(
    text: &str,
    bytes: &[usize],
    prev: &Chunk,
    next: &Chunk,
    starts: &std::collections::HashSet<usize>,
    counter: &dyn TokenCounter,
    cfg: &ChunkerConfig,
    stats: &mut Stats,
) {
    assert!(
        next.char_start > prev.char_start,
        "no progress at chunk {}",
        next.ordinal
    );
    if next.char_start >= prev.char_end {
        let gap = &text[bytes[prev.char_end]..bytes[next.char_start]];
        assert!(
            gap.trim().is_empty(),
            "text {gap:?} lost between chunks {} and {}",
            prev.ordinal,
            next.ordinal
        );
        return;
    }
    stats.overlapping += 1;
    let overlap = &text[bytes[next.char_start]..bytes[prev.char_end]];
    assert!(
        starts.contains(&bytes[next.char_start]),
        "overlap starts mid-sentence: {overlap:?}"
    );
    assert!(prev.text.ends_with(overlap) && next.text.starts_with(overlap));
    let tokens = counter.count_tokens(overlap);
    assert!(
        tokens <= cfg.overlap_tokens + 3,
        "overlap of {tokens} tokens: {overlap:?}"
    );
}

/// Chunks one document with the default configuration, checks it, prints the figures.
fn run(doc: &ParsedDocument, label: &str) -> Stats {
    let (counter, name) = chunk_support::counter();
    let cfg = ChunkerConfig::default();
    let chunks = chunk_document(doc, counter.as_ref(), &cfg);
    let stats = check(doc, &chunks, counter.as_ref(), &cfg);
    eprintln!("{label} ({name}): {} chars, {stats:?}", doc.char_len());
    stats
}

/// Chunks the first document of a QA fixture.
fn run_fixture(file: &str) -> Stats {
    run(&chunk_support::fixture_document(file, 0), file)
}

/// Chunks every document of a file of Chinese needle documents; token counts recounted from scratch
/// may differ from the chunker's in at most 1% of the chunks.
fn run_needle_documents(path: &Path) {
    let n = chunk_support::qa_len(path);
    let mut total = Stats::default();
    for i in 0..n {
        let s = run(
            &chunk_support::qa_document(path, i),
            &format!("zh_cmrc_needle[{i}]"),
        );
        total.chunks += s.chunks;
        total.oversize += s.oversize;
        total.overlapping += s.overlapping;
        total.count_mismatches += s.count_mismatches;
        total.max_fresh = total.max_fresh.max(s.max_fresh);
    }
    eprintln!("{}: {n} documents, {total:?}", path.display());
    assert!(n > 0 && total.chunks > 0, "{total:?}");
    assert!(total.count_mismatches * 100 <= total.chunks, "{total:?}");
}

#[test]
fn qmsum_transcript_chunks_respect_turns_sentences_and_budget() {
    let stats = run_fixture("qmsum_val.jsonl");
    assert!(
        stats.chunks > 20 && stats.overlapping > stats.chunks / 2,
        "{stats:?}"
    );
}

#[test]
fn fairytale_story_chunks_respect_wrapped_sentences_and_budget() {
    let stats = run_fixture("fairytaleqa_test.jsonl");
    assert_eq!(stats.oversize, 0, "{stats:?}");
}

#[test]
fn squad_article_chunks_respect_sentences_and_budget() {
    let stats = run_fixture("squad2_articles_dev.jsonl");
    assert_eq!(stats.oversize, 0, "{stats:?}");
}

#[test]
fn chinese_needle_document_chunks_respect_sentences_and_budget() {
    run_needle_documents(&chunk_support::test_data::fixture(
        "qa/zh_cmrc_needle.jsonl",
    ));
}

#[test]
fn every_chinese_needle_document_of_the_evaluation_data_chunks_within_sentences_and_budget() {
    if let Some(path) = chunk_support::test_data::evaluation_data("qa/zh_cmrc_needle.jsonl") {
        run_needle_documents(&path);
    }
}
