//! Choosing the next token from logits: repetition penalty, temperature, top-k, top-p, seeded sampling.
//!
//! The order follows HF `transformers` logits processors: repetition penalty on the raw logits (divide
//! positive logits, multiply negative ones, once per distinct token in the history), then temperature,
//! top-k, top-p (the smallest set of most likely tokens whose probability reaches `top_p`), then a draw
//! from the renormalised distribution. Temperature 0 is greedy (argmax, lowest id on ties). Stop
//! strings are handled on the decoded text by [`stop::StopStringMatcher`].

pub mod repetition;
pub mod stop;

use std::collections::HashSet;

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

use crate::error::{EngineError, Result};

pub use stop::{StopScan, StopStringMatcher};

/// How to pick tokens and when to stop.
#[derive(Debug, Clone, PartialEq)]
pub struct SamplingParams {
    /// Softmax temperature; `0` means greedy decoding.
    pub temperature: f32,
    /// Keep only the `top_k` most likely tokens; `0` disables the filter.
    pub top_k: usize,
    /// Keep the smallest set of most likely tokens whose probabilities sum to at least `top_p`; `1` disables.
    pub top_p: f32,
    /// HF-style repetition penalty; `1` disables.
    pub repetition_penalty: f32,
    /// Seed of the random generator; `None` seeds from the operating system.
    pub seed: Option<u64>,
    /// Maximum number of tokens to generate.
    pub max_tokens: usize,
    /// Token ids that end generation (in addition to the model's end-of-sequence ids).
    pub stop_token_ids: Vec<u32>,
    /// Strings that end generation; the text before the first one is kept.
    pub stop_strings: Vec<String>,
    /// End generation when it falls into a loop ([`repetition::repeating_block`]), with
    /// [`crate::serving::FinishReason::Loop`].
    pub stop_on_repetition: bool,
}

impl Default for SamplingParams {
    fn default() -> Self {
        Self {
            temperature: 0.0,
            top_k: 0,
            top_p: 1.0,
            repetition_penalty: 1.0,
            seed: None,
            max_tokens: 256,
            stop_token_ids: Vec::new(),
            stop_strings: Vec::new(),
            stop_on_repetition: false,
        }
    }
}

impl SamplingParams {
    /// Checks that every parameter is in range: temperature finite and ≥ 0, top_p in (0, 1],
    /// repetition penalty finite and > 0, max_tokens > 0.
    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(EngineError::InvalidSampling(m));
        if !self.temperature.is_finite() || self.temperature < 0.0 {
            return bad(format!(
                "temperature {} must be finite and >= 0",
                self.temperature
            ));
        }
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            return bad(format!("top_p {} must be in (0, 1]", self.top_p));
        }
        if !self.repetition_penalty.is_finite() || self.repetition_penalty <= 0.0 {
            return bad(format!(
                "repetition_penalty {} must be finite and > 0",
                self.repetition_penalty
            ));
        }
        if self.max_tokens == 0 {
            return bad("max_tokens must be at least 1".into());
        }
        Ok(())
    }
}

/// Picks tokens according to [`SamplingParams`], with its own seeded random generator.
#[derive(Debug)]
pub struct Sampler {
    params: SamplingParams,
    rng: StdRng,
    candidates: Vec<(u32, f32)>,
}

impl Sampler {
    /// A sampler for `params`; the same seed gives the same choices for the same logits.
    pub fn new(params: &SamplingParams) -> Self {
        let seed = params.seed.unwrap_or_else(rand::random);
        Self {
            params: params.clone(),
            rng: StdRng::seed_from_u64(seed),
            candidates: Vec::new(),
        }
    }

    /// The parameters this sampler was built with.
    pub fn params(&self) -> &SamplingParams {
        &self.params
    }

    /// Whether `token` is one of the request's stop token ids.
    pub fn is_stop_token(&self, token: u32) -> bool {
        self.params.stop_token_ids.contains(&token)
    }

    /// Picks the next token. `logits` (one per vocabulary entry) is modified in place by the repetition
    /// penalty; `history` holds the tokens seen so far (prompt and generated).
    pub fn sample(&mut self, logits: &mut [f32], history: &[u32]) -> u32 {
        apply_repetition_penalty(logits, history, self.params.repetition_penalty);
        let pick = self.next_pick();
        pick_token(logits, &pick, &mut self.candidates)
    }

    /// Whether the next pick can be made from the raw logits alone (no repetition penalty), so a
    /// backend can make it where the logits are ([`crate::backend::Backend::sample_rows`]).
    pub fn picks_from_raw_logits(&self) -> bool {
        self.params.repetition_penalty == 1.0
    }

    /// The next pick's parameters, drawing from the generator when the pick is random (as
    /// [`Self::sample`] does): [`pick_token`] with them gives the token `sample` would.
    pub fn next_pick(&mut self) -> Pick {
        let greedy = self.params.temperature <= 0.0 || self.params.top_k == 1;
        Pick {
            temperature: if greedy { 0.0 } else { self.params.temperature },
            top_k: self.params.top_k,
            top_p: self.params.top_p,
            draw: if greedy {
                0.0
            } else {
                self.rng.random::<f32>()
            },
        }
    }
}

/// One pick's parameters: temperature (0: arg-max), top-k (0: off), top-p (1: off) and the uniform
/// draw in [0, 1) that chooses within the kept tokens.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Pick {
    pub temperature: f32,
    pub top_k: usize,
    pub top_p: f32,
    pub draw: f32,
}

impl Pick {
    /// The arg-max.
    pub const GREEDY: Pick = Pick {
        temperature: 0.0,
        top_k: 0,
        top_p: 1.0,
        draw: 0.0,
    };

    /// The pick as the four floats a device kernel reads: temperature, top-k, top-p, draw.
    pub fn to_row(&self) -> [f32; 4] {
        [self.temperature, self.top_k as f32, self.top_p, self.draw]
    }

    /// The pick from a row of [`Self::to_row`].
    pub fn from_row(row: &[f32]) -> Self {
        Self {
            temperature: row[0],
            top_k: row[1] as usize,
            top_p: row[2],
            draw: row[3],
        }
    }
}

/// The token `pick` chooses from `logits`: the arg-max when the temperature is 0 or top-k is 1;
/// otherwise temperature, top-k, softmax and top-p keep the most likely tokens (ordered by logit,
/// then by id), and the draw times their total probability falls in one token's share of the
/// cumulative sum. `candidates` is scratch space.
pub fn pick_token(logits: &[f32], pick: &Pick, candidates: &mut Vec<(u32, f32)>) -> u32 {
    if pick.temperature <= 0.0 || pick.top_k == 1 {
        return argmax(logits);
    }
    let probs = filtered_probabilities(logits, pick, candidates);
    // Sums in f64: over a long flat tail, f32 running sums drift by many tokens' shares.
    let total: f64 = probs.iter().map(|&(_, p)| f64::from(p)).sum();
    let mut u = f64::from(pick.draw) * total;
    for &(id, p) in probs.iter() {
        let p = f64::from(p);
        if u < p {
            return id;
        }
        u -= p;
    }
    probs.last().map_or_else(|| argmax(logits), |&(id, _)| id)
}

/// Temperature, top-k, softmax and top-p: the kept `(id, probability)` pairs, most likely first
/// (not renormalised).
fn filtered_probabilities<'a>(
    logits: &[f32],
    pick: &Pick,
    candidates: &'a mut Vec<(u32, f32)>,
) -> &'a [(u32, f32)] {
    let inv_t = 1.0 / pick.temperature;
    candidates.clear();
    candidates.extend(logits.iter().enumerate().map(|(i, &l)| {
        (
            i as u32,
            if l.is_nan() {
                f32::NEG_INFINITY
            } else {
                l * inv_t
            },
        )
    }));
    let by_logit_desc = |a: &(u32, f32), b: &(u32, f32)| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0));
    let k = pick.top_k;
    if k > 0 && k < candidates.len() {
        candidates.select_nth_unstable_by(k - 1, by_logit_desc);
        candidates.truncate(k);
    }
    candidates.sort_unstable_by(by_logit_desc);
    softmax_in_place(candidates);
    let keep = nucleus_len(candidates, pick.top_p);
    candidates.truncate(keep);
    candidates
}

/// HF repetition penalty: for each distinct token in `history`, divide its logit by `penalty` when
/// positive, multiply when negative.
pub fn apply_repetition_penalty(logits: &mut [f32], history: &[u32], penalty: f32) {
    if penalty == 1.0 {
        return;
    }
    let mut seen = HashSet::with_capacity(history.len());
    for &t in history {
        if let Some(l) = logits.get_mut(t as usize)
            && seen.insert(t)
        {
            *l = if *l > 0.0 { *l / penalty } else { *l * penalty };
        }
    }
}

/// Index of the largest logit (lowest index on ties; NaN never wins).
pub fn argmax(logits: &[f32]) -> u32 {
    let mut best = 0usize;
    for (i, &l) in logits.iter().enumerate() {
        if l > logits[best] || (logits[best].is_nan() && !l.is_nan()) {
            best = i;
        }
    }
    best as u32
}

/// Replaces logits by probabilities (numerically stable: the max is subtracted first).
fn softmax_in_place(items: &mut [(u32, f32)]) {
    let max = items
        .iter()
        .map(|&(_, l)| l)
        .fold(f32::NEG_INFINITY, f32::max);
    if !max.is_finite() {
        let uniform = 1.0 / items.len().max(1) as f32;
        items.iter_mut().for_each(|(_, p)| *p = uniform);
        return;
    }
    let mut sum = 0.0f32;
    for (_, l) in items.iter_mut() {
        *l = (*l - max).exp();
        sum += *l;
    }
    items.iter_mut().for_each(|(_, p)| *p /= sum);
}

/// Length of the smallest prefix of `sorted` (probabilities, descending) whose sum reaches `top_p`.
fn nucleus_len(sorted: &[(u32, f32)], top_p: f32) -> usize {
    if top_p >= 1.0 {
        return sorted.len();
    }
    let mut cumulative = 0.0f64;
    for (i, &(_, p)) in sorted.iter().enumerate() {
        cumulative += f64::from(p);
        if cumulative >= f64::from(top_p) {
            return i + 1;
        }
    }
    sorted.len().max(1)
}
