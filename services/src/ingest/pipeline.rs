//! One ingestion job: parse the original and chunk it at sentence boundaries (in a child process
//! under a memory ceiling and a deadline, [`sandbox`]), embed the chunks, store them and index them. The document turns `ready` only in the final transaction, so a crash at any
//! point leaves no half document visible; partial chunks and index entries of a failed, cancelled or
//! interrupted run are removed.

use std::sync::Arc;

use docqa_indexer::ChunkRecord;

use super::lease::Lease;
use super::outcome;
use super::sandbox::{self, Prepared};
use crate::db::chunks::NewChunk;
use crate::db::documents::DocumentFacts;
use crate::db::jobs::Job;
use crate::state::AppState;

/// Chunks embedded between two progress reports (and cancellation checks).
const EMBED_BATCH: usize = 32;

/// Progress at the end of each step.
const CHUNKED: f64 = 0.10;
const EMBEDDED: f64 = 0.95;

/// Why a run stopped early.
pub(super) enum Stop {
    /// Failed for a reason the user should see.
    Failed(String),
    /// The job is no longer running under this worker: cancelled by a caller, or settled by
    /// another process.
    NotRunning,
    /// The server is shutting down: requeue.
    Shutdown,
}

impl From<sqlx::Error> for Stop {
    fn from(e: sqlx::Error) -> Self {
        Stop::Failed(format!("database error: {e}"))
    }
}

/// Runs a claimed job to its end and records the outcome.
pub async fn run_job(state: &Arc<AppState>, job: Job) {
    tracing::info!(job = %job.id, document = %job.document_id, attempt = job.attempts, "ingesting");
    let _lease = Lease::keep(Arc::clone(state), job.id.clone());
    // A previous, interrupted attempt may have left chunks or index entries.
    discard_index_entries(state, &job.tenant_id, &job.document_id).await;
    let outcome = ingest(state, &job).await;
    if let Err(error) = outcome::record(state, &job, outcome).await {
        tracing::error!(job = %job.id, %error, "cannot record the ingestion outcome");
    }
}

async fn ingest(state: &Arc<AppState>, job: &Job) -> Result<(), Stop> {
    let Prepared {
        parsed,
        chunks,
        token_count,
    } = sandbox::prepare(state, job).await?;
    if chunks.is_empty() {
        return Err(Stop::Failed("the document produced no chunks".into()));
    }
    let facts = DocumentFacts {
        format: parsed.format.as_str().to_string(),
        title: parsed.title.clone(),
        page_count: i64::from(parsed.pages.page_count()),
        char_count: parsed.char_len() as i64,
        token_count: token_count as i64,
        counted_by: state.tokenizer_id.clone(),
        chunk_count: chunks.len() as i64,
    };
    let page_starts = serde_json::to_string(parsed.pages.page_starts()).unwrap_or_default();
    state
        .db
        .set_document_facts(&job.document_id, &facts, &parsed.text, &page_starts)
        .await?;
    checkpoint(state, job, "embed", CHUNKED).await?;
    let vectors = embed(state, job, &chunks).await?;
    checkpoint(state, job, "index", EMBEDDED).await?;
    index(state, job, chunks, vectors).await?;
    if state
        .db
        .complete_ingestion(&job.id, &job.document_id)
        .await?
    {
        tracing::info!(job = %job.id, document = %job.document_id, "document ready");
        Ok(())
    } else {
        Err(Stop::NotRunning)
    }
}

/// Records progress; stops when the job was cancelled or the server is stopping.
async fn checkpoint(state: &AppState, job: &Job, step: &str, progress: f64) -> Result<(), Stop> {
    if state.shutdown.is_cancelled() {
        return Err(Stop::Shutdown);
    }
    if state.db.job_progress(&job.id, step, progress).await? {
        Ok(())
    } else {
        Err(Stop::NotRunning)
    }
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, String> + Send + 'static,
) -> Result<T, Stop> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| Stop::Failed(format!("ingestion task failed: {e}")))?
        .map_err(Stop::Failed)
}

async fn embed(
    state: &AppState,
    job: &Job,
    chunks: &[docqa_indexer::Chunk],
) -> Result<Vec<Vec<f32>>, Stop> {
    let mut vectors = Vec::with_capacity(chunks.len());
    for (i, batch) in chunks.chunks(EMBED_BATCH).enumerate() {
        let texts: Vec<String> = batch.iter().map(|c| c.text.clone()).collect();
        let embedder = Arc::clone(state.indexes.embedder());
        let part = blocking(move || {
            let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
            embedder
                .embed(&refs)
                .map_err(|e| format!("embedding failed: {e}"))
        })
        .await?;
        vectors.extend(part);
        let done = ((i + 1) * EMBED_BATCH).min(chunks.len()) as f64 / chunks.len() as f64;
        checkpoint(state, job, "embed", CHUNKED + (EMBEDDED - CHUNKED) * done).await?;
    }
    Ok(vectors)
}

async fn index(
    state: &AppState,
    job: &Job,
    chunks: Vec<docqa_indexer::Chunk>,
    vectors: Vec<Vec<f32>>,
) -> Result<(), Stop> {
    let rows: Vec<NewChunk> = chunks
        .iter()
        .zip(&vectors)
        .map(|(c, v)| NewChunk {
            ordinal: i64::from(c.ordinal),
            text: c.text.clone(),
            char_start: c.char_start as i64,
            char_end: c.char_end as i64,
            page_start: i64::from(c.page_start),
            page_end: i64::from(c.page_end),
            token_count: i64::from(c.token_count),
            embedding: v.clone(),
        })
        .collect();
    let ids = state
        .db
        .replace_chunks(&job.tenant_id, &job.document_id, &rows)
        .await?;
    let collection = state
        .db
        .document(&job.tenant_id, &job.document_id)
        .await?
        .and_then(|d| d.collection);
    let records: Vec<ChunkRecord> = ids
        .iter()
        .zip(chunks)
        .map(|(&id, c)| ChunkRecord {
            chunk_id: id as u64,
            document_id: job.document_id.clone(),
            collection: collection.clone(),
            text: c.text,
        })
        .collect();
    let index = state
        .indexes
        .get(&state.db, &job.tenant_id)
        .await
        .map_err(|e| Stop::Failed(e.to_string()))?;
    blocking(move || {
        let mut w = index.write().unwrap_or_else(|e| e.into_inner());
        w.add_embedded(&records, &vectors)
            .map_err(|e| format!("indexing failed: {e}"))
    })
    .await
}

/// Removes a document's chunks from the database and its entries from the tenant's index.
pub async fn discard_index_entries(state: &AppState, tenant_id: &str, document_id: &str) {
    if let Err(error) = state.db.delete_chunks(document_id).await {
        tracing::warn!(%error, document_id, "cannot delete chunks");
    }
    let index = match state.indexes.get(&state.db, tenant_id).await {
        Ok(index) => index,
        Err(error) => {
            tracing::warn!(%error, tenant_id, "cannot open the index to remove a document");
            return;
        }
    };
    let document_id = document_id.to_string();
    let removed = tokio::task::spawn_blocking(move || {
        let mut w = index.write().unwrap_or_else(|e| e.into_inner());
        w.delete_document(&document_id)
    })
    .await;
    if let Ok(Err(error)) = removed {
        tracing::warn!(%error, "cannot remove a document from the index");
    }
}
