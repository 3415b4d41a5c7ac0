//! `docqa_engine::synth` on tiny custom shapes: the config it writes reads back through the engine's
//! parser, a small shard limit gives several shards and an index covering every tensor, the CPU backend
//! loads the result and computes finite logits, the tokenizer loads, and a seed repeats its files byte for
//! byte.

use std::collections::BTreeSet;
use std::path::Path;

use docqa_engine::backend::KvDtype;
use docqa_engine::backend::cpu::CpuBackend;
use docqa_engine::config::LlamaConfig;
use docqa_engine::models::LogitsMode;
use docqa_engine::models::generate::SingleSequence;
use docqa_engine::models::llama::Llama;
use docqa_engine::synth::named::{MISTRAL_7B, QWEN_2_5_7B};
use docqa_engine::synth::{Shape, synthesize};
use docqa_engine::test_rng::Rng;
use docqa_engine::text::TextTokenizer;
use docqa_engine::weights::Weights;

/// Qwen2.5-7B's family and config fields at a width a test can afford.
fn tiny_qwen() -> Shape {
    Shape {
        name: "tiny-qwen2",
        hidden: 64,
        intermediate: 96,
        layers: 3,
        heads: 4,
        kv_heads: 2,
        vocab: 512,
        special_tokens: &[
            (300, "<|endoftext|>"),
            (301, "<|im_start|>"),
            (302, "<|im_end|>"),
        ],
        bos: 300,
        eos: &[302],
        ..QWEN_2_5_7B
    }
}

/// Every tensor name in the safetensors files of `dir`, read from their headers.
fn stored_names(dir: &Path) -> BTreeSet<String> {
    let files: Vec<_> = std::fs::read_dir(dir)
        .expect("read dir")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "safetensors"))
        .collect();
    let weights = Weights::open_files(&files).expect("open shards");
    weights.names().map(str::to_owned).collect()
}

#[test]
fn a_synthesized_config_reads_back_with_the_shape_it_was_written_from() {
    let dir = tempfile::tempdir().expect("tempdir");
    let shape = tiny_qwen();
    synthesize(dir.path(), &shape, &mut Rng::seeded(1), u64::MAX).expect("synthesize");
    let c = LlamaConfig::load(&dir.path().join("config.json")).expect("config loads");
    assert_eq!(c.architecture, "Qwen2ForCausalLM");
    assert_eq!(
        (c.hidden_size, c.intermediate_size, c.num_hidden_layers),
        (64, 96, 3)
    );
    assert_eq!(
        (c.num_attention_heads, c.num_key_value_heads, c.head_dim),
        (4, 2, 16)
    );
    assert_eq!((c.rms_norm_eps, c.rope_theta), (1e-6, 1_000_000.0));
    // Qwen2.5 publishes a sliding_window with use_sliding_window false: no layer slides.
    assert_eq!((c.max_position_embeddings, c.sliding_window), (32768, None));
    assert_eq!(c.sliding_layers, vec![false; 3]);
    assert_eq!(
        (c.vocab_size, c.tie_word_embeddings, c.qkv_bias),
        (512, false, true)
    );
    assert_eq!(
        (c.bos_token_id, c.eos_token_ids.clone()),
        (Some(300), vec![302])
    );
    assert!(dir.path().join("model.safetensors").exists());
    assert!(!dir.path().join("model.safetensors.index.json").exists());
}

#[test]
fn a_small_shard_limit_writes_several_shards_and_an_index_covering_every_tensor() {
    let dir = tempfile::tempdir().expect("tempdir");
    let shape = tiny_qwen();
    // The embeddings alone are 64 KiB; 40 KB per shard splits the model several ways.
    synthesize(dir.path(), &shape, &mut Rng::seeded(2), 40_000).expect("synthesize");
    let index: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.path().join("model.safetensors.index.json")).expect("index"),
    )
    .expect("index is JSON");
    let map = index["weight_map"].as_object().expect("weight_map");
    let shards: BTreeSet<&str> = map.values().filter_map(|v| v.as_str()).collect();
    assert!(shards.len() >= 3, "{shards:?}");
    let n = shards.len();
    for (i, shard) in shards.iter().enumerate() {
        assert_eq!(*shard, format!("model-{:05}-of-{n:05}.safetensors", i + 1));
    }
    let indexed: BTreeSet<String> = map.keys().cloned().collect();
    let wanted: BTreeSet<String> = shape.tensors().into_iter().map(|t| t.name).collect();
    assert_eq!(indexed, wanted);
    assert_eq!(stored_names(dir.path()), wanted);
    assert!(wanted.contains("lm_head.weight"));
    assert!(wanted.contains("model.layers.2.self_attn.v_proj.bias"));
    let total: u64 = shape.parameters() * 2;
    assert_eq!(index["metadata"]["total_size"].as_u64(), Some(total));
    assert!(!dir.path().join("model.safetensors").exists());
}

fn finite_logits_after_load(shape: &Shape, shard_bytes: u64) {
    let dir = tempfile::tempdir().expect("tempdir");
    synthesize(dir.path(), shape, &mut Rng::seeded(3), shard_bytes).expect("synthesize");
    let model = Llama::load(CpuBackend::new(), dir.path()).expect("the CPU backend loads it");
    let tokenizer = TextTokenizer::from_model_dir(dir.path()).expect("tokenizer loads");
    let prompt = tokenizer.encode("hello, world", false).expect("encode");
    assert_eq!(prompt.len(), "hello, world".len(), "one token per byte");
    assert!(prompt.iter().all(|&id| (id as usize) < shape.vocab));
    assert_eq!(tokenizer.eos_token_ids(), shape.eos);
    assert_eq!(tokenizer.vocab_size(), shape.vocab, "every id has a token");
    let mut seq = SingleSequence::new(&model, 64, 64, KvDtype::F32).expect("driver");
    let logits = seq.feed(&prompt, LogitsMode::All).expect("forward");
    assert_eq!(logits.len(), prompt.len() * shape.vocab);
    assert!(logits.iter().all(|x| x.is_finite()));
    let spread = logits.iter().fold(0f32, |m, x| m.max(x.abs()));
    assert!(spread > 0.0, "logits are not all zero");
}

#[test]
fn a_sharded_qwen2_shape_loads_on_the_cpu_and_gives_finite_logits() {
    finite_logits_after_load(&tiny_qwen(), 40_000);
}

#[test]
fn a_mistral_shape_with_tied_embeddings_loads_on_the_cpu_and_gives_finite_logits() {
    let shape = Shape {
        name: "tiny-mistral",
        hidden: 96,
        intermediate: 128,
        layers: 2,
        heads: 6,
        kv_heads: 2,
        vocab: 300,
        tied: true,
        ..MISTRAL_7B
    };
    finite_logits_after_load(&shape, u64::MAX);
}

#[test]
fn the_same_seed_writes_byte_identical_files_and_another_seed_does_not() {
    let shape = tiny_qwen();
    let write = |seed: u64| {
        let dir = tempfile::tempdir().expect("tempdir");
        let written =
            synthesize(dir.path(), &shape, &mut Rng::seeded(seed), 40_000).expect("synthesize");
        let files: Vec<(String, Vec<u8>)> = written
            .files
            .iter()
            .map(|p| {
                let name = p.file_name().expect("name").to_string_lossy().into_owned();
                (name, std::fs::read(p).expect("read"))
            })
            .collect();
        files
    };
    let (a, b, c) = (write(7), write(7), write(8));
    assert!(a.len() > 3);
    assert_eq!(a, b);
    let shard = |files: &[(String, Vec<u8>)]| {
        let first = files
            .iter()
            .find(|(name, _)| name.ends_with(".safetensors"));
        first.expect("a shard").1.clone()
    };
    assert_ne!(shard(&a), shard(&c));
}
