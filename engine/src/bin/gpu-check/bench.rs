//! Timings (`--bench`): attention prefill TFLOP/s and decode attention bandwidth of the tensor-core
//! kernels (bf16 pools, and int8 pools at head_dim 128), decode attention under several split
//! targets, the skinny decode products at real widths, token picks, and end-to-end prefill and decode
//! at batch 1, 8 and 32 on random models of SmolLM2-135M's and Llama-3.2-1B's shapes, decode with and
//! without CUDA graphs and programmatic dependent launch.
//!
//! Kernel times are CUDA events around the launch, median of several after a warm-up; inputs are
//! random, never zeros. FLOPs of causal attention: `4 · heads · head_dim · N(N+1)/2`; decode bytes:
//! every context K and V element read once (`seqs · ctx · kv_heads · head_dim · 2 bytes · 2`).

use docqa_engine::Result;
use docqa_engine::backend::cuda::{CudaBackend, CudaKv};
use docqa_engine::backend::{AttnShape, Backend, KvDtype, KvShape, PagedAttnMeta};
use docqa_engine::models::LogitsMode;
use docqa_engine::models::generate::{SingleSequence, argmax};
use docqa_engine::models::llama::Llama;

use crate::decode;
use crate::inputs::Rng;
use crate::random_models::{LLAMA32_1B, SMOLLM2, write_llama};

pub const BLOCK: usize = 16;

/// Median of `reps` timed runs of `f`, after one warm-up run.
pub fn median_ms(gpu: &CudaBackend, reps: usize, mut f: impl FnMut() -> Result<()>) -> Result<f64> {
    f()?;
    let mut t: Vec<f64> = Vec::with_capacity(reps);
    for _ in 0..reps {
        t.push(gpu.time_ms(&mut f)? as f64);
    }
    t.sort_by(f64::total_cmp);
    Ok(t[reps / 2])
}

/// Paged pools holding `seqs` contexts of `ctx` random tokens in shuffled blocks; the block table.
pub fn filled_pools(
    gpu: &CudaBackend,
    rng: &mut Rng,
    (seqs, ctx): (usize, usize),
    (kvh, hd): (usize, usize),
    dtype: KvDtype,
) -> Result<(CudaKv, CudaKv, Vec<u32>, usize)> {
    let per = ctx.div_ceil(BLOCK);
    let shape = KvShape {
        num_blocks: seqs * per,
        block_size: BLOCK,
        num_kv_heads: kvh,
        head_dim: hd,
        dtype,
    };
    let table = rng.permutation(seqs * per);
    let (mut kc, mut vc) = (gpu.alloc_kv(shape)?, gpu.alloc_kv(shape)?);
    // Written in pieces of at most 8K rows to keep the staging buffers small.
    let rows = 8192.min(seqs * ctx);
    let (mut k, mut v) = (gpu.alloc(rows * kvh * hd)?, gpu.alloc(rows * kvh * hd)?);
    gpu.write(&mut k, &rng.vec(rows * kvh * hd, 3.0))?;
    gpu.write(&mut v, &rng.vec(rows * kvh * hd, 2.0))?;
    let mut slots_buf = gpu.alloc_ids(rows)?;
    let all: Vec<u32> = (0..seqs)
        .flat_map(|s| {
            let t = &table[s * per..(s + 1) * per];
            (0..ctx).map(move |j| t[j / BLOCK] * BLOCK as u32 + (j % BLOCK) as u32)
        })
        .collect();
    for piece in all.chunks(rows) {
        gpu.write_ids(&mut slots_buf, piece)?;
        gpu.kv_write(&k, &v, &slots_buf, piece.len(), &mut kc, &mut vc)?;
    }
    Ok((kc, vc, table, per))
}

/// Times one paged attention call: `seqs` sequences of `ctx` tokens with `q_len` new rows each.
fn paged_ms(
    gpu: &CudaBackend,
    rng: &mut Rng,
    dims: (usize, usize, usize),
    heads: (usize, usize, usize),
    (dtype, reps): (KvDtype, usize),
) -> Result<f64> {
    Ok(paged_ms_sweep(gpu, rng, dims, heads, (dtype, reps), &[None])?[0])
}

/// [`paged_ms`] once for each decode block target (`None`: the split policy's), on one set of pools.
fn paged_ms_sweep(
    gpu: &CudaBackend,
    rng: &mut Rng,
    (seqs, q_len, ctx): (usize, usize, usize),
    (heads, kvh, hd): (usize, usize, usize),
    (dtype, reps): (KvDtype, usize),
    targets: &[Option<usize>],
) -> Result<Vec<f64>> {
    let (kc, vc, table, per) = filled_pools(gpu, rng, (seqs, ctx), (kvh, hd), dtype)?;
    let tokens = seqs * q_len;
    let ids = |v: &[u32]| -> Result<_> {
        let mut b = gpu.alloc_ids(v.len())?;
        gpu.write_ids(&mut b, v)?;
        Ok(b)
    };
    let qsl: Vec<u32> = (0..=seqs).map(|s| (s * q_len) as u32).collect();
    let (qsl, lens, table) = (ids(&qsl)?, ids(&vec![ctx as u32; seqs])?, ids(&table)?);
    let mut q = gpu.alloc(tokens * heads * hd)?;
    gpu.write(&mut q, &rng.vec(tokens * heads * hd, 3.0))?;
    let mut out = gpu.alloc(tokens * heads * hd)?;
    let meta = PagedAttnMeta {
        query_start_loc: &qsl,
        seq_lens: &lens,
        block_table: &table,
        max_blocks_per_seq: per,
        num_seqs: seqs,
        num_tokens: tokens,
        max_seq_len: ctx,
        windows: None,
    };
    let shape = AttnShape {
        num_heads: heads,
        num_kv_heads: kvh,
        head_dim: hd,
        scale: 1.0 / (hd as f32).sqrt(),
    };
    let mut times = Vec::with_capacity(targets.len());
    for &target in targets {
        gpu.set_decode_block_target(target);
        let ms = median_ms(gpu, reps, || {
            gpu.paged_attention(&q, &kc, &vc, &meta, shape, &mut out)
        });
        gpu.set_decode_block_target(None);
        times.push(ms?);
    }
    Ok(times)
}

/// Causal prefill attention of one sequence at head_dim 64 and 128, 1K to 64K tokens
/// (`DOCQA_BENCH_PREFILL=1` runs these alone, for kernel-lab variants of the prefill cubin; `=int8`
/// runs the int8 pools' rows instead).
pub fn prefill_timings(gpu: &CudaBackend, rng: &mut Rng) -> Result<()> {
    let choice = std::env::var("DOCQA_BENCH_PREFILL").unwrap_or_default();
    if choice == "int8" {
        return int8_prefill_timings(gpu, rng);
    }
    if choice == "windowed" {
        return crate::bench_windowed::run(gpu, rng);
    }
    let hopper = gpu.hopper_prefill();
    // `DOCQA_BENCH_PREFILL=wgmma` times the warpgroup-MMA kernel alone, both forms (kernel-lab variants).
    let only_wgmma = choice == "wgmma";
    let tma = gpu.hopper_tma();
    for kernel in ["wgmma", "wgmma TMA", "mma.sync"] {
        let wgmma = kernel.starts_with("wgmma");
        if (wgmma && !hopper) || (kernel == "mma.sync" && only_wgmma) {
            continue;
        }
        gpu.set_hopper_prefill(wgmma);
        gpu.set_hopper_tma(kernel == "wgmma TMA");
        println!(
            "bench: paged_attention prefill ({kernel}), one sequence, causal, bf16 KV, 32 heads / 8 KV heads"
        );
        for hd in [64, 128] {
            for n in [1024, 2048, 4096, 8192, 16384, 32768, 65536] {
                let reps = if n > 4096 { 5 } else { 9 };
                let ms = paged_ms(gpu, rng, (1, n, n), (32, 8, hd), (KvDtype::Bf16, reps))?;
                let flops = 4.0 * 32.0 * hd as f64 * (n as f64) * (n as f64 + 1.0) / 2.0;
                println!(
                    "  head_dim {hd:>3}  N {n:>6}  {ms:>9.3} ms  {:>7.2} TFLOP/s",
                    flops / ms * 1e-9
                );
            }
        }
    }
    gpu.set_hopper_prefill(hopper);
    gpu.set_hopper_tma(tma);
    Ok(())
}

/// Prints the kernel timings, then (with `end_to_end_too`) the end-to-end ones.
pub fn run(gpu: &CudaBackend, rng: &mut Rng, end_to_end_too: bool) -> Result<()> {
    prefill_timings(gpu, rng)?;
    decode_attention_timings(gpu, rng)?;
    int8_prefill_timings(gpu, rng)?;
    int8_decode_timings(gpu, rng)?;
    decode_split_timings(gpu, rng)?;
    crate::products::run(gpu, rng)?;
    pick_timings(gpu, rng)?;
    match end_to_end_too {
        true => end_to_end(rng),
        false => Ok(()),
    }
}

/// Decode alone (`DOCQA_BENCH_DECODE=1`): the attention kernel over bf16 and int8 pools and under
/// the split targets, then decode end to end at batch 1 and 8 (CUDA graphs on) of random models of
/// SmolLM2-135M's and Llama-3.2-1B's shapes. `DOCQA_BENCH_DECODE=products` times the skinny
/// products at the models' widths and the end-to-end rows instead of the attention kernel.
pub fn decode_timings(gpu: &CudaBackend, rng: &mut Rng) -> Result<()> {
    if std::env::var("DOCQA_BENCH_DECODE").is_ok_and(|v| v == "products") {
        crate::products::run(gpu, rng)?;
    } else {
        decode_attention_timings(gpu, rng)?;
        int8_decode_timings(gpu, rng)?;
        decode_split_timings(gpu, rng)?;
    }
    for shape in [SMOLLM2, LLAMA32_1B] {
        let dir = tempfile::tempdir().map_err(|e| docqa_engine::EngineError::io("temp dir", e))?;
        write_llama(dir.path(), shape, rng)?;
        let model = Llama::load(CudaBackend::new(0)?, dir.path())?;
        println!(
            "bench: decode end to end, random {}-shaped model, bf16 weights, {:?} KV",
            shape.name,
            decode::kv_dtype()
        );
        for seqs in [1, 8] {
            decode::report(&model, rng, seqs, true)?;
        }
        crate::persistent::print_profile(&model, rng, (1, decode::PROMPT))?;
    }
    Ok(())
}

/// Decode attention of 8 sequences over bf16 pools (Llama-3.1-8B's heads) at contexts of 4K to 128K.
fn decode_attention_timings(gpu: &CudaBackend, rng: &mut Rng) -> Result<()> {
    println!(
        "bench: paged_attention decode, 8 sequences, 1 new token each, bf16 KV, head_dim 128, 32/8 heads"
    );
    for ctx in [4096, 8192, 16384, 32768, 65536, 131072] {
        let ms = paged_ms(gpu, rng, (8, 1, ctx), (32, 8, 128), (KvDtype::Bf16, 11))?;
        let bytes = 8.0 * ctx as f64 * 8.0 * 128.0 * 2.0 * 2.0;
        println!(
            "  ctx {ctx:>6}  {ms:>9.3} ms  {:>7.3} TB/s",
            bytes / ms * 1e-9
        );
    }
    Ok(())
}

/// Decode at real models' shapes (`DOCQA_BENCH_SHAPES=llama-3.1-8b,qwen2.5-7b`): each shape written by
/// `docqa models synth`'s writer into `$DOCQA_BENCH_MODEL_DIR/<shape>` (kept there, so HF can time the
/// same weights) unless it is there already, then decode with CUDA graphs at batch 1 after a 512-token
/// prompt (where the weights are nearly all a step reads), at batch 1, 32 and 128 after 8,192-token
/// prompts and at batch 1, 8, 32 and 128 after 32,768 ([`decode_cases`]; bf16 KV, or [`decode::kv_dtype`]'s; what does not fit in
/// the GPU's memory says so). `DOCQA_BENCH_LAYERS=N` cuts the model to N layers of the real width.
pub fn real_scale(shapes: &str, rng: &mut Rng) -> Result<()> {
    for name in shapes.split(',') {
        let dir = synth_dir(name, rng)?;
        let t = std::time::Instant::now();
        let model = Llama::load(CudaBackend::new(0)?, &dir)?;
        println!(
            "bench: decode at the {name} shape (loaded in {:.1} s), bf16 weights, {:?} KV, wall clock",
            t.elapsed().as_secs_f64(),
            decode::kv_dtype()
        );
        model.backend.set_graphs(true);
        // A prompt and its decoded tokens stay inside the context window (Qwen2.5's is 32,768).
        let longest = model
            .max_context()
            .saturating_sub(decode::WARM_UP + decode::STEPS)
            .max(1);
        for (seqs, context) in decode_cases() {
            let case = (seqs, context.min(longest));
            if let Err(e) = decode::report_after(&model, rng, case, true) {
                println!("  decode batch {:>3} after {}: {e}", case.0, case.1);
            }
        }
        // The rows beside the default's only where the cases are the default's.
        let lab = std::env::var_os("DOCQA_BENCH_CASES").is_some();
        for case in [(1, 8192), (1, 32768.min(longest))]
            .into_iter()
            .filter(|_| !lab)
        {
            without_pdl(&model, || decode::report_after(&model, rng, case, true))?;
            with_one_step_splits(&model, || decode::report_after(&model, rng, case, true))?;
        }
        for case in [(1, 512), (1, 8192.min(longest))] {
            crate::persistent::print_profile(&model, rng, case)?;
        }
    }
    Ok(())
}

/// The (sequences, context) cases [`real_scale`] times: batch 1 after 512 tokens, batch 1, 32 and 128
/// after 8,192 and after 32,768, and batch 8 after 32,768; or those `DOCQA_BENCH_CASES=32x32768,...` names.
fn decode_cases() -> Vec<(usize, usize)> {
    let named = std::env::var("DOCQA_BENCH_CASES").ok().map(|list| {
        list.split(',')
            .filter_map(|case| {
                let (seqs, context) = case.split_once('x')?;
                Some((seqs.trim().parse().ok()?, context.trim().parse().ok()?))
            })
            .collect::<Vec<_>>()
    });
    named.unwrap_or_else(|| {
        vec![
            (1, 512),
            (1, 8192),
            (32, 8192),
            (128, 8192),
            (1, 32768),
            (8, 32768),
            (32, 32768),
            (128, 32768),
        ]
    })
}

/// A random checkpoint of the shape `name` in `$DOCQA_BENCH_MODEL_DIR` (default `/tmp/real-scale`),
/// written by `docqa models synth`'s writer unless it is there already; `DOCQA_BENCH_LAYERS=N` cuts it
/// to N layers of the real width.
pub fn synth_dir(name: &str, rng: &mut Rng) -> Result<std::path::PathBuf> {
    let root = std::env::var_os("DOCQA_BENCH_MODEL_DIR").map_or_else(
        || std::path::PathBuf::from("/tmp/real-scale"),
        std::path::PathBuf::from,
    );
    let mut shape = docqa_engine::synth::shape_named(name).ok_or_else(|| {
        docqa_engine::EngineError::InvalidConfig(format!("no shape named {name}"))
    })?;
    shape.layers = bench_layers().unwrap_or(shape.layers);
    let dir = root.join(format!("{name}-{}-layers", shape.layers));
    if !dir.join("config.json").exists() {
        write_llama(&dir, shape, rng)?;
    }
    Ok(dir)
}

/// `DOCQA_BENCH_LAYERS=N`: benchmarks and profiles of real shapes cut to N layers of the real width.
fn bench_layers() -> Option<usize> {
    std::env::var("DOCQA_BENCH_LAYERS").ok()?.parse().ok()
}

/// `f` with programmatic dependent launch off, for a row beside the default's.
fn without_pdl(model: &Llama<CudaBackend>, f: impl FnOnce() -> Result<()>) -> Result<()> {
    let was = model.backend.pdl_on();
    model.backend.set_pdl(false);
    let done = f();
    model.backend.set_pdl(was);
    done
}

/// `f` with decode split into one step of keys per block (the batch-1 policy before the blocks-an-SM
/// target), for a row beside the default's.
fn with_one_step_splits(model: &Llama<CudaBackend>, f: impl FnOnce() -> Result<()>) -> Result<()> {
    let was = model.backend.decode_block_target();
    model
        .backend
        .set_decode_block_target(Some(decode::ONE_STEP_SPLITS));
    let done = f();
    model.backend.set_decode_block_target(was);
    done
}

/// The prefill kernel once at head_dim 128 and 16,384 tokens over bf16 pools
/// (`DOCQA_PROFILE_PREFILL=1`) or int8 ones (`=int8`), for a profiler attached to the process
/// (`ncu -k regex:flash_prefill`).
pub fn profile_prefill(gpu: &CudaBackend, rng: &mut Rng) -> Result<()> {
    let dtype = match std::env::var("DOCQA_PROFILE_PREFILL").as_deref() {
        Ok("int8") => KvDtype::Int8,
        _ => KvDtype::Bf16,
    };
    let ms = paged_ms(gpu, rng, (1, 16384, 16384), (32, 8, 128), (dtype, 1))?;
    println!("profile: flash prefill head_dim 128, N 16384, {dtype:?} KV: {ms:.3} ms");
    Ok(())
}

/// Prefill attention over int8 pools (dequantised to bf16 as they load), TFLOP/s: on the
/// warpgroup-MMA kernel where the device has it, then on the mma.sync one.
fn int8_prefill_timings(gpu: &CudaBackend, rng: &mut Rng) -> Result<()> {
    let hopper = gpu.hopper_prefill();
    for kernel in ["wgmma", "mma.sync"] {
        if kernel == "wgmma" && !hopper {
            continue;
        }
        gpu.set_hopper_prefill(kernel == "wgmma");
        println!(
            "bench: paged_attention prefill over int8 KV pools ({kernel}), one sequence, causal, 32/8 heads"
        );
        for hd in [64, 128] {
            for n in [4096, 16384, 65536] {
                let ms = paged_ms(gpu, rng, (1, n, n), (32, 8, hd), (KvDtype::Int8, 5))?;
                let flops = 4.0 * 32.0 * hd as f64 * (n as f64) * (n as f64 + 1.0) / 2.0;
                println!(
                    "  head_dim {hd:>3}  N {n:>6}  {ms:>9.3} ms  {:>7.2} TFLOP/s",
                    flops / ms * 1e-9
                );
            }
        }
    }
    gpu.set_hopper_prefill(hopper);
    Ok(())
}

/// Decode attention of 8 sequences over int8 pools, the bytes counting each int8 element and each
/// (slot, head) scale once.
fn int8_decode_timings(gpu: &CudaBackend, rng: &mut Rng) -> Result<()> {
    println!("bench: paged_attention decode over int8 KV pools, head_dim 128, 32/8 heads");
    for ctx in [32768, 131072] {
        let ms = paged_ms(gpu, rng, (8, 1, ctx), (32, 8, 128), (KvDtype::Int8, 11))?;
        let bytes = 8.0 * ctx as f64 * 8.0 * (128.0 + 4.0) * 2.0;
        println!(
            "  decode 8 x ctx {ctx:>6}  {ms:>9.3} ms  {:>7.3} TB/s",
            bytes / ms * 1e-9
        );
    }
    Ok(())
}

/// Decode attention of 1 and 8 sequences (Llama-3.1-8B's heads: 32 query, 8 KV, head_dim 128) over
/// bf16 and int8 pools, with the split policy's launch and with launches aiming for 1, 2, 3, 4, 8 and
/// 16 blocks an SM, so the policy can be checked against its alternatives.
fn decode_split_timings(gpu: &CudaBackend, rng: &mut Rng) -> Result<()> {
    const SMS: usize = 132;
    let targets: Vec<Option<usize>> = std::iter::once(None)
        .chain([1, 2, 3, 4, 8, 16].map(|k| Some(k * SMS)))
        .collect();
    println!(
        "bench: paged_attention decode, head_dim 128, 32/8 heads; columns: the split policy, then 1, 2, 3, 4, 8, 16 blocks an SM"
    );
    for dtype in [KvDtype::Bf16, KvDtype::Int8] {
        let row_bytes = match dtype {
            KvDtype::Int8 => 128.0 + 4.0,
            _ => 256.0,
        };
        for (seqs, ctx) in [(1, 8192), (1, 32768), (1, 131072), (8, 32768), (8, 131072)] {
            let dims = (seqs, 1, ctx);
            let times = paged_ms_sweep(gpu, rng, dims, (32, 8, 128), (dtype, 21), &targets)?;
            let bytes = (seqs * ctx) as f64 * 8.0 * row_bytes * 2.0;
            let cells: Vec<String> = times
                .iter()
                .map(|ms| format!("{:>7.1} us {:>5.2} TB/s", ms * 1e3, bytes / ms * 1e-9))
                .collect();
            println!("  {dtype:?} {seqs} x ctx {ctx:>6}  {}", cells.join(" |"));
        }
    }
    Ok(())
}

/// Token picks over SmolLM2-135M's vocabulary: the arg-max against a temperature / top-p draw
/// (`sample_rows`), at 1 and 32 rows, over flat random logits (the nucleus holds thousands of
/// tokens: the radix path) and peaked ones (20 tokens well ahead, as a model's: the candidates path).
fn pick_timings(gpu: &CudaBackend, rng: &mut Rng) -> Result<()> {
    const VOCAB: usize = 49152;
    println!("bench: token picks on the device, vocabulary {VOCAB}");
    for (rows, peaked) in [(1, false), (32, false), (1, true), (32, true)] {
        let mut host = rng.vec(rows * VOCAB, if peaked { 4.0 } else { 8.0 });
        if peaked {
            for r in 0..rows {
                for _ in 0..20 {
                    host[r * VOCAB + rng.below(VOCAB)] += 12.0 + 2.0 * rng.uniform();
                }
            }
        }
        let mut logits = gpu.alloc(rows * VOCAB)?;
        gpu.write(&mut logits, &host)?;
        let mut picks = gpu.alloc(rows * 4)?;
        let row = [0.8, 0.0, 0.9, 0.5];
        gpu.write(&mut picks, &row.repeat(rows))?;
        let mut ids = gpu.alloc_ids(rows)?;
        let argmax_ms = median_ms(gpu, 21, || {
            gpu.argmax_rows(&logits, (rows, VOCAB), &mut ids)
        })?;
        let sample_ms = median_ms(gpu, 21, || {
            gpu.sample_rows(&logits, &picks, (rows, VOCAB), &mut ids)
        })?;
        let kind = if peaked { "peaked" } else { "flat" };
        println!(
            "  rows {rows:>2} {kind:>6}  argmax {:>7.1} us  temperature 0.8, top-p 0.9 {:>7.1} us",
            argmax_ms * 1e3,
            sample_ms * 1e3
        );
    }
    Ok(())
}

/// Prefill and decode of random models at SmolLM2-135M's and Llama-3.2-1B's shapes (bf16 weights,
/// bf16 KV). With `DOCQA_BENCH_MODEL_DIR` set, the models are written there and kept, so
/// `bench/hf_generate.py` can time HF transformers on the same weights.
pub fn end_to_end(rng: &mut Rng) -> Result<()> {
    let temp = tempfile::tempdir().map_err(|e| docqa_engine::EngineError::io("temp dir", e))?;
    let root = std::env::var_os("DOCQA_BENCH_MODEL_DIR")
        .map_or_else(|| temp.path().to_path_buf(), std::path::PathBuf::from);
    for shape in [SMOLLM2, LLAMA32_1B] {
        let dir = root.join(shape.name);
        std::fs::create_dir_all(&dir).map_err(|e| docqa_engine::EngineError::io(&dir, e))?;
        let t = std::time::Instant::now();
        write_llama(&dir, shape, rng)?;
        let model = Llama::load(CudaBackend::new(0)?, &dir)?;
        println!(
            "bench: end to end, random {}-shaped model (written and loaded in {:.1} s), bf16 weights, {:?} KV, wall clock",
            shape.name,
            t.elapsed().as_secs_f64(),
            decode::kv_dtype()
        );
        prefill(&model, rng)?;
        for seqs in [1, 8, 32] {
            for graphs in [false, true] {
                model.backend.set_graphs(graphs);
                decode::report(&model, rng, seqs, graphs)?;
            }
            without_pdl(&model, || decode::report(&model, rng, seqs, true))?;
        }
    }
    Ok(())
}

/// One prefill of 8,191 tokens (`DOCQA_PROFILE_TOKENS` where that is set) and one decode step at
/// batch 1 (graphs on) of a random model of the named shape (`DOCQA_PROFILE_MODEL=llama-3.2-1b`, or
/// any `docqa models synth` shape; at most `DOCQA_BENCH_LAYERS` layers of it where that is set), each
/// between cuProfilerStart and Stop, for `ncu --profile-from-start off` to time each of their kernels.
pub fn profile_model(name: &str, rng: &mut Rng) -> Result<()> {
    let mut shape = [SMOLLM2, LLAMA32_1B]
        .into_iter()
        .find(|s| s.name == name)
        .or_else(|| docqa_engine::synth::shape_named(name))
        .ok_or_else(|| {
            docqa_engine::EngineError::InvalidConfig(format!("no shape named {name}"))
        })?;
    if let Some(layers) = bench_layers() {
        shape.layers = shape.layers.min(layers);
    }
    let temp = tempfile::tempdir().map_err(|e| docqa_engine::EngineError::io("temp dir", e))?;
    write_llama(temp.path(), shape, rng)?;
    let model = Llama::load(CudaBackend::new(0)?, temp.path())?;
    let n = std::env::var("DOCQA_PROFILE_TOKENS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(8192 - 1);
    let p = decode::prompt(n, model.config.vocab_size, rng);
    for profiled in [false, true] {
        let mut seq = SingleSequence::new(&model, n + 1, n, KvDtype::Bf16)?;
        if profiled {
            // SAFETY: takes no arguments; only marks where a profiler attached to this process starts.
            unsafe { cudarc::driver::sys::cuProfilerStart() };
        }
        argmax(seq.feed(&p, LogitsMode::LastPerSequence)?);
        if profiled {
            // SAFETY: as above.
            unsafe { cudarc::driver::sys::cuProfilerStop() };
        }
    }
    println!("profiled one prefill of {n} tokens at the {name} shape");
    // SAFETY: the variable is read by this thread only, in decode::time_decode below.
    unsafe { std::env::set_var("DOCQA_PROFILE_DECODE", "1") };
    model.backend.set_graphs(true);
    decode::report(&model, rng, 1, true)
}

/// Seconds of the best of three prefills of `prompt` in one pass, batch 1, up to its first token,
/// into a KV cache of [`decode::kv_dtype`]'s type.
pub fn prefill_secs(model: &Llama<CudaBackend>, prompt: &[u32]) -> Result<f64> {
    let n = prompt.len();
    let mut best = f64::INFINITY;
    for _ in 0..3 {
        let mut seq = SingleSequence::new(model, n + 1, n, decode::kv_dtype())?;
        let t = std::time::Instant::now();
        argmax(seq.feed(prompt, LogitsMode::LastPerSequence)?);
        best = best.min(t.elapsed().as_secs_f64());
    }
    Ok(best)
}

/// Best of three prefills of 2,048 and 8,191 tokens, batch 1, and of 32,767 where the model's
/// context reaches that far.
fn prefill(model: &Llama<CudaBackend>, rng: &mut Rng) -> Result<()> {
    let vocab = model.config.vocab_size;
    let lengths = [2048, 8192 - 1, 32768 - 1];
    for n in lengths.into_iter().filter(|&n| n < model.max_context()) {
        let best = prefill_secs(model, &decode::prompt(n, vocab, rng))?;
        println!(
            "  prefill {n:>5} tokens  {:>8.1} ms  {:>9.0} tok/s",
            best * 1e3,
            n as f64 / best
        );
    }
    Ok(())
}
