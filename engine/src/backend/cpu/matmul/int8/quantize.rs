//! Block quantisation for the int8 path: weights to int8 (`s = max|w| / 127`) when a model loads, and
//! activation rows to int16 (`s = max|x| / 32767`) at each decode matmul.
//!
//! Each block of [`QBLOCK`] values takes its largest magnitude (a maximum is exact in any order) and
//! rounds `v / s` half away from zero. Where the CPU has AVX2 the same code is compiled for it, so the
//! division and the rounding run eight values at a time instead of one `roundf` call per value
//! (`vroundps` has no half-away mode; LLVM truncates `v + copysign(0.49999997, v)`, exact for every
//! f32). Every step is written so that it vectorises, and both forms give the same bits.

use super::QBLOCK;

/// A weight element the quantiser reads: f32, or a bf16 bit pattern.
pub(super) trait Widen: Copy {
    /// The element's f32 value.
    fn widen(self) -> f32;
}

impl Widen for f32 {
    #[inline(always)]
    fn widen(self) -> f32 {
        self
    }
}

impl Widen for u16 {
    #[inline(always)]
    fn widen(self) -> f32 {
        f32::from_bits(u32::from(self) << 16)
    }
}

/// `q = round(w / s)` in `[-127, 127]` and `s = max|w| / 127` (1 for an all-zero block), per block of
/// `w`; `w.len()` is a multiple of [`QBLOCK`].
pub(super) fn weights<T: Widen>(w: &[T], q: &mut [i8], scales: &mut [f32]) {
    if is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2, checked just above.
        return unsafe { weights_avx2(w, q, scales) };
    }
    weight_blocks(w, q, scales)
}

/// `q = round(x / s)` and `s = max|x| / 32767` (1 for an all-zero block), per block of `x`.
pub(super) fn activations(x: &[f32], q: &mut [i16], scales: &mut [f32]) {
    if is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2, checked just above.
        return unsafe { activations_avx2(x, q, scales) };
    }
    activation_blocks(x, q, scales)
}

#[target_feature(enable = "avx2")]
unsafe fn weights_avx2<T: Widen>(w: &[T], q: &mut [i8], scales: &mut [f32]) {
    weight_blocks(w, q, scales)
}

#[target_feature(enable = "avx2")]
unsafe fn activations_avx2(x: &[f32], q: &mut [i16], scales: &mut [f32]) {
    activation_blocks(x, q, scales)
}

#[inline(always)]
fn weight_blocks<T: Widen>(w: &[T], q: &mut [i8], scales: &mut [f32]) {
    for ((src, dst), scale) in w
        .chunks_exact(QBLOCK)
        .zip(q.chunks_exact_mut(QBLOCK))
        .zip(scales)
    {
        let mut block = [0f32; QBLOCK];
        for (b, &v) in block.iter_mut().zip(src) {
            *b = v.widen();
        }
        let s = block_scale(&block, 127.0);
        for (d, v) in dst.iter_mut().zip(&block) {
            *d = saturating_int(v / s, -127.0, 127.0) as i8;
        }
        *scale = s;
    }
}

#[inline(always)]
fn activation_blocks(x: &[f32], q: &mut [i16], scales: &mut [f32]) {
    for ((src, dst), scale) in x
        .chunks_exact(QBLOCK)
        .zip(q.chunks_exact_mut(QBLOCK))
        .zip(scales)
    {
        let src: &[f32; QBLOCK] = src.try_into().unwrap();
        let s = block_scale(src, 32767.0);
        for (d, v) in dst.iter_mut().zip(src) {
            *d = saturating_int(v / s, -32768.0, 32767.0) as i16;
        }
        *scale = s;
    }
}

/// `v` rounded half away from zero, clamped to `[lo, hi]`, NaN made 0: what `v.round().clamp(lo, hi)
/// as i8` (lo, hi = ±127) and `v.round() as i16` (lo, hi = -32768, 32767) give, Rust's `as` casts
/// saturating. The conversion is done on a value known to be in range, which vectorises, where the
/// saturating cast is compiled one value at a time.
#[inline(always)]
fn saturating_int(v: f32, lo: f32, hi: f32) -> i32 {
    let r = v.round();
    let r = if r.is_nan() { 0.0 } else { r.clamp(lo, hi) };
    // SAFETY: `r` is finite and inside [lo, hi], which callers keep inside i16.
    unsafe { r.to_int_unchecked::<i32>() }
}

/// `max|v| / top`, or 1 when the block is all zeros.
#[inline(always)]
fn block_scale(src: &[f32; QBLOCK], top: f32) -> f32 {
    // On the bit patterns: without the sign, a larger magnitude is a larger integer, and an integer
    // maximum vectorises where `f32::max` (with its NaN rule) is compiled one value at a time. NaN is
    // skipped, as `f32::max` skips it.
    let bits = src.iter().map(|v| match v.to_bits() & 0x7fff_ffff {
        magnitude if magnitude > f32::INFINITY.to_bits() => 0,
        magnitude => magnitude,
    });
    let max = f32::from_bits(bits.fold(0, u32::max));
    if max > 0.0 { max / top } else { 1.0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Values of both signs and many magnitudes, with zeros and halves.
    fn values(n: usize) -> Vec<f32> {
        (0..n)
            .map(|i| match i % 7 {
                0 => 0.0,
                1 => (i as f32 + 0.5) * if i % 2 == 0 { 1.0 } else { -1.0 },
                _ => (((i as u32).wrapping_mul(2_654_435_761) % 20_001) as f32 - 10_000.0) / 37.0,
            })
            .collect()
    }

    #[test]
    fn every_form_quantises_to_the_bits_of_one_value_at_a_time() {
        let mut x = values(QBLOCK * 40);
        x[QBLOCK..2 * QBLOCK].fill(0.0);
        // A NaN, and an infinity (its block's scale is infinite: its other values round to 0, itself
        // to NaN), in blocks of their own.
        x[2 * QBLOCK + 5] = f32::NAN;
        x[3 * QBLOCK + 9] = f32::NEG_INFINITY;
        // The dispatched forms (AVX2 where present), then the portable ones called directly.
        for portable in [false, true] {
            let (mut q8, mut s8) = (vec![0i8; x.len()], vec![0f32; x.len() / QBLOCK]);
            let (mut q16, mut s16) = (vec![0i16; x.len()], vec![0f32; x.len() / QBLOCK]);
            if portable {
                weight_blocks(&x, &mut q8, &mut s8);
                activation_blocks(&x, &mut q16, &mut s16);
            } else {
                weights(&x, &mut q8, &mut s8);
                activations(&x, &mut q16, &mut s16);
            }
            check_against_one_value_at_a_time(&x, (&q8, &s8), (&q16, &s16));
        }
    }

    fn check_against_one_value_at_a_time(
        x: &[f32],
        (q8, s8): (&[i8], &[f32]),
        (q16, s16): (&[i16], &[f32]),
    ) {
        for (b, src) in x.chunks_exact(QBLOCK).enumerate() {
            let max = src.iter().fold(0f32, |m, v| m.max(v.abs()));
            let (w_s, x_s) = match max > 0.0 {
                true => (max / 127.0, max / 32767.0),
                false => (1.0, 1.0),
            };
            assert_eq!(
                (s8[b].to_bits(), s16[b].to_bits()),
                (w_s.to_bits(), x_s.to_bits())
            );
            for (i, v) in src.iter().enumerate() {
                let want = (v / w_s).round().clamp(-127.0, 127.0) as i8;
                assert_eq!(q8[b * QBLOCK + i], want, "weight {v} of block {b}");
                assert_eq!(
                    q16[b * QBLOCK + i],
                    (v / x_s).round() as i16,
                    "activation {v}"
                );
            }
        }
        assert!(s8[1] == 1.0 && q8[QBLOCK..2 * QBLOCK].iter().all(|&q| q == 0));
    }

    #[test]
    fn bf16_weights_quantise_as_their_f32_values() {
        let bits: Vec<u16> = values(QBLOCK * 8)
            .iter()
            .map(|v| half::bf16::from_f32(*v).to_bits())
            .collect();
        let wide: Vec<f32> = bits
            .iter()
            .map(|&b| half::bf16::from_bits(b).to_f32())
            .collect();
        let (mut from_bits, mut s_bits) = (vec![0i8; bits.len()], vec![0f32; 8]);
        let (mut from_f32, mut s_f32) = (vec![0i8; bits.len()], vec![0f32; 8]);
        weights(&bits, &mut from_bits, &mut s_bits);
        weights(&wide, &mut from_f32, &mut s_f32);
        assert_eq!((from_bits, s_bits), (from_f32, s_f32));
    }

    #[test]
    fn rounding_is_half_away_from_zero() {
        // 127 in the block makes its scale 1, so 2.5 and -2.5 are exact halves.
        let mut x = vec![0f32; QBLOCK];
        x[0] = 127.0;
        x[1] = 2.5;
        x[2] = -2.5;
        let (mut q, mut s) = (vec![0i8; QBLOCK], vec![0f32; 1]);
        weights(&x, &mut q, &mut s);
        assert_eq!((s[0], q[0], q[1], q[2]), (1.0, 127, 3, -3));
    }
}
