//! ggml's blocks of 32 weights: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 and IQ4_NL, each dequantised into 32 floats.
//!
//! Layouts (little-endian; `d` and `m` are f16, weight `i < 16` takes the low nibble of `qs[i]` and weight
//! `i + 16` its high nibble; Q5's fifth bits are bit `i` of the u32 `qh`):
//! - Q4_0, 18 bytes `d, qs[16]`: `w = (q - 8)·d`;
//! - Q4_1, 20 bytes `d, m, qs[16]`: `w = q·d + m`;
//! - Q5_0, 22 bytes `d, qh[4], qs[16]`: `w = (q - 16)·d`;
//! - Q5_1, 24 bytes `d, m, qh[4], qs[16]`: `w = q·d + m`;
//! - Q8_0, 34 bytes `d, q[32]` (i8): `w = q·d`;
//! - IQ4_NL, 18 bytes `d, qs[16]`: `w = d·T[q]`, T the non-linear table [`IQ4_NL_VALUES`].
//!
//! The products are in the order gguf-py's reference dequantisation takes them, so the floats agree bit
//! for bit (`tests/reference/quants_golden.py`).

use half::f16;

/// Weights a block holds.
pub const BLOCK: usize = 32;

/// IQ4_NL's sixteen levels, indexed by the 4-bit code.
pub const IQ4_NL_VALUES: [i8; 16] = [
    -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
];

/// The f16 at `bytes[at..at + 2]`, widened.
pub(super) fn f16_at(bytes: &[u8], at: usize) -> f32 {
    f16::from_le_bytes([bytes[at], bytes[at + 1]]).to_f32()
}

/// The 32 codes of a block's 16 nibble bytes: low nibbles first, then high.
fn nibbles(qs: &[u8]) -> [u8; BLOCK] {
    let mut q = [0u8; BLOCK];
    for (i, &b) in qs[..BLOCK / 2].iter().enumerate() {
        q[i] = b & 0x0f;
        q[i + BLOCK / 2] = b >> 4;
    }
    q
}

/// The 32 five-bit codes of a Q5 block: the nibbles with bit `i` of `qh` as their fifth.
fn five_bit_codes(qh: &[u8], qs: &[u8]) -> [u8; BLOCK] {
    let high = u32::from_le_bytes([qh[0], qh[1], qh[2], qh[3]]);
    let mut q = nibbles(qs);
    for (i, c) in q.iter_mut().enumerate() {
        *c |= (((high >> i) & 1) as u8) << 4;
    }
    q
}

/// One Q4_0 block (18 bytes).
pub fn q4_0(block: &[u8], out: &mut [f32]) {
    let d = f16_at(block, 0);
    for (o, q) in out.iter_mut().zip(nibbles(&block[2..])) {
        *o = d * f32::from(q as i8 - 8);
    }
}

/// One Q4_1 block (20 bytes).
pub fn q4_1(block: &[u8], out: &mut [f32]) {
    let (d, m) = (f16_at(block, 0), f16_at(block, 2));
    for (o, q) in out.iter_mut().zip(nibbles(&block[4..])) {
        *o = d * f32::from(q) + m;
    }
}

/// One Q5_0 block (22 bytes).
pub fn q5_0(block: &[u8], out: &mut [f32]) {
    let d = f16_at(block, 0);
    for (o, q) in out
        .iter_mut()
        .zip(five_bit_codes(&block[2..6], &block[6..]))
    {
        *o = d * f32::from(q as i8 - 16);
    }
}

/// One Q5_1 block (24 bytes).
pub fn q5_1(block: &[u8], out: &mut [f32]) {
    let (d, m) = (f16_at(block, 0), f16_at(block, 2));
    for (o, q) in out
        .iter_mut()
        .zip(five_bit_codes(&block[4..8], &block[8..]))
    {
        *o = d * f32::from(q) + m;
    }
}

/// One Q8_0 block (34 bytes).
pub fn q8_0(block: &[u8], out: &mut [f32]) {
    let d = f16_at(block, 0);
    for (o, &q) in out.iter_mut().zip(&block[2..2 + BLOCK]) {
        *o = f32::from(q as i8) * d;
    }
}

/// One IQ4_NL block (18 bytes).
pub fn iq4_nl(block: &[u8], out: &mut [f32]) {
    let d = f16_at(block, 0);
    for (o, q) in out.iter_mut().zip(nibbles(&block[2..])) {
        *o = d * f32::from(IQ4_NL_VALUES[q as usize]);
    }
}
