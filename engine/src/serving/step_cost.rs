//! What a prefill step costs, fitted to the engine's recent prefill steps: a fixed time whatever the
//! step reads (launches, the weights read once however few the rows), a time per token (its
//! products) and a time per attended key. On a GPU serving a small model the fixed part is most of a
//! short step; on the CPU the work is.
//!
//! The fits are Siegel's repeated median: for each step, the median of its slopes to the steps it is
//! compared with; the pace is the median of those, and the fixed part the median of what each step
//! leaves over its work at that pace. Half the steps may be anything (the first read of a size on a
//! GPU pays kernel loading and library heuristics, ten times a warm step or more) without moving it,
//! where least squares follows the largest outlier.
//!
//! A key's time is measured where steps of one token count attended to different numbers of keys
//! (a long read's chunks, each further into the text), and trusted only where those steps agree on
//! it ([`KEY_PACE_AGREEMENT`]). Elsewhere a key is weighed against a token by their multiply-adds
//! ([`super::stats::attention_weight`]), and one pace is fitted to the weighed work. The
//! multiply-adds are right on the CPU; on a GPU the attention kernels run further below the
//! tensor cores' peak than the products, so weighed keys made a 30,000-token read's estimate 0.8
//! of its time on an H100 at the Llama-3.2-1B shape.
//!
//! Steps that read through a sink window are kept apart: their attention runs another kernel, whose
//! key may cost several times a dense one's on a GPU (a 2,048-row step of the SmolLM2 shape took
//! about 15 ms through an 8K window on an H100, against 3.5–5 ms dense at up to 6K keys). All their
//! rows past the window attend to as many keys, so their chunks cannot measure a key the way dense
//! chunks do; a windowed key's time is instead what each windowed step leaves over the dense fit's
//! fixed part and tokens, over its keys ([`RecentSteps::windowed_key_micros`]).

/// Prefill steps the fit looks back over.
pub const RECENT_STEPS: usize = 64;

/// Two steps' work must differ by this share of the larger for their slope to count.
const DISTINCT_WORK: f64 = 0.25;

/// Two steps of one token count must differ in keys by this share of their tokens, the keys
/// weighed as their multiply-adds weigh them, for their slope to measure a key.
const DISTINCT_KEYS: f64 = 0.1;

/// The measured key pace is trusted where the middle half of the steps' slopes spans at most this
/// share of it (an H100's chunks in the tests span about a tenth, a busy two-core CPU's a third).
const KEY_PACE_AGREEMENT: f64 = 0.25;

/// Steps with a slope to a step of another size that the fit needs.
const MIN_FITTED_STEPS: usize = 3;

/// What a prefill step costs: a fixed time, a time per token and a time per attended key, dense
/// or through a sink window.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StepCost {
    pub fixed_seconds: f64,
    pub seconds_per_token: f64,
    pub seconds_per_key: f64,
    /// A key attended through a sink window; the dense key's time until windowed steps measure it.
    pub seconds_per_windowed_key: f64,
}

impl StepCost {
    /// The time of `steps` steps reading `tokens` tokens whose rows attend to `keys` keys.
    pub fn seconds(&self, steps: f64, tokens: f64, keys: f64) -> f64 {
        steps * self.fixed_seconds + tokens * self.seconds_per_token + keys * self.seconds_per_key
    }

    /// The cost of steps that read through a sink window: their keys at the windowed key's time.
    pub fn through_window(self) -> Self {
        StepCost {
            seconds_per_key: self.seconds_per_windowed_key,
            ..self
        }
    }

    /// One pace for tokens' products and keys weighed at `attention_weight` tokens a key.
    pub fn weighed(fixed_seconds: f64, seconds_per_work: f64, attention_weight: f64) -> Self {
        let seconds_per_key = attention_weight * seconds_per_work;
        StepCost {
            fixed_seconds,
            seconds_per_token: seconds_per_work,
            seconds_per_key,
            seconds_per_windowed_key: seconds_per_key,
        }
    }

    /// This cost with a windowed key's time measured by `windowed` steps where they measure it.
    pub fn with_windowed_keys(self, windowed: &RecentSteps) -> Self {
        match windowed.windowed_key_micros(&self) {
            Some(micros) => StepCost {
                seconds_per_windowed_key: micros / 1e6,
                ..self
            },
            None => self,
        }
    }
}

/// The last [`RECENT_STEPS`] prefill steps' tokens, attended keys and microseconds, in a ring.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RecentSteps {
    tokens: [f32; RECENT_STEPS],
    keys: [f32; RECENT_STEPS],
    micros: [f32; RECENT_STEPS],
    len: usize,
    next: usize,
}

impl Default for RecentSteps {
    fn default() -> Self {
        RecentSteps {
            tokens: [0.0; RECENT_STEPS],
            keys: [0.0; RECENT_STEPS],
            micros: [0.0; RECENT_STEPS],
            len: 0,
            next: 0,
        }
    }
}

/// A step as the fits see it.
#[derive(Debug, Clone, Copy)]
struct Step {
    tokens: f64,
    keys: f64,
    micros: f64,
}

impl RecentSteps {
    /// Adds a step of `tokens` tokens whose rows attended to `keys` keys, run in `micros`,
    /// forgetting the oldest once the ring is full.
    pub fn push(&mut self, tokens: u64, keys: u64, micros: u64) {
        self.tokens[self.next] = tokens as f32;
        self.keys[self.next] = keys as f32;
        self.micros[self.next] = micros as f32;
        self.next = (self.next + 1) % RECENT_STEPS;
        self.len = (self.len + 1).min(RECENT_STEPS);
    }

    /// Steps held.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn steps(&self) -> Vec<Step> {
        (0..self.len)
            .map(|i| Step {
                tokens: self.tokens[i] as f64,
                keys: self.keys[i] as f64,
                micros: self.micros[i] as f64,
            })
            .collect()
    }

    /// The step's cost, keys weighed at `attention_weight` tokens a key unless the steps measure
    /// a key's time ([`key_micros`]): then the fixed part and the token pace are
    /// fitted to what each step leaves over its keys. None where the steps do not tell a fixed
    /// part from a pace (fewer than [`MIN_FITTED_STEPS`] with a step of another size to compare
    /// with, a pace not positive or a fixed part below zero).
    pub fn fit(&self, attention_weight: f64) -> Option<StepCost> {
        let steps = self.steps();
        let measured = key_micros(&steps, attention_weight).and_then(|per_key| {
            let left: Vec<(f64, f64)> = steps
                .iter()
                .map(|s| (s.tokens, s.micros - per_key * s.keys))
                .collect();
            let (fixed, per_token) = line_fit(&left)?;
            Some(StepCost {
                fixed_seconds: fixed / 1e6,
                seconds_per_token: per_token / 1e6,
                seconds_per_key: per_key / 1e6,
                seconds_per_windowed_key: per_key / 1e6,
            })
        });
        measured.or_else(|| {
            let weighed: Vec<(f64, f64)> = steps
                .iter()
                .map(|s| (s.tokens + attention_weight * s.keys, s.micros))
                .collect();
            let (fixed, per_work) = line_fit(&weighed)?;
            Some(StepCost::weighed(
                fixed / 1e6,
                per_work / 1e6,
                attention_weight,
            ))
        })
    }
}

impl RecentSteps {
    /// Microseconds a key attended through a sink window costs, these being windowed steps: the
    /// median over them of what each leaves over `dense`'s fixed part and tokens, per key. None
    /// where fewer than [`MIN_FITTED_STEPS`] steps attended to keys or the median is not positive.
    pub fn windowed_key_micros(&self, dense: &StepCost) -> Option<f64> {
        let per_key: Vec<f64> = self
            .steps()
            .iter()
            .filter(|s| s.keys > 0.0)
            .map(|s| {
                let left =
                    s.micros - 1e6 * (dense.fixed_seconds + s.tokens * dense.seconds_per_token);
                left / s.keys
            })
            .collect();
        if per_key.len() < MIN_FITTED_STEPS {
            return None;
        }
        median(per_key).filter(|&micros| micros > 0.0)
    }
}

/// Microseconds a key costs, from steps of one token count that attended to different numbers of
/// keys: each step's median slope to the others of its count, then the median of those; None where
/// fewer than [`MIN_FITTED_STEPS`] steps have one, where the pace is not positive or where the steps
/// disagree on it ([`KEY_PACE_AGREEMENT`]).
fn key_micros(steps: &[Step], attention_weight: f64) -> Option<f64> {
    let mut slopes = median_slopes(steps, |a, b| {
        (b.tokens == a.tokens
            && attention_weight * (a.keys - b.keys).abs() >= DISTINCT_KEYS * a.tokens)
            .then(|| (a.micros - b.micros) / (a.keys - b.keys))
    });
    if slopes.len() < MIN_FITTED_STEPS {
        return None;
    }
    slopes.sort_by(f64::total_cmp);
    let n = slopes.len();
    let (low, high) = (slopes[n / 4], slopes[(3 * n) / 4]);
    let pace = median(slopes)?;
    (pace > 0.0 && high - low <= KEY_PACE_AGREEMENT * pace).then_some(pace)
}

/// The repeated-median line through `points` (x, y): its intercept and slope, where at least
/// [`MIN_FITTED_STEPS`] points have a point of another x to compare with and the line has a
/// positive slope and no negative intercept.
fn line_fit(points: &[(f64, f64)]) -> Option<(f64, f64)> {
    let point_slopes = median_slopes(points, |&(xi, yi), &(xj, yj)| {
        ((xi - xj).abs() >= DISTINCT_WORK * xi.max(xj)).then(|| (yi - yj) / (xi - xj))
    });
    if point_slopes.len() < MIN_FITTED_STEPS {
        return None;
    }
    let slope = median(point_slopes)?;
    let intercept = median(points.iter().map(|&(x, y)| y - slope * x).collect())?;
    (slope > 0.0 && intercept >= 0.0).then_some((intercept, slope))
}

/// The first step of a repeated median: for each point, the median of its slopes to the points
/// `slope` compares it with (None for a pair it does not); points compared with none are left out.
fn median_slopes<T>(points: &[T], slope: impl Fn(&T, &T) -> Option<f64>) -> Vec<f64> {
    points
        .iter()
        .filter_map(|a| median(points.iter().filter_map(|b| slope(a, b)).collect()))
        .collect()
}

/// The median of `v` (the mean of the middle two where their count is even); None if empty.
fn median(mut v: Vec<f64>) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let mid = v.len() / 2;
    Some(match v.len() % 2 {
        1 => v[mid],
        _ => (v[mid - 1] + v[mid]) / 2.0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A key's weight in tokens' products for the tests whose steps attend to no keys.
    const WEIGHT: f64 = 3e-4;

    fn steps(points: &[(f64, f64)]) -> RecentSteps {
        let mut r = RecentSteps::default();
        for &(w, t) in points {
            r.push(w as u64, 0, t as u64);
        }
        r
    }

    #[test]
    fn steps_on_a_line_give_its_fixed_part_and_pace() {
        // 3 ms a step and 2 µs a unit of work.
        let line: Vec<(f64, f64)> = [40.0, 300.0, 816.0, 1500.0, 2048.0]
            .iter()
            .map(|&w| (w, 3000.0 + 2.0 * w))
            .collect();
        let fit = steps(&line).fit(WEIGHT).expect("a fit");
        assert!((fit.fixed_seconds - 3e-3).abs() < 1e-9, "{fit:?}");
        assert!((fit.seconds_per_token - 2e-6).abs() < 1e-12, "{fit:?}");
    }

    #[test]
    fn a_cold_first_step_does_not_move_the_fit() {
        // A GPU's first read of 1,500 tokens took 118 ms; warm, the same size takes 6.
        let warm = [
            (1500.0, 6000.0),
            (44.0, 3100.0),
            (815.0, 4600.0),
            (281.0, 3600.0),
        ];
        let without = steps(&warm).fit(WEIGHT).expect("a fit");
        let mut with = vec![(1500.0, 118_000.0)];
        with.extend_from_slice(&warm);
        let fit = steps(&with).fit(WEIGHT).expect("a fit");
        let ratio = |a: f64, b: f64| a / b;
        assert!(
            (0.8..1.25).contains(&ratio(fit.seconds_per_token, without.seconds_per_token)),
            "{fit:?} against {without:?}"
        );
        assert!(
            (0.8..1.25).contains(&ratio(fit.fixed_seconds, without.fixed_seconds)),
            "{fit:?} against {without:?}"
        );
        // Least squares over the same steps puts the pace at 43 µs a unit and the fixed part
        // below zero.
        assert!(fit.seconds_per_token < 5e-6, "{fit:?}");
    }

    #[test]
    fn steps_of_one_size_or_two_steps_give_no_fit() {
        assert_eq!(steps(&[(512.0, 4000.0); 8]).fit(WEIGHT), None);
        assert_eq!(steps(&[(512.0, 4000.0), (40.0, 3000.0)]).fit(WEIGHT), None);
        assert_eq!(RecentSteps::default().fit(WEIGHT), None);
        // Sizes within a quarter of each other count as one.
        assert_eq!(
            steps(&[(512.0, 4000.0), (480.0, 3900.0), (420.0, 3700.0)]).fit(WEIGHT),
            None
        );
    }

    #[test]
    fn a_fit_with_a_falling_pace_or_a_negative_fixed_part_is_refused() {
        assert_eq!(
            steps(&[(2048.0, 1000.0), (1024.0, 2000.0), (100.0, 3000.0)]).fit(WEIGHT),
            None
        );
        // Steps that cost more than their share the larger they are: the line through them
        // starts below zero.
        let convex: Vec<(f64, f64)> = [100.0, 300.0, 1024.0, 2048.0]
            .iter()
            .map(|&w| (w, w * w / 100.0))
            .collect();
        assert_eq!(steps(&convex).fit(WEIGHT), None);
    }

    #[test]
    fn the_ring_keeps_the_last_steps() {
        // Old steps on one line, then RECENT_STEPS steps on another: only the second is left.
        let mut r = RecentSteps::default();
        for i in 0..10 {
            r.push(100 + 200 * i, 0, 50_000 + 100 * i);
        }
        for i in 0..RECENT_STEPS {
            let w = 100 + 30 * i as u64;
            r.push(w, 0, 1000 + w);
        }
        assert_eq!(r.len(), RECENT_STEPS);
        let fit = r.fit(WEIGHT).expect("a fit");
        assert!((fit.fixed_seconds - 1e-3).abs() < 2e-6, "{fit:?}");
        assert!((fit.seconds_per_token - 1e-6).abs() < 1e-8, "{fit:?}");
    }

    /// Llama-3.2-1B's key weight: 2 · 2,048 against 2,048 · (2,048 + 2 · 512) + 2,048 · 2,048
    /// + 3 · 2,048 · 8,192 multiply-adds a layer.
    const LLAMA_1B_WEIGHT: f64 = 4096.0 / 60_817_408.0;

    /// Prefill steps (tokens, keys, microseconds) of `docqa generate --warm-up` on an H100 at the
    /// Llama-3.2-1B shape (bench/reading_estimates.sh): reads of 1,499, 44, 815 and 281 tokens,
    /// then one of 6,999 in chunks of 2,048.
    const H100_1B_STEPS: [(u64, u64, u64); 8] = [
        (1499, 1_124_250, 6306),
        (44, 990, 1953),
        (815, 332_520, 4025),
        (281, 39_621, 2934),
        (2048, 2_098_176, 7880),
        (2048, 6_292_480, 9165),
        (2048, 10_486_784, 10_377),
        (855, 5_619_060, 6942),
    ];

    fn recent(points: &[(u64, u64, u64)]) -> RecentSteps {
        let mut r = RecentSteps::default();
        for &(tokens, keys, micros) in points {
            r.push(tokens, keys, micros);
        }
        r
    }

    #[test]
    fn a_long_reads_chunks_measure_what_a_key_costs_on_a_gpu() {
        let r = recent(&H100_1B_STEPS);
        let fit = r.fit(LLAMA_1B_WEIGHT).expect("a fit");
        // The three chunks of 2,048 rows, each 4.2 million keys further: about 0.29 ns a key.
        assert!((0.27e-9..0.31e-9).contains(&fit.seconds_per_key), "{fit:?}");
        // The next read, 29,999 tokens: 14 chunks of 2,048 and one of 1,327; its steps took
        // 257.2 ms in all.
        let keys = |start: u64, rows: u64| (start + 1..=start + rows).sum::<u64>() as f64;
        let chunks: Vec<(u64, u64)> = (0..14)
            .map(|i| (i * 2048, 2048))
            .chain([(28_672, 1327)])
            .collect();
        let estimate: f64 = chunks
            .iter()
            .map(|&(start, rows)| fit.seconds(1.0, rows as f64, keys(start, rows)))
            .sum();
        let took = 0.2572;
        assert!((0.9..1.1).contains(&(estimate / took)), "{estimate} s");
        // Keys weighed by their multiply-adds put it at 0.8 of that.
        let points: Vec<(f64, f64)> = H100_1B_STEPS
            .iter()
            .map(|&(t, k, us)| (t as f64 + LLAMA_1B_WEIGHT * k as f64, us as f64))
            .collect();
        let (fixed, per_work) = line_fit(&points).expect("a line");
        let weighed = StepCost::weighed(fixed / 1e6, per_work / 1e6, LLAMA_1B_WEIGHT);
        let weighed_estimate: f64 = chunks
            .iter()
            .map(|&(start, rows)| weighed.seconds(1.0, rows as f64, keys(start, rows)))
            .sum();
        assert!(weighed_estimate < 0.85 * took, "{weighed_estimate} s");
    }

    #[test]
    fn key_slopes_that_disagree_are_not_trusted_and_keys_are_weighed() {
        // The first steps of a busy two-core CPU at the SmolLM2 shape (chunks of 256): their
        // chunks' slopes run from 1.0 to 7.0 µs a key.
        let cpu = recent(&[
            (256, 32_896, 1_371_895),
            (256, 98_432, 1_354_066),
            (256, 163_968, 1_570_134),
            (256, 229_504, 1_743_825),
            (256, 295_040, 2_271_803),
            (219, 304_410, 1_665_485),
            (44, 990, 166_938),
            (256, 32_896, 829_259),
            (256, 98_432, 852_173),
            (256, 163_968, 928_565),
            (47, 37_224, 209_576),
            (256, 32_896, 758_588),
            (25, 6725, 126_377),
        ]);
        let weight = 1152.0 / 3_538_944.0;
        assert_eq!(key_micros(&cpu.steps(), weight), None);
        let fit = cpu.fit(weight).expect("a fit");
        assert!(
            (fit.seconds_per_key - weight * fit.seconds_per_token).abs() < 1e-15,
            "{fit:?}"
        );
        // Steps of one count that agree are trusted, even two apart in time.
        let gpu = recent(&H100_1B_STEPS);
        assert!(key_micros(&gpu.steps(), LLAMA_1B_WEIGHT).is_some());
        // Chunks whose keys differ by less than a tenth of their tokens' work measure nothing.
        let close = recent(&[
            (2048, 2_098_176, 7880),
            (2048, 4_000_000, 8400),
            (2048, 5_000_000, 8700),
        ]);
        assert_eq!(key_micros(&close.steps(), LLAMA_1B_WEIGHT), None);
    }

    #[test]
    fn a_windowed_key_is_what_windowed_steps_leave_over_the_dense_fixed_part_and_tokens() {
        // Dense: 3 ms a step, 0.5 µs a token, 0.1 ns a key. Through a window of 8,192 keys a row
        // the kernel is slower: 0.6 ns a key, so a 2,048-row step takes about 14 ms.
        let dense = StepCost {
            fixed_seconds: 3e-3,
            seconds_per_token: 0.5e-6,
            seconds_per_key: 0.1e-9,
            seconds_per_windowed_key: 0.1e-9,
        };
        let keys = 2048 * 8192;
        let micros =
            |rows: u64, keys: u64| (3000.0 + 0.5 * rows as f64 + 6e-4 * keys as f64) as u64;
        let mut windowed = RecentSteps::default();
        windowed.push(2048, keys, micros(2048, keys));
        windowed.push(2048, keys, micros(2048, keys));
        assert_eq!(windowed.windowed_key_micros(&dense), None, "two steps");
        assert_eq!(dense.with_windowed_keys(&windowed), dense);
        // A third step, and a cold one four times as slow that the median leaves out.
        windowed.push(700, 700 * 8192, micros(700, 700 * 8192));
        windowed.push(2048, keys, 4 * micros(2048, keys));
        let cost = dense.with_windowed_keys(&windowed);
        assert!(
            (cost.seconds_per_windowed_key - 0.6e-9).abs() < 0.01e-9,
            "{cost:?}"
        );
        assert_eq!(cost.seconds_per_key, dense.seconds_per_key);
        let step = cost.through_window().seconds(1.0, 2048.0, keys as f64);
        assert!(
            (step - micros(2048, keys) as f64 / 1e6).abs() < 1e-5,
            "{step}"
        );
        // Steps that leave nothing over the dense fit measure no windowed key.
        let mut fast = RecentSteps::default();
        for _ in 0..4 {
            fast.push(2048, keys, 3000);
        }
        assert_eq!(fast.windowed_key_micros(&dense), None);
    }

    /// Llama-3.1-8B's key weight: 2 · 4,096 against 4,096 · (4,096 + 2 · 1,024) + 4,096 · 4,096
    /// + 3 · 4,096 · 14,336 multiply-adds a layer.
    const LLAMA_8B_WEIGHT: f64 = 8192.0 / 218_103_808.0;

    /// Chunks of 2,048 rows at offsets 0, 2,048, 4,096, … of a 120,000-token read at the
    /// Llama-3.1-8B shape on an H100, microseconds (bench/gpu-reports/2026-12-07-windowed-splits-h100/
    /// gen-8b.txt: the warm-up's reversed read of the meeting).
    const H100_8B_CHUNKS: [u64; 8] = [
        44_189, 52_860, 58_966, 62_311, 65_324, 69_650, 73_957, 79_723,
    ];

    /// The calibration's own four chunks in the same process, and its three short reads.
    const H100_8B_CALIBRATION: [u64; 4] = [46_662, 57_004, 61_096, 62_984];
    const H100_8B_SHORT: [(u64, u64); 3] = [(1024, 24_621), (256, 9354), (64, 7756)];

    /// A later process with the calibration of eight chunks (`3-gen-8b-eight-chunks.txt`), and its
    /// short reads; its timed read's steps took 10.029 s.
    const H100_8B_EIGHT_CHUNKS: [u64; 8] = [
        46_679, 56_600, 61_473, 64_287, 68_095, 71_200, 74_933, 78_726,
    ];
    const H100_8B_EIGHT_SHORT: [(u64, u64); 3] = [(1024, 24_467), (256, 9216), (64, 7630)];

    /// The timed read after it: 58 chunks of 2,048 and one of 1,216, 10.129 s of steps.
    fn estimate_of_the_120k_read(chunks: &[u64]) -> (Option<f64>, f64) {
        estimate_of_the_120k_read_with(chunks, &H100_8B_SHORT)
    }

    fn estimate_of_the_120k_read_with(chunks: &[u64], short: &[(u64, u64)]) -> (Option<f64>, f64) {
        let keys = |start: u64, rows: u64| (start + 1..=start + rows).sum::<u64>();
        let mut r = RecentSteps::default();
        for (i, &us) in chunks.iter().enumerate() {
            r.push(2048, keys(2048 * i as u64, 2048), us);
        }
        for &(rows, us) in short {
            r.push(rows, keys(0, rows), us);
        }
        let fit = r.fit(LLAMA_8B_WEIGHT).expect("a fit");
        let measured = key_micros(&r.steps(), LLAMA_8B_WEIGHT);
        let estimate = (0..58)
            .map(|i| (i * 2048, 2048))
            .chain([(58 * 2048, 1216)])
            .map(|(start, rows)| fit.seconds(1.0, rows as f64, keys(start, rows) as f64))
            .sum();
        (measured, estimate)
    }

    #[test]
    fn eight_chunks_measure_an_8b_models_key_where_four_uneven_ones_do_not() {
        let took = 10.129;
        // The first four chunks' slopes run from 1.9 to 10.3 ms a chunk: not trusted, keys weighed.
        let (measured, weighed) = estimate_of_the_120k_read(&H100_8B_CALIBRATION);
        assert_eq!(measured, None);
        assert!((0.85..0.92).contains(&(weighed / took)), "{weighed} s");
        // Eight chunks agree on about 1 ns a key (4.3 ms a chunk further in), and the estimate
        // comes within a few per cent.
        let (measured, estimate) = estimate_of_the_120k_read(&H100_8B_CHUNKS);
        let per_key = measured.expect("a key's time") * 1e3;
        assert!((0.95..1.1).contains(&per_key), "{per_key} ns");
        assert!((0.95..1.05).contains(&(estimate / took)), "{estimate} s");
        // The calibration of eight chunks as it ran later: its chunks agree on 0.87 ns a key, where
        // the read's later chunks cost about 1 ns each, so it comes to 0.92 of the read.
        let (measured, estimate) =
            estimate_of_the_120k_read_with(&H100_8B_EIGHT_CHUNKS, &H100_8B_EIGHT_SHORT);
        let per_key = measured.expect("a key's time") * 1e3;
        assert!((0.8..0.95).contains(&per_key), "{per_key} ns");
        assert!((0.9..0.95).contains(&(estimate / 10.029)), "{estimate} s");
    }
}
