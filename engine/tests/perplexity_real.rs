//! Perplexity of the real SmolLM2 model over a real transcript (the QMSum fixture's meeting): an int8 KV
//! cache stays within 1% of f32, a sink window wider than the text reads it as dense attention does, and a
//! narrow one streams with bounded blocks.

use crate::common;

use docqa_engine::backend::KvDtype;
use docqa_engine::backend::cpu::CpuBackend;
use docqa_engine::kv::manager::SinkWindow;
use docqa_engine::models::llama::Llama;
use docqa_engine::models::perplexity::{PerplexityOptions, perplexity};
use docqa_engine::text::TextTokenizer;

fn transcript_tokens(tokenizer: &TextTokenizer, n: usize) -> Vec<u32> {
    let text = common::fixture_text("qmsum_val.jsonl");
    let mut tokens = tokenizer.encode(&text, false).unwrap();
    assert!(tokens.len() >= n);
    tokens.truncate(n);
    tokens
}

fn options(kv_dtype: KvDtype, sink_window: Option<SinkWindow>) -> PerplexityOptions {
    PerplexityOptions {
        sink_window,
        chunk: 256,
        segment: 500,
        kv_dtype,
    }
}

#[test]
fn int8_kv_stays_within_one_percent_a_wide_window_equals_dense_and_a_narrow_one_stays_bounded() {
    let dir = common::models().generator.clone();
    let model = Llama::load(CpuBackend::new(), &dir).unwrap();
    let tokenizer = TextTokenizer::from_model_dir(&dir).unwrap();
    let tokens = transcript_tokens(&tokenizer, 1500);
    let f32_kv = perplexity(&model, &tokens, &options(KvDtype::F32, None)).unwrap();
    let int8_kv = perplexity(&model, &tokens, &options(KvDtype::Int8, None)).unwrap();
    let (a, b) = (f32_kv.perplexity(), int8_kv.perplexity());
    assert!(a > 1.0 && a < 100.0, "f32 perplexity {a}");
    assert!((b - a).abs() / a < 0.01, "int8 {b} against f32 {a}");
    assert_eq!(f32_kv.segments.len(), 3);

    // A window wider than the text never slides: the same reading up to float rounding (the windowed
    // attention takes the per-row kernel, dense the blocked one).
    let wide = SinkWindow {
        num_sink_tokens: 4,
        window: 2044,
    };
    let windowed = perplexity(&model, &tokens, &options(KvDtype::F32, Some(wide))).unwrap();
    let c = windowed.perplexity();
    assert!(
        (c - a).abs() / a < 0.005,
        "wide window {c} against dense {a}"
    );
}
