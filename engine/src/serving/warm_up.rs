//! Warming an engine up before it serves: one full step of prompt and a few decoded tokens, then
//! shorter prompts ([`EngineCore::warm_up`]); or one given prompt read once ([`EngineCore::warm_up_on`],
//! as `docqa generate --warm-up` reads a prompt of its timed one's length).
//!
//! A device's first pass pays one-off costs: kernels and library code loaded on first use, handles and
//! workspaces set up, weights and buffers touched for the first time, decode graphs recorded. Paid at
//! start, they neither slow the first question nor enter the measured paces that the reading-time
//! estimates rest on ([`super::stats::EngineStats::prefill_seconds`]). Either leaves no trace:
//! its KV is dropped from the prefix cache and the engine's counters are set back to what they were.

use std::time::{Duration, Instant};

use super::core::EngineCore;
use super::request::{GenerateRequest, GenerationEvent};
use crate::backend::Backend;
use crate::error::{EngineError, Result};
use crate::kv::manager::CacheNamespace;
use crate::sampling::SamplingParams;

/// The prefix-cache namespace of warm-up prompts, forgotten when the warm-up ends (no tenant's
/// namespace is this one: theirs are hashes of their names).
pub const WARM_UP_NAMESPACE: CacheNamespace = u64::MAX;

/// Tokens a warm-up decodes after its prompt (fewer if the model ends its answer first).
const DECODED_TOKENS: usize = 4;

/// What a warm-up did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WarmUp {
    /// Prompt tokens read (one step's worth, or less where the context or the KV cache is smaller).
    pub prompt_tokens: usize,
    /// Tokens decoded after them.
    pub decoded_tokens: usize,
    /// Wall-clock time of the whole warm-up.
    pub took: Duration,
}

impl<B: Backend> EngineCore<B> {
    /// Reads one step's worth of prompt and decodes a few tokens, then reads shorter prompts (half
    /// the step, a quarter, … down to 8 tokens: cuBLAS picks its kernels by the number of rows, and
    /// loads each on first use), then forgets them all and sets the counters back. Only an idle engine
    /// warms up.
    pub fn warm_up(&mut self) -> Result<WarmUp> {
        let started = Instant::now();
        let tokens = self
            .step_tokens()
            .min(self.max_context().saturating_sub(DECODED_TOKENS + 1))
            .min(self.kv_capacity_tokens().saturating_sub(2 * DECODED_TOKENS))
            .max(1);
        let decoded = self.leaving_no_trace(|core| core.warm_up_reads(tokens))?;
        Ok(WarmUp {
            prompt_tokens: tokens,
            decoded_tokens: decoded,
            took: started.elapsed(),
        })
    }

    /// Reads `prompt` once and picks one token after it, as a warm-up does: the kernels of its size
    /// are loaded and its steps run once, and it leaves no trace (no cached KV, no counts, so none of
    /// its steps enters the reading-time estimates). Returns the time it took. Only an idle engine
    /// warms up.
    pub fn warm_up_on(&mut self, prompt: Vec<u32>) -> Result<Duration> {
        let started = Instant::now();
        self.leaving_no_trace(|core| core.warm_up_read(prompt, 1))?;
        Ok(started.elapsed())
    }

    /// Runs `work` on an idle engine, then forgets the warm-up namespace's KV and sets the counters
    /// back to what they were, whether `work` succeeded or not.
    fn leaving_no_trace<T>(&mut self, work: impl FnOnce(&mut Self) -> Result<T>) -> Result<T> {
        if self.has_work() {
            return Err(EngineError::InvalidBatch(
                "an engine with requests cannot warm up".into(),
            ));
        }
        let saved = self.counters();
        let done = work(self);
        self.forget_namespace(WARM_UP_NAMESPACE);
        self.restore_counters(saved);
        done
    }

    /// The warm-up's requests, one after the other; returns the tokens the first decoded.
    fn warm_up_reads(&mut self, tokens: usize) -> Result<usize> {
        let shorter =
            std::iter::successors(Some(tokens / 2), |n| Some(n / 2)).take_while(|&n| n >= 8);
        let mut decoded = 0;
        for (salt, n) in std::iter::once(tokens).chain(shorter).enumerate() {
            let max_tokens = if salt == 0 { DECODED_TOKENS } else { 1 };
            let prompt = warm_up_prompt(n, self.vocab_size(), salt as u64);
            let ran = self.warm_up_read(prompt, max_tokens)?;
            if salt == 0 {
                decoded = ran;
            }
        }
        Ok(decoded)
    }

    /// One warm-up request of `prompt` in the warm-up namespace, run to its end; returns the tokens
    /// it decoded.
    fn warm_up_read(&mut self, prompt: Vec<u32>, max_tokens: usize) -> Result<usize> {
        let request = GenerateRequest::new(
            prompt,
            SamplingParams {
                max_tokens,
                ..SamplingParams::default()
            },
        )
        .in_cache_namespace(WARM_UP_NAMESPACE);
        let id = self.add_request(request)?;
        self.run_warm_up().or_else(|e| {
            self.abort(id)?;
            Err(e)
        })
    }

    /// Steps the engine until its one warm-up request ends; returns the tokens it decoded.
    fn run_warm_up(&mut self) -> Result<usize> {
        while self.has_work() {
            for (_, event) in self.step()? {
                match event {
                    GenerationEvent::Finished { usage, .. } => return Ok(usage.completion_tokens),
                    GenerationEvent::Failed { message } => {
                        return Err(EngineError::Internal(format!(
                            "the warm-up failed: {message}"
                        )));
                    }
                    GenerationEvent::Token { .. } | GenerationEvent::Progress { .. } => {}
                }
            }
        }
        Err(EngineError::Internal(
            "the warm-up ended without finishing".into(),
        ))
    }
}

/// `tokens` ids spread over the vocabulary, starting where `salt` says so that no two warm-up prompts
/// share a prefix (any ids do: the warm-up's answers are thrown away).
fn warm_up_prompt(tokens: usize, vocab_size: usize, salt: u64) -> Vec<u32> {
    let vocab = vocab_size.max(1) as u64;
    (0..tokens as u64)
        .map(|i| ((i * 7919 + 13 + salt * 104_729) % vocab) as u32)
        .collect()
}
