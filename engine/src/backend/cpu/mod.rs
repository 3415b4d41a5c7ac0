//! The CPU backend: f32 activations, bf16 (or f32) weights with f32 accumulation, KV pool in f32 or bf16.
//!
//! Ops run on the current rayon pool: wrap a forward pass in `pool.install(..)` to choose the thread
//! count. Matmuls use AVX-512 BF16 / FMA when the CPU has them (run-time detection) and portable code
//! otherwise; see [`matmul`]. This backend is the reference other backends are tested against.

pub mod attention;
pub mod kv;
pub mod matmul;
pub mod ops;

use std::sync::Mutex;

use crate::backend::{AttnShape, Backend, KvShape, PagedAttnMeta};
use crate::config::RopeFreqs;
use crate::error::{EngineError, Result};
use crate::weights::{TensorRef, WeightDtype};
use attention::{Dense, Paged};
use kv::KvElem;
pub use kv::{CpuKv, KvStore};
use matmul::{MatmulDims, WeightSlice};

/// A weight in host memory: a matrix `[rows, cols]` or a vector (`rows == 1`).
#[derive(Debug, Clone)]
pub struct CpuWeight {
    /// Output features (matrix rows).
    pub rows: usize,
    /// Input features (matrix columns).
    pub cols: usize,
    /// The elements, row-major.
    pub data: CpuWeightData,
    /// An int8 copy for decode-sized batches, when the backend makes one.
    #[cfg(target_arch = "x86_64")]
    pub q8: Option<matmul::int8::Q8Matrix>,
}

/// Element storage of a [`CpuWeight`].
#[derive(Debug, Clone)]
pub enum CpuWeightData {
    /// bf16 bit patterns.
    Bf16(Vec<u16>),
    /// f32 values.
    F32(Vec<f32>),
}

impl CpuWeight {
    /// The elements as a matmul operand.
    pub fn slice(&self) -> WeightSlice<'_> {
        match &self.data {
            CpuWeightData::Bf16(v) => WeightSlice::Bf16(v),
            CpuWeightData::F32(v) => WeightSlice::F32(v),
        }
    }

    /// The elements as f32 (vectors are always stored so).
    fn f32(&self) -> &[f32] {
        match &self.data {
            CpuWeightData::F32(v) => v,
            CpuWeightData::Bf16(_) => panic!("vector weights are uploaded as f32"),
        }
    }
}

/// Reusable buffers for quantised copies of matmul activations.
#[derive(Debug, Default)]
struct Scratch {
    bf16: Vec<u16>,
    i16: Vec<i16>,
    scales: Vec<f32>,
}

/// Activation rows up to which the int8 decode path is used (when enabled).
pub const INT8_MAX_ROWS: usize = 4;

/// The CPU backend. Holds scratch buffers for quantised activations and its weight settings.
#[derive(Debug, Default)]
pub struct CpuBackend {
    scratch: Mutex<Scratch>,
    int8_decode: bool,
}

impl CpuBackend {
    /// A CPU backend computing with the weights as stored (bf16 or f32).
    pub fn new() -> Self {
        Self::default()
    }

    /// A CPU backend that also keeps an int8 copy (blocks of 64, f32 scales) of every bf16 matrix and
    /// uses it for batches of at most [`INT8_MAX_ROWS`] rows (decode), where weight bandwidth dominates.
    /// It costs ~5× the bf16 rounding error on those steps and needs AVX2 with FMA (or AVX-512 VNNI);
    /// without them the setting is ignored.
    pub fn with_int8_decode() -> Self {
        #[cfg(target_arch = "x86_64")]
        let int8_decode = matmul::int8::available();
        #[cfg(not(target_arch = "x86_64"))]
        let int8_decode = false;
        CpuBackend {
            int8_decode,
            ..Self::default()
        }
    }

    /// Whether decode-sized batches run on int8 copies of the weights.
    pub fn int8_decode(&self) -> bool {
        self.int8_decode
    }
}

impl Backend for CpuBackend {
    type Buf = Vec<f32>;
    type Ids = Vec<u32>;
    type Weight = CpuWeight;
    type Kv = CpuKv;
    type Graph = ();

    fn name(&self) -> &'static str {
        "cpu"
    }

    fn alloc(&self, len: usize) -> Result<Vec<f32>> {
        Ok(vec![0.0; len])
    }

    fn alloc_ids(&self, len: usize) -> Result<Vec<u32>> {
        Ok(vec![0; len])
    }

    fn alloc_kv(&self, shape: KvShape) -> Result<CpuKv> {
        Ok(CpuKv::zeros(shape))
    }

    fn upload_matrix(&self, t: &TensorRef<'_>) -> Result<CpuWeight> {
        let &[rows, cols] = t.shape else {
            return Err(EngineError::TensorShape {
                name: t.name.into(),
                expected: vec![0, 0],
                actual: t.shape.into(),
            });
        };
        let data = match t.dtype {
            WeightDtype::Bf16 => CpuWeightData::Bf16(t.to_bf16_bits()),
            WeightDtype::F32 | WeightDtype::F16 => CpuWeightData::F32(t.to_f32()),
        };
        #[cfg(target_arch = "x86_64")]
        let q8 = match (&data, self.int8_decode) {
            (CpuWeightData::Bf16(bits), true) => matmul::int8::Q8Matrix::quantize_bf16(bits, cols),
            _ => None,
        };
        Ok(CpuWeight {
            rows,
            cols,
            data,
            #[cfg(target_arch = "x86_64")]
            q8,
        })
    }

    fn upload_vector(&self, t: &TensorRef<'_>) -> Result<CpuWeight> {
        Ok(CpuWeight {
            rows: 1,
            cols: t.numel(),
            data: CpuWeightData::F32(t.to_f32()),
            #[cfg(target_arch = "x86_64")]
            q8: None,
        })
    }

    fn write(&self, dst: &mut Vec<f32>, src: &[f32]) -> Result<()> {
        dst[..src.len()].copy_from_slice(src);
        Ok(())
    }

    fn write_ids(&self, dst: &mut Vec<u32>, src: &[u32]) -> Result<()> {
        dst[..src.len()].copy_from_slice(src);
        Ok(())
    }

    fn read(&self, src: &Vec<f32>, dst: &mut [f32]) -> Result<()> {
        dst.copy_from_slice(&src[..dst.len()]);
        Ok(())
    }

    fn read_ids(&self, src: &Vec<u32>, dst: &mut [u32]) -> Result<()> {
        let front = src.get(..dst.len()).ok_or_else(|| {
            EngineError::InvalidBatch(format!(
                "read_ids: buffer of {} elements, {} needed",
                src.len(),
                dst.len()
            ))
        })?;
        dst.copy_from_slice(front);
        Ok(())
    }

    fn read_kv_blocks(
        &self,
        pools: &[&CpuKv],
        blocks: &[u32],
        out: &mut [crate::kv::tiers::BlockBuf],
    ) -> Result<()> {
        let mut records: Vec<&mut [u8]> = out.iter_mut().map(|b| &mut b[..]).collect();
        kv::read_pools_blocks(pools, blocks, &mut records)
    }

    fn write_kv_blocks(
        &self,
        pools: &mut [&mut CpuKv],
        blocks: &[u32],
        src: &[crate::kv::tiers::BlockBytes],
    ) -> Result<()> {
        let records: Vec<&[u8]> = src.iter().map(|r| &r[..]).collect();
        kv::write_pools_blocks(pools, blocks, &records)
    }

    fn sample_rows(
        &self,
        logits: &Vec<f32>,
        picks: &Vec<f32>,
        (rows, vocab): (usize, usize),
        ids: &mut Vec<u32>,
    ) -> Result<()> {
        let too_small = logits.len() < rows * vocab || picks.len() < rows * 4 || ids.len() < rows;
        if too_small {
            return Err(EngineError::InvalidBatch(format!(
                "sample_rows: {rows} rows of {vocab} logits need larger buffers"
            )));
        }
        let mut scratch = Vec::new();
        for (r, id) in ids[..rows].iter_mut().enumerate() {
            let row = &logits[r * vocab..(r + 1) * vocab];
            let pick = crate::sampling::Pick::from_row(&picks[r * 4..r * 4 + 4]);
            *id = crate::sampling::pick_token(row, &pick, &mut scratch);
        }
        Ok(())
    }

    fn copy(&self, src: &Vec<f32>, n: usize, dst: &mut Vec<f32>) -> Result<()> {
        dst[..n].copy_from_slice(&src[..n]);
        Ok(())
    }

    fn embedding(
        &self,
        table: &CpuWeight,
        ids: &Vec<u32>,
        rows: usize,
        first: u32,
        out: &mut Vec<f32>,
    ) -> Result<()> {
        let ids = &ids[..rows];
        match &table.data {
            CpuWeightData::Bf16(t) => ops::embedding_bf16(t, table.cols, first, ids, out),
            CpuWeightData::F32(t) => ops::embedding_f32(t, table.cols, first, ids, out),
        }
        Ok(())
    }

    fn gather_rows(
        &self,
        x: &Vec<f32>,
        idx: &Vec<u32>,
        rows: usize,
        width: usize,
        out: &mut Vec<f32>,
    ) -> Result<()> {
        for (o, &i) in out.chunks_exact_mut(width).zip(&idx[..rows]) {
            o.copy_from_slice(&x[i as usize * width..][..width]);
        }
        Ok(())
    }

    fn rms_norm(
        &self,
        x: &Vec<f32>,
        w: &CpuWeight,
        eps: f32,
        rows: usize,
        out: &mut Vec<f32>,
    ) -> Result<()> {
        ops::rms_norm(x, w.f32(), eps, rows, out);
        Ok(())
    }

    fn layer_norm(
        &self,
        x: &Vec<f32>,
        w: &CpuWeight,
        b: &CpuWeight,
        eps: f32,
        rows: usize,
        out: &mut Vec<f32>,
    ) -> Result<()> {
        ops::layer_norm(x, w.f32(), b.f32(), eps, rows, out);
        Ok(())
    }

    fn matmul(
        &self,
        x: &Vec<f32>,
        w: &CpuWeight,
        bias: Option<&CpuWeight>,
        rows: usize,
        out: &mut Vec<f32>,
    ) -> Result<()> {
        let dims = MatmulDims {
            rows,
            k: w.cols,
            n: w.rows,
        };
        let mut scratch = self.scratch.lock().unwrap_or_else(|e| e.into_inner());
        let bias = bias.map(CpuWeight::f32);
        #[cfg(target_arch = "x86_64")]
        if let (Some(q8), true) = (&w.q8, rows <= INT8_MAX_ROWS) {
            let Scratch { i16, scales, .. } = &mut *scratch;
            matmul::int8::matmul(x, q8, bias, dims, out, i16, scales);
            return Ok(());
        }
        matmul::matmul(x, w.slice(), bias, dims, out, &mut scratch.bf16);
        Ok(())
    }

    fn rope_table(
        &self,
        positions: &Vec<u32>,
        freqs: &RopeFreqs,
        rows: usize,
        table: &mut Vec<f32>,
    ) -> Result<()> {
        ops::rope_table(&positions[..rows], freqs, table);
        Ok(())
    }

    fn rope(
        &self,
        x: &mut Vec<f32>,
        table: &Vec<f32>,
        rows: usize,
        heads: usize,
        head_dim: usize,
    ) -> Result<()> {
        ops::rope(x, table, rows, heads, head_dim);
        Ok(())
    }

    fn silu_mul(&self, gate: &Vec<f32>, up: &Vec<f32>, n: usize, out: &mut Vec<f32>) -> Result<()> {
        ops::silu_mul(&gate[..n], &up[..n], &mut out[..n]);
        Ok(())
    }

    fn gelu(&self, x: &mut Vec<f32>, n: usize) -> Result<()> {
        ops::gelu(&mut x[..n]);
        Ok(())
    }

    fn add(&self, x: &mut Vec<f32>, y: &Vec<f32>, n: usize) -> Result<()> {
        ops::add(&mut x[..n], &y[..n]);
        Ok(())
    }

    fn kv_write(
        &self,
        k: &Vec<f32>,
        v: &Vec<f32>,
        slot_mapping: &Vec<u32>,
        rows: usize,
        k_cache: &mut CpuKv,
        v_cache: &mut CpuKv,
    ) -> Result<()> {
        let width = k_cache.shape.num_kv_heads * k_cache.shape.head_dim;
        k_cache.write_rows(&k[..rows * width], &slot_mapping[..rows]);
        v_cache.write_rows(&v[..rows * width], &slot_mapping[..rows]);
        Ok(())
    }

    fn paged_attention(
        &self,
        q: &Vec<f32>,
        k_cache: &CpuKv,
        v_cache: &CpuKv,
        meta: &PagedAttnMeta<'_, Self>,
        shape: AttnShape,
        out: &mut Vec<f32>,
    ) -> Result<()> {
        let block_size = k_cache.shape.block_size;
        match (&k_cache.store, &v_cache.store) {
            (KvStore::F32(k), KvStore::F32(v)) => {
                paged_attention_over(q, (k, v), (&[], &[]), block_size, meta, shape, out)
            }
            (KvStore::Bf16(k), KvStore::Bf16(v)) => {
                paged_attention_over(q, (k, v), (&[], &[]), block_size, meta, shape, out)
            }
            (
                KvStore::Int8 {
                    q: k,
                    scales: k_scales,
                },
                KvStore::Int8 {
                    q: v,
                    scales: v_scales,
                },
            ) => paged_attention_over(
                q,
                (k, v),
                (k_scales, v_scales),
                block_size,
                meta,
                shape,
                out,
            ),
            _ => panic!("K and V pools of one layer must share a dtype"),
        }
        Ok(())
    }

    fn varlen_attention(
        &self,
        q: &Vec<f32>,
        k: &Vec<f32>,
        v: &Vec<f32>,
        query_start_loc: &Vec<u32>,
        (num_seqs, num_tokens): (usize, usize),
        shape: AttnShape,
        out: &mut Vec<f32>,
    ) -> Result<()> {
        let qsl = &query_start_loc[..num_seqs + 1];
        let rows = qsl[num_seqs] as usize;
        if rows != num_tokens {
            return Err(EngineError::InvalidBatch(format!(
                "varlen_attention: query_start_loc ends at {rows}, {num_tokens} tokens given"
            )));
        }
        let (hd, row_stride) = (shape.head_dim, shape.num_kv_heads * shape.head_dim);
        let ctx = |s: usize| (qsl[s + 1] - qsl[s]) as usize;
        let kv_for = |s: usize, g: usize| Dense {
            k,
            v,
            start: qsl[s] as usize,
            row_stride,
            head_off: g * hd,
            head_dim: hd,
        };
        attention::run(
            q,
            &mut out[..rows * shape.num_heads * hd],
            qsl,
            ctx,
            kv_for,
            shape,
            false,
        );
        Ok(())
    }
}

/// Paged attention over one layer's K and V pools of element type `T` (with their per-(slot, head) scales
/// for int8, else empty), dense or with sink windows.
fn paged_attention_over<T: KvElem>(
    q: &[f32],
    (k, v): (&[T], &[T]),
    (k_scales, v_scales): (&[f32], &[f32]),
    block_size: usize,
    meta: &PagedAttnMeta<'_, CpuBackend>,
    shape: AttnShape,
    out: &mut [f32],
) {
    let qsl = &meta.query_start_loc[..meta.num_seqs + 1];
    let (hd, mb) = (shape.head_dim, meta.max_blocks_per_seq);
    let ctx = |s: usize| meta.seq_lens[s] as usize;
    let out = &mut out[..meta.num_tokens * shape.num_heads * hd];
    let window_of = |s: usize| -> [usize; 3] {
        match &meta.windows {
            Some(w) => std::array::from_fn(|i| w.windows[3 * s + i] as usize),
            None => [0; 3],
        }
    };
    let kv_for = |s: usize, g: usize| {
        let [sinks, window, block_offset] = window_of(s);
        Paged {
            k,
            v,
            k_scales,
            v_scales,
            blocks: &meta.block_table[s * mb..(s + 1) * mb],
            sink_blocks: if window > 0 {
                sinks.div_ceil(block_size)
            } else {
                0
            },
            block_offset,
            block_size,
            row_stride: shape.num_kv_heads * hd,
            head_off: g * hd,
            head_dim: hd,
        }
    };
    match &meta.windows {
        Some(w) => attention::run_windowed(q, w.q_sinks, out, qsl, ctx, window_of, kv_for, shape),
        None => attention::run(q, out, qsl, ctx, kv_for, shape, true),
    }
}
