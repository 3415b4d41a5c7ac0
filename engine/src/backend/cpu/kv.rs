//! The CPU KV pool: one layer's K (or V) as `[num_blocks, block_size, num_kv_heads, head_dim]`, stored
//! f32, bf16, or int8 with one f32 scale per (token, head) (symmetric: `scale = max |x| / 127`), per
//! engine setting.

use crate::backend::{KvDtype, KvShape, pools_transfer_shape};
use crate::error::Result;

/// An element of the KV pool, converted to and from f32.
pub(crate) trait KvElem: Copy + Send + Sync + 'static {
    /// The f32 value.
    fn to_f32(self) -> f32;
    /// Rounds an f32 value into this type.
    fn from_f32(v: f32) -> Self;
}

impl KvElem for f32 {
    #[inline(always)]
    fn to_f32(self) -> f32 {
        self
    }
    #[inline(always)]
    fn from_f32(v: f32) -> Self {
        v
    }
}

/// bf16 stored as its bit pattern.
impl KvElem for u16 {
    #[inline(always)]
    fn to_f32(self) -> f32 {
        f32::from_bits((self as u32) << 16)
    }
    #[inline(always)]
    fn from_f32(v: f32) -> Self {
        half::bf16::from_f32(v).to_bits()
    }
}

/// int8, scaled by the (token, head)'s scale outside.
impl KvElem for i8 {
    #[inline(always)]
    fn to_f32(self) -> f32 {
        self as f32
    }
    #[inline(always)]
    fn from_f32(v: f32) -> Self {
        v.round().clamp(-127.0, 127.0) as i8
    }
}

/// The pool's elements.
#[derive(Debug, Clone)]
pub enum KvStore {
    /// f32 elements.
    F32(Vec<f32>),
    /// bf16 bit patterns.
    Bf16(Vec<u16>),
    /// int8 elements and `[num_blocks * block_size * num_kv_heads]` scales: element `e` of (slot, head)
    /// is `q[e] * scales[slot * num_kv_heads + head]`.
    Int8 {
        /// Quantised elements.
        q: Vec<i8>,
        /// One scale per (slot, head).
        scales: Vec<f32>,
    },
}

/// One layer's K (or V) pool on the CPU.
#[derive(Debug, Clone)]
pub struct CpuKv {
    /// Its shape.
    pub shape: KvShape,
    /// Its elements.
    pub store: KvStore,
}

impl CpuKv {
    /// A zeroed pool.
    pub fn zeros(shape: KvShape) -> Self {
        let len = shape.num_blocks * shape.block_size * shape.num_kv_heads * shape.head_dim;
        let store = match shape.dtype {
            KvDtype::F32 => KvStore::F32(vec![0.0; len]),
            KvDtype::Bf16 => KvStore::Bf16(vec![0; len]),
            KvDtype::Int8 => KvStore::Int8 {
                q: vec![0; len],
                scales: vec![0.0; len / shape.head_dim.max(1)],
            },
        };
        CpuKv { shape, store }
    }

    /// Number of slots (`num_blocks * block_size`).
    pub fn num_slots(&self) -> usize {
        self.shape.num_blocks * self.shape.block_size
    }

    /// Writes `rows` rows of `src[rows, num_kv_heads * head_dim]` to the given slots.
    pub fn write_rows(&mut self, src: &[f32], slots: &[u32]) {
        let width = self.shape.num_kv_heads * self.shape.head_dim;
        match &mut self.store {
            KvStore::F32(d) => scatter(d, src, slots, width),
            KvStore::Bf16(d) => scatter(d, src, slots, width),
            KvStore::Int8 { q, scales } => {
                scatter_int8(q, scales, src, slots, width, self.shape.head_dim)
            }
        }
    }

    /// Copies whole blocks to `out`, laid out as [`crate::backend::Backend::read_kv_blocks`] says for
    /// one pool.
    pub fn read_blocks(&self, blocks: &[u32], out: &mut [&mut [u8]]) -> Result<()> {
        self.check_records(blocks, out.iter().map(|r| r.len()))?;
        let elems = self.shape.block_size * self.shape.num_kv_heads * self.shape.head_dim;
        for (&b, record) in blocks.iter().zip(out.iter_mut()) {
            let b = b as usize;
            match &self.store {
                KvStore::F32(d) => copy_out(d, elems, b, record),
                KvStore::Bf16(d) => copy_out(d, elems, b, record),
                KvStore::Int8 { q, scales } => {
                    let (head, tail) = record.split_at_mut(elems);
                    copy_out(q, elems, b, head);
                    copy_out(scales, elems / self.shape.head_dim, b, tail);
                }
            }
        }
        Ok(())
    }

    /// Writes whole blocks from `src`, laid out as [`CpuKv::read_blocks`] writes them.
    pub fn write_blocks(&mut self, blocks: &[u32], src: &[&[u8]]) -> Result<()> {
        self.check_records(blocks, src.iter().map(|r| r.len()))?;
        let elems = self.shape.block_size * self.shape.num_kv_heads * self.shape.head_dim;
        let head_dim = self.shape.head_dim;
        for (&b, record) in blocks.iter().zip(src) {
            let b = b as usize;
            match &mut self.store {
                KvStore::F32(d) => copy_in(d, elems, b, record),
                KvStore::Bf16(d) => copy_in(d, elems, b, record),
                KvStore::Int8 { q, scales } => {
                    let (head, tail) = record.split_at(elems);
                    copy_in(q, elems, b, head);
                    copy_in(scales, elems / head_dim, b, tail);
                }
            }
        }
        Ok(())
    }

    /// Checks a block transfer: every block exists and has one host record of the block's size.
    fn check_records(
        &self,
        blocks: &[u32],
        records: impl ExactSizeIterator<Item = usize>,
    ) -> Result<()> {
        self.shape.check_block_transfer(blocks, records, 1)
    }

    /// Element `i` of the pool as f32 (dequantised for int8).
    pub fn value_at(&self, i: usize) -> f32 {
        match &self.store {
            KvStore::F32(d) => d[i],
            KvStore::Bf16(d) => d[i].to_f32(),
            KvStore::Int8 { q, scales } => q[i] as f32 * scales[i / self.shape.head_dim],
        }
    }
}

/// Copies whole blocks of several pools of one shape to records, laid out as
/// [`crate::backend::Backend::read_kv_blocks`] says: each record holds the block of every pool in turn.
pub fn read_pools_blocks(pools: &[&CpuKv], blocks: &[u32], out: &mut [&mut [u8]]) -> Result<()> {
    let shapes = pools.iter().map(|kv| kv.shape);
    let Some(shape) = pools_transfer_shape(shapes, blocks, out.iter().map(|r| r.len()))? else {
        return Ok(());
    };
    let per_pool = shape.block_bytes();
    let mut by_pool: Vec<Vec<&mut [u8]>> = pools.iter().map(|_| Vec::new()).collect();
    for record in out.iter_mut() {
        for (p, part) in record.chunks_exact_mut(per_pool).enumerate() {
            by_pool[p].push(part);
        }
    }
    for (kv, mut parts) in pools.iter().zip(by_pool) {
        kv.read_blocks(blocks, &mut parts)?;
    }
    Ok(())
}

/// Writes whole blocks of several pools from records as [`read_pools_blocks`] lays them out.
pub fn write_pools_blocks(pools: &mut [&mut CpuKv], blocks: &[u32], src: &[&[u8]]) -> Result<()> {
    let shapes = pools.iter().map(|kv| kv.shape);
    let Some(shape) = pools_transfer_shape(shapes, blocks, src.iter().map(|r| r.len()))? else {
        return Ok(());
    };
    let per_pool = shape.block_bytes();
    for (p, kv) in pools.iter_mut().enumerate() {
        let parts: Vec<&[u8]> = src
            .iter()
            .map(|record| &record[p * per_pool..(p + 1) * per_pool])
            .collect();
        kv.write_blocks(blocks, &parts)?;
    }
    Ok(())
}

/// Copies block `b` of `per_block` elements of `d` into `out`, as bytes.
fn copy_out<T: bytemuck::Pod>(d: &[T], per_block: usize, b: usize, out: &mut [u8]) {
    out.copy_from_slice(bytemuck::cast_slice(&d[b * per_block..(b + 1) * per_block]));
}

/// Overwrites block `b` of `per_block` elements of `d` with the bytes `src`.
fn copy_in<T: bytemuck::Pod>(d: &mut [T], per_block: usize, b: usize, src: &[u8]) {
    bytemuck::cast_slice_mut::<T, u8>(&mut d[b * per_block..(b + 1) * per_block])
        .copy_from_slice(src);
}

/// Quantises each head of each row with its own scale.
fn scatter_int8(
    q: &mut [i8],
    scales: &mut [f32],
    src: &[f32],
    slots: &[u32],
    width: usize,
    head_dim: usize,
) {
    for (row, &slot) in src.chunks_exact(width).zip(slots) {
        let o = slot as usize * width;
        for (h, head) in row.chunks_exact(head_dim).enumerate() {
            let amax = head.iter().fold(0f32, |m, x| m.max(x.abs()));
            let scale = amax / 127.0;
            let inv = if scale > 0.0 { 1.0 / scale } else { 0.0 };
            scales[(o + h * head_dim) / head_dim] = scale;
            q[o + h * head_dim..o + (h + 1) * head_dim]
                .iter_mut()
                .zip(head)
                .for_each(|(d, x)| *d = i8::from_f32(x * inv));
        }
    }
}

fn scatter<T: KvElem>(dst: &mut [T], src: &[f32], slots: &[u32], width: usize) {
    for (row, &slot) in src.chunks_exact(width).zip(slots) {
        let o = slot as usize * width;
        dst[o..o + width]
            .iter_mut()
            .zip(row)
            .for_each(|(d, s)| *d = T::from_f32(*s));
    }
}
