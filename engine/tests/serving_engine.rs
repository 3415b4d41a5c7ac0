//! The serving engine on the real SmolLM2 model: batching is exact, prefix caching is exact and real,
//! cancellation frees blocks, admission control answers with typed errors, sink windows stream with
//! bounded memory and batch exactly, prompts read in chunks report their progress, and the repetition
//! guard ends a looping answer. Documents are the QMSum fixture's transcript (`tests/fixtures/qa/`).

use crate::common;

use std::path::PathBuf;

use docqa_engine::EngineError;
use docqa_engine::backend::cpu::CpuBackend;
use docqa_engine::fetch::{NoProgress, default_models_dir, ensure_models};
use docqa_engine::kv::manager::SinkWindow;
use docqa_engine::models::llama::Llama;
use docqa_engine::sampling::{SamplingParams, repetition};
use docqa_engine::serving::stats::PromptRead;
use docqa_engine::serving::{
    EngineConfig, EngineCore, EngineHandle, FinishReason, GenerateRequest, GenerationEvent,
    KvBudget, WARM_UP_NAMESPACE,
};
use docqa_engine::text::{ChatMessage, TextTokenizer};

fn generator_dir() -> PathBuf {
    ensure_models(&default_models_dir(), &NoProgress)
        .expect("models are fetched")
        .generator
}

fn engine(cfg: &EngineConfig) -> EngineCore<CpuBackend> {
    let dir = generator_dir();
    let model = Llama::load(CpuBackend::new(), &dir).unwrap();
    let tokenizer = TextTokenizer::from_model_dir(&dir).unwrap();
    EngineCore::new(model, tokenizer, cfg).unwrap()
}

fn greedy(max_tokens: usize) -> SamplingParams {
    SamplingParams {
        max_tokens,
        temperature: 0.0,
        ..SamplingParams::default()
    }
}

fn chat(tokenizer: &TextTokenizer, user: &str) -> Vec<u32> {
    let text = tokenizer
        .apply_chat_template(&[ChatMessage::new("user", user)], true)
        .unwrap();
    tokenizer.encode(&text, false).unwrap()
}

/// A request's generated tokens and its first step's top log-probabilities.
type Outcome = (Vec<u32>, Vec<(u32, f32)>);

/// Runs every request to completion; returns each request's tokens and first-step top log-probabilities.
fn run_all(core: &mut EngineCore<CpuBackend>, requests: Vec<GenerateRequest>) -> Vec<Outcome> {
    let ids: Vec<u64> = requests
        .into_iter()
        .map(|r| core.add_request(r).unwrap())
        .collect();
    let mut out = vec![(Vec::new(), Vec::new()); ids.len()];
    while core.has_work() {
        for (id, ev) in core.step().unwrap() {
            let slot = &mut out[ids.iter().position(|&i| i == id).unwrap()];
            if let GenerationEvent::Token {
                id: tok,
                top_logprobs,
                ..
            } = ev
            {
                if slot.0.is_empty() {
                    slot.1 = top_logprobs;
                }
                slot.0.push(tok);
            }
        }
    }
    out
}

/// The first `chars` characters of the QMSum fixture's meeting transcript.
fn qmsum_text(chars: usize) -> String {
    let text = common::fixture_text("qmsum_val.jsonl");
    assert!(text.chars().count() >= chars, "the fixture is shorter");
    text.chars().take(chars).collect()
}

#[test]
fn eight_concurrent_greedy_requests_match_each_request_run_alone() {
    let cfg = EngineConfig {
        max_num_seqs: 8,
        max_num_batched_tokens: 256,
        ..EngineConfig::default()
    };
    let mut core = engine(&cfg);
    let text = qmsum_text(6000);
    let prompts: Vec<Vec<u32>> = [40usize, 150, 300, 700, 1200, 2000, 3500, 5000]
        .iter()
        .map(|&n| {
            let cut: String = text.chars().take(n).collect();
            chat(
                core.tokenizer(),
                &format!("Summarise this in one sentence:\n{cut}"),
            )
        })
        .collect();
    let alone: Vec<Vec<u32>> = prompts
        .iter()
        .map(|p| {
            run_all(&mut core, vec![GenerateRequest::new(p.clone(), greedy(20))])
                .remove(0)
                .0
        })
        .collect();
    let together: Vec<Vec<u32>> = run_all(
        &mut core,
        prompts
            .iter()
            .map(|p| GenerateRequest::new(p.clone(), greedy(20)))
            .collect(),
    )
    .into_iter()
    .map(|r| r.0)
    .collect();
    for (i, (a, t)) in alone.iter().zip(&together).enumerate() {
        assert!(!a.is_empty());
        assert_eq!(a, t, "request {i} differs when batched");
    }
    assert_eq!(core.stats().used_blocks, 0);
}

#[test]
fn sink_windows_change_nothing_until_they_slide_then_stream_with_bounded_blocks_and_batch_exactly()
{
    let cfg = EngineConfig {
        max_num_batched_tokens: 128,
        ..EngineConfig::default()
    };
    let mut core = engine(&cfg);
    let text = qmsum_text(9000);
    let short = chat(core.tokenizer(), &format!("Summarise:\n{}", &text[..900]));
    let long = chat(core.tokenizer(), &format!("Summarise:\n{text}"));
    assert!(
        short.len() + 16 < 500 && long.len() > 1500,
        "{} / {}",
        short.len(),
        long.len()
    );

    // A window wider than the whole request: the same tokens as dense attention.
    let wide = SinkWindow {
        num_sink_tokens: 4,
        window: 508,
    };
    let dense = run_all(
        &mut core,
        vec![GenerateRequest::new(short.clone(), greedy(16))],
    );
    let windowed = run_all(
        &mut core,
        vec![GenerateRequest::new(short.clone(), greedy(16)).with_sink_window(wide)],
    );
    assert_eq!(dense[0].0, windowed[0].0);

    // A narrow window slides over the long prompt: blocks stay bounded by sinks + window + one chunk.
    let narrow = SinkWindow {
        num_sink_tokens: 4,
        window: 256,
    };
    let streaming = || GenerateRequest::new(long.clone(), greedy(16)).with_sink_window(narrow);
    let id = core.add_request(streaming()).unwrap();
    let (mut alone, mut peak) = (Vec::new(), 0);
    while core.has_work() {
        for (rid, ev) in core.step().unwrap() {
            if let (true, GenerationEvent::Token { id: tok, .. }) = (rid == id, ev) {
                alone.push(tok);
            }
        }
        peak = peak.max(core.stats().used_blocks);
    }
    let bound = 1 + 256usize.div_ceil(16) + 1 + 128usize.div_ceil(16);
    assert!(peak <= bound, "{peak} blocks in use, bound {bound}");
    assert_eq!(alone.len(), 16, "the stream generated {alone:?}");

    // Batched beside a dense request, the streaming request produces the same tokens.
    let together = run_all(
        &mut core,
        vec![streaming(), GenerateRequest::new(short.clone(), greedy(16))],
    );
    assert_eq!(together[0].0, alone);
    assert_eq!(together[1].0, dense[0].0);
    assert_eq!(core.stats().used_blocks, 0);
}

#[test]
fn a_second_question_on_a_cached_document_computes_only_its_new_tokens_and_matches_a_cold_run() {
    // A document of about 2,200 tokens, read in chunks of 512: the warm and cold runs cut the prompt
    // at different places.
    let cfg = EngineConfig {
        max_num_batched_tokens: 512,
        ..EngineConfig::default()
    };
    let document = qmsum_text(9_000);
    let ask = |core: &EngineCore<CpuBackend>, q: &str| {
        chat(
            core.tokenizer(),
            &format!("{document}\n\nAnswer from the meeting above: {q}"),
        )
    };
    let mut warm = engine(&cfg);
    let first = ask(&warm, "Who spoke first?");
    let second = ask(&warm, "What was decided about the budget?");
    assert!(
        second.len() > 2000,
        "the document is {} tokens",
        second.len()
    );
    let request = |p: &Vec<u32>| GenerateRequest {
        top_logprobs: 20,
        ..GenerateRequest::new(p.clone(), greedy(4))
    };
    run_all(&mut warm, vec![request(&first)]);
    let before = warm.stats();
    let warm_out = run_all(&mut warm, vec![request(&second)]).remove(0);
    let after = warm.stats();
    let computed = (after.computed_tokens - before.computed_tokens) as usize;
    let shared = first
        .iter()
        .zip(&second)
        .take_while(|(a, b)| a == b)
        .count();
    let reused = (after.cached_tokens - before.cached_tokens) as usize;
    assert_eq!(
        reused,
        shared / 16 * 16,
        "every full block of the shared prefix is reused"
    );
    assert_eq!(
        computed,
        second.len() - reused + 3,
        "only new prompt tokens and 3 decode steps run"
    );

    let mut cold = engine(&cfg);
    let cold_out = run_all(&mut cold, vec![request(&second)]).remove(0);
    assert_eq!(warm_out.0, cold_out.0);
    // Tolerance: the same kernels over the same KV give equal results up to the summation order of
    // attention over a different chunking of the prompt; 1e-3 in log-probability is far below any change
    // that could alter a ranking of distinct tokens.
    for ((wi, wl), (ci, cl)) in warm_out.1.iter().zip(&cold_out.1) {
        assert_eq!(wi, ci);
        assert!(
            (wl - cl).abs() < 1e-3,
            "logprob of {wi}: warm {wl} cold {cl}"
        );
    }
}

#[test]
fn dropping_a_stream_cancels_its_request_and_frees_its_blocks() {
    let core = engine(&EngineConfig::default());
    let prompt = chat(
        core.tokenizer(),
        "Write a long story about a lighthouse keeper.",
    );
    let handle = EngineHandle::spawn(core, None).unwrap();
    let mut stream = handle
        .generate_blocking(GenerateRequest::new(prompt, greedy(500)))
        .unwrap();
    for _ in 0..3 {
        assert!(matches!(
            stream.blocking_next(),
            Some(GenerationEvent::Token { .. })
        ));
    }
    assert!(handle.stats().used_blocks > 0);
    drop(stream);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while handle.stats().used_blocks > 0 || handle.stats().running > 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "blocks still held: {:?}",
            handle.stats()
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

#[test]
fn a_request_larger_than_the_whole_kv_cache_is_refused_at_once() {
    // 40 blocks of 16 tokens: 2 (K, V) × 30 layers × 16 tokens × 3 heads × 64 dims × 4 bytes each.
    let cfg = EngineConfig {
        kv_cache: KvBudget::Bytes(40 * 737_280),
        ..EngineConfig::default()
    };
    let mut core = engine(&cfg);
    let prompt = vec![28u32; 600];
    let err = core
        .add_request(GenerateRequest::new(prompt, greedy(100)))
        .unwrap_err();
    assert!(
        matches!(
            err,
            EngineError::RequestTooLarge {
                capacity_tokens: 640,
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn a_full_queue_answers_overloaded_and_a_prompt_over_the_context_is_refused() {
    let cfg = EngineConfig {
        max_waiting: 2,
        ..EngineConfig::default()
    };
    let mut core = engine(&cfg);
    for _ in 0..2 {
        core.add_request(GenerateRequest::new(vec![1, 2, 3], greedy(2)))
            .unwrap();
    }
    let err = core
        .add_request(GenerateRequest::new(vec![1, 2, 3], greedy(2)))
        .unwrap_err();
    assert!(
        matches!(err, EngineError::Overloaded { queued: 2 }),
        "{err}"
    );
    let err = core
        .add_request(GenerateRequest::new(vec![28; 9000], greedy(2)))
        .unwrap_err();
    assert!(
        matches!(
            err,
            EngineError::ContextTooLong {
                len: 9000,
                max: 8192
            }
        ),
        "{err}"
    );
}

/// Runs one request alone; returns its generated tokens, why it finished, and the progress events
/// (computed, total) it sent before its first token.
fn run_one(
    core: &mut EngineCore<CpuBackend>,
    request: GenerateRequest,
) -> (Vec<u32>, FinishReason, Vec<(usize, usize)>) {
    let id = core.add_request(request).unwrap();
    let (mut tokens, mut progress) = (Vec::new(), Vec::new());
    while core.has_work() {
        for (rid, ev) in core.step().unwrap() {
            assert_eq!(rid, id);
            match ev {
                GenerationEvent::Progress { computed, total } => {
                    assert!(tokens.is_empty(), "progress after the first token");
                    progress.push((computed, total));
                }
                GenerationEvent::Token { id, .. } => tokens.push(id),
                GenerationEvent::Finished { reason, .. } => return (tokens, reason, progress),
                GenerationEvent::Failed { message } => panic!("{message}"),
            }
        }
    }
    panic!("the request never finished");
}

#[test]
fn the_repetition_guard_ends_a_looping_answer_where_the_loop_is_first_complete() {
    let mut core = engine(&EngineConfig::default());
    let tokenizer = TextTokenizer::from_model_dir(&generator_dir()).unwrap();
    let prompt = chat(&tokenizer, "List the letter A one hundred times.");
    let unguarded = GenerateRequest::new(prompt.clone(), greedy(96));
    let (all, reason, _) = run_one(&mut core, unguarded);
    assert_eq!(reason, FinishReason::Length);
    // The model loops (the premise of the test): some prefix of its answer ends in a loop.
    let first_loop = (1..=all.len())
        .find(|&n| repetition::repeating_block(&all[..n]).is_some())
        .unwrap_or_else(|| panic!("no loop in {:?}", tokenizer.decode(&all)));
    let guarded = GenerateRequest::new(
        prompt,
        SamplingParams {
            stop_on_repetition: true,
            ..greedy(96)
        },
    );
    let (cut, reason, _) = run_one(&mut core, guarded);
    assert_eq!(reason, FinishReason::Loop);
    assert_eq!(
        cut,
        all[..first_loop],
        "the guarded answer is the unguarded one, cut at the loop"
    );
}

#[test]
fn a_prompt_read_in_chunks_reports_each_chunk_but_the_last_as_progress() {
    let budget = 128;
    let mut core = engine(&EngineConfig {
        max_num_batched_tokens: budget,
        ..EngineConfig::default()
    });
    let tokenizer = TextTokenizer::from_model_dir(&generator_dir()).unwrap();
    let prompt = chat(&tokenizer, &qmsum_text(2000));
    let n = prompt.len();
    let (tokens, _, progress) = run_one(&mut core, GenerateRequest::new(prompt, greedy(2)));
    assert!(!tokens.is_empty());
    let expected: Vec<(usize, usize)> = (1..n.div_ceil(budget)).map(|c| (c * budget, n)).collect();
    assert_eq!(
        progress, expected,
        "a {n}-token prompt in chunks of {budget}"
    );
}

/// The counters a warm-up must leave as they were (its time aside).
fn counted(core: &EngineCore<CpuBackend>) -> (u64, u64, u64, u64, u64, u64, usize, usize) {
    let s = core.stats();
    (
        s.steps,
        s.computed_tokens,
        s.prefill_tokens,
        s.prefill_micros,
        s.decode_steps,
        s.prefix_queried_tokens,
        s.used_blocks,
        s.free_blocks,
    )
}

#[test]
fn a_warm_up_reads_one_step_then_leaves_no_counts_no_cached_kv_and_the_same_answers() {
    let cfg = EngineConfig::default();
    let mut cold = engine(&cfg);
    let prompt = chat(cold.tokenizer(), "Name three colours of the rainbow.");
    let request = || GenerateRequest::new(prompt.clone(), greedy(12));
    let cold_answer = run_all(&mut cold, vec![request()]);

    let mut warmed = engine(&cfg);
    let before = counted(&warmed);
    let warm = warmed.warm_up().unwrap();
    assert_eq!(warm.prompt_tokens, cfg.max_num_batched_tokens);
    assert!((1..=4).contains(&warm.decoded_tokens), "{warm:?}");
    assert_eq!(counted(&warmed), before);
    assert_eq!(
        warmed.forget_namespace(WARM_UP_NAMESPACE),
        0,
        "the warm-up's KV was already forgotten"
    );
    assert_eq!(run_all(&mut warmed, vec![request()]), cold_answer);
    let (after_cold, after_warm) = (cold.stats(), warmed.stats());
    assert_eq!(after_warm.prefill_tokens, after_cold.prefill_tokens);
    assert_eq!(after_warm.prefill_keys, after_cold.prefill_keys);
    assert_eq!(after_warm.decode_steps, after_cold.decode_steps);

    warmed.add_request(request()).unwrap();
    let busy = warmed.warm_up().unwrap_err();
    assert!(matches!(busy, EngineError::InvalidBatch(_)), "{busy}");
}

#[test]
fn a_warm_up_on_a_prompt_reads_it_once_and_leaves_no_counts_and_no_cached_kv() {
    let cfg = EngineConfig::default();
    let mut core = engine(&cfg);
    let prompt = chat(core.tokenizer(), &qmsum_text(1200));
    let before = counted(&core);
    let took = core.warm_up_on(prompt.clone(), None).unwrap();
    assert!(took > std::time::Duration::ZERO);
    assert_eq!(counted(&core), before, "the read left counts behind");
    assert_eq!(core.stats().recent_prefill_steps.len(), 0);
    assert_eq!(
        core.forget_namespace(WARM_UP_NAMESPACE),
        0,
        "the read's KV was already forgotten"
    );
    // The same prompt asked afterwards is read whole: nothing of it is served from the cache.
    run_all(
        &mut core,
        vec![GenerateRequest::new(prompt.clone(), greedy(1))],
    );
    assert_eq!(core.stats().prefill_tokens, prompt.len() as u64);
    assert_eq!(core.stats().prefix_hit_tokens, 0);

    core.add_request(GenerateRequest::new(prompt, greedy(1)))
        .unwrap();
    let busy = core.warm_up_on(vec![1, 2, 3], None).unwrap_err();
    assert!(matches!(busy, EngineError::InvalidBatch(_)), "{busy}");
}

#[test]
fn a_calibration_keeps_its_prefill_steps_measure_and_no_kv_nor_any_other_count() {
    let cfg = EngineConfig {
        max_num_batched_tokens: 256,
        ..EngineConfig::default()
    };
    let mut core = engine(&cfg);
    assert_eq!(core.stats().prefill_seconds(dense_read(6000)), None);
    let window = SinkWindow {
        num_sink_tokens: 4,
        window: 252,
    };
    let before = core.stats();
    let calibration = core
        .calibrate(Some(window), std::time::Duration::from_secs(3600))
        .unwrap();
    // Eight steps of 256 at growing offsets, prompts of 128, 32 and 8, then 256 + 2 · 256 tokens
    // through the window.
    assert_eq!(calibration.dense_tokens, 2048 + 128 + 32 + 8);
    assert_eq!(calibration.windowed_tokens, 768);
    let after = core.stats();
    assert_eq!(after.recent_prefill_steps.len(), 11);
    assert_eq!(after.recent_windowed_steps.len(), 3);
    assert_eq!(after.prefill_tokens, 2216 + 768);
    assert!(after.prefill_keys > 0 && after.prefill_micros > 0);
    // Its reads asked nothing of the prefix cache's counts, finished no request, and left no KV.
    assert_eq!(
        (after.steps, after.computed_tokens, after.finished_requests),
        (
            before.steps,
            before.computed_tokens,
            before.finished_requests
        )
    );
    assert_eq!(after.prefix_queried_tokens, before.prefix_queried_tokens);
    assert_eq!((after.used_blocks, after.decode_steps), (0, 0));
    assert_eq!(core.forget_namespace(WARM_UP_NAMESPACE), 0);
    // The first question is estimated from them, a read through the window at the windowed pace.
    let dense = after
        .prefill_seconds(dense_read(6000))
        .expect("an estimate");
    assert!(dense > 0.0, "{dense}");
    let through_window = after
        .prefill_seconds(PromptRead {
            cached: 0,
            tokens: 6000,
            window: Some(window),
        })
        .expect("an estimate");
    assert!(through_window > 0.0, "{through_window}");

    // Asked to spend no time on the window, it reads none.
    let mut other = engine(&cfg);
    let calibration = other
        .calibrate(Some(window), std::time::Duration::ZERO)
        .unwrap();
    assert_eq!(calibration.windowed_tokens, 0);
    assert_eq!(other.stats().recent_windowed_steps.len(), 0);
    other
        .add_request(GenerateRequest::new(vec![1, 2, 3], greedy(1)))
        .unwrap();
    let busy = other
        .calibrate(None, std::time::Duration::ZERO)
        .unwrap_err();
    assert!(matches!(busy, EngineError::InvalidBatch(_)), "{busy}");
}

fn dense_read(tokens: usize) -> PromptRead {
    PromptRead {
        cached: 0,
        tokens,
        window: None,
    }
}

#[test]
fn a_warm_up_fits_a_kv_cache_smaller_than_one_step() {
    // 40 blocks of 16 tokens (see the test above for a block's bytes): 640 tokens against a step of 2,048.
    let cfg = EngineConfig {
        kv_cache: KvBudget::Bytes(40 * 737_280),
        max_num_batched_tokens: 2048,
        ..EngineConfig::default()
    };
    let mut core = engine(&cfg);
    let warm = core.warm_up().unwrap();
    assert_eq!(warm.prompt_tokens, 640 - 8);
    assert_eq!(core.stats().used_blocks, 0);
}
