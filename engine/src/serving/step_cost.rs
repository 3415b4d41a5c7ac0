//! What a prefill step costs, fitted to the engine's recent prefill steps: a fixed time whatever the
//! step reads (launches, the weights read once however few the rows), and a time per unit of work
//! (one token's products; attended keys weighed as [`super::stats::attention_weight`] says). On a
//! GPU serving a small model the fixed part is most of a step; on the CPU the work is.
//!
//! The fit is Siegel's repeated median over the last [`RECENT_STEPS`] steps: for each step, the
//! median of its slopes to the steps of another size; the pace is the median of those, and the fixed
//! part the median of what each step leaves over its work at that pace. Half the steps may be
//! anything (the first read of a size on a GPU pays kernel loading and library heuristics, ten times
//! a warm step or more) without moving it, where least squares follows the largest outlier.

/// Prefill steps the fit looks back over.
pub const RECENT_STEPS: usize = 64;

/// Two steps' work must differ by this share of the larger for their slope to count.
const DISTINCT_WORK: f64 = 0.25;

/// Steps with a slope to a step of another size that the fit needs.
const MIN_FITTED_STEPS: usize = 3;

/// What a prefill step costs: a fixed time, and a time per unit of work (one token's products).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StepCost {
    pub fixed_seconds: f64,
    pub seconds_per_work: f64,
}

/// The last [`RECENT_STEPS`] prefill steps' work and microseconds, in a ring.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RecentSteps {
    work: [f32; RECENT_STEPS],
    micros: [f32; RECENT_STEPS],
    len: usize,
    next: usize,
}

impl Default for RecentSteps {
    fn default() -> Self {
        RecentSteps {
            work: [0.0; RECENT_STEPS],
            micros: [0.0; RECENT_STEPS],
            len: 0,
            next: 0,
        }
    }
}

impl RecentSteps {
    /// Adds a step of `work` run in `micros`, forgetting the oldest once the ring is full.
    pub fn push(&mut self, work: f64, micros: u64) {
        self.work[self.next] = work as f32;
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

    /// The repeated-median fit, where at least [`MIN_FITTED_STEPS`] steps have a step of another
    /// size to compare with and the fit has a positive pace and no negative fixed part; else None.
    pub fn fit(&self) -> Option<StepCost> {
        let points: Vec<(f64, f64)> = (0..self.len)
            .map(|i| (self.work[i] as f64, self.micros[i] as f64))
            .collect();
        let step_slopes: Vec<f64> = points
            .iter()
            .filter_map(|&(wi, ti)| {
                let slopes: Vec<f64> = points
                    .iter()
                    .filter(|&&(wj, _)| (wi - wj).abs() >= DISTINCT_WORK * wi.max(wj))
                    .map(|&(wj, tj)| (ti - tj) / (wi - wj))
                    .collect();
                median(slopes)
            })
            .collect();
        if step_slopes.len() < MIN_FITTED_STEPS {
            return None;
        }
        let per_work = median(step_slopes)?;
        let fixed = median(points.iter().map(|&(w, t)| t - per_work * w).collect())?;
        (per_work > 0.0 && fixed >= 0.0).then(|| StepCost {
            fixed_seconds: fixed / 1e6,
            seconds_per_work: per_work / 1e6,
        })
    }
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

    fn steps(points: &[(f64, f64)]) -> RecentSteps {
        let mut r = RecentSteps::default();
        for &(w, t) in points {
            r.push(w, t as u64);
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
        let fit = steps(&line).fit().expect("a fit");
        assert!((fit.fixed_seconds - 3e-3).abs() < 1e-9, "{fit:?}");
        assert!((fit.seconds_per_work - 2e-6).abs() < 1e-12, "{fit:?}");
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
        let without = steps(&warm).fit().expect("a fit");
        let mut with = vec![(1500.0, 118_000.0)];
        with.extend_from_slice(&warm);
        let fit = steps(&with).fit().expect("a fit");
        let ratio = |a: f64, b: f64| a / b;
        assert!(
            (0.8..1.25).contains(&ratio(fit.seconds_per_work, without.seconds_per_work)),
            "{fit:?} against {without:?}"
        );
        assert!(
            (0.8..1.25).contains(&ratio(fit.fixed_seconds, without.fixed_seconds)),
            "{fit:?} against {without:?}"
        );
        // Least squares over the same steps puts the pace at 43 µs a unit and the fixed part
        // below zero.
        assert!(fit.seconds_per_work < 5e-6, "{fit:?}");
    }

    #[test]
    fn steps_of_one_size_or_two_steps_give_no_fit() {
        assert_eq!(steps(&[(512.0, 4000.0); 8]).fit(), None);
        assert_eq!(steps(&[(512.0, 4000.0), (40.0, 3000.0)]).fit(), None);
        assert_eq!(RecentSteps::default().fit(), None);
        // Sizes within a quarter of each other count as one.
        assert_eq!(
            steps(&[(512.0, 4000.0), (480.0, 3900.0), (420.0, 3700.0)]).fit(),
            None
        );
    }

    #[test]
    fn a_fit_with_a_falling_pace_or_a_negative_fixed_part_is_refused() {
        assert_eq!(
            steps(&[(2048.0, 1000.0), (1024.0, 2000.0), (100.0, 3000.0)]).fit(),
            None
        );
        // Steps that cost more than their share the larger they are: the line through them
        // starts below zero.
        let convex: Vec<(f64, f64)> = [100.0, 300.0, 1024.0, 2048.0]
            .iter()
            .map(|&w| (w, w * w / 100.0))
            .collect();
        assert_eq!(steps(&convex).fit(), None);
    }

    #[test]
    fn the_ring_keeps_the_last_steps() {
        // Old steps on one line, then RECENT_STEPS steps on another: only the second is left.
        let mut r = RecentSteps::default();
        for i in 0..10 {
            r.push(
                100.0 + 200.0 * i as f64,
                (50_000.0 + 100.0 * i as f64) as u64,
            );
        }
        for i in 0..RECENT_STEPS {
            let w = 100.0 + 30.0 * i as f64;
            r.push(w, (1000.0 + w) as u64);
        }
        assert_eq!(r.len(), RECENT_STEPS);
        let fit = r.fit().expect("a fit");
        assert!((fit.fixed_seconds - 1e-3).abs() < 2e-6, "{fit:?}");
        assert!((fit.seconds_per_work - 1e-6).abs() < 1e-8, "{fit:?}");
    }
}
