//! Counters and gauges a serving engine reports (for logs and the service's metrics), and what they
//! predict: how long reading a prompt will take.
//!
//! A prompt's reading time grows faster than its length: besides the products every token goes
//! through, each row attends to every key before it (or to its sink window's). The engine counts both
//! in its prefill steps, weighing a key by what it costs against a token's products in multiply-adds
//! ([`attention_weight`]), and measures the steps' time. A step also costs a fixed time whatever its
//! work (launches, the weights read once however few the rows), which dominates where the model is
//! small against the device: the engine fits a step's time as a fixed part plus a pace of work over
//! its recent prefill steps ([`super::step_cost`]; a key's own pace where a long read's chunks
//! measure it), and a read's estimate is its steps' fixed parts plus its own work at that pace
//! ([`EngineStats::prefill_seconds`]).

use crate::config::LlamaConfig;
use crate::kv::manager::SinkWindow;
use crate::kv::tiers::TierStats;

use super::step_cost::RecentSteps;
pub use super::step_cost::StepCost;

/// A snapshot of the engine's state and its counters since it started.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct EngineStats {
    /// KV blocks in the pool.
    pub total_blocks: usize,
    /// KV blocks referenced by requests.
    pub used_blocks: usize,
    /// KV blocks free (some still holding cached prefixes).
    pub free_blocks: usize,
    /// Requests running.
    pub running: usize,
    /// Requests waiting.
    pub waiting: usize,
    /// Steps run.
    pub steps: u64,
    /// Tokens run through the model.
    pub computed_tokens: u64,
    /// Prompt tokens taken from the prefix cache instead of being computed (finished requests).
    pub cached_tokens: u64,
    /// Prompt tokens looked up in the prefix cache.
    pub prefix_queried_tokens: u64,
    /// Of those, tokens found.
    pub prefix_hit_tokens: u64,
    /// Preemptions (requests recomputed later).
    pub preemptions: u64,
    /// Requests finished, cancelled included.
    pub finished_requests: u64,
    /// Decode steps replayed from recorded graphs (CUDA graphs; 0 on the CPU).
    pub graph_replays: u64,
    /// Tokens computed in steps that read prompt (chunks of prompts, with any decode tokens beside them).
    pub prefill_tokens: u64,
    /// Wall-clock microseconds of those steps.
    pub prefill_micros: u64,
    /// Keys the rows of those steps attended to, summed over the rows.
    pub prefill_keys: u64,
    /// The last of those steps that read densely: their tokens, attended keys and time, for the
    /// fit of a step's cost.
    pub recent_prefill_steps: RecentSteps,
    /// The last of those steps that read through a sink window, for a windowed key's time.
    pub recent_windowed_steps: RecentSteps,
    /// Prompt tokens one step reads at most (the engine's chunk): a read's steps.
    pub step_tokens: usize,
    /// What one attended key costs against one token's products ([`attention_weight`] of the model).
    pub attention_weight: f64,
    /// Steps that only decoded (one new token per running request).
    pub decode_steps: u64,
    /// Wall-clock microseconds of those steps.
    pub decode_micros: u64,
    /// The lower KV tiers (all zero without them).
    pub tiers: TierStats,
    /// Whether lower KV tiers are attached.
    pub tiers_attached: bool,
}

/// Steps' worth of measurement below which a rate is not reported (the first steps run op by op
/// and record CUDA graphs, so they say little about the steady pace).
const MIN_PREFILL_TOKENS: u64 = 1024;
const MIN_DECODE_STEPS: u64 = 16;

impl EngineStats {
    /// Prompt tokens read per second, measured over the engine's prefill steps so far; None until a
    /// thousand tokens were read.
    pub fn prefill_tokens_per_second(&self) -> Option<f64> {
        (self.prefill_tokens >= MIN_PREFILL_TOKENS && self.prefill_micros > 0)
            .then(|| self.prefill_tokens as f64 * 1e6 / self.prefill_micros as f64)
    }

    /// Seconds reading `read` should take: its steps' fixed time and its work (tokens and attended
    /// keys, weighed as the model's multiply-adds weigh them) at the pace the prefill steps so far
    /// were fitted to ([`EngineStats::step_cost`]); None until a thousand tokens were read.
    pub fn prefill_seconds(&self, read: PromptRead) -> Option<f64> {
        let cost = match read.window {
            Some(_) => self.step_cost()?.through_window(),
            None => self.step_cost()?,
        };
        let steps = read.tokens.div_ceil(self.step_tokens.max(1)) as f64;
        Some(cost.seconds(steps, read.tokens as f64, read.attended_keys() as f64))
    }

    /// A prefill step's time as a fixed part and paces of tokens and keys, fitted to the recent
    /// dense prefill steps where they tell them apart ([`RecentSteps::fit`]); otherwise the pace alone,
    /// all the prefill steps' work over their time. A windowed key's time is measured by the recent
    /// windowed steps where there are enough of them ([`StepCost::with_windowed_keys`]). None until a
    /// thousand tokens were read.
    pub fn step_cost(&self) -> Option<StepCost> {
        self.prefill_tokens_per_second()?;
        let dense = self
            .recent_prefill_steps
            .fit(self.attention_weight)
            .unwrap_or(StepCost::weighed(
                0.0,
                self.prefill_micros as f64
                    / 1e6
                    / self.prefill_work(self.prefill_tokens, self.prefill_keys),
                self.attention_weight,
            ));
        Some(dense.with_windowed_keys(&self.recent_windowed_steps))
    }

    /// Counts a prefill step of `tokens` tokens whose rows attended to `keys` keys, run in `micros`;
    /// `windowed` where any of its rows read through a sink window (all its keys are then counted as
    /// windowed ones: a step rarely mixes a windowed read with a dense prompt's chunk).
    pub fn count_prefill_step(&mut self, tokens: u64, keys: u64, micros: u64, windowed: bool) {
        self.prefill_tokens += tokens;
        self.prefill_keys += keys;
        self.prefill_micros += micros;
        let recent = match windowed {
            true => &mut self.recent_windowed_steps,
            false => &mut self.recent_prefill_steps,
        };
        recent.push(tokens, keys, micros);
    }

    /// Takes `measured`'s prefill measure (its prefill counts and recent steps), leaving every other
    /// counter as it is: what a calibration keeps of its reads.
    pub fn keep_prefill_measure(&mut self, measured: &EngineStats) {
        self.prefill_tokens = measured.prefill_tokens;
        self.prefill_keys = measured.prefill_keys;
        self.prefill_micros = measured.prefill_micros;
        self.recent_prefill_steps = measured.recent_prefill_steps;
        self.recent_windowed_steps = measured.recent_windowed_steps;
    }

    /// `tokens` tokens' products and `keys` attended keys, in tokens' products.
    fn prefill_work(&self, tokens: u64, keys: u64) -> f64 {
        tokens as f64 + self.attention_weight * keys as f64
    }

    /// Seconds a decode step takes, measured over the decode steps so far; None until sixteen ran.
    pub fn seconds_per_decode_step(&self) -> Option<f64> {
        (self.decode_steps >= MIN_DECODE_STEPS)
            .then(|| self.decode_micros as f64 / 1e6 / self.decode_steps as f64)
    }

    /// Share of looked-up prompt tokens found in the prefix cache.
    pub fn prefix_hit_rate(&self) -> f64 {
        if self.prefix_queried_tokens == 0 {
            0.0
        } else {
            self.prefix_hit_tokens as f64 / self.prefix_queried_tokens as f64
        }
    }
}

/// A prompt read: `tokens` new rows after `cached` tokens already in the cache, attending to all the
/// keys before them or, under a sink window, to at most its sinks and window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PromptRead {
    /// Tokens already in the cache (the rows' first position).
    pub cached: usize,
    /// Rows to compute.
    pub tokens: usize,
    /// The sink window the rows attend through, if any.
    pub window: Option<SinkWindow>,
}

impl PromptRead {
    /// Keys the rows attend to, summed over the rows: the row at position p sees p + 1 keys, at most
    /// the window's sinks and window.
    pub fn attended_keys(&self) -> u64 {
        if self.tokens == 0 {
            return 0;
        }
        // Row counts run from a to b; each is capped at `cap`.
        let (a, b) = (self.cached as u64 + 1, (self.cached + self.tokens) as u64);
        let cap = self
            .window
            .map_or(b, |w| ((w.num_sink_tokens + w.window) as u64).min(b));
        let uncapped = if cap >= a {
            (a + cap) * (cap - a + 1) / 2
        } else {
            0
        };
        let capped_rows = b - cap.max(a - 1);
        uncapped + capped_rows * cap
    }
}

/// What attending to one key costs a row, against one token going through the model's products, in
/// multiply-adds: q·k and p·v over every head (2 · heads · head_dim a layer), against the q/k/v,
/// output and MLP products (hidden · (heads + 2 · kv_heads) · head_dim + heads · head_dim · hidden +
/// 3 · hidden · intermediate a layer). The LM head, run for a prompt's last row only, is left out.
pub fn attention_weight(c: &LlamaConfig) -> f64 {
    let q_width = c.num_attention_heads * c.head_dim;
    let kv_width = c.num_key_value_heads * c.head_dim;
    let products = c.hidden_size * (q_width + 2 * kv_width)
        + q_width * c.hidden_size
        + 3 * c.hidden_size * c.intermediate_size;
    2.0 * q_width as f64 / products as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_appear_once_enough_was_measured() {
        let mut s = EngineStats {
            prefill_tokens: 512,
            prefill_micros: 50_000,
            decode_steps: 8,
            decode_micros: 80_000,
            ..EngineStats::default()
        };
        assert_eq!(s.prefill_tokens_per_second(), None);
        assert_eq!(s.seconds_per_decode_step(), None);
        s.prefill_tokens = 2048;
        s.prefill_micros = 100_000;
        s.decode_steps = 20;
        s.decode_micros = 200_000;
        assert_eq!(s.prefill_tokens_per_second(), Some(20_480.0));
        assert_eq!(s.seconds_per_decode_step(), Some(0.01));
    }

    fn read(cached: usize, tokens: usize, window: Option<(usize, usize)>) -> PromptRead {
        PromptRead {
            cached,
            tokens,
            window: window.map(|(num_sink_tokens, window)| SinkWindow {
                num_sink_tokens,
                window,
            }),
        }
    }

    #[test]
    fn a_reads_keys_are_each_rows_position_plus_one_capped_by_its_window() {
        for (cached, tokens) in [
            (0, 0),
            (0, 1),
            (0, 700),
            (5, 10),
            (3, 9000),
            (8000, 500),
            (20_000, 64),
        ] {
            for window in [None, Some((4, 8188)), Some((4, 60)), Some((0, 1))] {
                let r = read(cached, tokens, window);
                let cap = window.map_or(usize::MAX, |(s, w)| s + w);
                let counted: u64 = (cached..cached + tokens)
                    .map(|p| (p + 1).min(cap) as u64)
                    .sum();
                assert_eq!(r.attended_keys(), counted, "{r:?}");
            }
        }
    }

    fn smollm2() -> LlamaConfig {
        let json = crate::synth::named::SMOLLM2_135M.config_json().to_string();
        LlamaConfig::from_json(&json).expect("the shape's config")
    }

    #[test]
    fn a_key_weighs_two_q_widths_against_a_tokens_products() {
        // SmolLM2-135M: 2 · 576 against 576 · (576 + 2 · 192) + 576 · 576 + 3 · 576 · 1536 a layer
        // (3.26e-4); Llama-3.1-8B: 2 · 4096 against 4096 · (4096 + 2 · 1024) + 4096 · 4096
        // + 3 · 4096 · 14336 (3.76e-5).
        let w = attention_weight(&smollm2());
        assert!((w - 1152.0 / 3_538_944.0).abs() < 1e-12, "{w}");
        let json = crate::synth::named::LLAMA_3_1_8B.config_json().to_string();
        let w = attention_weight(&LlamaConfig::from_json(&json).expect("the shape's config"));
        assert!((w - 8192.0 / 218_103_808.0).abs() < 1e-12, "{w}");
    }

    /// Stats after prefill steps of `tokens` tokens each (every one a prompt's first chunk), each
    /// taking `micros(work)` microseconds for its work in tokens' products.
    fn after_steps(tokens: &[usize], micros: impl Fn(f64) -> f64) -> EngineStats {
        let mut s = EngineStats {
            attention_weight: attention_weight(&smollm2()),
            step_tokens: 2048,
            ..EngineStats::default()
        };
        for &t in tokens {
            let keys = read(0, t, None).attended_keys();
            let work = t as f64 + s.attention_weight * keys as f64;
            s.count_prefill_step(t as u64, keys, micros(work).round() as u64, false);
        }
        s
    }

    #[test]
    fn a_steps_fixed_time_is_told_from_its_pace_once_the_steps_work_spreads() {
        // A GPU where a step costs 4 ms whatever it reads, and a microsecond a token's products.
        let s = after_steps(&[1527, 7, 1160, 2048, 300], |work| 4000.0 + work);
        let cost = s.step_cost().expect("a fit");
        assert!((cost.fixed_seconds - 4e-3).abs() < 2e-6, "{cost:?}");
        assert!((cost.seconds_per_token - 1e-6).abs() < 1e-9, "{cost:?}");
        // A 71,868-token read through a window of 4 + 8,188 keys: 36 steps of 2,048 rows.
        let long = read(16, 71_868, Some((4, 8188)));
        let work = 71_868.0 + s.attention_weight * long.attended_keys() as f64;
        let expected = 36.0 * 4e-3 + work * 1e-6;
        let estimate = s.prefill_seconds(long).unwrap();
        assert!(
            (estimate - expected).abs() < 1e-3 * expected,
            "{estimate} against {expected}"
        );
        // The pace alone puts every step's fixed time into its work: here 2.6 times too long.
        let pace_alone = s.prefill_micros as f64
            / 1e6
            / (s.prefill_tokens as f64 + s.attention_weight * s.prefill_keys as f64);
        assert!(work * pace_alone > 2.5 * estimate, "{pace_alone}");
    }

    #[test]
    fn steps_of_one_size_or_too_few_give_the_pace_alone() {
        let pace_alone = |s: &EngineStats| {
            StepCost::weighed(
                0.0,
                s.prefill_micros as f64
                    / 1e6
                    / (s.prefill_tokens as f64 + s.attention_weight * s.prefill_keys as f64),
                s.attention_weight,
            )
        };
        // Four steps of one size say only their sum; two of different sizes, not yet enough.
        for tokens in [&[512, 512, 512, 512][..], &[1527, 300]] {
            let s = after_steps(tokens, |work| 4000.0 + work);
            assert_eq!(s.step_cost(), Some(pace_alone(&s)), "{tokens:?}");
        }
        // A fit whose fixed part would be negative (steps that cost more than their share the
        // larger they are) is not used either, nor one whose pace would be.
        let s = after_steps(&[2048, 1024, 1024, 300], |work| work * work / 2000.0);
        assert_eq!(s.step_cost(), Some(pace_alone(&s)));
        let s = after_steps(&[2048, 1024, 300, 100], |work| 9000.0 - work);
        assert_eq!(s.step_cost(), Some(pace_alone(&s)));
        assert_eq!(after_steps(&[512], |w| w).step_cost(), None);
    }

    #[test]
    fn a_read_is_estimated_at_the_measured_pace_of_its_tokens_and_keys() {
        let measured = read(0, 2048, None);
        let mut s = EngineStats {
            prefill_tokens: 2048,
            prefill_keys: measured.attended_keys(),
            prefill_micros: 1_000_000,
            attention_weight: attention_weight(&smollm2()),
            ..EngineStats::default()
        };
        let again = s.prefill_seconds(measured).expect("a pace");
        assert!((again - 1.0).abs() < 1e-9, "{again}");
        // Ten times the tokens take more than ten times as long (their keys grow with the square) ...
        let long = s.prefill_seconds(read(0, 20_480, None)).unwrap();
        assert!(long > 10.5, "{long}");
        // ... less where a window caps the keys. A question after a cached document reads its own
        // rows only, each against the whole document.
        let windowed = s.prefill_seconds(read(0, 20_480, Some((4, 2044)))).unwrap();
        assert!(
            windowed < long && windowed > 10.0,
            "{windowed} against {long}"
        );
        let question = s.prefill_seconds(read(20_400, 80, None)).unwrap();
        assert!(
            question < 0.05 * long && question > 80.0 / 2048.0,
            "{question}"
        );
        s.prefill_tokens = 512;
        assert_eq!(s.prefill_seconds(measured), None);
    }

    #[test]
    fn a_read_through_a_window_is_estimated_at_the_windowed_steps_pace() {
        // Dense steps on a GPU: 4 ms a step and a microsecond a token's products.
        let mut s = after_steps(&[1527, 7, 1160, 2048, 300], |work| 4000.0 + work);
        let long = read(16, 71_868, Some((4, 8188)));
        let dense_estimate = s.prefill_seconds(long).unwrap();
        // Then windowed steps of 2,048 rows past the window take 15 ms each.
        let window_keys = read(20_000, 2048, Some((4, 8188))).attended_keys();
        for _ in 0..3 {
            s.count_prefill_step(2048, window_keys, 15_000, true);
        }
        assert_eq!(
            s.recent_prefill_steps.len(),
            5,
            "windowed steps are kept apart"
        );
        let estimate = s.prefill_seconds(long).unwrap();
        // 36 steps of 4 ms, a microsecond a token, and each windowed key at what a full windowed
        // step leaves over those: (15,000 - 4,000 - 2,048) µs over its keys.
        let per_key = (15_000.0 - 4000.0 - 2048.0) / window_keys as f64 / 1e6;
        let expected = 36.0 * 4e-3 + 71_868.0 * 1e-6 + long.attended_keys() as f64 * per_key;
        assert!(
            (estimate - expected).abs() < 1e-3 * expected && estimate > 1.25 * dense_estimate,
            "{estimate} s against {expected} s, dense keys {dense_estimate} s"
        );
        // A dense read's estimate does not move.
        let dense = read(0, 6000, None);
        let before = after_steps(&[1527, 7, 1160, 2048, 300], |work| 4000.0 + work);
        assert_eq!(s.prefill_seconds(dense), before.prefill_seconds(dense));
    }
}
