//! Device token picks (`sample_rows`) against the host sampler's `pick_token` on the same logits and
//! draws: temperatures, top-k and top-p across their range, ties across the top-k and top-p cuts, a
//! flat row, NaNs, and SmolLM2-135M's vocabulary width. A pick that differs from the host's passes
//! only as a near-tie: recomputed in f64, the draw lies within 1e-5 (of the kept mass) of the
//! device's token's share, for the exact nucleus or for one whose top-p cut falls within 1e-5 of a
//! boundary between two tokens.

use docqa_engine::Result;
use docqa_engine::backend::Backend;
use docqa_engine::sampling::{Pick, pick_token};

use crate::inputs::{Pair, Rng};
use crate::report::Report;

/// SmolLM2-135M's vocabulary.
const VOCAB: usize = 49152;
/// Rows of the check: every combination of the settings below, twice.
const TEMPERATURES: [f32; 3] = [0.4, 1.0, 1.7];
const TOP_KS: [usize; 4] = [0, 2, 40, 5000];
const TOP_PS: [f32; 3] = [1.0, 0.9, 0.3];
/// How close to a boundary a differing pick may fall (share of the kept mass).
const NEAR_TIE: f64 = 1e-5;

/// Runs the sampling parity check.
pub fn run(p: &Pair, rng: &mut Rng, r: &mut Report) -> Result<()> {
    let picks = settings(rng);
    let rows = picks.len();
    let logits = logit_rows(rng, rows);
    let (_, gl) = p.buf(&logits)?;
    let params: Vec<f32> = picks.iter().flat_map(|p| p.to_row()).collect();
    let (_, gp) = p.buf(&params)?;
    let mut ids = p.gpu.alloc_ids(rows)?;
    p.gpu.write_ids(&mut ids, &vec![u32::MAX; rows])?;
    p.gpu.sample_rows(&gl, &gp, (rows, VOCAB), &mut ids)?;
    let mut got = vec![0u32; rows];
    p.gpu.read_ids(&ids, &mut got)?;
    let mut scratch = Vec::new();
    let (mut same, mut near) = (0, 0);
    for (row, (pick, &g)) in picks.iter().zip(&got).enumerate() {
        let logits = &logits[row * VOCAB..(row + 1) * VOCAB];
        let want = pick_token(logits, pick, &mut scratch);
        if g == want {
            same += 1;
        } else if near_tie(logits, pick, g) {
            near += 1;
            println!("  sample_rows row {row}: near-tie, device {g}, host {want}, {pick:?}");
        } else {
            println!("  sample_rows row {row}: device {g}, host {want}, {pick:?}");
        }
    }
    let what = format!("{same}/{rows} equal, {near} near-ties");
    r.note(
        "sample_rows",
        &format!("{rows} x {VOCAB}, temperature/top-k/top-p grid"),
        &what,
        same + near == rows,
    );
    Ok(())
}

/// Every (temperature, top-k, top-p) twice with fresh draws, plus greedy rows.
fn settings(rng: &mut Rng) -> Vec<Pick> {
    let mut picks = vec![Pick::GREEDY, Pick::GREEDY];
    for _ in 0..2 {
        for &temperature in &TEMPERATURES {
            for &top_k in &TOP_KS {
                for &top_p in &TOP_PS {
                    let draw = ((rng.uniform() + 1.0) / 2.0).min(0.999_999);
                    picks.push(Pick {
                        temperature,
                        top_k,
                        top_p,
                        draw,
                    });
                }
            }
        }
    }
    picks
}

/// Random logits (spread like a small model's, a few tokens well ahead), with planted cases: ties
/// at the top (so top-k 2 and small top-p cut inside a run of equals), a flat row, NaNs.
fn logit_rows(rng: &mut Rng, rows: usize) -> Vec<f32> {
    let mut logits = rng.vec(rows * VOCAB, 3.0);
    for row in 0..rows {
        let base = row * VOCAB;
        for _ in 0..8 {
            logits[base + rng.below(VOCAB)] += 12.0 + 4.0 * rng.uniform();
        }
        match row % 7 {
            0 => [11, 900, 30_000]
                .iter()
                .for_each(|&i| logits[base + i] = 20.0),
            3 => logits[base..base + VOCAB].fill(1.5),
            5 => [3, 77, 4_000]
                .iter()
                .for_each(|&i| logits[base + i] = f32::NAN),
            _ => {}
        }
    }
    logits
}

/// Whether the device's pick `g` is the host's up to rounding: in f64, with the tokens top-k keeps in
/// the host's order, the draw lands within [`NEAR_TIE`] of `g`'s share for the exact nucleus or for
/// a nucleus whose cut lies within [`NEAR_TIE`] of top-p (a cut on a boundary between two tokens).
fn near_tie(logits: &[f32], pick: &Pick, g: u32) -> bool {
    let inv_t = 1.0 / pick.temperature;
    let mut order: Vec<(u32, f32)> = logits
        .iter()
        .enumerate()
        .map(|(i, &l)| {
            (
                i as u32,
                if l.is_nan() {
                    f32::NEG_INFINITY
                } else {
                    l * inv_t
                },
            )
        })
        .collect();
    order.sort_by(|x, y| y.1.total_cmp(&x.1).then(x.0.cmp(&y.0)));
    if pick.top_k > 0 {
        order.truncate(pick.top_k);
    }
    let max = f64::from(order[0].1);
    // before[i]: the mass of the tokens ahead of position i.
    let mut before = vec![0.0f64];
    for &(_, s) in &order {
        before.push(before[before.len() - 1] + (f64::from(s) - max).exp());
    }
    let total = before[order.len()];
    let Some(at) = order.iter().position(|&(id, _)| id == g) else {
        return false;
    };
    let top_p = f64::from(pick.top_p);
    let exact = (1..=order.len())
        .find(|&n| before[n] / total >= top_p)
        .unwrap_or(order.len());
    let cut_on_boundary = |n: usize| (before[n] / total - top_p).abs() < NEAR_TIE;
    (1..=order.len())
        .filter(|&n| n == exact || cut_on_boundary(n))
        .any(|n| {
            let x = f64::from(pick.draw) * before[n];
            let slack = NEAR_TIE * before[n];
            at < n && before[at] - slack <= x && x < before[at + 1] + slack
        })
}
