//! The [`Backend`] trait's ops for [`CudaBackend`]: each hands its buffers to the module that
//! launches its kernels (products in `matmul` and `gemv`, attention in `attention` and `flash`, the
//! elementwise ops in `ops`), or to the op-by-op sequences in `unfused` where no fused kernel fits.

use std::sync::Mutex;
use std::sync::atomic::Ordering;

use cudarc::driver::{CudaSlice, PushKernelArg};

use super::{
    CudaBackend, CudaGraphExec, CudaKv, CudaKvStore, CudaWeight, CudaWeightData, attention,
    check_len, cuda_err, decode_step, gemv, grid, matmul, ops, rope_kv, sample, sublayer,
};
use crate::backend::{
    AttnBuffers, AttnShape, AttnWeights, Backend, KvDtype, KvShape, PagedAttnMeta, RmsNormInto,
    RopeKvWrite, SwigluBuffers, SwigluWeights, unfused,
};
use crate::config::RopeFreqs;
use crate::error::{EngineError, Result};
use crate::weights::{TensorRef, WeightDtype};

impl Backend for CudaBackend {
    type Buf = CudaSlice<f32>;
    type Ids = CudaSlice<u32>;
    type Weight = CudaWeight;
    type Kv = CudaKv;
    type Graph = CudaGraphExec;

    fn name(&self) -> &'static str {
        "cuda"
    }

    fn records_graphs(&self) -> bool {
        self.graphs_on()
    }

    fn begin_capture(&self) -> Result<()> {
        self.settle_transfers()?;
        self.capture_begin()
    }

    fn end_capture(&self) -> Result<CudaGraphExec> {
        self.capture_end()
    }

    fn replay(&self, graph: &CudaGraphExec) -> Result<()> {
        self.settle_transfers()?;
        self.graph_launch(graph)
    }

    fn graph_epoch(&self) -> u64 {
        self.epoch_now()
    }

    fn memory_info(&self) -> Result<Option<(usize, usize)>> {
        self.dev.stream.synchronize().map_err(cuda_err)?;
        self.dev.ctx.mem_get_info().map(Some).map_err(cuda_err)
    }

    fn alloc(&self, len: usize) -> Result<CudaSlice<f32>> {
        self.zeros(len)
    }

    fn alloc_ids(&self, len: usize) -> Result<CudaSlice<u32>> {
        self.zeros(len)
    }

    fn alloc_kv(&self, shape: KvShape) -> Result<CudaKv> {
        let len = shape.num_blocks * shape.block_size * shape.num_kv_heads * shape.head_dim;
        let store = match shape.dtype {
            KvDtype::F32 => CudaKvStore::F32(self.zeros(len)?),
            KvDtype::Bf16 => CudaKvStore::Bf16(self.zeros(len)?),
            KvDtype::Int8 => CudaKvStore::Int8 {
                q: self.zeros(len)?,
                scales: self.zeros(len / shape.head_dim.max(1))?,
            },
        };
        Ok(CudaKv {
            shape,
            store,
            pending: Mutex::new(None),
        })
    }

    fn read_kv_blocks(
        &self,
        pools: &[&CudaKv],
        blocks: &[u32],
        out: &mut [crate::kv::tiers::BlockBuf],
    ) -> Result<()> {
        self.read_blocks(pools, blocks, out)
    }

    fn write_kv_blocks(
        &self,
        pools: &mut [&mut CudaKv],
        blocks: &[u32],
        src: &[crate::kv::tiers::BlockBytes],
    ) -> Result<()> {
        self.write_blocks(pools, blocks, src)
    }

    fn wait_kv_writes(&self, keep: usize) -> Result<()> {
        self.wait_transfers(keep)
    }

    fn host_memory_is_pinned(&self) -> bool {
        true
    }

    fn host_allocator(&self) -> crate::kv::tiers::HostAllocator {
        self.pinned_allocator()
    }

    fn upload_matrix(&self, t: &TensorRef<'_>) -> Result<CudaWeight> {
        let &[rows, cols] = t.shape else {
            return Err(EngineError::TensorShape {
                name: t.name.into(),
                expected: vec![0, 0],
                actual: t.shape.into(),
            });
        };
        let data = match t.dtype {
            WeightDtype::Bf16 => CudaWeightData::Bf16(self.upload(&t.to_bf16_bits())?),
            WeightDtype::F32 | WeightDtype::F16 => CudaWeightData::F32(self.upload(&t.to_f32())?),
        };
        Ok(CudaWeight { rows, cols, data })
    }

    fn upload_vector(&self, t: &TensorRef<'_>) -> Result<CudaWeight> {
        Ok(CudaWeight {
            rows: 1,
            cols: t.numel(),
            data: CudaWeightData::F32(self.upload(&t.to_f32())?),
        })
    }

    fn write(&self, dst: &mut CudaSlice<f32>, src: &[f32]) -> Result<()> {
        ops::write(&self.dev.stream, dst, src)
    }

    fn write_ids(&self, dst: &mut CudaSlice<u32>, src: &[u32]) -> Result<()> {
        ops::write(&self.dev.stream, dst, src)
    }

    fn read(&self, src: &CudaSlice<f32>, dst: &mut [f32]) -> Result<()> {
        ops::read(&self.dev.stream, "read", src, dst)?;
        self.release_finished_transfers();
        Ok(())
    }

    fn copy(&self, src: &CudaSlice<f32>, n: usize, dst: &mut CudaSlice<f32>) -> Result<()> {
        check_len("copy src", src.len(), n)?;
        check_len("copy dst", dst.len(), n)?;
        self.dev
            .stream
            .memcpy_dtod(&src.slice(..n), &mut dst.slice_mut(..n))
            .map_err(cuda_err)
    }

    fn embedding(
        &self,
        table: &CudaWeight,
        ids: &CudaSlice<u32>,
        rows: usize,
        first: u32,
        out: &mut CudaSlice<f32>,
    ) -> Result<()> {
        let width = table.cols;
        check_len("embedding ids", ids.len(), rows)?;
        check_len("embedding out", out.len(), rows * width)?;
        let (r, w) = (rows as i32, width as i32);
        let f = match &table.data {
            CudaWeightData::Bf16(_) => "embedding_bf16",
            CudaWeightData::F32(_) => "embedding_f32",
        };
        let f = self.kernels.get(f)?;
        let mut b = self.dev.stream.launch_builder(f);
        match &table.data {
            CudaWeightData::Bf16(t) => b.arg(t),
            CudaWeightData::F32(t) => b.arg(t),
        };
        let table_rows = table.rows as u32;
        b.arg(ids)
            .arg(out)
            .arg(&r)
            .arg(&w)
            .arg(&first)
            .arg(&table_rows);
        // SAFETY: the kernel's arguments match its signature; sizes were checked above.
        unsafe { b.launch(grid(rows * width)) }.map_err(cuda_err)?;
        Ok(())
    }

    fn gather_rows(
        &self,
        x: &CudaSlice<f32>,
        idx: &CudaSlice<u32>,
        rows: usize,
        width: usize,
        out: &mut CudaSlice<f32>,
    ) -> Result<()> {
        check_len("gather_rows idx", idx.len(), rows)?;
        check_len("gather_rows out", out.len(), rows * width)?;
        let (r, w) = (rows as i32, width as i32);
        let f = self.kernels.get("gather_rows_f32")?;
        let mut b = self.dev.stream.launch_builder(f);
        b.arg(x).arg(idx).arg(out).arg(&r).arg(&w);
        // SAFETY: the kernel's arguments match its signature; sizes were checked above.
        unsafe { b.launch(grid(rows * width)) }.map_err(cuda_err)?;
        Ok(())
    }

    fn rms_norm(
        &self,
        x: &CudaSlice<f32>,
        w: &CudaWeight,
        eps: f32,
        rows: usize,
        out: &mut CudaSlice<f32>,
    ) -> Result<()> {
        ops::rms_norm(self, x, w, eps, rows, out)
    }

    fn layer_norm(
        &self,
        x: &CudaSlice<f32>,
        w: &CudaWeight,
        b: &CudaWeight,
        eps: f32,
        rows: usize,
        out: &mut CudaSlice<f32>,
    ) -> Result<()> {
        ops::layer_norm(self, x, (w, b), eps, rows, out)
    }

    fn matmul(
        &self,
        x: &CudaSlice<f32>,
        w: &CudaWeight,
        bias: Option<&CudaWeight>,
        rows: usize,
        out: &mut CudaSlice<f32>,
    ) -> Result<()> {
        matmul::matmul(self, x, w, bias, rows, out)
    }

    fn rope_table(
        &self,
        positions: &CudaSlice<u32>,
        freqs: &RopeFreqs,
        rows: usize,
        table: &mut CudaSlice<f32>,
    ) -> Result<()> {
        ops::rope_table(self, positions, freqs, rows, table)
    }

    fn rope(
        &self,
        x: &mut CudaSlice<f32>,
        table: &CudaSlice<f32>,
        rows: usize,
        num_heads: usize,
        head_dim: usize,
    ) -> Result<()> {
        ops::rope(self, x, table, rows, (num_heads, head_dim))
    }

    fn silu_mul(
        &self,
        gate: &CudaSlice<f32>,
        up: &CudaSlice<f32>,
        n: usize,
        out: &mut CudaSlice<f32>,
    ) -> Result<()> {
        ops::silu_mul(self, gate, up, n, out)
    }

    fn gelu(&self, x: &mut CudaSlice<f32>, n: usize) -> Result<()> {
        ops::gelu(self, x, n)
    }

    fn add(&self, x: &mut CudaSlice<f32>, y: &CudaSlice<f32>, n: usize) -> Result<()> {
        ops::add(self, x, y, n)
    }

    fn matmul_add(
        &self,
        x: &CudaSlice<f32>,
        w: &CudaWeight,
        (rows, width): (usize, usize),
        scratch: &mut CudaSlice<f32>,
        out: &mut CudaSlice<f32>,
    ) -> Result<()> {
        if gemv::bf16_weight(w, rows).is_some() {
            return gemv::gemv(self, (x, w, None), rows, true, out);
        }
        check_len("matmul_add out", out.len(), rows * width)?;
        if let Some(done) = matmul::matmul_accumulate(self, x, w, rows, out) {
            return done;
        }
        unfused::matmul_add(self, (x, w), (rows, width), scratch, out)
    }

    fn gated_matmul(
        &self,
        x: &CudaSlice<f32>,
        norm: Option<RmsNormInto<'_, Self>>,
        (gate_w, up_w): (&CudaWeight, &CudaWeight),
        (rows, width): (usize, usize),
        (gate, up): (&mut CudaSlice<f32>, &mut CudaSlice<f32>),
        out: &mut CudaSlice<f32>,
    ) -> Result<()> {
        let same = (gate_w.rows, gate_w.cols) == (up_w.rows, up_w.cols);
        let skinny = [gate_w, up_w]
            .iter()
            .all(|w| gemv::bf16_weight(w, rows).is_some());
        let fused_norm = gemv::fused_norm(norm.as_ref())?;
        if same && skinny {
            return gemv::silu_mul(self, (x, fused_norm), (gate_w, up_w), rows, out);
        }
        let products = ([gate_w, up_w], [None, None]);
        let outs = [&mut *gate, &mut *up];
        match matmul::products_of_one_input(self, (x, fused_norm), products, rows, outs) {
            Some(done) => {
                done?;
                ops::silu_mul(self, gate, up, rows * width, out)
            }
            None => {
                let (ws, dims) = ((gate_w, up_w), (rows, width));
                unfused::gated_matmul(self, (x, norm), ws, dims, (gate, up), out)
            }
        }
    }

    fn swiglu_mlp(
        &self,
        x: &mut CudaSlice<f32>,
        norm: Option<(&CudaWeight, f32)>,
        weights: SwigluWeights<'_, Self>,
        dims: (usize, usize, usize),
        (gate, up, act, scratch): SwigluBuffers<'_, Self>,
    ) -> Result<()> {
        let fused_norm = match norm {
            Some((w, eps)) => Some((ops::vector(w)?, eps)),
            None => None,
        };
        let pair = (&mut *gate, &mut *up);
        if let Some(done) = matmul::swiglu_mlp(self, (x, fused_norm), weights, dims, pair) {
            return done;
        }
        unfused::swiglu_mlp(self, (x, norm), weights, dims, (gate, up, act, scratch))
    }

    fn matmul3(
        &self,
        x: &CudaSlice<f32>,
        norm: Option<RmsNormInto<'_, Self>>,
        (w, bias): ([&CudaWeight; 3], [Option<&CudaWeight>; 3]),
        rows: usize,
        outs: [&mut CudaSlice<f32>; 3],
    ) -> Result<()> {
        let fused = w.iter().all(|w| gemv::bf16_weight(w, rows).is_some())
            && w[0].cols == w[1].cols
            && (w[1].rows, w[1].cols) == (w[2].rows, w[2].cols);
        let fused_norm = gemv::fused_norm(norm.as_ref())?;
        if fused {
            return gemv::gemv3(self, (x, fused_norm), (w, bias), rows, outs);
        }
        let [o0, o1, o2] = outs;
        let reborrowed = [&mut *o0, &mut *o1, &mut *o2];
        match matmul::products_of_one_input(self, (x, fused_norm), (w, bias), rows, reborrowed) {
            Some(done) => done,
            None => unfused::matmul3(self, (x, norm), (w, bias), rows, [o0, o1, o2]),
        }
    }

    fn matmul3_rope_kv_write(
        &self,
        x: &CudaSlice<f32>,
        norm: Option<RmsNormInto<'_, Self>>,
        weights: ([&CudaWeight; 3], [Option<&CudaWeight>; 3]),
        rows: usize,
        [q, k, v]: [&mut CudaSlice<f32>; 3],
        mut rope: RopeKvWrite<'_, Self>,
    ) -> Result<()> {
        let fused = gemv::gemv3_rope_kv(
            self,
            (x, gemv::fused_norm(norm.as_ref())?),
            weights,
            rows,
            [&mut *q, &mut *k, &mut *v],
            rope.reborrow(),
        );
        if let Some(done) = fused {
            return done;
        }
        self.matmul3(x, norm, weights, rows, [&mut *q, &mut *k, &mut *v])?;
        let (h, kvh, hd) = rope.heads;
        let (table, slots) = (rope.table, rope.slot_mapping);
        self.rope_kv_write((q, k, v), table, slots, (rows, h, kvh, hd), rope.caches)
    }

    fn attention_sublayer(
        &self,
        x: &mut CudaSlice<f32>,
        weights: AttnWeights<'_, Self>,
        rope: RopeKvWrite<'_, Self>,
        attn: (&PagedAttnMeta<'_, Self>, AttnShape),
        bufs: AttnBuffers<'_, Self>,
    ) -> Result<()> {
        match sublayer::takes(self, &weights, &rope, attn) {
            true => {
                self.bf16_sublayer_runs.fetch_add(1, Ordering::Relaxed);
                sublayer::run(self, x, weights, rope, attn, bufs)
            }
            false => unfused::attention_sublayer(self, x, weights, rope, attn, bufs),
        }
    }

    fn decode_layers(
        &self,
        x: &mut CudaSlice<f32>,
        step: crate::backend::DecodeLayers<'_, Self>,
    ) -> Result<bool> {
        decode_step::run(self, x, step)
    }

    fn runs_decode_layers(&self) -> bool {
        self.persistent_decode()
    }

    fn argmax_rows(
        &self,
        logits: &CudaSlice<f32>,
        dims: (usize, usize),
        ids: &mut CudaSlice<u32>,
    ) -> Result<()> {
        sample::argmax_rows(self, logits, dims, ids)
    }

    fn sample_rows(
        &self,
        logits: &CudaSlice<f32>,
        picks: &CudaSlice<f32>,
        dims: (usize, usize),
        ids: &mut CudaSlice<u32>,
    ) -> Result<()> {
        sample::sample_rows(self, logits, picks, dims, ids)
    }

    fn rope_kv_write(
        &self,
        qkv: (&mut CudaSlice<f32>, &mut CudaSlice<f32>, &CudaSlice<f32>),
        table: &CudaSlice<f32>,
        slot_mapping: &CudaSlice<u32>,
        dims: (usize, usize, usize, usize),
        caches: (&mut CudaKv, &mut CudaKv),
    ) -> Result<()> {
        if !self.int8_rope_write && matches!(caches.0.store, CudaKvStore::Int8 { .. }) {
            return unfused::rope_kv_write(self, qkv, (table, slot_mapping), dims, caches);
        }
        rope_kv::rope_kv_write(self, qkv, (table, slot_mapping), dims, caches)
    }

    fn read_ids(&self, src: &CudaSlice<u32>, dst: &mut [u32]) -> Result<()> {
        ops::read(&self.dev.stream, "read_ids", src, dst)?;
        self.release_finished_transfers();
        Ok(())
    }

    fn kv_write(
        &self,
        k: &CudaSlice<f32>,
        v: &CudaSlice<f32>,
        slot_mapping: &CudaSlice<u32>,
        rows: usize,
        k_cache: &mut CudaKv,
        v_cache: &mut CudaKv,
    ) -> Result<()> {
        ops::kv_write(self, (k, v), slot_mapping, rows, (k_cache, v_cache))
    }

    fn paged_attention(
        &self,
        q: &CudaSlice<f32>,
        k_cache: &CudaKv,
        v_cache: &CudaKv,
        meta: &PagedAttnMeta<'_, Self>,
        shape: AttnShape,
        out: &mut CudaSlice<f32>,
    ) -> Result<()> {
        attention::paged(self, q, (k_cache, v_cache), meta, shape, out)
    }

    fn varlen_attention(
        &self,
        q: &CudaSlice<f32>,
        k: &CudaSlice<f32>,
        v: &CudaSlice<f32>,
        query_start_loc: &CudaSlice<u32>,
        seqs_tokens: (usize, usize),
        shape: AttnShape,
        out: &mut CudaSlice<f32>,
    ) -> Result<()> {
        attention::varlen(self, q, (k, v), query_start_loc, seqs_tokens, shape, out)
    }
}
