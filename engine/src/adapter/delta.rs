//! The merge's arithmetic: `row += scale · (b_row · A)` for each row of a projection, the delta summed
//! over the rank in f32 and in rank order, then scaled and added, as PEFT computes
//! `W + (B @ A) * scale`.
//!
//! The delta is built a block of [`BLOCK`] columns at a time, so a block's partial sums stay in
//! registers while the rank is summed instead of going through memory once per rank, and a task takes
//! each block of `A` (rank × 64 values, 8 KiB at rank 32) through all its rows while it is in L1,
//! where one row at a time would read the whole of `A` from L2 for each row. Where the CPU has
//! AVX2 the same code is compiled for it (eight lanes against SSE2's four). Every form performs the
//! same f32 operations in the same order (a product then a sum, never fused), so the merged weights are
//! bit-identical whichever runs.

/// Columns of the delta summed together over the rank.
const BLOCK: usize = 64;

/// `rows += scale · (B_rows · A)` for whole rows of `cols` values: `b_rows` holds each row's `rank`
/// values of `B`, and `A` is `[rank, cols]` row-major.
pub(super) fn add_delta_rows(rows: &mut [f32], b_rows: &[f32], a: &[f32], cols: usize, scale: f32) {
    #[cfg(target_arch = "x86_64")]
    if is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2, checked just above.
        return unsafe { add_delta_rows_avx2(rows, b_rows, a, cols, scale) };
    }
    add_delta_rows_blocked(rows, b_rows, a, cols, scale)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn add_delta_rows_avx2(
    rows: &mut [f32],
    b_rows: &[f32],
    a: &[f32],
    cols: usize,
    scale: f32,
) {
    add_delta_rows_blocked(rows, b_rows, a, cols, scale)
}

#[inline(always)]
fn add_delta_rows_blocked(rows: &mut [f32], b_rows: &[f32], a: &[f32], cols: usize, scale: f32) {
    let rank = a.len() / cols.max(1);
    assert!(
        a.len() == rank * cols && rows.len() * rank == b_rows.len() * cols,
        "A is [rank, columns] and B has a rank's values per row"
    );
    let whole = cols - cols % BLOCK;
    for start in (0..whole).step_by(BLOCK) {
        for (row, b_row) in rows.chunks_exact_mut(cols).zip(b_rows.chunks_exact(rank)) {
            let mut delta = [0f32; BLOCK];
            for (&b, a_row) in b_row.iter().zip(a.chunks_exact(cols)) {
                let a_block: &[f32; BLOCK] = a_row[start..start + BLOCK].try_into().unwrap();
                for (d, &x) in delta.iter_mut().zip(a_block) {
                    *d += b * x;
                }
            }
            let w: &mut [f32; BLOCK] = (&mut row[start..start + BLOCK]).try_into().unwrap();
            for (w, d) in w.iter_mut().zip(delta) {
                *w += d * scale;
            }
        }
    }
    for (row, b_row) in rows.chunks_exact_mut(cols).zip(b_rows.chunks_exact(rank)) {
        add_delta_columns(&mut row[whole..], b_row, a, cols, whole, scale);
    }
}

/// The columns past the last whole block, one at a time.
#[inline(always)]
fn add_delta_columns(
    tail: &mut [f32],
    b_row: &[f32],
    a: &[f32],
    cols: usize,
    first: usize,
    scale: f32,
) {
    for (j, w) in tail.iter_mut().enumerate() {
        let mut d = 0f32;
        for (&b, a_row) in b_row.iter().zip(a.chunks_exact(cols)) {
            d += b * a_row[first + j];
        }
        *w += d * scale;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The plain definition, one element at a time, written apart from the code under test.
    fn reference(row: &mut [f32], b_row: &[f32], a: &[f32], scale: f32) {
        let cols = row.len();
        for (j, w) in row.iter_mut().enumerate() {
            let mut d = 0f32;
            for (r, &b) in b_row.iter().enumerate() {
                d += b * a[r * cols + j];
            }
            *w += d * scale;
        }
    }

    fn values(n: usize, seed: u32) -> Vec<f32> {
        (0..n as u32)
            .map(|i| (((i.wrapping_mul(2_654_435_761) ^ seed) % 2001) as f32 - 1000.0) / 997.0)
            .collect()
    }

    #[test]
    fn a_delta_row_is_b_times_a_scaled() {
        // A = [[1, 2], [3, 4]], B row = [10, 100], scale 0.5: delta = 0.5 * (10*[1,2] + 100*[3,4]).
        let mut row = [1.0, -1.0];
        add_delta_rows(&mut row, &[10.0, 100.0], &[1.0, 2.0, 3.0, 4.0], 2, 0.5);
        assert_eq!(row, [1.0 + 155.0, -1.0 + 210.0]);
    }

    #[test]
    fn every_form_gives_the_bits_of_the_element_by_element_sum_blocks_and_ragged_tail_alike() {
        for (rank, cols, rows) in [(32, 576, 5), (8, 1536 + 13, 3), (3, 50, 2), (1, 64, 1)] {
            let (a, b) = (values(rank * cols, 7), values(rows * rank, 11));
            let base = values(rows * cols, 3);
            // The dispatched form (AVX2 where present) and the portable one, called directly.
            let (mut fast, mut portable, mut slow) = (base.clone(), base.clone(), base);
            add_delta_rows(&mut fast, &b, &a, cols, 2.0);
            add_delta_rows_blocked(&mut portable, &b, &a, cols, 2.0);
            for (row, b_row) in slow.chunks_exact_mut(cols).zip(b.chunks_exact(rank)) {
                reference(row, b_row, &a, 2.0);
            }
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            let case = format!("rank {rank}, {cols} columns, {rows} rows");
            assert_eq!(bits(&fast), bits(&slow), "{case}");
            assert_eq!(bits(&portable), bits(&slow), "{case}, portable");
        }
    }
}
