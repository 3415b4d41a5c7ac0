//! Applying one change of the index change log to this replica's indexes: the document's entries are
//! replaced by what the database holds for it now (its chunks if it is ready, nothing otherwise), so a
//! change applied twice, or late, leaves the index right.
//!
//! A ready change made by this process is skipped: its ingestion indexed the chunks here before the
//! change was committed. A deletion is applied everywhere, its origin included: it is cheap, and it
//! removes entries that a concurrent application of an older ready change may have put back.

use std::sync::Arc;

use docqa_indexer::ChunkRecord;

use crate::db::Db;
use crate::db::index_changes::{IndexChange, kind};
use crate::indexes::{IndexOpenError, TenantIndexes};

/// What became of a change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Applied {
    /// The document's entries now match the database.
    Synced,
    /// Nothing to do here (this process made the change, or the kind is unknown).
    Skipped,
}

/// Applies `change` to the indexes; `own_origin` is this process's instance id.
pub async fn apply(
    db: &Db,
    indexes: &TenantIndexes,
    own_origin: &str,
    change: &IndexChange,
) -> Result<Applied, IndexOpenError> {
    match change.kind.as_str() {
        kind::READY if change.origin == own_origin => return Ok(Applied::Skipped),
        kind::READY | kind::DELETED => {}
        other => {
            tracing::warn!(
                seq = change.seq,
                kind = other,
                "unknown index change; skipped"
            );
            return Ok(Applied::Skipped);
        }
    }
    let index = indexes.get(db, &change.tenant_id).await?;
    let rows = if change.kind == kind::READY {
        db.indexable_chunks_of(&change.tenant_id, &change.document_id)
            .await?
    } else {
        Vec::new()
    };
    let (records, vectors): (Vec<ChunkRecord>, Vec<Vec<f32>>) = rows
        .into_iter()
        .map(|(chunk, collection, vector)| {
            let record = ChunkRecord {
                chunk_id: chunk.id as u64,
                document_id: chunk.document_id,
                collection,
                text: chunk.text,
            };
            (record, vector)
        })
        .unzip();
    let document_id = change.document_id.clone();
    let index = Arc::clone(&index);
    tokio::task::spawn_blocking(move || {
        let mut w = index.write().unwrap_or_else(|e| e.into_inner());
        w.delete_document(&document_id)?;
        if records.is_empty() {
            return Ok(());
        }
        w.add_embedded(&records, &vectors)
    })
    .await
    .map_err(|e| IndexOpenError::Task(e.to_string()))??;
    Ok(Applied::Synced)
}
