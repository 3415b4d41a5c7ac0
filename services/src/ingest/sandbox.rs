//! Parsing and chunking in a child process (`docqa ingest-worker`): the parsers read untrusted bytes
//! with third-party code whose memory and time no caller can bound from outside, so they run where
//! a ceiling can. The child sets its own address-space limit (`--ingest-memory-mib` above what it
//! uses at start) before it reads the file; the service kills it at the deadline
//! (`--parse-timeout-secs`), when the job is cancelled, and at shutdown. Whatever the child
//! does, the service process keeps its memory, and a breach is a typed
//! [`docqa_indexer::IndexerError::LimitExceeded`] message naming the limit.

use std::path::PathBuf;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use docqa_engine::text::TextTokenizer;
use docqa_indexer::parse::exceeded;
use docqa_indexer::{
    Chunk, ChunkerConfig, Limit, ParseLimits, ParsedDocument, chunk_document,
    parse_document_with_limits,
};
use serde::{Deserialize, Serialize};
use tokio::io::AsyncWriteExt;

use super::pipeline::Stop;
use crate::db::jobs::{Job, status as job_status};
use crate::state::AppState;

/// How often a running parse looks whether its job was cancelled.
const CANCEL_POLL: Duration = Duration::from_millis(200);

/// Texts up to this many bytes are counted in one call to the tokenizer; longer ones a piece at a
/// time (pieces end at line breaks), which bounds the tokenizer's memory.
const WHOLE_COUNT_BYTES: usize = 1 << 20;

/// What the service asks of the child.
#[derive(Debug, Serialize, Deserialize)]
pub struct WorkerRequest {
    /// The stored original.
    pub path: PathBuf,
    /// The uploaded file's name (format detection, title).
    pub file_name: Option<String>,
    /// The declared media type.
    pub mime: Option<String>,
    /// Parse limits.
    pub limits: ParseLimits,
    /// Model directory of the generator whose tokenizer counts chunk tokens.
    pub tokenizer_dir: PathBuf,
    /// Memory the child may take beyond its size at start, in MiB.
    pub memory_mib: u64,
}

/// What the child answers on its standard output.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WorkerReply {
    /// The document, its chunks and the token count of its whole text.
    Prepared(Prepared),
    /// Why the document cannot be ingested.
    Failed(String),
}

/// A parsed and chunked document.
#[derive(Debug, Serialize, Deserialize)]
pub struct Prepared {
    /// The parsed document.
    pub parsed: ParsedDocument,
    /// Its chunks.
    pub chunks: Vec<Chunk>,
    /// Generator tokens of its whole text.
    pub token_count: usize,
}

/// The child's work: parse and chunk, never panicking out (a panic is reported as a failure).
pub fn work(request: &WorkerRequest) -> WorkerReply {
    match std::panic::catch_unwind(|| prepare_in_process(request)) {
        Ok(Ok(prepared)) => WorkerReply::Prepared(prepared),
        Ok(Err(reason)) => WorkerReply::Failed(reason),
        Err(_) => WorkerReply::Failed("the parser failed on this file".into()),
    }
}

fn prepare_in_process(request: &WorkerRequest) -> Result<Prepared, String> {
    let tokenizer = TextTokenizer::from_model_dir(&request.tokenizer_dir)
        .map_err(|e| format!("cannot load the tokenizer: {e}"))?;
    let bytes = std::fs::read(&request.path).map_err(|e| {
        format!(
            "cannot read the original file {}: {e}",
            request.path.display()
        )
    })?;
    let parsed = parse_document_with_limits(
        &bytes,
        request.file_name.as_deref(),
        request.mime.as_deref(),
        &request.limits,
    )
    .map_err(|e| e.to_string())?;
    drop(bytes);
    let token_count = document_tokens(&tokenizer, &parsed.text);
    let count = |piece: &str| tokens_in(&tokenizer, piece);
    let chunks = chunk_document(&parsed, &count, &ChunkerConfig::default());
    Ok(Prepared {
        parsed,
        chunks,
        token_count,
    })
}

/// Generator tokens of a document's whole text, as ingestion records them (and a recount for another
/// generator, [`super::recount`]).
pub(crate) fn document_tokens(tokenizer: &TextTokenizer, text: &str) -> usize {
    count_in_pieces(text, &|piece| tokens_in(tokenizer, piece))
}

/// Generator tokens of `piece` (none where it cannot be encoded).
fn tokens_in(tokenizer: &TextTokenizer, piece: &str) -> usize {
    tokenizer.encode(piece, false).map_or(0, |ids| ids.len())
}

/// Tokens of `text`: exact up to [`WHOLE_COUNT_BYTES`], beyond that the sum over pieces cut after
/// line breaks (a piece boundary can change a merge across it, a few tokens in millions).
fn count_in_pieces(text: &str, count: &dyn Fn(&str) -> usize) -> usize {
    let mut total = 0;
    let mut rest = text;
    while rest.len() > WHOLE_COUNT_BYTES {
        let mut cut = WHOLE_COUNT_BYTES;
        while !rest.is_char_boundary(cut) {
            cut -= 1;
        }
        let cut = rest[..cut].rfind('\n').map_or(cut, |i| i + 1);
        total += count(&rest[..cut]);
        rest = &rest[cut..];
    }
    total + count(rest)
}

/// Sets the process's address-space ceiling to its current size plus `memory_mib`.
pub fn limit_memory(memory_mib: u64) -> anyhow::Result<()> {
    let status = std::fs::read_to_string("/proc/self/status")?;
    let current_kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmSize:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .ok_or_else(|| anyhow::anyhow!("no VmSize in /proc/self/status"))?;
    let ceiling = (current_kib << 10) + (memory_mib << 20);
    rlimit::setrlimit(rlimit::Resource::AS, ceiling, ceiling)?;
    Ok(())
}

/// Parses and chunks the job's document in a child process; see the module documentation.
pub(super) async fn prepare(state: &AppState, job: &Job) -> Result<Prepared, Stop> {
    let doc = state
        .db
        .document(&job.tenant_id, &job.document_id)
        .await?
        .ok_or_else(|| Stop::Failed("the document was deleted".into()))?;
    let request = WorkerRequest {
        path: state.original_path(&job.tenant_id, &job.document_id),
        file_name: Some(doc.file_name),
        mime: doc.content_type,
        limits: ParseLimits {
            max_bytes: state.config.max_upload_bytes,
            ..ParseLimits::default()
        },
        tokenizer_dir: state.generator_dir.clone(),
        memory_mib: state.config.ingest_memory_mib,
    };
    let deadline = Duration::from_secs(state.config.parse_timeout_secs.max(1));
    let output = tokio::select! {
        output = run_worker(&request) => output?,
        () = tokio::time::sleep(deadline) => {
            return Err(Stop::Failed(exceeded(
                Limit::Time,
                format!("parsing took longer than {} s", deadline.as_secs()),
            ).to_string()));
        }
        () = no_longer_running(state, job) => return Err(Stop::NotRunning),
        () = state.shutdown.cancelled() => return Err(Stop::Shutdown),
    };
    read_reply(&output, request.memory_mib)
}

/// Runs the child to its end; dropping the future kills it.
async fn run_worker(request: &WorkerRequest) -> Result<std::process::Output, Stop> {
    let exe = std::env::current_exe()
        .map_err(|e| Stop::Failed(format!("cannot find the docqa executable: {e}")))?;
    let mut child = tokio::process::Command::new(exe)
        .arg("ingest-worker")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| Stop::Failed(format!("cannot start the parse worker: {e}")))?;
    let body = serde_json::to_vec(request).map_err(|e| Stop::Failed(e.to_string()))?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(&body)
            .await
            .map_err(|e| Stop::Failed(format!("cannot talk to the parse worker: {e}")))?;
    }
    child
        .wait_with_output()
        .await
        .map_err(|e| Stop::Failed(format!("the parse worker was lost: {e}")))
}

/// The child's answer, or what its death means.
fn read_reply(output: &std::process::Output, memory_mib: u64) -> Result<Prepared, Stop> {
    if output.status.success() {
        return match serde_json::from_slice(&output.stdout) {
            Ok(WorkerReply::Prepared(prepared)) => Ok(prepared),
            Ok(WorkerReply::Failed(reason)) => Err(Stop::Failed(reason)),
            Err(e) => Err(Stop::Failed(format!(
                "the parse worker's answer is unreadable: {e}"
            ))),
        };
    }
    Err(Stop::Failed(death_reason(
        output.status,
        &String::from_utf8_lossy(&output.stderr),
        memory_mib,
    )))
}

/// Why the child died, from its exit and its last words.
fn death_reason(status: ExitStatus, stderr: &str, memory_mib: u64) -> String {
    if stderr.contains("memory allocation of") {
        return exceeded(
            Limit::Memory,
            format!("parsing needed more than {memory_mib} MiB"),
        )
        .to_string();
    }
    if stderr.contains("has overflowed its stack") {
        return exceeded(
            Limit::NestingDepth,
            "the parser's stack overflowed on deep nesting",
        )
        .to_string();
    }
    let last = stderr.lines().rev().find(|l| !l.trim().is_empty());
    match last {
        Some(line) => format!("the parser failed on this file ({status}): {line}"),
        None => format!("the parser failed on this file ({status})"),
    }
}

/// Returns once the job is no longer running here (cancelled, deleted or settled elsewhere).
async fn no_longer_running(state: &AppState, job: &Job) {
    loop {
        tokio::time::sleep(CANCEL_POLL).await;
        match state.db.job(&job.tenant_id, &job.id).await {
            Ok(Some(current)) if current.status == job_status::RUNNING => {}
            Ok(_) => return,
            Err(error) => tracing::debug!(%error, "cannot look at the job while parsing"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counting_in_pieces_is_exact_for_texts_that_fit_one_call_and_adds_up_beyond() {
        let by_words = |t: &str| t.split_whitespace().count();
        let small = "one two three\nfour five";
        assert_eq!(count_in_pieces(small, &by_words), 5);
        let line = "word ".repeat(99) + "word\n";
        let big = line.repeat(WHOLE_COUNT_BYTES / line.len() * 3);
        assert!(big.len() > 2 * WHOLE_COUNT_BYTES);
        assert_eq!(count_in_pieces(&big, &by_words), by_words(&big));
    }

    #[test]
    fn a_worker_killed_for_memory_reads_as_the_memory_limit() {
        use std::os::unix::process::ExitStatusExt;
        let status = ExitStatus::from_raw(6);
        let reason = death_reason(
            status,
            "memory allocation of 1073741824 bytes failed\n",
            1024,
        );
        assert_eq!(
            reason,
            "the document exceeds the memory limit: parsing needed more than 1024 MiB"
        );
        let other = death_reason(status, "thread 'main' panicked\nboom\n", 1024);
        assert!(
            other.starts_with("the parser failed on this file"),
            "{other}"
        );
        assert!(other.ends_with("boom"), "{other}");
    }
}
