//! The tiered KV cache on CUDA: a document read on a small KV pool, pushed out to host memory (or to disk
//! and found by a new engine on the same directory) and brought back, gives logits equal bit for bit to
//! a pool that never lost it, for bf16 and int8 pools (whose scales travel with the blocks), also when
//! the blocks were copied down while their prompt was still being read (write-through).

use docqa_engine::backend::KvDtype;
use docqa_engine::backend::cuda::CudaBackend;
use docqa_engine::kv::tiers::TierSettings;
use docqa_engine::models::llama::Llama;
use docqa_engine::sampling::SamplingParams;
use docqa_engine::serving::{EngineConfig, EngineCore, GenerateRequest, GenerationEvent, KvBudget};
use docqa_engine::text::TextTokenizer;
use docqa_engine::{EngineError, Result};

use crate::inputs::Rng;
use crate::random_models::write_smollm2;
use crate::report::Report;

const DOC_TOKENS: usize = 600;
const VOCAB: u64 = 49_152;

fn engine(
    dir: &std::path::Path,
    dtype: KvDtype,
    blocks: usize,
    tiers: &TierSettings,
) -> Result<EngineCore<CudaBackend>> {
    let model = Llama::load(CudaBackend::new(0)?, dir)?;
    let mut cfg = EngineConfig {
        kv_dtype: dtype,
        ..EngineConfig::default()
    };
    cfg.kv_cache = KvBudget::Bytes(blocks * cfg.kv_block_bytes(&model.config));
    let mut core = EngineCore::new(model, TextTokenizer::from_model_dir(dir)?, &cfg)?;
    core.attach_tiers(tiers)?;
    Ok(core)
}

/// The first token and its top-20 log-probabilities (bits) of a one-token answer.
fn first_step(core: &mut EngineCore<CudaBackend>, prompt: Vec<u32>) -> Result<Vec<(u32, u32)>> {
    let params = SamplingParams {
        max_tokens: 1,
        temperature: 0.0,
        ..SamplingParams::default()
    };
    let mut request = GenerateRequest::new(prompt, params);
    request.top_logprobs = 20;
    core.add_request(request)?;
    let mut out = Vec::new();
    while core.has_work() {
        for (_, event) in core.step()? {
            if let GenerationEvent::Token { top_logprobs, .. } = event {
                out = top_logprobs
                    .iter()
                    .map(|&(t, l)| (t, l.to_bits()))
                    .collect();
            }
        }
    }
    Ok(out)
}

fn prompt(doc: &[u32], question: u32) -> Vec<u32> {
    let mut p = doc.to_vec();
    p.extend((0..24).map(|i| 100 + question * 50 + i));
    p
}

/// A first step and the blocks that came back from a lower tier for it.
type Answer = (Vec<(u32, u32)>, u64);

/// Runs the checks and adds their rows to `r`.
pub fn run(rng: &mut Rng, r: &mut Report) -> Result<()> {
    let dir = tempfile::tempdir().map_err(|e| EngineError::io("temp dir", e))?;
    write_smollm2(dir.path(), rng)?;
    let docs: Vec<Vec<u32>> = (0..4)
        .map(|_| {
            (0..DOC_TOKENS)
                .map(|_| 3 + rng.below(VOCAB as usize - 3) as u32)
                .collect()
        })
        .collect();
    for dtype in [KvDtype::Bf16, KvDtype::Int8] {
        // Never evicted: a pool that holds every document.
        let mut whole = engine(dir.path(), dtype, 256, &TierSettings::default())?;
        first_step(&mut whole, prompt(&docs[0], 0))?;
        let expected = first_step(&mut whole, prompt(&docs[0], 1))?;
        drop(whole);
        let mut check = |name: &str, (got, hits): Answer| {
            r.note(
                name,
                &format!("{dtype:?} pool, {hits} blocks back"),
                "logits equal bit for bit",
                hits > 0 && got == expected,
            );
        };
        check(
            "KV reloaded from host memory",
            pushed_out_to_host(dir.path(), dtype, &docs)?,
        );
        let disk_dir = tempfile::tempdir().map_err(|e| EngineError::io("temp dir", e))?;
        let disk = TierSettings {
            disk: Some((disk_dir.path().to_path_buf(), 1 << 30)),
            ..TierSettings::default()
        };
        let mut before = engine(dir.path(), dtype, 256, &disk)?;
        first_step(&mut before, prompt(&docs[0], 0))?;
        before.persist_kv()?;
        let block_bytes = before.kv_block_bytes();
        drop(before);
        check(
            "KV from disk after a restart",
            second_question(dir.path(), dtype, &docs[0], &disk)?,
        );
        // Again with pinned room for eight records: the document streams back in batches.
        let narrow = TierSettings {
            transit_bytes: 8 * block_bytes,
            ..disk
        };
        check(
            "KV streamed from disk in batches of pinned records",
            second_question(dir.path(), dtype, &docs[0], &narrow)?,
        );
        check(
            "KV written through to disk while read, found after a crash",
            written_through_then_crashed(dir.path(), dtype, &docs[0])?,
        );
    }
    Ok(())
}

/// Reads every document of `docs` on a pool that holds two, with host memory behind it, then asks the
/// second question about the first.
fn pushed_out_to_host(
    model: &std::path::Path,
    dtype: KvDtype,
    docs: &[Vec<u32>],
) -> Result<Answer> {
    let host = TierSettings {
        host_bytes: 1 << 30,
        ..TierSettings::default()
    };
    let mut small = engine(model, dtype, 2 * DOC_TOKENS / 16 + 8, &host)?;
    for doc in docs {
        first_step(&mut small, prompt(doc, 0))?;
    }
    let got = first_step(&mut small, prompt(&docs[0], 1))?;
    Ok((got, small.stats().tiers.host_hits))
}

/// The second question about `doc` on a new engine with `tiers` (whose disk holds the document).
fn second_question(
    model: &std::path::Path,
    dtype: KvDtype,
    doc: &[u32],
    tiers: &TierSettings,
) -> Result<Answer> {
    let mut after = engine(model, dtype, 256, tiers)?;
    let got = first_step(&mut after, prompt(doc, 1))?;
    Ok((got, after.stats().tiers.disk_hits))
}

/// Reads `doc` on a disk-only engine that copies blocks down as they are computed (the first prompt
/// chunk's while the second is read), lets it idle until the disk holds them, ends it without the
/// shutdown's copy to disk, and asks the second question on a new engine: its first step, and the
/// blocks that came back from disk.
fn written_through_then_crashed(
    model: &std::path::Path,
    dtype: KvDtype,
    doc: &[u32],
) -> Result<Answer> {
    let disk_dir = tempfile::tempdir().map_err(|e| EngineError::io("temp dir", e))?;
    let through = TierSettings {
        disk: Some((disk_dir.path().to_path_buf(), 1 << 30)),
        write_through: true,
        ..TierSettings::default()
    };
    let mut first = engine(model, dtype, 256, &through)?;
    first_step(&mut first, prompt(doc, 0))?;
    while first.copy_down_while_idle()? {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    first.flush_kv_tiers();
    drop(first);
    second_question(model, dtype, doc, &through)
}
