//! Tensor parallelism through NCCL on the GPUs this machine has (two at most; one still runs every
//! collective and the split model through NCCL, as a group of one rank):
//! - the collectives: a sum over the ranks in place, and the gather of vocabulary parts into whole
//!   rows (one row, and several, which take the pitched copies);
//! - the family checkpoints (`tests/golden/families`) split over the ranks against the whole model on
//!   GPU 0, teacher-forced: a prefill, then single tokens;
//! - with `DOCQA_TP_SHAPES=llama-3.1-8b,qwen2.5-7b` (and `DOCQA_BENCH_MODEL_DIR`, where `docqa models
//!   synth` checkpoints are written if missing), those shapes split against whole: a 512-token
//!   prefill, then 64 teacher-forced steps.

use std::path::Path;
use std::sync::Arc;

use docqa_engine::Result;
use docqa_engine::backend::cuda::{CudaBackend, visible_devices};
use docqa_engine::backend::{Backend, KvDtype};
use docqa_engine::models::LogitsMode;
use docqa_engine::models::generate::SingleSequence;
use docqa_engine::models::llama::Llama;
use docqa_engine::parallel::Collective;
use docqa_engine::parallel::nccl::NcclGroup;

use crate::inputs::Rng;
use crate::report::Report;

/// bf16 tolerance of a split model's logits against the whole model's, relative to the largest.
const SPLIT_TOLERANCE: f64 = 1e-2;

/// The ranks of one group, each with its own backend on its own GPU.
fn group(world: usize) -> Result<Vec<(CudaBackend, NcclGroup)>> {
    let backends = (0..world)
        .map(CudaBackend::new)
        .collect::<Result<Vec<_>>>()?;
    let groups = NcclGroup::over(&backends.iter().collect::<Vec<_>>())?;
    Ok(backends.into_iter().zip(groups).collect())
}

/// Runs `f` on every rank at once (collectives wait for all), rank 0's result first.
fn on_ranks<T: Send>(
    ranks: Vec<(CudaBackend, NcclGroup)>,
    f: impl Fn(CudaBackend, NcclGroup) -> Result<T> + Sync,
) -> Result<Vec<T>> {
    std::thread::scope(|s| {
        let f = &f;
        let running: Vec<_> = ranks
            .into_iter()
            .map(|(b, g)| s.spawn(move || f(b, g)))
            .collect();
        running
            .into_iter()
            .map(|r| r.join().expect("rank thread"))
            .collect()
    })
}

/// Adds the collective and split-model rows to the report.
pub fn run(rng: &mut Rng, r: &mut Report) -> Result<()> {
    let world = visible_devices().min(2);
    collectives(world, rng, r)?;
    stopped_group(world, r)?;
    families(world, r)?;
    if let Ok(shapes) = std::env::var("DOCQA_TP_SHAPES") {
        for shape in shapes.split(',').filter(|s| !s.is_empty()) {
            real_shape(shape, world, rng, r)?;
        }
    }
    Ok(())
}

fn collectives(world: usize, rng: &mut Rng, r: &mut Report) -> Result<()> {
    let n = 4096 * 37 + 5;
    let inputs: Vec<Vec<f32>> = (0..world).map(|_| rng.vec(n, 2.0)).collect();
    let want: Vec<f32> = (0..n).map(|i| inputs.iter().map(|x| x[i]).sum()).collect();
    let sums = on_ranks(group(world)?, |b, g| {
        let mut x = b.alloc(n + 3)?;
        b.write(&mut x, &inputs[g.shard().rank])?;
        g.all_reduce_sum(&b, &mut x, n)?;
        let mut out = vec![0.0; n];
        b.read(&x, &mut out)?;
        Ok(out)
    })?;
    for (rank, got) in sums.iter().enumerate() {
        let shape = format!("{world} ranks, {n} values, rank {rank}");
        r.check("nccl all-reduce sum", &shape, got, &want, 1e-6);
    }
    for rows in [1, 5] {
        let width = 1000;
        let parts: Vec<Vec<f32>> = (0..world).map(|_| rng.vec(rows * width, 1.0)).collect();
        let want: Vec<f32> = (0..rows)
            .flat_map(|row| parts.iter().flat_map(move |p| &p[row * width..][..width]))
            .copied()
            .collect();
        let gathered = on_ranks(group(world)?, |b, g| {
            let mut part = b.alloc(rows * width)?;
            b.write(&mut part, &parts[g.shard().rank])?;
            let (mut stacked, mut out) = (b.alloc(world * rows * width)?, b.alloc(want.len())?);
            g.all_gather_cols(&b, &part, (rows, width), &mut stacked, &mut out)?;
            let mut host = vec![0.0; want.len()];
            b.read(&out, &mut host)?;
            Ok(host)
        })?;
        let shape = format!("{world} ranks, {rows} rows of {width} a rank");
        r.check("nccl all-gather columns", &shape, &gathered[0], &want, 0.0);
    }
    Ok(())
}

/// A group its last rank stops (every communicator aborted): each rank's next sum fails, naming why.
fn stopped_group(world: usize, r: &mut Report) -> Result<()> {
    let ranks = group(world)?;
    ranks[world - 1].1.abort("gpu-check stopped the group");
    let errors = on_ranks(ranks, |b, g| {
        let mut x = b.alloc(16)?;
        Ok(g.all_reduce_sum(&b, &mut x, 16)
            .err()
            .map(|e| e.to_string()))
    })?;
    for (rank, e) in errors.iter().enumerate() {
        let named = e
            .as_deref()
            .is_some_and(|e| e.contains("gpu-check stopped the group"));
        let shape = format!("{world} ranks, rank {rank}");
        r.note(
            "nccl sum after the group stopped",
            &shape,
            "fails, naming why",
            named,
        );
    }
    Ok(())
}

/// Logits of every fed position of `tokens`, fed in `pieces`.
fn feed(model: &Llama<CudaBackend>, tokens: &[u32], pieces: &[usize]) -> Result<Vec<f32>> {
    let mut seq = SingleSequence::new(model, tokens.len() + 1, pieces[0], KvDtype::Bf16)?;
    let (mut out, mut at) = (Vec::new(), 0);
    for &n in pieces {
        out.extend_from_slice(seq.feed(&tokens[at..at + n], LogitsMode::All)?);
        at += n;
    }
    Ok(out)
}

/// A row: rank 0's logits of the model in `dir` split over `world` GPUs against the whole model's
/// on GPU 0, `tokens` fed in `pieces`.
fn check_split(
    r: &mut Report,
    dir: &Path,
    world: usize,
    (tokens, pieces): (&[u32], &[usize]),
    label: &str,
) -> Result<()> {
    let split = on_ranks(group(world)?, |b, g| {
        let g: Arc<dyn Collective<CudaBackend>> = Arc::new(g);
        feed(&Llama::load_part(b, dir, None, Some(g))?, tokens, pieces)
    })?;
    let whole = feed(&Llama::load(CudaBackend::new(0)?, dir)?, tokens, pieces)?;
    let shape = format!("{label}, {world} ranks");
    r.check(
        "split model vs whole",
        &shape,
        &split[0],
        &whole,
        SPLIT_TOLERANCE,
    );
    Ok(())
}

fn families(world: usize, r: &mut Report) -> Result<()> {
    let dir = crate::families::golden_dir();
    if !dir.join("meta.json").exists() {
        println!("tensor parallel: no goldens at {} (skipped)", dir.display());
        return Ok(());
    }
    let tokens = crate::families::tokens(&dir)?;
    let mut pieces = vec![20];
    pieces.resize(tokens.len() - 19, 1);
    for family in ["llama3", "qwen2-yarn", "mistral-sliding"] {
        let label = format!("{family}, prefill 20 then 1 by 1");
        check_split(r, &dir.join(family), world, (&tokens, &pieces), &label)?;
    }
    Ok(())
}

fn real_shape(shape: &str, world: usize, rng: &mut Rng, r: &mut Report) -> Result<()> {
    let dir = crate::bench::synth_dir(shape, rng)?;
    let vocab = docqa_engine::config::LlamaConfig::load(&dir.join("config.json"))?.vocab_size;
    let tokens: Vec<u32> = (0..512 + 64).map(|_| rng.below(vocab) as u32).collect();
    let mut pieces = vec![512];
    pieces.resize(65, 1);
    let label = format!("{shape}, prefill 512 then 64 steps");
    check_split(r, &dir, world, (&tokens, &pieces), &label)
}

/// `DOCQA_BENCH_TP=llama-3.1-8b,...`: each shape (a `docqa models synth` checkpoint, as
/// `DOCQA_BENCH_SHAPES` writes it) whole on GPU 0, then split over the GPUs (two at most; one
/// runs it as a group of one rank through NCCL): prefill of 8,191 and 32,767 tokens (best of three)
/// and decode at batch 1 and 32 after 8,192-token prompts (graphs on), then NCCL's all-reduce of one
/// decode row and of an 8K prefill's residual stream between the same GPUs.
pub fn bench(shapes: &str, rng: &mut Rng) -> Result<()> {
    let world = visible_devices().min(2);
    for shape in shapes.split(',').filter(|s| !s.is_empty()) {
        let dir = crate::bench::synth_dir(shape, rng)?;
        println!("bench: tensor parallel at the {shape} shape, bf16 weights and KV, wall clock");
        let whole = Llama::load(CudaBackend::new(0)?, &dir)?;
        let hidden = whole.config.hidden_size;
        let timed = timings(&whole, rng.clone())?;
        drop(whole);
        print_timings("whole, GPU 0", &timed);
        let split = on_ranks(group(world)?, |b, g| {
            let g: Arc<dyn Collective<CudaBackend>> = Arc::new(g);
            timings(&Llama::load_part(b, &dir, None, Some(g))?, rng.clone())
        })?;
        print_timings(&format!("{world} ranks"), &split[0]);
        all_reduce_timings(world, hidden)?;
    }
    Ok(())
}

/// Prefill seconds at 8,191 and 32,767 tokens, then decode (seconds for the steps, steps replayed) at
/// batch 1 and 32 after 8,192.
type Timings = ([f64; 2], [(f64, u64); 2]);

fn timings(model: &Llama<CudaBackend>, mut rng: Rng) -> Result<Timings> {
    model.backend.set_graphs(true);
    let vocab = model.config.vocab_size;
    let mut prefill = [0.0; 2];
    for (secs, n) in prefill.iter_mut().zip([8191, 32767]) {
        *secs = crate::bench::prefill_secs(model, &crate::decode::prompt(n, vocab, &mut rng))?;
    }
    let decode = [
        crate::decode::time_decode(model, &mut rng, 1, 8192)?,
        crate::decode::time_decode(model, &mut rng, 32, 8192)?,
    ];
    Ok((prefill, decode))
}

fn print_timings(how: &str, (prefill, decode): &Timings) {
    for (secs, n) in prefill.iter().zip([8191, 32767]) {
        println!(
            "  {how:<14} prefill {n:>5} tokens  {:>8.1} ms  {:>8.0} tok/s",
            secs * 1e3,
            n as f64 / secs
        );
    }
    for ((secs, replays), seqs) in decode.iter().zip([1, 32]) {
        let steps = crate::decode::STEPS;
        println!(
            "  {how:<14} decode batch {seqs:>2} after 8192  {:>7.3} ms/step  {:>7.0} tok/s  ({replays} steps replayed)",
            secs * 1e3 / steps as f64,
            (seqs * steps) as f64 / secs
        );
    }
}

/// Wall clock of NCCL's sum in place over `world` GPUs, 50 in a row after 5 to warm up, for one decode
/// row (`hidden` f32 values) and an 8,192-token pass's residual stream; with the bus bandwidth NCCL's
/// tests report (2 (n − 1) / n of the bytes a second).
fn all_reduce_timings(world: usize, hidden: usize) -> Result<()> {
    for rows in [1, 8192] {
        let n = rows * hidden;
        let secs = on_ranks(group(world)?, |b, g| {
            let mut x = b.alloc(n)?;
            let mut one = [0f32; 1];
            for _ in 0..5 {
                g.all_reduce_sum(&b, &mut x, n)?;
            }
            b.read(&x, &mut one)?;
            let t = std::time::Instant::now();
            for _ in 0..50 {
                g.all_reduce_sum(&b, &mut x, n)?;
            }
            b.read(&x, &mut one)?;
            Ok(t.elapsed().as_secs_f64() / 50.0)
        })?;
        let bytes = (n * 4) as f64;
        let bus = 2.0 * (world as f64 - 1.0) / world as f64 * bytes / secs[0];
        println!(
            "  nccl all-reduce, {world} ranks, {rows:>4} rows of {hidden} f32  {:>8.1} us  bus {:>6.1} GB/s",
            secs[0] * 1e6,
            bus * 1e-9
        );
    }
    Ok(())
}
