//! ggml's K-quants: super-blocks of 256 weights in sub-blocks of 16 or 32, each sub-block with its own
//! scale (and minimum) quantised against the super-block's f16 `d` (and `dmin`). Q2_K to Q6_K, the
//! types of llama.cpp's `Q2_K` … `Q6_K` and `Q*_K_S/M/L` files, and IQ4_XS, IQ4_NL's codes in the
//! same super-blocks with 6-bit sub-block scales, each dequantised into 256 floats.
//!
//! Layouts (little-endian; `d`, `dmin` f16):
//! - Q2_K, 84 bytes `scales[16], qs[64], d, dmin`: sub-block `s` of 16 has scale `d·(scales[s] & 15)`
//!   and minimum `dmin·(scales[s] >> 4)`; 2-bit codes;
//! - Q3_K, 110 bytes `hmask[32], qs[64], scales[12], d`: sixteen 6-bit scales less 32, 2-bit codes less
//!   4 where the code's bit of `hmask` is clear;
//! - Q4_K, 144 bytes `d, dmin, scales[12], qs[128]`: eight 6-bit scales and minimums for sub-blocks of
//!   32 ([`scale_and_min`]); 4-bit codes;
//! - Q5_K, 176 bytes `d, dmin, scales[12], qh[32], qs[128]`: Q4_K's with a fifth bit from `qh`;
//! - Q6_K, 210 bytes `ql[128], qh[64], scales[16], d`: i8 scales for sub-blocks of 16; 6-bit codes
//!   less 32;
//! - IQ4_XS, 136 bytes `d, scales_h (u16), scales_l[4], qs[128]`: eight 6-bit scales less 32 for
//!   sub-blocks of 32, the low nibble of scale `j` in nibble `j % 2` of `scales_l[j / 2]`, its top
//!   two bits at bit `2j` of `scales_h`; each sub-block's 16 code bytes as IQ4_NL's block has them
//!   (low nibbles, then high) into the same table of levels.
//!
//! Each weight is `(d·scale)·code − dmin·min`, the products in the order gguf-py's reference
//! dequantisation takes them, so the floats agree bit for bit (`tests/reference/quants_golden.py`).

use super::legacy_quants::{IQ4_NL_VALUES, f16_at};

/// Weights a super-block holds.
pub const SUPER_BLOCK: usize = 256;

/// Q4_K's and Q5_K's scale and minimum of sub-block `j < 8`, 6 bits each, packed in 12 bytes: bytes
/// 0–3 hold scales 0–3 and the top bits of scales 4–7, bytes 4–7 the same for the minimums, bytes 8–11
/// the low nibbles of scales (low) and minimums (high) 4–7.
fn scale_and_min(packed: &[u8], j: usize) -> (f32, f32) {
    let (scale, min) = if j < 4 {
        (packed[j] & 63, packed[j + 4] & 63)
    } else {
        (
            (packed[j + 4] & 0x0f) | ((packed[j - 4] >> 6) << 4),
            (packed[j + 4] >> 4) | ((packed[j] >> 6) << 4),
        )
    };
    (f32::from(scale), f32::from(min))
}

/// Q3_K's sixteen 6-bit scales, less 32: low nibbles in bytes 0–7 (scales 0–7 low, 8–15 high), the
/// top two bits in bytes 8–11 (scale `s` at bits `2·(s / 4)` of byte `8 + s % 4`).
fn q3_k_scales(packed: &[u8]) -> [f32; 16] {
    std::array::from_fn(|s| {
        let low = if s < 8 {
            packed[s] & 0x0f
        } else {
            packed[s - 8] >> 4
        };
        let high = (packed[8 + s % 4] >> (2 * (s / 4))) & 3;
        f32::from((low | (high << 4)) as i8 - 32)
    })
}

/// One Q2_K super-block (84 bytes). Weight `128·h + 32·k + l` is bits `2k` of `qs[32·h + l]`.
pub fn q2_k(block: &[u8], out: &mut [f32]) {
    let (scales, qs) = (&block[..16], &block[16..80]);
    let (d, dmin) = (f16_at(block, 80), f16_at(block, 82));
    for (i, o) in out[..SUPER_BLOCK].iter_mut().enumerate() {
        let (h, k, l) = (i / 128, (i % 128) / 32, i % 32);
        let code = (qs[32 * h + l] >> (2 * k)) & 3;
        let sc = scales[i / 16];
        let scale = d * f32::from(sc & 0x0f);
        let min = dmin * f32::from(sc >> 4);
        *o = scale * f32::from(code) - min;
    }
}

/// One Q3_K super-block (110 bytes). Weight `128·h + 32·k + l` is bits `2k` of `qs[32·h + l]`, less 4
/// where bit `4h + k` of `hmask[l]` is clear.
pub fn q3_k(block: &[u8], out: &mut [f32]) {
    let (hmask, qs) = (&block[..32], &block[32..96]);
    let scales = q3_k_scales(&block[96..108]);
    let d = f16_at(block, 108);
    for (i, o) in out[..SUPER_BLOCK].iter_mut().enumerate() {
        let (h, k, l) = (i / 128, (i % 128) / 32, i % 32);
        let low = ((qs[32 * h + l] >> (2 * k)) & 3) as i8;
        let high_clear = ((hmask[l] >> (4 * h + k)) & 1) ^ 1;
        let code = low - ((high_clear << 2) as i8);
        *o = (d * scales[i / 16]) * f32::from(code);
    }
}

/// Q4_K's and Q5_K's common form: sub-block `j` of 32 takes nibble `j % 2` of `qs[32·(j / 2) + l]`,
/// and with `qh`, bit `j` of `qh[l]` as its fifth.
fn q4_or_q5_k(d: f32, dmin: f32, packed: &[u8], qh: Option<&[u8]>, qs: &[u8], out: &mut [f32]) {
    for (j, sub) in out[..SUPER_BLOCK].chunks_exact_mut(32).enumerate() {
        let (sc, m) = scale_and_min(packed, j);
        let (scale, min) = (d * sc, dmin * m);
        for (l, o) in sub.iter_mut().enumerate() {
            let low = (qs[32 * (j / 2) + l] >> (4 * (j % 2))) & 0x0f;
            let high = qh.map_or(0, |qh| ((qh[l] >> j) & 1) << 4);
            *o = scale * f32::from(low | high) - min;
        }
    }
}

/// One Q4_K super-block (144 bytes).
pub fn q4_k(block: &[u8], out: &mut [f32]) {
    let (d, dmin) = (f16_at(block, 0), f16_at(block, 2));
    q4_or_q5_k(d, dmin, &block[4..16], None, &block[16..144], out);
}

/// One Q5_K super-block (176 bytes).
pub fn q5_k(block: &[u8], out: &mut [f32]) {
    let (d, dmin) = (f16_at(block, 0), f16_at(block, 2));
    q4_or_q5_k(
        d,
        dmin,
        &block[4..16],
        Some(&block[16..48]),
        &block[48..176],
        out,
    );
}

/// One Q6_K super-block (210 bytes). In half `h`, weight `t < 128` takes nibble `t / 64` of
/// `ql[64·h + t % 64]` and bits `2·(t / 32)` of `qh[32·h + t % 32]` as its top two.
pub fn q6_k(block: &[u8], out: &mut [f32]) {
    let (ql, qh, scales) = (&block[..128], &block[128..192], &block[192..208]);
    let d = f16_at(block, 208);
    for (i, o) in out[..SUPER_BLOCK].iter_mut().enumerate() {
        let (h, t) = (i / 128, i % 128);
        let low = (ql[64 * h + t % 64] >> (4 * (t / 64))) & 0x0f;
        let high = (qh[32 * h + t % 32] >> (2 * (t / 32))) & 3;
        let code = (low | (high << 4)) as i8 - 32;
        *o = (d * f32::from(scales[i / 16] as i8)) * f32::from(code);
    }
}

/// One IQ4_XS super-block (136 bytes).
pub fn iq4_xs(block: &[u8], out: &mut [f32]) {
    let d = f16_at(block, 0);
    let scales_h = u16::from_le_bytes([block[2], block[3]]);
    let (scales_l, qs) = (&block[4..8], &block[8..136]);
    for (j, sub) in out[..SUPER_BLOCK].chunks_exact_mut(32).enumerate() {
        let low = (scales_l[j / 2] >> (4 * (j % 2))) & 0x0f;
        let high = ((scales_h >> (2 * j)) & 3) as u8;
        let dl = d * f32::from((low | (high << 4)) as i8 - 32);
        let codes = &qs[16 * j..16 * j + 16];
        for (i, o) in sub.iter_mut().enumerate() {
            let code = (codes[i % 16] >> (4 * (i / 16))) & 0x0f;
            *o = dl * f32::from(IQ4_NL_VALUES[code as usize]);
        }
    }
}
