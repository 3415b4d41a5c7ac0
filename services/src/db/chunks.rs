//! Chunk rows: text, span, pages, token count and the stored embedding, so the search indexes can be
//! rebuilt from the database without re-embedding.

use sqlx::any::AnyRow;
use sqlx::{AssertSqlSafe, Row};

use super::Db;

/// A chunk to store.
#[derive(Debug, Clone)]
pub struct NewChunk {
    /// Position in the document.
    pub ordinal: i64,
    /// Text.
    pub text: String,
    /// First character (offset into the document's extracted text).
    pub char_start: i64,
    /// One past the last character.
    pub char_end: i64,
    /// First page (1-based).
    pub page_start: i64,
    /// Last page.
    pub page_end: i64,
    /// Generator tokens.
    pub token_count: i64,
    /// Unit-length embedding.
    pub embedding: Vec<f32>,
}

/// A stored chunk.
#[derive(Debug, Clone)]
pub struct ChunkRow {
    /// Chunk id (the search indexes' key).
    pub id: i64,
    /// Its document.
    pub document_id: String,
    /// Position in the document.
    pub ordinal: i64,
    /// Text.
    pub text: String,
    /// First character.
    pub char_start: i64,
    /// One past the last character.
    pub char_end: i64,
    /// First page.
    pub page_start: i64,
    /// Last page.
    pub page_end: i64,
}

/// Little-endian f32 bytes of a vector.
pub fn vector_to_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// The vector stored as little-endian f32 bytes.
pub fn vector_from_bytes(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// A chunk as the indexes take it: the row, its document's collection and its stored vector.
pub type IndexableChunk = (ChunkRow, Option<String>, Vec<f32>);

const CHUNK_COLUMNS: &str =
    "id, document_id, ordinal, text, char_start, char_end, page_start, page_end";

fn chunk_from(r: &AnyRow) -> Result<ChunkRow, sqlx::Error> {
    Ok(ChunkRow {
        id: r.try_get("id")?,
        document_id: r.try_get("document_id")?,
        ordinal: r.try_get("ordinal")?,
        text: r.try_get("text")?,
        char_start: r.try_get("char_start")?,
        char_end: r.try_get("char_end")?,
        page_start: r.try_get("page_start")?,
        page_end: r.try_get("page_end")?,
    })
}

impl Db {
    /// Replaces a document's chunks in one transaction; returns the new chunk ids in order.
    pub async fn replace_chunks(
        &self,
        tenant_id: &str,
        document_id: &str,
        chunks: &[NewChunk],
    ) -> Result<Vec<i64>, sqlx::Error> {
        let mut tx = self.pool().begin().await?;
        sqlx::query("DELETE FROM chunks WHERE document_id = $1")
            .bind(document_id)
            .execute(&mut *tx)
            .await?;
        let mut ids = Vec::with_capacity(chunks.len());
        for c in chunks {
            let row = sqlx::query(
                "INSERT INTO chunks (document_id, tenant_id, ordinal, text, char_start, char_end, \
                 page_start, page_end, token_count, embedding) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) RETURNING id",
            )
            .bind(document_id)
            .bind(tenant_id)
            .bind(c.ordinal)
            .bind(&c.text)
            .bind(c.char_start)
            .bind(c.char_end)
            .bind(c.page_start)
            .bind(c.page_end)
            .bind(c.token_count)
            .bind(vector_to_bytes(&c.embedding))
            .fetch_one(&mut *tx)
            .await?;
            ids.push(row.try_get("id")?);
        }
        tx.commit().await?;
        Ok(ids)
    }

    /// Removes a document's chunks.
    pub async fn delete_chunks(&self, document_id: &str) -> Result<(), sqlx::Error> {
        sqlx::query("DELETE FROM chunks WHERE document_id = $1")
            .bind(document_id)
            .execute(self.pool())
            .await?;
        Ok(())
    }

    /// Chunks of a tenant by id (ids of other tenants are ignored), in the order asked.
    pub async fn chunks_by_ids(
        &self,
        tenant_id: &str,
        ids: &[i64],
    ) -> Result<Vec<ChunkRow>, sqlx::Error> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let list = ids.iter().map(i64::to_string).collect::<Vec<_>>().join(",");
        let sql =
            format!("SELECT {CHUNK_COLUMNS} FROM chunks WHERE tenant_id = $1 AND id IN ({list})");
        let rows = sqlx::query(AssertSqlSafe(sql))
            .bind(tenant_id)
            .fetch_all(self.pool())
            .await?;
        let mut found: Vec<ChunkRow> = rows.iter().map(chunk_from).collect::<Result<_, _>>()?;
        found.sort_by_key(|c| ids.iter().position(|&i| i == c.id));
        Ok(found)
    }

    /// Every chunk of a tenant's ready documents with its vector and collection, for index rebuilds.
    pub async fn indexable_chunks(
        &self,
        tenant_id: &str,
    ) -> Result<Vec<IndexableChunk>, sqlx::Error> {
        self.indexable(tenant_id, None).await
    }

    /// The chunks of one of a tenant's documents, as [`Self::indexable_chunks`]: none unless it is
    /// ready (a deleted document has none).
    pub async fn indexable_chunks_of(
        &self,
        tenant_id: &str,
        document_id: &str,
    ) -> Result<Vec<IndexableChunk>, sqlx::Error> {
        self.indexable(tenant_id, Some(document_id)).await
    }

    async fn indexable(
        &self,
        tenant_id: &str,
        document_id: Option<&str>,
    ) -> Result<Vec<IndexableChunk>, sqlx::Error> {
        let rows = sqlx::query(
            "SELECT k.id, k.document_id, k.ordinal, k.text, k.char_start, k.char_end, k.page_start, \
             k.page_end, k.embedding, c.name AS collection \
             FROM chunks k JOIN documents d ON d.id = k.document_id \
             LEFT JOIN collections c ON c.id = d.collection_id \
             WHERE k.tenant_id = $1 AND d.status = 'ready' AND ($2 IS NULL OR k.document_id = $2) \
             ORDER BY k.id",
        )
        .bind(tenant_id)
        .bind(document_id)
        .fetch_all(self.pool())
        .await?;
        rows.iter()
            .map(|r| {
                let bytes: Vec<u8> = r.try_get("embedding")?;
                Ok((
                    chunk_from(r)?,
                    r.try_get("collection")?,
                    vector_from_bytes(&bytes),
                ))
            })
            .collect()
    }

    /// How many chunks a tenant's ready documents have.
    pub async fn ready_chunk_count(&self, tenant_id: &str) -> Result<i64, sqlx::Error> {
        let row = sqlx::query(
            "SELECT COUNT(*) AS n FROM chunks k JOIN documents d ON d.id = k.document_id \
             WHERE k.tenant_id = $1 AND d.status = 'ready'",
        )
        .bind(tenant_id)
        .fetch_one(self.pool())
        .await?;
        row.try_get("n")
    }
}
