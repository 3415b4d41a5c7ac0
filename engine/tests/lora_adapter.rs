//! LoRA adapters merged at load, against PEFT's own merge: the tiny random Llama and random adapter of
//! `tests/golden/lora/` (made by `tests/reference/lora_golden.py`, which merged them with
//! `PeftModel.merge_and_unload()` and ran the forward in float32), on the CPU backend; and every PEFT
//! feature docqa cannot merge refused with its typed error before anything is uploaded; and the shipped
//! reader, installed by the model fetch, merges into SmolLM2-135M.
//!
//! Tolerance. docqa merges in f32 like the reference but rounds each merged weight to the base's bf16
//! (≤ 2⁻⁹ relative), and its AVX-512 BF16 matmul (where the CPU has it) rounds activations to bf16 too.
//! The reference script measured both on the same model and tokens (`meta.json`): merged weights
//! rounded to bf16 move the logits by at most 0.085, weights and linear inputs rounded by at most 0.146,
//! over logits spanning -16.3 to 21.1. We allow max |Δlogit| ≤ 0.3 (0.8 % of that range, twice the
//! larger measure); the adapter itself moves the logits by up to 10.9 (mean 2.0), so the comparison
//! without the adapter must miss by more than ten times the tolerance.

use crate::common;

use std::path::{Path, PathBuf};

use common::{Tensor, max_abs_diff};
use docqa_engine::EngineError;
use docqa_engine::adapter::{Adapter, AdapterProblem};
use docqa_engine::backend::KvDtype;
use docqa_engine::backend::cpu::CpuBackend;
use docqa_engine::models::LogitsMode;
use docqa_engine::models::generate::SingleSequence;
use docqa_engine::models::llama::Llama;
use docqa_engine::weights::Weights;
use serde_json::{Value, json};

/// Largest |Δlogit| allowed against the PyTorch merge (see the header).
const TOLERANCE: f32 = 0.3;

fn golden() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/golden/lora")
}

fn meta() -> Value {
    let text = std::fs::read_to_string(golden().join("meta.json")).expect("meta.json");
    serde_json::from_str(&text).expect("meta json")
}

fn tokens() -> Vec<u32> {
    let ids = meta()["tokens"].as_array().expect("tokens").clone();
    ids.iter().map(|v| v.as_u64().expect("id") as u32).collect()
}

fn reference(name: &str) -> Vec<f32> {
    let w = Weights::open_files(&[golden().join("logits.safetensors")]).expect("golden logits");
    w.get(name).expect("logits tensor").to_f32()
}

/// Logits of every position of the golden token sequence, with `adapter` merged.
fn logits(adapter: Option<&Adapter>) -> Vec<f32> {
    let model = Llama::load_with(CpuBackend::new(), &golden().join("model"), adapter)
        .expect("load the tiny model");
    let tokens = tokens();
    let mut seq = SingleSequence::new(&model, 64, 64, KvDtype::F32).expect("sequence");
    seq.feed(&tokens, LogitsMode::All)
        .expect("forward")
        .to_vec()
}

#[test]
fn a_merged_lora_adapter_gives_the_logits_of_a_pytorch_merge() {
    let adapter = Adapter::load(&golden().join("adapter")).expect("load the golden adapter");
    assert_eq!((adapter.len(), adapter.scale()), (14, 2.0));
    let (merged, base) = (reference("merged"), reference("base"));
    let with = logits(Some(&adapter));
    let without = logits(None);
    let diff = max_abs_diff(&with, &merged);
    eprintln!(
        "max |docqa - peft merge| = {diff:.4}; base: {:.4}; adapter's own effect: {:.3}",
        max_abs_diff(&without, &base),
        max_abs_diff(&merged, &base)
    );
    assert!(diff <= TOLERANCE, "merged logits differ by {diff}");
    assert!(
        max_abs_diff(&without, &base) <= TOLERANCE,
        "the base model itself differs"
    );
    let unmerged = max_abs_diff(&without, &merged);
    assert!(
        unmerged > 10.0 * TOLERANCE,
        "without the adapter the logits differ by only {unmerged}: the test could not fail"
    );
}

/// A copy of the golden adapter with `config` merged into its config and its tensors replaced by
/// `tensors` (bf16) when given.
fn variant(config: Value, tensors: Option<Vec<Tensor>>) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    let src = golden().join("adapter");
    let text = std::fs::read_to_string(src.join("adapter_config.json")).expect("config");
    let mut cfg: Value = serde_json::from_str(&text).expect("config json");
    for (k, v) in config.as_object().expect("object") {
        cfg[k] = v.clone();
    }
    std::fs::write(dir.path().join("adapter_config.json"), cfg.to_string()).expect("write");
    let weights = dir.path().join("adapter_model.safetensors");
    match tensors {
        Some(ts) => common::write_safetensors(&weights, &ts, true),
        None => {
            std::fs::copy(src.join("adapter_model.safetensors"), &weights).expect("copy");
        }
    }
    dir
}

/// The golden adapter's tensors as f32, `edit` applied to each (name, shape, values).
fn golden_tensors(edit: impl Fn(&mut Tensor)) -> Vec<Tensor> {
    let path = golden().join("adapter/adapter_model.safetensors");
    let w = Weights::open_files(&[path]).expect("golden adapter");
    let mut names: Vec<&str> = w.names().collect();
    names.sort();
    names
        .into_iter()
        .map(|name| {
            let t = w.get(name).expect("tensor");
            let mut t = Tensor {
                name: name.into(),
                shape: t.shape.to_vec(),
                values: t.to_f32(),
            };
            edit(&mut t);
            t
        })
        .collect()
}

#[test]
fn an_adapter_whose_lora_b_is_zero_changes_no_logit() {
    let zero_b = |t: &mut Tensor| {
        if t.name.contains("lora_B") {
            t.values.iter_mut().for_each(|v| *v = 0.0);
        }
    };
    let dir = variant(json!({}), Some(golden_tensors(zero_b)));
    let adapter = Adapter::load(dir.path()).expect("load");
    assert_eq!(logits(Some(&adapter)), logits(None));
}

/// The problem `Adapter::load` (then `Llama::load_with`) reports for the adapter in `dir`.
fn problem(dir: &Path) -> AdapterProblem {
    let err = match Adapter::load(dir) {
        Err(e) => e,
        Ok(adapter) => {
            match Llama::load_with(CpuBackend::new(), &golden().join("model"), Some(&adapter)) {
                Err(e) => e,
                Ok(_) => panic!("{} was accepted", dir.display()),
            }
        }
    };
    eprintln!("refused: {err}");
    match err {
        EngineError::Adapter { problem, .. } => problem,
        other => panic!("not an adapter error: {other}"),
    }
}

#[test]
fn an_adapter_shaped_for_another_model_is_refused() {
    let wider = |t: &mut Tensor| {
        if t.name.contains("layers.1.mlp.up_proj.lora_A") {
            t.shape = vec![4, 96];
            t.values = vec![0.01; 4 * 96];
        }
    };
    let dir = variant(json!({}), Some(golden_tensors(wider)));
    assert_eq!(
        problem(dir.path()),
        AdapterProblem::Misfit {
            projection: "model.layers.1.mlp.up_proj.weight".into(),
            base: [128, 64],
            lora: [128, 96],
        }
    );
    let deeper = |t: &mut Tensor| t.name = t.name.replace("layers.1.", "layers.7.");
    let dir = variant(json!({}), Some(golden_tensors(deeper)));
    assert!(
        matches!(problem(dir.path()), AdapterProblem::NoBaseTensor(name)
        if name == "model.layers.7.mlp.down_proj.weight")
    );
}

#[test]
fn a_rank_other_than_the_configured_r_is_refused() {
    let dir = variant(json!({"r": 8}), None);
    assert!(
        matches!(problem(dir.path()), AdapterProblem::Shape { expected, .. }
        if expected[0] == 8)
    );
}

#[test]
fn adapters_on_the_embeddings_or_the_lm_head_are_refused() {
    let dir = variant(json!({"target_modules": ["q_proj", "lm_head"]}), None);
    assert_eq!(
        problem(dir.path()),
        AdapterProblem::UnsupportedTarget("lm_head".into())
    );
    let mut ts = golden_tensors(|_| {});
    ts.push(Tensor {
        name: "base_model.model.model.embed_tokens.lora_embedding_A".into(),
        shape: vec![4, 128],
        values: vec![0.0; 4 * 128],
    });
    let dir = variant(json!({}), Some(ts));
    assert_eq!(
        problem(dir.path()),
        AdapterProblem::UnsupportedTarget("embed_tokens".into())
    );
}

#[test]
fn dora_is_refused() {
    let dir = variant(json!({"use_dora": true}), None);
    assert_eq!(problem(dir.path()), AdapterProblem::Dora);
}

#[test]
fn fan_in_fan_out_trained_biases_and_modules_to_save_are_refused() {
    let cases = [
        (json!({"fan_in_fan_out": true}), AdapterProblem::FanInFanOut),
        (
            json!({"bias": "lora_only"}),
            AdapterProblem::Bias("lora_only".into()),
        ),
        (
            json!({"modules_to_save": ["lm_head"]}),
            AdapterProblem::ModulesToSave("lm_head".into()),
        ),
    ];
    for (config, want) in cases {
        let dir = variant(config, None);
        assert_eq!(problem(dir.path()), want);
    }
}

#[test]
fn a_file_that_differs_from_sha256sums_is_refused() {
    let dir = variant(json!({}), None);
    let listing = docqa_engine::adapter::sums_listing(dir.path()).expect("listing");
    std::fs::write(dir.path().join("SHA256SUMS"), &listing).expect("write sums");
    let adapter = Adapter::load(dir.path()).expect("a listed adapter loads");
    assert_eq!(adapter.sha256.len(), 64);
    std::fs::write(dir.path().join("adapter_config.json"), b"{}").expect("damage");
    assert_eq!(
        problem(dir.path()),
        AdapterProblem::Checksum("adapter_config.json".into())
    );
}

#[test]
fn the_shipped_reader_installs_beside_smollm2_and_merges_into_it() {
    let models = common::models();
    let reader = Adapter::load(&models.reader).expect("the installed reader loads");
    assert_eq!(reader.name, "docqa-reader");
    assert!(!reader.is_empty());
    let model = Llama::load_with(CpuBackend::new(), &models.generator, Some(&reader))
        .expect("the reader fits SmolLM2-135M");
    let mut seq = SingleSequence::new(&model, 64, 64, KvDtype::F32).expect("sequence");
    let logits = seq.feed(&[1, 504, 3458, 30], LogitsMode::LastPerSequence);
    assert!(logits.expect("forward").iter().all(|v| v.is_finite()));
}
