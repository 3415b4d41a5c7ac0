//! Budget behaviour with a counter whose counts are known by hand (one token per
//! whitespace-separated word, or per character): greedy filling, whole-sentence overlap, oversize
//! sentences split at clauses, then whitespace, then characters; and chunking speed.

use crate::chunk_support;

use docqa_indexer::{Chunk, ChunkerConfig, ParsedDocument, TokenCounter, chunk_document};

fn words(text: &str) -> usize {
    text.split_whitespace().count()
}

fn chars(text: &str) -> usize {
    text.chars().filter(|c| !c.is_whitespace()).count()
}

fn chunk(
    text: &str,
    counter: &dyn TokenCounter,
    max_tokens: usize,
    overlap_tokens: usize,
) -> Vec<Chunk> {
    let doc = ParsedDocument::from_text("t", text);
    chunk_document(
        &doc,
        counter,
        &ChunkerConfig {
            max_tokens,
            overlap_tokens,
        },
    )
}

fn texts(chunks: &[Chunk]) -> Vec<&str> {
    chunks.iter().map(|c| c.text.as_str()).collect()
}

#[test]
fn chunks_fill_the_budget_with_whole_sentences() {
    // Sentences of 3, 4, 2, 5 and 3 words.
    let text = "One two three. Four five six seven. Eight nine. Ten eleven twelve thirteen fourteen. Fifteen sixteen seventeen.";
    let got = chunk(text, &words, 9, 0);
    assert_eq!(
        texts(&got),
        [
            "One two three. Four five six seven. Eight nine.",
            "Ten eleven twelve thirteen fourteen. Fifteen sixteen seventeen."
        ]
    );
    assert_eq!(got[0].token_count, 9);
    assert_eq!(got[1].token_count, 8);
    assert!(got.iter().all(|c| !c.oversize_split));
}

#[test]
fn overlap_repeats_whole_sentences_within_its_budget() {
    let text = "One two three. Four five six seven. Eight nine. Ten eleven twelve thirteen fourteen. Fifteen sixteen seventeen.";
    let got = chunk(text, &words, 9, 4);
    assert_eq!(
        texts(&got),
        [
            "One two three. Four five six seven. Eight nine.",
            "Eight nine. Ten eleven twelve thirteen fourteen.",
            "Fifteen sixteen seventeen.",
        ]
    );
    // "Eight nine." (2 words) fits the overlap budget of 4 and is repeated; "Ten … fourteen."
    // (5 words) does not, so the third chunk starts fresh.
    assert_eq!(got[1].char_start, text.find("Eight").unwrap());
}

#[test]
fn an_oversize_sentence_is_split_at_clauses_and_marked() {
    let text = "Short one. The council met on Monday, the budget was debated at length, several amendments were rejected, and the final vote was postponed until the spring session. Short two.";
    let got = chunk(text, &words, 10, 0);
    assert!(
        got.iter().filter(|c| c.oversize_split).count() >= 3,
        "{:#?}",
        texts(&got)
    );
    for c in &got {
        assert!(c.token_count <= 10 && words(&c.text) == c.token_count as usize);
        assert!(
            c.text.ends_with(',') || c.text.ends_with('.'),
            "{:?}",
            c.text
        );
    }
    assert!(got[0].text.starts_with("Short one. The council"));
    assert!(
        !got[got.len() - 1].oversize_split,
        "the last sentence is whole"
    );
    assert_eq!(texts(&got).join(" "), text);
}

#[test]
fn an_oversize_chinese_sentence_is_split_at_full_width_commas() {
    let text = "曹操大宴群臣，命武将比试弓箭，众将纷纷上前，各显其能，场面十分热闹。";
    let got = chunk(text, &chars, 12, 0);
    assert!(
        got.len() >= 3 && got.iter().all(|c| c.oversize_split),
        "{:?}",
        texts(&got)
    );
    assert!(
        got[..got.len() - 1].iter().all(|c| c.text.ends_with('，')),
        "{:?}",
        texts(&got)
    );
    assert_eq!(texts(&got).concat(), text);
}

#[test]
fn a_sentence_without_clauses_falls_back_to_whitespace_then_characters() {
    let text = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu";
    let got = chunk(text, &words, 5, 0);
    assert_eq!(
        texts(&got),
        [
            "alpha beta gamma delta epsilon",
            "zeta eta theta iota kappa",
            "lambda mu"
        ]
    );
    let blob = "x".repeat(25);
    let got = chunk(&blob, &chars, 10, 0);
    assert_eq!(texts(&got), ["x".repeat(10), "x".repeat(10), "x".repeat(5)]);
    assert!(got.iter().all(|c| c.oversize_split && c.token_count <= 10));
}

#[test]
fn oversize_pieces_are_never_repeated_as_overlap() {
    let text = "a b c d e f g h i j k l. m n.";
    let got = chunk(text, &words, 5, 3);
    for pair in got.windows(2) {
        if pair[0].oversize_split {
            assert!(pair[1].char_start >= pair[0].char_end, "{:?}", texts(&got));
        }
    }
}

#[test]
fn a_megabyte_of_abbreviations_is_chunked_in_linear_time() {
    let text = "Dr. ".repeat(250_000);
    let start = std::time::Instant::now();
    let got = chunk(&text, &words, 256, 32);
    let secs = start.elapsed().as_secs_f64();
    assert!(got.iter().all(|c| c.oversize_split && c.token_count <= 256));
    assert_eq!(got.iter().map(|c| words(&c.text)).sum::<usize>(), 250_000);
    assert!(secs < 5.0, "{secs:.2} s for 1 MB");
}

#[test]
fn chunking_runs_at_several_megabytes_per_second() {
    // The SQuAD fixture's six articles, four times over: about half a megabyte.
    let path = chunk_support::test_data::fixture("qa/squad2_articles_dev.jsonl");
    let content = std::fs::read_to_string(&path).unwrap();
    let articles: Vec<String> = content
        .lines()
        .map(|l| {
            let record: serde_json::Value = serde_json::from_str(l).unwrap();
            record["text"].as_str().unwrap().to_owned()
        })
        .collect();
    let text = vec![articles.join("\n\n"); 4].join("\n\n");
    let doc = ParsedDocument::from_text("squad", text);
    let cheap = |t: &str| t.len() / 4;
    let start = std::time::Instant::now();
    let chunks = chunk_document(&doc, &cheap, &ChunkerConfig::default());
    let secs = start.elapsed().as_secs_f64();
    let mb_s = doc.text.len() as f64 / 1e6 / secs;
    eprintln!(
        "chunked {} bytes into {} chunks in {secs:.3} s: {mb_s:.1} MB/s",
        doc.text.len(),
        chunks.len()
    );
    if !cfg!(debug_assertions) {
        assert!(mb_s >= 3.0, "{mb_s:.1} MB/s");
    }
}
