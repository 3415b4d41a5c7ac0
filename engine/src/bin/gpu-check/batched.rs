//! Batched decode on the GPU, as the service's scheduler runs it, against each sequence decoded
//! alone on the CPU: eight sequences of different prompt lengths decode together, each for its own
//! number of steps, so the batch shrinks from eight sequences to one and its block table crosses
//! buckets; the decode steps replay recorded CUDA graphs for every (sequences, bucket) they meet.
//!
//! The GPU batch is fed the CPU's tokens (teacher forcing). At every step each sequence's GPU logits
//! are compared with the CPU's at the bf16 tolerance of the end-to-end rows, and the token the device
//! picks (`argmax_rows`) must be the CPU's unless the two are a near-tie (the CPU's gap between them
//! within twice that step's largest logit difference).

use docqa_engine::backend::cpu::CpuBackend;
use docqa_engine::backend::cuda::CudaBackend;
use docqa_engine::backend::{Backend, KvDtype};
use docqa_engine::models::generate::{SingleSequence, argmax};
use docqa_engine::models::llama::Llama;
use docqa_engine::models::{Batch, LogitsMode, SeqInput};
use docqa_engine::{EngineError, Result};

use crate::inputs::Rng;
use crate::report::{Report, rel_err};

use crate::decode::BLOCK;
/// Prompt length and decode steps of each sequence.
const SEQS: [(usize, usize); 8] = [
    (5, 20),
    (40, 8),
    (130, 16),
    (250, 4),
    (240, 24),
    (500, 12),
    (700, 2),
    (1000, 20),
];
/// Tolerance on logits after a whole forward pass (as the end-to-end rows).
const TOL_LOGITS: f64 = 2e-2;

/// One sequence decoded greedily alone on the CPU: its prompt, its tokens, the logits of each step.
struct Reference {
    prompt: Vec<u32>,
    tokens: Vec<u32>,
    logits: Vec<Vec<f32>>,
}

fn reference(cpu: &Llama<CpuBackend>, prompt: Vec<u32>, steps: usize) -> Result<Reference> {
    let mut seq = SingleSequence::new(cpu, prompt.len() + steps + 1, 512, KvDtype::Bf16)?;
    let mut logits = vec![seq.feed(&prompt, LogitsMode::LastPerSequence)?.to_vec()];
    let mut tokens = vec![argmax(&logits[0])];
    for step in 0..steps {
        logits.push(
            seq.feed(&tokens[step..=step], LogitsMode::LastPerSequence)?
                .to_vec(),
        );
        tokens.push(argmax(&logits[step + 1]));
    }
    Ok(Reference {
        prompt,
        tokens,
        logits,
    })
}

/// How the GPU batch compared.
#[derive(Default)]
struct Tally {
    worst_err: f64,
    picks: usize,
    mismatches: usize,
    not_near_ties: usize,
}

impl Tally {
    fn compare(&mut self, gpu: &[f32], cpu: &[f32], picked: u32) {
        self.worst_err = self.worst_err.max(rel_err(gpu, cpu));
        self.picks += 1;
        let want = argmax(cpu);
        if picked != want {
            self.mismatches += 1;
            let gap = cpu[want as usize] - cpu[picked as usize];
            let diff = gpu
                .iter()
                .zip(cpu)
                .fold(0f32, |m, (g, c)| m.max((g - c).abs()));
            if gap > 2.0 * diff {
                self.not_near_ties += 1;
            }
        }
    }
}

/// Runs the check and adds its rows to the report.
pub fn check(
    cpu: &Llama<CpuBackend>,
    gpu: &Llama<CudaBackend>,
    rng: &mut Rng,
    r: &mut Report,
) -> Result<()> {
    let vocab = gpu.config.vocab_size;
    let refs = SEQS
        .iter()
        .map(|&(len, steps)| {
            let prompt = (0..len).map(|_| 3 + rng.below(vocab - 3) as u32).collect();
            reference(cpu, prompt, steps)
        })
        .collect::<Result<Vec<_>>>()?;
    let per = SEQS
        .iter()
        .map(|(l, s)| (l + s + 1).div_ceil(BLOCK))
        .max()
        .unwrap_or(1);
    let (mut kv, mut ws, blocks) = crate::decode::sequences(gpu, (SEQS.len(), per), 1024)?;
    let mut tally = Tally::default();
    let mut logits = vec![0f32; SEQS.len() * vocab];
    let mut ids = gpu.backend.alloc_ids(SEQS.len())?;
    let mut picked = vec![0u32; SEQS.len()];
    for (s, rf) in refs.iter().enumerate() {
        let input = SeqInput {
            tokens: &rf.prompt,
            num_computed_tokens: 0,
            blocks: &blocks[s],
            sink_window: None,
        };
        let batch = Batch::build(&[input], BLOCK, LogitsMode::LastPerSequence)?;
        gpu.forward(&batch, &mut kv, &mut ws)?;
        gpu.backend.read(&ws.logits, &mut logits[..vocab])?;
        gpu.backend.argmax_rows(&ws.logits, (1, vocab), &mut ids)?;
        gpu.backend.read_ids(&ids, &mut picked[..1])?;
        tally.compare(&logits[..vocab], &rf.logits[0], picked[0]);
    }
    for step in 0.. {
        let active: Vec<usize> = (0..SEQS.len()).filter(|&s| step < SEQS[s].1).collect();
        if active.is_empty() {
            break;
        }
        let inputs: Vec<SeqInput<'_>> = active
            .iter()
            .map(|&s| SeqInput {
                tokens: &refs[s].tokens[step..=step],
                num_computed_tokens: SEQS[s].0 + step,
                blocks: &blocks[s],
                sink_window: None,
            })
            .collect();
        let batch = Batch::build(&inputs, BLOCK, LogitsMode::LastPerSequence)?;
        let rows = gpu.forward(&batch, &mut kv, &mut ws)?;
        gpu.backend.read(&ws.logits, &mut logits[..rows * vocab])?;
        gpu.backend
            .argmax_rows(&ws.logits, (rows, vocab), &mut ids)?;
        gpu.backend.read_ids(&ids, &mut picked[..rows])?;
        for (row, &s) in active.iter().enumerate() {
            let got = &logits[row * vocab..(row + 1) * vocab];
            tally.compare(got, &refs[s].logits[step + 1], picked[row]);
        }
    }
    let what = "8 seqs, prompts 5..1000, 2..24 steps";
    r.row(
        "batched decode logits (CPU alone)",
        what,
        tally.worst_err,
        TOL_LOGITS,
    );
    let picks = format!(
        "{}/{} picks equal, {} graphs",
        tally.picks - tally.mismatches,
        tally.picks,
        ws.graphs.len()
    );
    let replayed = ws.graphs.replays > 0 && ws.graphs.failed.is_none();
    r.note(
        "batched decode picks",
        what,
        &picks,
        tally.not_near_ties == 0 && replayed,
    );
    if let Some(why) = &ws.graphs.failed {
        return Err(EngineError::Cuda(format!("graph recording failed: {why}")));
    }
    Ok(())
}
