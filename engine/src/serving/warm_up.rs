//! Warming an engine up before it serves: one full step of prompt and a few decoded tokens, then
//! shorter prompts ([`EngineCore::warm_up`]); or one given prompt read once ([`EngineCore::warm_up_on`],
//! as `docqa generate --warm-up` reads a prompt of its timed one's length).
//!
//! A device's first pass pays one-off costs: kernels and library code loaded on first use, handles and
//! workspaces set up, weights and buffers touched for the first time, decode graphs recorded. Paid at
//! start, they neither slow the first question nor enter the measured paces that the reading-time
//! estimates rest on ([`super::stats::EngineStats::prefill_seconds`]). Either leaves no trace:
//! its KV is dropped from the prefix cache and the engine's counters are set back to what they were.
//!
//! A warm engine can then calibrate those estimates ([`EngineCore::calibrate`]): it reads a prompt of
//! several steps and a few short ones, and through a sink window where that is cheap, and keeps only
//! their prefill steps' measure. Without it the first long read is estimated from short prompts alone,
//! which cannot tell a key's time on a GPU (a 120K-token read at the Llama-3.1-8B shape was estimated
//! at 0.70 of its time, a 72K sink-window read at the SmolLM2 shape at 0.37).

use std::time::{Duration, Instant};

use super::core::EngineCore;
use super::request::{GenerateRequest, GenerationEvent};
use super::stats::PromptRead;
use crate::backend::Backend;
use crate::error::{EngineError, Result};
use crate::kv::manager::{CacheNamespace, SinkWindow};
use crate::sampling::SamplingParams;

/// The prefix-cache namespace of warm-up prompts, forgotten when the warm-up ends (no tenant's
/// namespace is this one: theirs are hashes of their names).
pub const WARM_UP_NAMESPACE: CacheNamespace = u64::MAX;

/// Tokens a warm-up decodes after its prompt (fewer if the model ends its answer first).
const DECODED_TOKENS: usize = 4;

/// Steps of one size the calibration's long prompt is read in, each further into it: three or
/// more measure a key's time ([`super::step_cost`]); at the Llama-3.1-8B shape on an H100 four were
/// too uneven to, eight agreed within a ninth (the step cost's tests replay them).
const CALIBRATION_CHUNKS: usize = 8;

/// The calibration's short prompts, as shares of a step: with the long prompt's steps they tell a
/// step's fixed time from its tokens'.
const CALIBRATION_SHORT_READS: [usize; 3] = [2, 8, 32];

/// What a calibration's read through a sink window may be estimated to take, by default: a small
/// model's window on a GPU (tens of milliseconds), not an 8B model's 128K one (seconds).
pub const WINDOWED_CALIBRATION_WITHIN: Duration = Duration::from_secs(1);

/// Salts of the calibration's prompts, apart from the warm-up's.
const CALIBRATION_SALT: u64 = 1 << 20;

/// What a calibration read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Calibration {
    /// Prompt tokens read densely.
    pub dense_tokens: usize,
    /// Prompt tokens read through the sink window (0 where none was asked for or it was too long).
    pub windowed_tokens: usize,
    /// Wall-clock time of the whole calibration.
    pub took: Duration,
}

/// What a warm-up's or a calibration's reads leave of their counts.
enum Kept {
    Nothing,
    /// The prefill steps' measure, which the reading-time estimates are fitted to.
    PrefillMeasure,
}

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

    /// Reads `prompt` once (through `window`, if given) and picks one token after it, as a warm-up
    /// does: the kernels of its size are loaded and its steps run once, and it leaves no trace (no
    /// cached KV, no counts, so none of its steps enters the reading-time estimates). Returns the
    /// time it took. Only an idle engine warms up.
    pub fn warm_up_on(&mut self, prompt: Vec<u32>, window: Option<SinkWindow>) -> Result<Duration> {
        let started = Instant::now();
        let request = GenerateRequest::new(prompt, one_token());
        let request = match window {
            Some(w) => request.with_sink_window(w),
            None => request,
        };
        self.leaving_no_trace(|core| core.warm_up_read(request))?;
        Ok(started.elapsed())
    }

    /// Measures the prefill steps the reading-time estimates are fitted to, on a warmed-up engine:
    /// reads a prompt of [`CALIBRATION_CHUNKS`] steps (fewer where the context or the KV cache is
    /// smaller), then prompts of a half, an eighth and a thirty-second of a step, then, where `window`
    /// is given, the steps so far put it within `windowed_within` (see [`WINDOWED_CALIBRATION_WITHIN`])
    /// and the KV cache could hold it whole, a prompt two steps longer than the window through it.
    /// Their KV is forgotten and every counter set back but the prefill steps' measure, so the first
    /// question's estimate rests on them. Only an idle engine calibrates.
    pub fn calibrate(
        &mut self,
        window: Option<SinkWindow>,
        windowed_within: Duration,
    ) -> Result<Calibration> {
        let started = Instant::now();
        let (dense_tokens, windowed_tokens) = self
            .forgetting_reads(Kept::PrefillMeasure, |core| {
                core.calibration_reads(window, windowed_within)
            })?;
        Ok(Calibration {
            dense_tokens,
            windowed_tokens,
            took: started.elapsed(),
        })
    }

    /// The calibration's reads; returns the tokens read densely and through the window.
    fn calibration_reads(
        &mut self,
        window: Option<SinkWindow>,
        windowed_within: Duration,
    ) -> Result<(usize, usize)> {
        let step = self.step_tokens().max(1);
        let room = (self.max_context().saturating_sub(2))
            .min(self.kv_capacity_tokens().saturating_sub(2 * DECODED_TOKENS))
            .max(1);
        let long = (CALIBRATION_CHUNKS * step)
            .min(room / step * step)
            .max(room.min(step));
        let short = CALIBRATION_SHORT_READS.iter().map(|&share| step / share);
        let mut dense = 0;
        for (salt, tokens) in std::iter::once(long).chain(short).enumerate() {
            if tokens == 0 {
                continue;
            }
            let prompt = warm_up_prompt(tokens, self.vocab_size(), CALIBRATION_SALT + salt as u64);
            self.warm_up_read(GenerateRequest::new(prompt, one_token()))?;
            dense += tokens;
        }
        let windowed = match window {
            Some(window) => self.calibration_read_through(window, windowed_within)?,
            None => 0,
        };
        Ok((dense, windowed))
    }

    /// The calibration's read through `window`, two steps longer than it, where the steps so far
    /// put it within `windowed_within` and the KV cache could hold it whole; returns its tokens (0
    /// where it was not read).
    fn calibration_read_through(
        &mut self,
        window: SinkWindow,
        windowed_within: Duration,
    ) -> Result<usize> {
        let tokens = window.num_sink_tokens + window.window + 2 * self.step_tokens().max(1);
        let read = PromptRead {
            cached: 0,
            tokens,
            window: Some(window),
        };
        let cheap = self
            .stats()
            .prefill_seconds(read)
            .is_some_and(|s| s <= windowed_within.as_secs_f64());
        if !cheap || tokens > self.kv_capacity_tokens() {
            return Ok(0);
        }
        let prompt = warm_up_prompt(tokens, self.vocab_size(), CALIBRATION_SALT - 1);
        self.warm_up_read(GenerateRequest::new(prompt, one_token()).with_sink_window(window))?;
        Ok(tokens)
    }

    /// Runs `work` on an idle engine, then forgets the warm-up namespace's KV and sets the counters
    /// back to what they were, whether `work` succeeded or not.
    fn leaving_no_trace<T>(&mut self, work: impl FnOnce(&mut Self) -> Result<T>) -> Result<T> {
        self.forgetting_reads(Kept::Nothing, work)
    }

    /// Runs `work` on an idle engine, then forgets the warm-up namespace's KV and sets the counters
    /// back to what they were but what `kept` says, whether `work` succeeded or not.
    fn forgetting_reads<T>(
        &mut self,
        kept: Kept,
        work: impl FnOnce(&mut Self) -> Result<T>,
    ) -> Result<T> {
        if self.has_work() {
            return Err(EngineError::InvalidBatch(
                "an engine with requests cannot warm up".into(),
            ));
        }
        let saved = self.counters();
        let done = work(self);
        self.forget_namespace(WARM_UP_NAMESPACE);
        self.restore_counters(match kept {
            Kept::Nothing => saved,
            Kept::PrefillMeasure => saved.with_prefill_measure_of(&self.counters()),
        });
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
            let ran = self.warm_up_read(GenerateRequest::new(prompt, greedy(max_tokens)))?;
            if salt == 0 {
                decoded = ran;
            }
        }
        Ok(decoded)
    }

    /// `request` run to its end in the warm-up namespace, its blocks never copied to the lower KV
    /// tiers (they are forgotten when it ends); returns the tokens it decoded.
    fn warm_up_read(&mut self, request: GenerateRequest) -> Result<usize> {
        let mut request = request.in_cache_namespace(WARM_UP_NAMESPACE);
        request.cache_scope.scratch = true;
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

/// Sampling of a warm-up or calibration read: `max_tokens` tokens at the default settings.
fn greedy(max_tokens: usize) -> SamplingParams {
    SamplingParams {
        max_tokens,
        ..SamplingParams::default()
    }
}

/// Sampling of a read that only needs its prompt read: one token.
fn one_token() -> SamplingParams {
    greedy(1)
}

/// `tokens` ids spread over the vocabulary, starting where `salt` says so that no two warm-up prompts
/// share a prefix (any ids do: the warm-up's answers are thrown away).
fn warm_up_prompt(tokens: usize, vocab_size: usize, salt: u64) -> Vec<u32> {
    let vocab = vocab_size.max(1) as u64;
    (0..tokens as u64)
        .map(|i| ((i * 7919 + 13 + salt * 104_729) % vocab) as u32)
        .collect()
}
