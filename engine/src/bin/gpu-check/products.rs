//! Timings of the skinny decode products at real models' widths (`--bench`): the normalised q/k/v
//! triple, SwiGLU's normalised gate/up pair, the two residual products (o and down) and the LM
//! head, at one activation row. Each call reads a different copy of its weights, the copies together
//! larger than the H200's 50 MB L2 cache, so the weights come from memory as in a decode step;
//! bandwidth counts the bf16 weight bytes of a call.

use cudarc::driver::CudaSlice;
use docqa_engine::Result;
use docqa_engine::backend::cuda::{CudaBackend, CudaWeight};
use docqa_engine::backend::{Backend, RmsNormInto};
use docqa_engine::weights::{TensorRef, WeightDtype};

use crate::inputs::{Rng, tensor_bytes};

/// Weight bytes the copies of one product span together, well past the L2 cache.
const SPAN_BYTES: usize = 256 << 20;
/// Most copies of one product's weights.
const MOST_COPIES: usize = 64;

/// A model's widths: hidden, q, k/v, FFN, vocabulary.
struct Widths {
    name: &'static str,
    hidden: usize,
    q: usize,
    kv: usize,
    ffn: usize,
    vocab: usize,
}

const SHAPES: [Widths; 3] = [
    Widths {
        name: "smollm2-135m",
        hidden: 576,
        q: 576,
        kv: 192,
        ffn: 1536,
        vocab: 49152,
    },
    Widths {
        name: "llama-3.2-1b",
        hidden: 2048,
        q: 2048,
        kv: 512,
        ffn: 8192,
        vocab: 128256,
    },
    Widths {
        name: "llama-3.1-8b",
        hidden: 4096,
        q: 4096,
        kv: 1024,
        ffn: 14336,
        vocab: 128256,
    },
];

/// Prints each product's time a call and the bandwidth of its weight reads.
pub fn run(gpu: &CudaBackend, rng: &mut Rng) -> Result<()> {
    let (warps, per_sm) = gpu.gemv_blocks();
    println!(
        "bench: decode products, 1 row, bf16 weights read from memory (copies cycled); \
         blocks of {warps} warps, {per_sm} an SM"
    );
    for w in &SHAPES {
        let norm_bytes = tensor_bytes(&rng.vec(w.hidden, 0.5), WeightDtype::F32);
        let norm = gpu.upload_vector(&TensorRef {
            name: "bench",
            dtype: WeightDtype::F32,
            shape: &[w.hidden],
            bytes: &norm_bytes,
        })?;
        let x = filled(gpu, rng, w.ffn.max(w.q))?;
        let mut out = [w.q, w.kv, w.kv, w.ffn, w.ffn, w.ffn, w.vocab]
            .map(|n| gpu.alloc(n))
            .into_iter()
            .collect::<Result<Vec<_>>>()?;
        let mut norm_out = gpu.alloc(w.hidden)?;
        let [yq, yk, yv, g, u, y, logits] = out.as_mut_slice() else {
            unreachable!("seven buffers")
        };
        let qkv = copies(
            gpu,
            rng,
            &[[w.q, w.hidden], [w.kv, w.hidden], [w.kv, w.hidden]],
        )?;
        report(gpu, w.name, "q/k/v + RMSNorm", &qkv, |c| {
            let n = RmsNormInto {
                weight: &norm,
                eps: 1e-5,
                out: &mut norm_out,
            };
            let ws = [&c[0], &c[1], &c[2]];
            gpu.matmul3(&x, Some(n), (ws, [None; 3]), 1, [yq, yk, yv])
        })?;
        let gate_up = copies(gpu, rng, &[[w.ffn, w.hidden], [w.ffn, w.hidden]])?;
        report(gpu, w.name, "gate/up + RMSNorm", &gate_up, |c| {
            let n = RmsNormInto {
                weight: &norm,
                eps: 1e-5,
                out: &mut norm_out,
            };
            gpu.gated_matmul(&x, Some(n), (&c[0], &c[1]), (1, w.ffn), (g, u), y)
        })?;
        for (what, n, k) in [
            ("o + residual", w.hidden, w.q),
            ("down + residual", w.hidden, w.ffn),
        ] {
            let ws = copies(gpu, rng, &[[n, k]])?;
            report(gpu, w.name, what, &ws, |c| {
                gpu.matmul_add(&x, &c[0], (1, n), g, u)
            })?;
        }
        let head = copies(gpu, rng, &[[w.vocab, w.hidden]])?;
        report(gpu, w.name, "LM head", &head, |c| {
            gpu.matmul(&x, &c[0], None, 1, logits)
        })?;
    }
    Ok(())
}

/// Times one call on each copy in turn (median of 5 passes) and prints µs a call and GB/s.
fn report(
    gpu: &CudaBackend,
    model: &str,
    what: &str,
    copies: &[Vec<CudaWeight>],
    mut call: impl FnMut(&[CudaWeight]) -> Result<()>,
) -> Result<()> {
    let bytes: usize = copies[0].iter().map(|w| w.rows * w.cols * 2).sum();
    for c in copies {
        call(c)?;
    }
    let mut times = Vec::new();
    for _ in 0..5 {
        let ms = gpu.time_ms(|| copies.iter().try_for_each(|c| call(c)))?;
        times.push(f64::from(ms) / copies.len() as f64);
    }
    times.sort_by(f64::total_cmp);
    let ms = times[2];
    println!(
        "  {model:<13} {what:<18} {:>9.0} KB  {:>8.2} us  {:>6.2} TB/s",
        bytes as f64 / 1e3,
        ms * 1e3,
        bytes as f64 / ms * 1e-9
    );
    Ok(())
}

/// Enough copies of random bf16 matrices of these shapes to span [`SPAN_BYTES`].
fn copies(gpu: &CudaBackend, rng: &mut Rng, shapes: &[[usize; 2]]) -> Result<Vec<Vec<CudaWeight>>> {
    let bytes: usize = shapes.iter().map(|[n, k]| n * k * 2).sum();
    let count = SPAN_BYTES.div_ceil(bytes).clamp(2, MOST_COPIES);
    let host: Vec<(Vec<u8>, [usize; 2])> = shapes
        .iter()
        .map(|&[n, k]| {
            let v = rng.vec(n * k, 2.0 / (k as f32).sqrt());
            (tensor_bytes(&v, WeightDtype::Bf16), [n, k])
        })
        .collect();
    (0..count)
        .map(|_| {
            host.iter()
                .map(|(b, shape)| {
                    gpu.upload_matrix(&TensorRef {
                        name: "bench",
                        dtype: WeightDtype::Bf16,
                        shape,
                        bytes: b,
                    })
                })
                .collect()
        })
        .collect()
}

/// A device buffer of `n` random activations.
fn filled(gpu: &CudaBackend, rng: &mut Rng, n: usize) -> Result<CudaSlice<f32>> {
    let mut b = gpu.alloc(n)?;
    gpu.write(&mut b, &rng.vec(n, 2.0))?;
    Ok(b)
}
