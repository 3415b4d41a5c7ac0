//! The tiered KV cache on the real SmolLM2 model and the CPU backend: a document pushed out of a small
//! device pool comes back from host memory or disk with logits equal bit for bit to a cache that never
//! lost it, survives a restart on disk, and a damaged file is recomputed rather than believed. The same
//! holds over a tensor-parallel group of three ranks (a record joins the ranks' shares), and a disk
//! tier written by the group is not taken for a whole model's.

use crate::common;

use std::path::{Path, PathBuf};

use docqa_engine::backend::cpu::CpuBackend;
use docqa_engine::fetch::{NoProgress, default_models_dir, ensure_models};
use docqa_engine::kv::tiers::TierSettings;
use docqa_engine::models::llama::Llama;
use docqa_engine::models::split::load_ranks;
use docqa_engine::sampling::SamplingParams;
use docqa_engine::serving::{EngineConfig, EngineCore, GenerateRequest, GenerationEvent, KvBudget};
use docqa_engine::text::{ChatMessage, TextTokenizer};

/// The SmolLM2 f32 KV of one 16-token block: 2 · 30 layers · 16 · 3 heads · 64 · 4 bytes.
const BLOCK_BYTES: usize = 737_280;

fn generator_dir() -> PathBuf {
    ensure_models(&default_models_dir(), &NoProgress)
        .expect("models are fetched")
        .generator
}

/// An engine whose device pool holds `blocks` KV blocks, with `tiers` behind it.
fn engine(blocks: usize, tiers: &TierSettings) -> EngineCore<CpuBackend> {
    engine_over(1, blocks, tiers)
}

/// An engine over SmolLM2 split over `world` ranks (whole for 1) whose pools hold `blocks` KV blocks
/// each (a rank's block is its share of the KV heads), with `tiers` behind it.
fn engine_over(world: usize, blocks: usize, tiers: &TierSettings) -> EngineCore<CpuBackend> {
    let dir = generator_dir();
    let ranks = match world {
        1 => vec![Llama::load(CpuBackend::new(), &dir).unwrap()],
        _ => load_ranks((0..world).map(|_| CpuBackend::new()).collect(), &dir, None).unwrap(),
    };
    let tokenizer = TextTokenizer::from_model_dir(&dir).unwrap();
    let cfg = EngineConfig {
        kv_cache: KvBudget::Bytes(blocks * BLOCK_BYTES / world),
        ..EngineConfig::default()
    };
    let mut core = EngineCore::with_ranks(ranks, tokenizer, &cfg).unwrap();
    assert_eq!(core.stats().total_blocks, blocks);
    assert_eq!(
        core.kv_block_bytes(),
        BLOCK_BYTES,
        "a record holds every rank's share"
    );
    core.attach_tiers(tiers).unwrap();
    core
}

/// A question about the `n`-th document: a different 1,100-character stretch of the QMSum transcript.
fn prompt(core: &EngineCore<CpuBackend>, n: usize, question: &str) -> Vec<u32> {
    let text = common::fixture_text("qmsum_val.jsonl");
    let doc: String = text.chars().skip(n * 1100).take(1100).collect();
    let user = format!("Document:\n{doc}\n\nQuestion: {question}");
    let prompt = core
        .tokenizer()
        .apply_chat_template(&[ChatMessage::new("user", &user)], true)
        .unwrap();
    core.tokenizer().encode(&prompt, false).unwrap()
}

/// What one request produced: its tokens, its first step's top log-probabilities (as bits), and the
/// prompt tokens it took from the cache.
#[derive(Debug, PartialEq)]
struct Outcome {
    tokens: Vec<u32>,
    first_logprobs: Vec<(u32, u32)>,
    cached: usize,
}

/// Asks `question` about the `n`-th document.
fn ask(core: &mut EngineCore<CpuBackend>, n: usize, question: &str) -> Outcome {
    let prompt = prompt(core, n, question);
    run(core, prompt)
}

fn run(core: &mut EngineCore<CpuBackend>, prompt: Vec<u32>) -> Outcome {
    let params = SamplingParams {
        max_tokens: 4,
        temperature: 0.0,
        ..SamplingParams::default()
    };
    let mut request = GenerateRequest::new(prompt, params);
    request.top_logprobs = 20;
    let id = core.add_request(request).unwrap();
    let mut out = Outcome {
        tokens: Vec::new(),
        first_logprobs: Vec::new(),
        cached: 0,
    };
    while core.has_work() {
        for (rid, event) in core.step().unwrap() {
            assert_eq!(rid, id);
            match event {
                GenerationEvent::Token {
                    id: token,
                    top_logprobs,
                    ..
                } => {
                    if out.tokens.is_empty() {
                        out.first_logprobs = top_logprobs
                            .iter()
                            .map(|&(t, l)| (t, l.to_bits()))
                            .collect();
                    }
                    out.tokens.push(token);
                }
                GenerationEvent::Finished { usage, .. } => out.cached = usage.cached_prompt_tokens,
                _ => {}
            }
        }
    }
    out
}

/// The second question about document 0, asked after the first on a pool large enough to keep it.
fn reference() -> Outcome {
    reference_over(1)
}

/// [`reference`] on an engine over `world` ranks.
fn reference_over(world: usize) -> Outcome {
    let mut core = engine_over(world, 256, &TierSettings::default());
    ask(&mut core, 0, "What is discussed?");
    let second = ask(&mut core, 0, "Who speaks first?");
    assert!(second.cached >= 16 * 14, "the document came from the cache");
    second
}

fn disk_tier(dir: &Path, host_bytes: usize) -> TierSettings {
    TierSettings {
        host_bytes,
        disk: Some((dir.to_path_buf(), 1 << 30)),
        ..TierSettings::default()
    }
}

/// Reads documents 0..4 on a pool that holds about two of them.
fn read_four_documents(core: &mut EngineCore<CpuBackend>) {
    for n in 0..4 {
        ask(core, n, "What is discussed?");
    }
}

#[test]
fn a_document_pushed_out_to_host_memory_comes_back_with_bit_identical_logits() {
    pushed_out_to_host_memory_and_back(1);
}

#[test]
fn over_three_ranks_a_document_pushed_out_to_host_memory_comes_back_as_the_group_computed_it() {
    pushed_out_to_host_memory_and_back(3);
}

/// A document pushed out of an engine over `world` ranks comes back from host memory with the logits
/// of an engine over as many ranks that kept it.
fn pushed_out_to_host_memory_and_back(world: usize) {
    let expected = reference_over(world);
    let host = TierSettings {
        host_bytes: 256 << 20,
        ..TierSettings::default()
    };
    let mut core = engine_over(world, 48, &host);
    read_four_documents(&mut core);
    let before = core.stats().tiers;
    assert!(
        before.offloaded_blocks > 0 && before.host_blocks > 0,
        "{before:?}"
    );
    let got = ask(&mut core, 0, "Who speaks first?");
    let after = core.stats().tiers;
    assert!(after.host_hits > before.host_hits, "{after:?}");
    assert_eq!(got, expected);
}

/// Reads document 0 on an engine with `tiers`, shuts it down (its KV copied to disk), then asks the
/// reference question on an engine started later on the same tiers; returns what it answered and how
/// many blocks came back from disk.
fn ask_after_a_restart(tiers: &TierSettings) -> (Outcome, u64) {
    ask_after_a_restart_over((1, 1), tiers)
}

/// [`ask_after_a_restart`] with the first engine over `world.0` ranks and the later one over
/// `world.1`.
fn ask_after_a_restart_over(world: (usize, usize), tiers: &TierSettings) -> (Outcome, u64) {
    {
        let mut core = engine_over(world.0, 256, tiers);
        ask(&mut core, 0, "What is discussed?");
        assert!(core.persist_kv().unwrap() >= 14);
        assert!(core.stats().tiers.disk_blocks >= 14);
    }
    let mut restarted = engine_over(world.1, 256, tiers);
    let got = ask(&mut restarted, 0, "Who speaks first?");
    (got, restarted.stats().tiers.disk_hits)
}

#[test]
fn a_document_on_disk_is_found_by_an_engine_started_later_on_the_same_directory() {
    let expected = reference();
    let dir = tempfile::tempdir().unwrap();
    let (got, disk_hits) = ask_after_a_restart(&disk_tier(dir.path(), 64 << 20));
    assert!(disk_hits >= 14, "{disk_hits} blocks from disk");
    assert_eq!(got, expected);
}

#[test]
fn a_group_finds_its_own_blocks_on_disk_after_a_restart_and_a_whole_model_does_not_take_them() {
    let expected = reference_over(3);
    let dir = tempfile::tempdir().unwrap();
    // Eight records in transit: the document's blocks come back from disk in batches.
    let tiers = TierSettings {
        transit_bytes: 8 * BLOCK_BYTES,
        ..disk_tier(dir.path(), 0)
    };
    let (got, disk_hits) = ask_after_a_restart_over((3, 3), &tiers);
    assert!(disk_hits >= 14, "{disk_hits} blocks from disk");
    assert_eq!(got, expected);
    // The same directory under a whole model: the group's records (its ranks' shares in turn) are not
    // found, and the document is read again.
    let mut whole = engine(256, &disk_tier(dir.path(), 0));
    let answer = ask(&mut whole, 0, "Who speaks first?");
    assert_eq!(whole.stats().tiers.disk_hits, 0);
    assert_eq!(answer.cached, 0);
}

#[test]
fn a_document_larger_than_the_memory_for_transfers_streams_back_from_disk_bit_for_bit() {
    let expected = reference();
    let dir = tempfile::tempdir().unwrap();
    // Room for eight block records in transit: the document's fourteen and more come back in batches.
    let narrow = TierSettings {
        transit_bytes: 8 * BLOCK_BYTES,
        ..disk_tier(dir.path(), 0)
    };
    let (got, disk_hits) = ask_after_a_restart(&narrow);
    assert!(disk_hits >= 14, "{disk_hits} blocks from disk");
    assert_eq!(got, expected);
}

/// Reads document 0 on a disk-only engine with `write_through`, lets it idle until its copies and
/// writes are done, and ends it without the shutdown's copy to disk (as a crash would); returns how
/// many blocks the disk then holds.
fn read_then_crash(dir: &Path, write_through: bool) -> u64 {
    let tiers = TierSettings {
        write_through,
        ..disk_tier(dir, 0)
    };
    let mut core = engine(256, &tiers);
    ask(&mut core, 0, "What is discussed?");
    while core.copy_down_while_idle().unwrap() {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    core.flush_kv_tiers();
    let stats = core.stats().tiers;
    assert_eq!(stats.host_evictions, 0, "nothing was evicted: {stats:?}");
    stats.disk_blocks
}

#[test]
fn under_write_through_a_document_read_is_on_disk_without_eviction_and_survives_a_crash() {
    let expected = reference();
    let back = tempfile::tempdir().unwrap();
    assert_eq!(
        read_then_crash(back.path(), false),
        0,
        "write-back waits for eviction"
    );
    let through = tempfile::tempdir().unwrap();
    let on_disk = read_then_crash(through.path(), true);
    assert!(on_disk >= 14, "{on_disk} blocks on disk");
    let tiers = TierSettings {
        write_through: true,
        ..disk_tier(through.path(), 0)
    };
    let mut restarted = engine(256, &tiers);
    let got = ask(&mut restarted, 0, "Who speaks first?");
    assert!(restarted.stats().tiers.disk_hits >= 14);
    assert_eq!(got, expected);
}

#[test]
fn a_warm_up_and_a_calibration_write_nothing_through_to_the_tiers() {
    let dir = tempfile::tempdir().unwrap();
    let tiers = TierSettings {
        write_through: true,
        ..disk_tier(dir.path(), 0)
    };
    let mut core = engine(256, &tiers);
    core.warm_up().unwrap();
    let calibration = core.calibrate(None, std::time::Duration::ZERO).unwrap();
    assert!(calibration.dense_tokens >= 2048, "{calibration:?}");
    while core.copy_down_while_idle().unwrap() {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    core.flush_kv_tiers();
    let stats = core.stats().tiers;
    assert_eq!(
        (stats.offloaded_blocks, stats.disk_blocks),
        (0, 0),
        "{stats:?}"
    );
    // A question read afterwards is written through as before.
    ask(&mut core, 0, "What is discussed?");
    while core.copy_down_while_idle().unwrap() {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    core.flush_kv_tiers();
    assert!(core.stats().tiers.disk_blocks >= 14);
}

#[test]
fn a_damaged_block_file_is_recomputed_and_the_answer_is_unchanged() {
    let expected = reference();
    let dir = tempfile::tempdir().unwrap();
    {
        let mut core = engine(256, &disk_tier(dir.path(), 0));
        ask(&mut core, 0, "What is discussed?");
        core.persist_kv().unwrap();
    }
    let mut files: Vec<PathBuf> = walk(dir.path());
    files.sort();
    assert!(files.len() >= 14);
    for (i, file) in files.iter().enumerate().filter(|(i, _)| i % 3 == 1) {
        let mut bytes = std::fs::read(file).unwrap();
        match i % 2 {
            0 => bytes.truncate(bytes.len() / 2),
            _ => *bytes.last_mut().unwrap() ^= 0x10,
        }
        std::fs::write(file, bytes).unwrap();
    }
    let mut restarted = engine(256, &disk_tier(dir.path(), 0));
    let got = ask(&mut restarted, 0, "Who speaks first?");
    let tiers = restarted.stats().tiers;
    assert!(tiers.disk_errors >= 1, "{tiers:?}");
    assert_eq!(got.tokens, expected.tokens);
    assert!(
        got.cached < expected.cached,
        "the damaged blocks were recomputed"
    );
}

#[test]
fn a_disk_tier_that_cannot_be_opened_is_a_clear_error() {
    let file = tempfile::NamedTempFile::new().unwrap();
    let dir = generator_dir();
    let model = Llama::load(CpuBackend::new(), &dir).unwrap();
    let tokenizer = TextTokenizer::from_model_dir(&dir).unwrap();
    let mut core = EngineCore::new(model, tokenizer, &EngineConfig::default()).unwrap();
    let err = core
        .attach_tiers(&disk_tier(&file.path().join("kv"), 0))
        .unwrap_err();
    assert!(err.to_string().contains("KV disk tier"), "{err}");
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(walk(&path));
        } else {
            out.push(path);
        }
    }
    out
}
