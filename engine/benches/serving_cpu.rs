//! Serving throughput and prefix-cache latency of the CPU engine on the real SmolLM2-135M model.
//!
//! Measures (1) output tokens per second with 1, 4 and 16 concurrent greedy requests (each a ~120-token
//! chat prompt generating 64 tokens, all submitted at once, continuous batching), and (2) time to first
//! token of a second question on a 4,000-token document whose KV is in the prefix cache, against the same
//! question on a cold engine (the anchor measured in the same run).
//!
//! Run: `cargo bench -p docqa-engine --bench serving_cpu` (models are fetched on first use; threads follow
//! `RAYON_NUM_THREADS`, default all cores).

#[path = "../../tests/support/test_data.rs"]
mod test_data;

use std::time::{Duration, Instant};

use docqa_engine::backend::cpu::CpuBackend;
use docqa_engine::fetch::{NoProgress, default_models_dir, ensure_models};
use docqa_engine::models::llama::Llama;
use docqa_engine::sampling::SamplingParams;
use docqa_engine::serving::{EngineConfig, EngineCore, GenerateRequest, GenerationEvent};
use docqa_engine::text::{ChatMessage, TextTokenizer};

type Core = EngineCore<CpuBackend>;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = ensure_models(&default_models_dir(), &NoProgress)?.generator;
    let cfg = EngineConfig {
        max_num_batched_tokens: 1024,
        max_num_seqs: 16,
        ..EngineConfig::default()
    };
    let new_core = || -> Result<Core, Box<dyn std::error::Error>> {
        let model = Llama::load(CpuBackend::new(), &dir)?;
        Ok(EngineCore::new(
            model,
            TextTokenizer::from_model_dir(&dir)?,
            &cfg,
        )?)
    };
    let document = document_text(18_000)?;
    let mut core = new_core()?;
    println!("threads: {}", rayon::current_num_threads());
    println!("| concurrent requests | output tokens | wall s | output tok/s |");
    println!("|---|---|---|---|");
    for n in [1usize, 4, 16] {
        let prompts: Vec<Vec<u32>> = (0..n)
            .map(|i| {
                let excerpt: String = document.chars().skip(i * 300).take(400).collect();
                chat(
                    &core,
                    &format!("Question {i}: summarise this meeting.\n{excerpt}"),
                )
            })
            .collect::<Result<_, _>>()?;
        let (tokens, wall) = run(&mut core, prompts, 64)?;
        println!(
            "| {n} | {tokens} | {:.2} | {:.1} |",
            wall.as_secs_f64(),
            tokens as f64 / wall.as_secs_f64()
        );
    }
    let q1 = chat(
        &core,
        &format!("{document}\n\nAnswer from the meeting above: who spoke first?"),
    )?;
    let q2 = chat(
        &core,
        &format!("{document}\n\nAnswer from the meeting above: what was decided?"),
    )?;
    let mut cold = new_core()?;
    let cold_ttft = first_token(&mut cold, q2.clone())?;
    let mut warm = new_core()?;
    first_token(&mut warm, q1)?;
    let warm_ttft = first_token(&mut warm, q2.clone())?;
    println!();
    println!(
        "| second question on a {}-token document | time to first token |",
        q2.len()
    );
    println!("|---|---|");
    println!("| cold (anchor) | {:.3} s |", cold_ttft.as_secs_f64());
    println!(
        "| prefix-cached | {:.3} s ({:.1}× faster) |",
        warm_ttft.as_secs_f64(),
        cold_ttft.as_secs_f64() / warm_ttft.as_secs_f64()
    );
    Ok(())
}

fn chat(core: &Core, user: &str) -> Result<Vec<u32>, Box<dyn std::error::Error>> {
    let tok = core.tokenizer();
    let text = tok.apply_chat_template(&[ChatMessage::new("user", user)], true)?;
    Ok(tok.encode(&text, false)?)
}

fn greedy(max_tokens: usize) -> SamplingParams {
    SamplingParams {
        max_tokens,
        ..SamplingParams::default()
    }
}

/// Submits every prompt at once and runs to completion; returns generated tokens and wall time.
fn run(
    core: &mut Core,
    prompts: Vec<Vec<u32>>,
    max_tokens: usize,
) -> Result<(usize, Duration), Box<dyn std::error::Error>> {
    let start = Instant::now();
    for p in prompts {
        core.add_request(GenerateRequest::new(p, greedy(max_tokens)))?;
    }
    let mut tokens = 0;
    while core.has_work() {
        tokens += core
            .step()?
            .iter()
            .filter(|(_, e)| matches!(e, GenerationEvent::Token { .. }))
            .count();
    }
    Ok((tokens, start.elapsed()))
}

fn first_token(core: &mut Core, prompt: Vec<u32>) -> Result<Duration, Box<dyn std::error::Error>> {
    let start = Instant::now();
    core.add_request(GenerateRequest::new(prompt, greedy(1)))?;
    while core.has_work() {
        core.step()?;
    }
    Ok(start.elapsed())
}

/// The first `chars` characters of the QMSum fixture's meeting transcript (`tests/fixtures/qa/`).
fn document_text(chars: usize) -> Result<String, Box<dyn std::error::Error>> {
    let path = test_data::fixture("qa/qmsum_val.jsonl");
    let line = std::fs::read_to_string(path)?
        .lines()
        .next()
        .unwrap_or_default()
        .to_owned();
    let doc: serde_json::Value = serde_json::from_str(&line)?;
    Ok(doc["text"]
        .as_str()
        .unwrap_or_default()
        .chars()
        .take(chars)
        .collect())
}
