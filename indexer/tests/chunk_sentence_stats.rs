//! Measurement, not a check (ignored by default): how docqa's sentence rules change UAX #29 on
//! every document of the evaluation data's QA files (`chunk_support::test_data`). Run with
//! `cargo test -p docqa-indexer --release --test chunk_sentence_stats -- --ignored --nocapture`.

use crate::chunk_support;

use docqa_indexer::chunk::sentences;
use unicode_segmentation::UnicodeSegmentation;

#[test]
#[ignore = "measurement; prints figures"]
fn sentence_rules_change_uax29_on_the_real_documents() {
    let (counter, name) = chunk_support::counter();
    eprintln!("token counter: {name}");
    for file in [
        "qmsum_val.jsonl",
        "fairytaleqa_test.jsonl",
        "squad2_articles_dev.jsonl",
        "zh_cmrc_needle.jsonl",
        "squality_dev.jsonl",
        "leval_dev.jsonl",
    ] {
        let Some(path) = chunk_support::test_data::evaluation_data(&format!("qa/{file}")) else {
            return;
        };
        let n = chunk_support::qa_len(&path);
        let (mut uax, mut ours, mut chars, mut over_budget, mut tokens) = (0, 0, 0, 0, 0);
        let start = std::time::Instant::now();
        let docs: Vec<_> = (0..n)
            .map(|i| chunk_support::qa_document(&path, i))
            .collect();
        for doc in &docs {
            uax += doc.text.unicode_sentences().count();
            let s = sentences(&doc.text);
            ours += s.len();
            chars += doc.char_len();
            for sentence in s {
                let t = counter.count_tokens(sentence);
                tokens += t;
                over_budget += usize::from(t > 256);
            }
        }
        eprintln!(
            "{file}: {} docs, {chars} chars, UAX#29 {uax} sentences, docqa {ours} sentences, \
             mean {:.1} tokens, {over_budget} over 256 tokens ({:.2} s)",
            docs.len(),
            tokens as f64 / ours.max(1) as f64,
            start.elapsed().as_secs_f64()
        );
    }
}
