//! Choosing the next token from logits: repetition penalty, temperature, top-k, top-p, seeded sampling.
//!
//! The order follows HF `transformers` logits processors: repetition penalty on the raw logits (divide
//! positive logits, multiply negative ones, once per distinct token in the history), then temperature,
//! top-k, top-p (the smallest set of most likely tokens whose probability reaches `top_p`), then a draw
//! from the renormalised distribution. Temperature 0 is greedy (argmax, lowest id on ties). Stop
//! strings are handled on the decoded text by [`stop::StopStringMatcher`].

pub mod stop;

use std::collections::HashSet;

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

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
        }
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
        if self.params.temperature <= 0.0 || self.params.top_k == 1 {
            return argmax(logits);
        }
        let draw = self.rng.random::<f32>();
        let probs = self.filtered_probabilities(logits);
        let total: f32 = probs.iter().map(|&(_, p)| p).sum();
        let mut u = draw * total;
        for &(id, p) in probs {
            if u < p {
                return id;
            }
            u -= p;
        }
        probs.last().map_or_else(|| argmax(logits), |&(id, _)| id)
    }

    /// Temperature, top-k, softmax and top-p: the kept `(id, probability)` pairs, most likely first
    /// (not renormalised).
    fn filtered_probabilities(&mut self, logits: &[f32]) -> &[(u32, f32)] {
        let inv_t = 1.0 / self.params.temperature;
        self.candidates.clear();
        self.candidates.extend(
            logits
                .iter()
                .enumerate()
                .map(|(i, &l)| (i as u32, if l.is_nan() { f32::NEG_INFINITY } else { l * inv_t })),
        );
        let by_logit_desc = |a: &(u32, f32), b: &(u32, f32)| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0));
        let k = self.params.top_k;
        if k > 0 && k < self.candidates.len() {
            self.candidates.select_nth_unstable_by(k - 1, by_logit_desc);
            self.candidates.truncate(k);
        }
        self.candidates.sort_unstable_by(by_logit_desc);
        softmax_in_place(&mut self.candidates);
        let keep = nucleus_len(&self.candidates, self.params.top_p);
        self.candidates.truncate(keep);
        &self.candidates
    }
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
    let max = items.iter().map(|&(_, l)| l).fold(f32::NEG_INFINITY, f32::max);
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
    let mut cumulative = 0.0f32;
    for (i, &(_, p)) in sorted.iter().enumerate() {
        cumulative += p;
        if cumulative >= top_p {
            return i + 1;
        }
    }
    sorted.len().max(1)
}
