//! The embedder against the figures published for all-MiniLM-L6-v2 (sentence-transformers' README
//! similarity example): cosine similarities 0.6660 / 0.1046 / 0.1411, to within 1e-3.

use crate::common;

use docqa_engine::models::bert::{BertEmbedder, MAX_TOKENS};

fn embedder() -> BertEmbedder {
    BertEmbedder::load(&common::models().embedder).expect("load all-MiniLM-L6-v2")
}

fn cos(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

#[test]
fn minilm_reproduces_published_similarities() {
    let e = embedder();
    let texts = [
        "The weather is lovely today.",
        "It's so sunny outside!",
        "He drove to the stadium.",
    ];
    let v = e.embed(&texts).expect("embed");
    assert_eq!((v.len(), e.dim()), (3, 384));
    let got = [cos(&v[0], &v[1]), cos(&v[0], &v[2]), cos(&v[1], &v[2])];
    eprintln!("similarities {got:?}");
    for (g, want) in got.iter().zip([0.6660, 0.1046, 0.1411]) {
        assert!((g - want).abs() < 1e-3, "similarities {got:?}");
    }
}

#[test]
fn embeddings_are_unit_length_and_independent_of_batch_company() {
    let e = embedder();
    let alone = e.embed(&["This is an example sentence"]).expect("embed");
    let long = "word ".repeat(600);
    let batch = e
        .embed(&[
            "Each sentence is converted",
            "This is an example sentence",
            &long,
            "",
        ])
        .expect("embed");
    assert_eq!(batch.len(), 4);
    for v in &batch {
        assert!((cos(v, v) - 1.0).abs() < 1e-5);
    }
    // Packed with other texts (one truncated at the limit) the embedding is the same as alone.
    let diff = alone[0]
        .iter()
        .zip(&batch[1])
        .map(|(a, b)| (a - b).abs())
        .fold(0.0, f32::max);
    assert!(diff < 1e-5, "max difference {diff}");
    // Truncation at MAX_TOKENS (CLS + 254 words + SEP): 600 words embed like their first 254.
    let cut = "word ".repeat(MAX_TOKENS - 2);
    let truncated = e.embed(&[&cut]).expect("embed");
    let diff = truncated[0]
        .iter()
        .zip(&batch[2])
        .map(|(a, b)| (a - b).abs())
        .fold(0.0, f32::max);
    assert!(diff < 1e-5, "truncated text differs by {diff}");
    assert!(
        cos(&batch[0], &batch[1]) > 0.3,
        "the README pair is related: {}",
        cos(&batch[0], &batch[1])
    );
}
