//! The search indexes of every tenant, one [`SearchIndex`] per tenant under `<data>/indexes/<tenant>/`,
//! opened on first use. On opening, an index whose size disagrees with the database is rebuilt from the
//! stored chunks and vectors (the database is the source of truth). Opening is one at a time: two
//! openers of one directory would fight over the index's writer lock (a search and the index follower
//! at a replica's start, say), and the loser would fail.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, RwLock};

use docqa_indexer::{ChunkRecord, Embedder, SearchIndex};

use crate::db::Db;

/// One tenant's index, shared between searches (read) and ingestion (write).
pub type SharedIndex = Arc<RwLock<SearchIndex>>;

/// The open indexes, by tenant.
pub struct TenantIndexes {
    dir: PathBuf,
    embedder: Arc<dyn Embedder>,
    open: Mutex<HashMap<String, SharedIndex>>,
    /// Held while an index is being opened.
    opening: tokio::sync::Mutex<()>,
}

/// Why an index could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum IndexOpenError {
    /// Reading the chunks to rebuild from failed.
    #[error("database: {0}")]
    Db(#[from] sqlx::Error),
    /// The index itself failed.
    #[error("search index: {0}")]
    Index(#[from] docqa_indexer::IndexerError),
    /// A worker thread failed.
    #[error("index task failed: {0}")]
    Task(String),
}

impl TenantIndexes {
    /// Indexes live under `dir`; `embedder` embeds queries and new chunks.
    pub fn new(dir: PathBuf, embedder: Arc<dyn Embedder>) -> Self {
        TenantIndexes {
            dir,
            embedder,
            open: Mutex::new(HashMap::new()),
            opening: tokio::sync::Mutex::new(()),
        }
    }

    /// The embedder shared by every index.
    pub fn embedder(&self) -> &Arc<dyn Embedder> {
        &self.embedder
    }

    /// A tenant's index, opened (and checked against the database) on first use.
    pub async fn get(&self, db: &Db, tenant_id: &str) -> Result<SharedIndex, IndexOpenError> {
        if let Some(index) = self.cached(tenant_id) {
            return Ok(index);
        }
        let _opening = self.opening.lock().await;
        if let Some(index) = self.cached(tenant_id) {
            return Ok(index);
        }
        let dir = self.dir.join(sanitize(tenant_id));
        let embedder = Arc::clone(&self.embedder);
        let index = tokio::task::spawn_blocking(move || SearchIndex::open(&dir, embedder))
            .await
            .map_err(|e| IndexOpenError::Task(e.to_string()))??;
        let expected = db.ready_chunk_count(tenant_id).await?;
        let (bm25, dense) = index.counts();
        let index = Arc::new(RwLock::new(index));
        if bm25 != expected as u64 || dense as i64 != expected {
            tracing::warn!(
                tenant_id,
                bm25,
                dense,
                expected,
                "index disagrees with the database; rebuilding"
            );
            rebuild(db, tenant_id, &index).await?;
        }
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        Ok(Arc::clone(
            open.entry(tenant_id.to_string()).or_insert(index),
        ))
    }

    fn cached(&self, tenant_id: &str) -> Option<SharedIndex> {
        let open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        open.get(tenant_id).cloned()
    }
}

/// Replaces a tenant's index content by its ready chunks from the database.
pub async fn rebuild(db: &Db, tenant_id: &str, index: &SharedIndex) -> Result<(), IndexOpenError> {
    let rows = db.indexable_chunks(tenant_id).await?;
    let mut records = Vec::with_capacity(rows.len());
    let mut vectors = Vec::with_capacity(rows.len());
    for (chunk, collection, vector) in rows {
        records.push(ChunkRecord {
            chunk_id: chunk.id as u64,
            document_id: chunk.document_id,
            collection,
            text: chunk.text,
        });
        vectors.push(vector);
    }
    let index = Arc::clone(index);
    tokio::task::spawn_blocking(move || {
        let mut w = index.write().unwrap_or_else(|e| e.into_inner());
        w.rebuild_from_embedded(&records, &vectors)
    })
    .await
    .map_err(|e| IndexOpenError::Task(e.to_string()))??;
    Ok(())
}

/// A tenant id as a directory name (ids are UUIDs or `local`; anything else is made safe).
fn sanitize(id: &str) -> String {
    id.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}
