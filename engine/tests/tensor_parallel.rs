//! Tensor parallelism on the CPU backend: a model split over two to four ranks (one thread each, with
//! its part of every matrix, its own KV pool and workspace, summing and gathering through
//! `ThreadGroup`) gives the whole model's logits on every rank, in prefill and in decode; and the
//! serving engine over the real SmolLM2 split in three serves what it serves whole (batching, the
//! prefix cache, sink windows and the samplers above the ranks unchanged).
//!
//! Tolerance. The ranks' parts are the whole model's weights, cut; what changes is the order of the
//! f32 sums of the row-parallel products (each rank sums its heads or features, then the ranks are
//! added). Over logits spanning about ±4 that moves them by about 1e-6, so 1e-4 is the bound. The
//! comparisons run on f32 copies of the checkpoints: with bf16 weights, a CPU with AVX-512 BF16 rounds
//! each product's activations to bf16, and a last-bit change of the sum flips roundings that move the
//! logits by up to 0.02. The family checkpoints as published (bf16), split, are also held to
//! transformers' logits with `family_parity`'s tolerance.

use crate::common;

use std::path::Path;
use std::sync::Arc;

use docqa_engine::backend::cpu::CpuBackend;
use docqa_engine::backend::{KvDtype, KvShape};
use docqa_engine::kv::manager::SinkWindow;
use docqa_engine::models::llama::{Llama, WorkspaceSize};
use docqa_engine::models::perplexity::{PerplexityOptions, perplexity, perplexity_split};
use docqa_engine::models::split::load_ranks;
use docqa_engine::models::{Batch, KvPool, LogitsMode, SeqInput};
use docqa_engine::parallel::{Collective, ThreadGroup};
use docqa_engine::sampling::SamplingParams;
use docqa_engine::serving::{
    EngineConfig, EngineCore, EngineHandle, GenerateRequest, GenerationEvent, KvBudget, Usage,
};
use docqa_engine::text::{ChatMessage, TextTokenizer};
use docqa_engine::weights::Weights;

use common::families::{all_at_once, feed, golden, prefill_then_decode, reference, tokens};
use common::{Rng, Tensor, TinyLlama, max_abs_diff, write_safetensors, write_tiny_llama};

/// Largest |Δlogit| allowed between the split model and the whole one (see the header).
const SPLIT_TOLERANCE: f32 = 1e-4;
/// `family_parity`'s bound against transformers.
const TRANSFORMERS_TOLERANCE: f32 = 0.3;

/// The checkpoint in `dir` with every tensor widened to f32 (see the header), beside copies of its
/// other files (config, tokenizer).
fn f32_copy(dir: &Path) -> tempfile::TempDir {
    let copy = tempfile::tempdir().expect("tempdir");
    for entry in std::fs::read_dir(dir).expect("model directory") {
        let path = entry.expect("entry").path();
        let name = path.file_name().expect("file name").to_owned();
        if path.is_file() && !name.to_string_lossy().contains("safetensors") {
            std::fs::copy(&path, copy.path().join(name)).expect("copy");
        }
    }
    let weights = Weights::open_dir(dir).expect("weights");
    let tensors: Vec<Tensor> = weights
        .names()
        .map(|name| {
            let t = weights.get(name).expect("tensor");
            Tensor {
                name: name.to_owned(),
                shape: t.shape.to_vec(),
                values: t.to_f32(),
            }
        })
        .collect();
    write_safetensors(&copy.path().join("model.safetensors"), &tensors, false);
    copy
}

fn whole(dir: &Path, tokens: &[u32], pieces: &[usize]) -> Vec<f32> {
    let model = Llama::load(CpuBackend::new(), dir).expect("load the whole model");
    feed(&model, tokens, pieces)
}

/// Each rank's logits, the model split over `world` ranks.
fn split(dir: &Path, world: usize, tokens: &[u32], pieces: &[usize]) -> Vec<Vec<f32>> {
    std::thread::scope(|s| {
        let ranks: Vec<_> = ThreadGroup::new(world)
            .into_iter()
            .map(|rank| {
                s.spawn(move || {
                    let group: Arc<dyn Collective<CpuBackend>> = Arc::new(rank);
                    let model = Llama::load_part(CpuBackend::new(), dir, None, Some(group));
                    feed(&model.expect("load the rank's part"), tokens, pieces)
                })
            })
            .collect();
        ranks.into_iter().map(|r| r.join().expect("rank")).collect()
    })
}

/// Every rank of a `world`-way split of the f32 copy of `dir` ends with the whole model's logits.
fn split_matches_whole(dir: &Path, world: usize, tokens: &[u32], pieces: &[usize]) {
    let exact = f32_copy(dir);
    let want = whole(exact.path(), tokens, pieces);
    let ranks = split(exact.path(), world, tokens, pieces);
    for (rank, got) in ranks.iter().enumerate() {
        let diff = max_abs_diff(got, &want);
        assert!(
            diff <= SPLIT_TOLERANCE,
            "rank {rank} of {world}: logits differ by {diff}"
        );
    }
}

fn family_split_in_two_matches_whole_and_transformers(family: &str, pieces: &[usize]) {
    let dir = golden().join(family);
    split_matches_whole(&dir, 2, &tokens(), pieces);
    let got = split(&dir, 2, &tokens(), pieces).swap_remove(0);
    let want = reference(family);
    let diff = max_abs_diff(&got, &want);
    assert!(
        diff <= TRANSFORMERS_TOLERANCE,
        "{family}: {diff} from transformers"
    );
}

#[test]
fn llama3_split_over_two_ranks_gives_the_whole_models_logits() {
    family_split_in_two_matches_whole_and_transformers("llama3", &all_at_once());
    family_split_in_two_matches_whole_and_transformers("llama3", &prefill_then_decode());
}

#[test]
fn qwen2_biases_split_with_their_heads_over_two_ranks() {
    family_split_in_two_matches_whole_and_transformers("qwen2-yarn", &all_at_once());
}

#[test]
fn mistral_sliding_window_split_over_two_ranks_decodes_like_the_whole_model() {
    family_split_in_two_matches_whole_and_transformers("mistral-sliding", &prefill_then_decode());
}

#[test]
fn a_tied_embedding_split_by_vocabulary_over_four_ranks_serves_lookup_and_lm_head() {
    let mut rng = Rng::fresh("tied_four_ranks");
    let m = TinyLlama {
        kv_heads: 4,
        vocab: 100,
        tied: true,
        ..TinyLlama::default()
    };
    let dir = tempfile::tempdir().expect("tempdir");
    write_tiny_llama(dir.path(), &m, &mut rng);
    // Ids from every rank's quarter of the vocabulary.
    let tokens: Vec<u32> = (0..30).map(|i| (i * 37 % 100) as u32).collect();
    split_matches_whole(dir.path(), 4, &tokens, &[24, 1, 1, 4]);
}

#[test]
fn a_split_the_heads_do_not_divide_fails_on_every_rank_with_the_reason() {
    let dir = golden().join("llama3"); // 2 key/value heads
    let errors: Vec<String> = std::thread::scope(|s| {
        let ranks: Vec<_> = ThreadGroup::new(4)
            .into_iter()
            .map(|rank| {
                s.spawn(|| {
                    let group: Arc<dyn Collective<CpuBackend>> = Arc::new(rank);
                    match Llama::load_part(CpuBackend::new(), &dir, None, Some(group)) {
                        Ok(_) => String::from("loaded"),
                        Err(e) => e.to_string(),
                    }
                })
            })
            .collect();
        ranks.into_iter().map(|r| r.join().expect("rank")).collect()
    });
    for e in errors {
        assert!(e.contains("key/value heads (2)"), "{e}");
    }
}

/// One forward pass of a 20-token prompt in blocks 0 and 1 of a pool of `pool_blocks` 16-token blocks:
/// the error it ended with, or "ran".
fn one_pass(model: &Llama<CpuBackend>, pool_blocks: usize) -> String {
    let shape = KvShape {
        num_blocks: pool_blocks,
        block_size: 16,
        num_kv_heads: model.part_config().num_key_value_heads,
        head_dim: model.config.head_dim,
        dtype: KvDtype::F32,
    };
    let mut kv = KvPool::new(&model.backend, model.config.num_hidden_layers, shape).expect("pool");
    let size = WorkspaceSize {
        max_num_batched_tokens: 32,
        max_num_seqs: 1,
        max_blocks_per_seq: 2,
        max_logit_rows: 1,
    };
    let mut ws = model.workspace(size).expect("workspace");
    let tokens: Vec<u32> = (1..=20).collect();
    let seq = SeqInput {
        tokens: &tokens,
        num_computed_tokens: 0,
        blocks: &[0, 1],
        sink_window: None,
    };
    let batch = Batch::build(&[seq], 16, LogitsMode::LastPerSequence).expect("batch");
    match model.forward(&batch, &mut kv, &mut ws) {
        Ok(_) => "ran".into(),
        Err(e) => e.to_string(),
    }
}

#[test]
fn a_rank_whose_pass_fails_stops_the_group_and_the_other_ranks_fail_with_its_reason() {
    // Rank 1's pool holds one block, so the batch's block 1 fails its pass before the first
    // collective; rank 0 is then waiting in the sum after the embedding. A group that did
    // not stop would leave it there, so the test gives up after a minute rather than hang.
    let dir = golden().join("llama3");
    let (sender, results) = std::sync::mpsc::channel();
    for rank in ThreadGroup::new(2) {
        let (dir, sender) = (dir.clone(), sender.clone());
        std::thread::spawn(move || {
            let r = rank.shard().rank;
            let group: Arc<dyn Collective<CpuBackend>> = Arc::new(rank);
            let model = Llama::load_part(CpuBackend::new(), &dir, None, Some(group)).expect("part");
            let _ = sender.send((r, one_pass(&model, if r == 1 { 1 } else { 4 })));
        });
    }
    let mut errors = vec![String::new(); 2];
    for _ in 0..2 {
        let wait = std::time::Duration::from_secs(60);
        let (rank, error) = results.recv_timeout(wait).expect("every rank's pass ends");
        errors[rank] = error;
    }
    assert!(errors[1].contains("block"), "rank 1: {}", errors[1]);
    assert!(
        errors[0].contains("tensor-parallel group has stopped: rank 1 failed"),
        "rank 0: {}",
        errors[0]
    );
}

/// Every request's tokens and usage, run together to the end.
fn serve(
    core: &mut EngineCore<CpuBackend>,
    requests: Vec<GenerateRequest>,
) -> Vec<(Vec<u32>, Usage)> {
    let ids: Vec<u64> = requests
        .into_iter()
        .map(|r| core.add_request(r))
        .collect::<Result<_, _>>()
        .expect("admitted");
    let mut out: Vec<(Vec<u32>, Option<Usage>)> = vec![(Vec::new(), None); ids.len()];
    while core.has_work() {
        for (id, event) in core.step().expect("step") {
            let slot = &mut out[ids.iter().position(|&i| i == id).expect("known id")];
            match event {
                GenerationEvent::Token { id, .. } => slot.0.push(id),
                GenerationEvent::Finished { usage, .. } => slot.1 = Some(usage),
                GenerationEvent::Failed { message } => panic!("request failed: {message}"),
                _ => {}
            }
        }
    }
    out.into_iter()
        .map(|(tokens, usage)| (tokens, usage.expect("finished")))
        .collect()
}

#[test]
fn an_engine_over_three_ranks_serves_what_the_whole_model_serves_sink_windows_included() {
    let dir = f32_copy(&common::models().generator);
    let tokenizer = || TextTokenizer::from_model_dir(dir.path()).expect("tokenizer");
    let cfg = EngineConfig {
        kv_cache: KvBudget::Bytes(64 << 20),
        max_num_batched_tokens: 64,
        ..EngineConfig::default()
    };
    let text = |q: &str| {
        let chat = [ChatMessage::new("user", q)];
        let t = tokenizer()
            .apply_chat_template(&chat, true)
            .expect("template");
        tokenizer().encode(&t, false).expect("encode")
    };
    let greedy = SamplingParams {
        max_tokens: 12,
        temperature: 0.0,
        ..SamplingParams::default()
    };
    let ask = |prompt: &Vec<u32>| GenerateRequest::new(prompt.clone(), greedy.clone());
    let prompts = [
        text("Name three primary colours."),
        text("What does a KV cache hold in a transformer?"),
        text(&"Repeat after me: the quick brown fox jumps over the lazy dog. ".repeat(12)),
    ];
    // The third streams through a sink window narrower than its prompt.
    let window = SinkWindow {
        num_sink_tokens: 4,
        window: 64,
    };
    assert!(prompts[2].len() > 2 * window.window, "{}", prompts[2].len());
    let requests = || {
        vec![
            ask(&prompts[0]),
            ask(&prompts[1]),
            ask(&prompts[2]).with_sink_window(window),
        ]
    };
    let whole = Llama::load(CpuBackend::new(), dir.path()).expect("whole model");
    let mut whole = EngineCore::new(whole, tokenizer(), &cfg).expect("engine");
    let ranks = load_ranks(
        vec![CpuBackend::new(), CpuBackend::new(), CpuBackend::new()],
        dir.path(),
        None,
    );
    let mut split =
        EngineCore::with_ranks(ranks.expect("ranks"), tokenizer(), &cfg).expect("engine");
    let together = serve(&mut split, requests());
    let wanted = serve(&mut whole, requests());
    for ((got, _), (want, _)) in together.iter().zip(&wanted) {
        assert_eq!(got, want, "three ranks answer as the whole model");
        assert_eq!(got.len(), 12);
    }
    // The first question again: its prompt's KV, written by the three ranks, comes from the cache.
    let again = serve(&mut split, vec![ask(&prompts[0])]);
    assert_eq!(again[0].0, wanted[0].0);
    assert!(
        again[0].1.cached_prompt_tokens >= prompts[0].len() - 16,
        "{} of {} prompt tokens cached",
        again[0].1.cached_prompt_tokens,
        prompts[0].len()
    );
}

#[test]
fn an_engine_whose_group_stopped_fails_the_request_with_the_reason_and_stops() {
    let dir = &common::models().generator;
    let tokenizer = TextTokenizer::from_model_dir(dir).expect("tokenizer");
    let cfg = EngineConfig {
        kv_cache: KvBudget::Bytes(16 << 20),
        max_num_batched_tokens: 64,
        ..EngineConfig::default()
    };
    let backends = vec![CpuBackend::new(), CpuBackend::new(), CpuBackend::new()];
    let ranks = load_ranks(backends, dir, None).expect("ranks");
    // As if rank 1 had failed in an earlier pass.
    ranks[1].stop_group("rank 1 failed: device lost");
    let core = EngineCore::with_ranks(ranks, tokenizer, &cfg).expect("engine");
    let engine = EngineHandle::spawn(core, None).expect("engine thread");
    let params = SamplingParams {
        max_tokens: 4,
        ..SamplingParams::default()
    };
    let mut stream = engine
        .generate_blocking(GenerateRequest::new(vec![1, 2, 3, 4, 5], params))
        .expect("admitted");
    let mut failed = None;
    while let Some(event) = stream.blocking_next() {
        if let GenerationEvent::Failed { message } = event {
            failed = Some(message);
        }
    }
    let message = failed.expect("the request fails");
    assert!(message.contains("rank 1 failed: device lost"), "{message}");
    // The engine thread ends: readiness reports it, and a new request is refused at once.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while engine.is_running() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert!(!engine.is_running(), "the engine thread still runs");
    let again =
        engine.generate_blocking(GenerateRequest::new(vec![1, 2], SamplingParams::default()));
    assert!(again.is_err(), "a request after the stop is refused");
}

#[test]
fn perplexity_over_three_ranks_is_the_whole_models_dense_and_through_a_sink_window() {
    let dir = f32_copy(&common::models().generator);
    let tokenizer = TextTokenizer::from_model_dir(dir.path()).expect("tokenizer");
    let text = common::fixture_text("qmsum_val.jsonl");
    let mut tokens = tokenizer.encode(&text, false).expect("encode");
    tokens.truncate(600);
    let window = SinkWindow {
        num_sink_tokens: 4,
        window: 128,
    };
    for sink_window in [None, Some(window)] {
        let opts = PerplexityOptions {
            sink_window,
            chunk: 96,
            segment: 200,
            kv_dtype: KvDtype::F32,
        };
        let whole = Llama::load(CpuBackend::new(), dir.path()).expect("whole model");
        let want = perplexity(&whole, &tokens, &opts).expect("whole");
        let backends = vec![CpuBackend::new(), CpuBackend::new(), CpuBackend::new()];
        let ranks = load_ranks(backends, dir.path(), None).expect("ranks");
        let got = perplexity_split(ranks, &tokens, &opts).expect("split");
        assert_eq!(got.segments.len(), want.segments.len());
        for (g, w) in got.segments.iter().zip(&want.segments) {
            assert_eq!((g.end, g.tokens), (w.end, w.tokens));
            assert!(
                (g.nll - w.nll).abs() < 1e-4,
                "{sink_window:?}: segment ending at {}: {} against {}",
                g.end,
                g.nll,
                w.nll
            );
        }
        assert_eq!(got.peak_blocks, want.peak_blocks);
    }
}

#[test]
fn an_engine_refuses_fewer_ranks_than_the_group_has() {
    let dir = golden().join("llama3");
    let mut ranks =
        load_ranks(vec![CpuBackend::new(), CpuBackend::new()], &dir, None).expect("ranks");
    ranks.pop();
    let tokenizer = TextTokenizer::from_model_dir(&common::models().generator).expect("tokenizer");
    let err = EngineCore::with_ranks(ranks, tokenizer, &EngineConfig::default());
    let text = err.err().expect("refused").to_string();
    assert!(
        text.contains("1 ranks given for a tensor-parallel group of 2"),
        "{text}"
    );
}
