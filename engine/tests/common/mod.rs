//! Helpers shared by the engine's integration tests: a seeded random source that is fresh per run
//! (the seed is printed so a failure can be replayed with `DOCQA_TEST_SEED`), the real model
//! directories (fetched once if missing), the texts of the QA fixtures ([`test_data`]), and a writer
//! for tiny random Llama checkpoints.
#![allow(dead_code)]

#[path = "../../../tests/support/test_data.rs"]
pub mod test_data;

use std::path::Path;
use std::sync::OnceLock;

use docqa_engine::fetch::{self, ModelPaths};

pub use docqa_engine::test_rng::Rng;

/// Largest absolute difference between two logit rows (or any two equal-length slices).
pub fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len(), "compared slices differ in length");
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

/// The model directories, fetched (and checked) once per test binary with
/// [`docqa_engine::fetch::ensure_models`] under `$DOCQA_MODELS_DIR` or the default cache.
pub fn models() -> &'static ModelPaths {
    static PATHS: OnceLock<ModelPaths> = OnceLock::new();
    PATHS.get_or_init(|| {
        let dir = fetch::default_models_dir();
        fetch::ensure_models(&dir, &fetch::NoProgress)
            .unwrap_or_else(|e| panic!("models unavailable in {}: {e}", dir.display()))
    })
}

/// The text of the first document of the QA fixture `tests/fixtures/qa/<file>`.
pub fn fixture_text(file: &str) -> String {
    let path = test_data::fixture(&format!("qa/{file}"));
    let content = std::fs::read_to_string(&path).unwrap();
    let first = content.lines().next().expect("a document");
    let doc: serde_json::Value = serde_json::from_str(first).unwrap();
    doc["text"].as_str().expect("a text field").to_owned()
}

/// A tensor to write: name, shape, f32 values (stored as `dtype`).
pub struct Tensor {
    pub name: String,
    pub shape: Vec<usize>,
    pub values: Vec<f32>,
}

/// Writes a safetensors file of bf16 (`bf16 = true`) or f32 tensors.
pub fn write_safetensors(path: &Path, tensors: &[Tensor], bf16: bool) {
    let mut header = serde_json::Map::new();
    let mut data = Vec::new();
    for t in tensors {
        let start = data.len();
        for v in &t.values {
            if bf16 {
                data.extend_from_slice(&half::bf16::from_f32(*v).to_le_bytes());
            } else {
                data.extend_from_slice(&v.to_le_bytes());
            }
        }
        let info = serde_json::json!({"dtype": if bf16 {"BF16"} else {"F32"}, "shape": t.shape, "data_offsets": [start, data.len()]});
        header.insert(t.name.clone(), info);
    }
    let mut text = serde_json::Value::Object(header).to_string();
    while !text.len().is_multiple_of(8) {
        text.push(' ');
    }
    let mut bytes = (text.len() as u64).to_le_bytes().to_vec();
    bytes.extend_from_slice(text.as_bytes());
    bytes.extend_from_slice(&data);
    std::fs::write(path, bytes).expect("write safetensors");
}

/// Shape of a tiny Llama for tests.
pub struct TinyLlama {
    pub hidden: usize,
    pub ffn: usize,
    pub layers: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub vocab: usize,
    pub max_pos: usize,
    pub tied: bool,
}

impl Default for TinyLlama {
    fn default() -> Self {
        TinyLlama {
            hidden: 64,
            ffn: 96,
            layers: 2,
            heads: 4,
            kv_heads: 2,
            vocab: 101,
            max_pos: 256,
            tied: true,
        }
    }
}

/// Writes a random tiny Llama (config.json + bf16 model.safetensors) into `dir`.
pub fn write_tiny_llama(dir: &Path, m: &TinyLlama, rng: &mut Rng) {
    let hd = m.hidden / m.heads;
    let config = serde_json::json!({
        "architectures": ["LlamaForCausalLM"], "hidden_size": m.hidden, "intermediate_size": m.ffn,
        "num_hidden_layers": m.layers, "num_attention_heads": m.heads, "num_key_value_heads": m.kv_heads,
        "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "max_position_embeddings": m.max_pos,
        "tie_word_embeddings": m.tied, "vocab_size": m.vocab, "eos_token_id": 2, "bos_token_id": 1
    });
    std::fs::write(dir.join("config.json"), config.to_string()).expect("write config");
    let mut ts = Vec::new();
    let mut t = |name: String, shape: Vec<usize>, scale: f32, offset: f32| {
        let n = shape.iter().product();
        let values = rng.vec(n, scale).into_iter().map(|v| v + offset).collect();
        ts.push(Tensor {
            name,
            shape,
            values,
        });
    };
    t(
        "model.embed_tokens.weight".into(),
        vec![m.vocab, m.hidden],
        1.0,
        0.0,
    );
    t("model.norm.weight".into(), vec![m.hidden], 0.1, 1.0);
    if !m.tied {
        t("lm_head.weight".into(), vec![m.vocab, m.hidden], 0.2, 0.0);
    }
    let s = 1.0 / (m.hidden as f32).sqrt();
    for i in 0..m.layers {
        let p = format!("model.layers.{i}");
        t(
            format!("{p}.input_layernorm.weight"),
            vec![m.hidden],
            0.1,
            1.0,
        );
        t(
            format!("{p}.post_attention_layernorm.weight"),
            vec![m.hidden],
            0.1,
            1.0,
        );
        t(
            format!("{p}.self_attn.q_proj.weight"),
            vec![m.heads * hd, m.hidden],
            2.0 * s,
            0.0,
        );
        t(
            format!("{p}.self_attn.k_proj.weight"),
            vec![m.kv_heads * hd, m.hidden],
            2.0 * s,
            0.0,
        );
        t(
            format!("{p}.self_attn.v_proj.weight"),
            vec![m.kv_heads * hd, m.hidden],
            s,
            0.0,
        );
        t(
            format!("{p}.self_attn.o_proj.weight"),
            vec![m.hidden, m.heads * hd],
            s,
            0.0,
        );
        t(
            format!("{p}.mlp.gate_proj.weight"),
            vec![m.ffn, m.hidden],
            s,
            0.0,
        );
        t(
            format!("{p}.mlp.up_proj.weight"),
            vec![m.ffn, m.hidden],
            s,
            0.0,
        );
        t(
            format!("{p}.mlp.down_proj.weight"),
            vec![m.hidden, m.ffn],
            s,
            0.0,
        );
    }
    write_safetensors(&dir.join("model.safetensors"), &ts, true);
}

/// The family checkpoints of `tests/golden/families` (made by `tests/reference/families_golden.py`):
/// where they are, the tokens they were run on, transformers' logits, and the feedings the tests use.
pub mod families {
    use std::path::PathBuf;

    use docqa_engine::backend::{Backend, KvDtype};
    use docqa_engine::models::LogitsMode;
    use docqa_engine::models::generate::SingleSequence;
    use docqa_engine::models::llama::Llama;
    use docqa_engine::weights::Weights;

    /// The goldens' directory.
    pub fn golden() -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/golden/families")
    }

    /// The tokens every family was run on (`meta.json`).
    pub fn tokens() -> Vec<u32> {
        let text = std::fs::read_to_string(golden().join("meta.json")).expect("meta.json");
        let meta: serde_json::Value = serde_json::from_str(&text).expect("meta json");
        let ids = meta["tokens"].as_array().expect("tokens");
        ids.iter().map(|v| v.as_u64().expect("id") as u32).collect()
    }

    /// transformers' logits named `name` (a family, or `FAMILY.ablated`).
    pub fn reference(name: &str) -> Vec<f32> {
        let w = Weights::open_files(&[golden().join("logits.safetensors")]).expect("golden logits");
        w.get(name).expect("logits tensor").to_f32()
    }

    /// Checks `got` against transformers' logits of `family` within `tolerance`, and that the logits
    /// with the family's feature switched off are more than ten times that away (the feature is what is
    /// being checked).
    pub fn assert_matches_transformers(family: &str, got: &[f32], tolerance: f32) {
        let diff = super::max_abs_diff(got, &reference(family));
        assert!(diff <= tolerance, "{family}: logits differ by {diff}");
        let ablated = super::max_abs_diff(got, &reference(&format!("{family}.ablated")));
        assert!(
            ablated > 10.0 * tolerance,
            "{family}: the logits without the family's feature are only {ablated} away"
        );
    }

    /// All the tokens in one prefill.
    pub fn all_at_once() -> Vec<usize> {
        vec![tokens().len()]
    }

    /// A 20-token prefill, then one token per step: the decode path (past the sliding windows).
    pub fn prefill_then_decode() -> Vec<usize> {
        let mut pieces = vec![20];
        pieces.resize(tokens().len() - 19, 1);
        pieces
    }

    /// Logits of every position of `tokens`, fed to `model` in `pieces`, f32 KV.
    pub fn feed<B: Backend>(model: &Llama<B>, tokens: &[u32], pieces: &[usize]) -> Vec<f32> {
        let mut seq = SingleSequence::new(model, 64, 64, KvDtype::F32).expect("sequence");
        let mut out = Vec::new();
        let mut at = 0;
        for &n in pieces {
            let logits = seq.feed(&tokens[at..at + n], LogitsMode::All);
            out.extend_from_slice(logits.expect("forward"));
            at += n;
        }
        assert_eq!(at, tokens.len(), "the pieces cover the tokens");
        out
    }
}
