//! Documents and collections. A document row is created with its ingestion job when the file is
//! uploaded; it becomes `ready` (searchable) only when its job succeeds.

use serde::Serialize;
use sqlx::any::AnyRow;
use sqlx::{AssertSqlSafe, Row};

use super::{Db, new_id, now_ms};

/// Sets a document's status ($1), error ($2) and update time ($3) by id ($4). Only a ready document
/// has chunks: any other state's were discarded with its run, so its chunk count goes too.
pub(super) const SET_STATUS: &str = "UPDATE documents SET status = $1, error = $2, updated_at = $3, \
     chunk_count = CASE WHEN $1 = 'ready' THEN chunk_count ELSE NULL END WHERE id = $4";

/// Lifecycle of a document.
pub mod status {
    /// Waiting for or going through ingestion.
    pub const PROCESSING: &str = "processing";
    /// Indexed and searchable.
    pub const READY: &str = "ready";
    /// Ingestion failed; `error` says why.
    pub const FAILED: &str = "failed";
    /// Ingestion was cancelled.
    pub const CANCELLED: &str = "cancelled";
}

/// A document as the API shows it.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct Document {
    /// Document id.
    pub id: String,
    /// The collection's name, if any.
    pub collection: Option<String>,
    /// Uploaded file name.
    pub file_name: String,
    /// Content type given at upload.
    pub content_type: Option<String>,
    /// Size of the original file.
    pub size_bytes: i64,
    /// SHA-256 of the original file (hex).
    pub sha256: String,
    /// `processing`, `ready`, `failed` or `cancelled`.
    pub status: String,
    /// Why ingestion failed.
    pub error: Option<String>,
    /// Detected format (`pdf`, `docx`, `html`, `markdown`, `text`).
    pub format: Option<String>,
    /// Title from the document or its file name.
    pub title: Option<String>,
    /// Pages.
    pub page_count: Option<i64>,
    /// Characters of the extracted text.
    pub char_count: Option<i64>,
    /// Generator tokens of the extracted text.
    pub token_count: Option<i64>,
    /// Chunks indexed.
    pub chunk_count: Option<i64>,
    /// Upload time (Unix ms).
    pub created_at: i64,
    /// Last change (Unix ms).
    pub updated_at: i64,
}

/// What an upload creates.
#[derive(Debug, Clone)]
pub struct NewDocument<'a> {
    /// Owner.
    pub tenant_id: &'a str,
    /// Collection name, created on first use.
    pub collection: Option<&'a str>,
    /// File name as uploaded.
    pub file_name: &'a str,
    /// Content type as uploaded.
    pub content_type: Option<&'a str>,
    /// Bytes.
    pub size_bytes: i64,
    /// SHA-256 hex of the bytes.
    pub sha256: &'a str,
}

/// Filters and paging of a document listing.
#[derive(Debug, Clone, Default)]
pub struct DocumentQuery {
    /// Only this collection.
    pub collection: Option<String>,
    /// Only this status.
    pub status: Option<String>,
    /// File names or titles containing this text (case-insensitive).
    pub search: Option<String>,
    /// Page size.
    pub limit: i64,
    /// Rows to skip.
    pub offset: i64,
}

/// Facts learned while parsing and chunking.
#[derive(Debug, Clone, Default)]
pub struct DocumentFacts {
    /// Detected format.
    pub format: String,
    /// Title.
    pub title: String,
    /// Pages.
    pub page_count: i64,
    /// Characters.
    pub char_count: i64,
    /// Tokens.
    pub token_count: i64,
    /// The tokenizer that counted them ([`crate::ingest::recount::tokenizer_id`]).
    pub counted_by: String,
    /// Chunks.
    pub chunk_count: i64,
}

const DOC_COLUMNS: &str = "d.id, c.name AS collection, d.file_name, d.content_type, d.size_bytes, d.sha256, \
     d.status, d.error, d.format, COALESCE(d.user_title, d.title) AS title, d.page_count, d.char_count, d.token_count, d.chunk_count, \
     d.created_at, d.updated_at";

fn document_from(r: &AnyRow) -> Result<Document, sqlx::Error> {
    Ok(Document {
        id: r.try_get("id")?,
        collection: r.try_get("collection")?,
        file_name: r.try_get("file_name")?,
        content_type: r.try_get("content_type")?,
        size_bytes: r.try_get("size_bytes")?,
        sha256: r.try_get("sha256")?,
        status: r.try_get("status")?,
        error: r.try_get("error")?,
        format: r.try_get("format")?,
        title: r.try_get("title")?,
        page_count: r.try_get("page_count")?,
        char_count: r.try_get("char_count")?,
        token_count: r.try_get("token_count")?,
        chunk_count: r.try_get("chunk_count")?,
        created_at: r.try_get("created_at")?,
        updated_at: r.try_get("updated_at")?,
    })
}

impl Db {
    /// The id of a tenant's collection, created if `create` and missing.
    pub async fn collection_id(
        &self,
        tenant_id: &str,
        name: &str,
        create: bool,
    ) -> Result<Option<String>, sqlx::Error> {
        if create {
            sqlx::query(
                "INSERT INTO collections (id, tenant_id, name, created_at) VALUES ($1, $2, $3, $4) \
                 ON CONFLICT DO NOTHING",
            )
            .bind(new_id())
            .bind(tenant_id)
            .bind(name)
            .bind(now_ms())
            .execute(self.pool())
            .await?;
        }
        let row = sqlx::query("SELECT id FROM collections WHERE tenant_id = $1 AND name = $2")
            .bind(tenant_id)
            .bind(name)
            .fetch_optional(self.pool())
            .await?;
        row.map(|r| r.try_get("id")).transpose()
    }

    /// Creates a document (status `processing`) and its queued ingestion job in one transaction;
    /// returns the job id.
    pub async fn create_document_with_job(
        &self,
        doc_id: &str,
        doc: &NewDocument<'_>,
    ) -> Result<String, sqlx::Error> {
        let collection_id = match doc.collection {
            Some(name) => self.collection_id(doc.tenant_id, name, true).await?,
            None => None,
        };
        let (job_id, now) = (new_id(), now_ms());
        let mut tx = self.pool().begin().await?;
        sqlx::query(
            "INSERT INTO documents (id, tenant_id, collection_id, file_name, content_type, size_bytes, \
             sha256, status, created_at, updated_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $9)",
        )
        .bind(doc_id)
        .bind(doc.tenant_id)
        .bind(collection_id)
        .bind(doc.file_name)
        .bind(doc.content_type)
        .bind(doc.size_bytes)
        .bind(doc.sha256)
        .bind(status::PROCESSING)
        .bind(now)
        .execute(&mut *tx)
        .await?;
        self.insert_job(&mut tx, &job_id, doc.tenant_id, doc_id, now)
            .await?;
        tx.commit().await?;
        Ok(job_id)
    }

    /// One of a tenant's documents.
    pub async fn document(
        &self,
        tenant_id: &str,
        id: &str,
    ) -> Result<Option<Document>, sqlx::Error> {
        let sql = format!(
            "SELECT {DOC_COLUMNS} FROM documents d LEFT JOIN collections c ON c.id = d.collection_id \
             WHERE d.tenant_id = $1 AND d.id = $2"
        );
        let row = sqlx::query(AssertSqlSafe(sql))
            .bind(tenant_id)
            .bind(id)
            .fetch_optional(self.pool())
            .await?;
        row.as_ref().map(document_from).transpose()
    }

    /// A tenant's documents whose original has this SHA-256, oldest first.
    pub async fn documents_with_checksum(
        &self,
        tenant_id: &str,
        sha256: &str,
    ) -> Result<Vec<Document>, sqlx::Error> {
        let sql = format!(
            "SELECT {DOC_COLUMNS} FROM documents d LEFT JOIN collections c ON c.id = d.collection_id \
             WHERE d.tenant_id = $1 AND d.sha256 = $2 ORDER BY d.created_at, d.id"
        );
        let rows = sqlx::query(AssertSqlSafe(sql))
            .bind(tenant_id)
            .bind(sha256)
            .fetch_all(self.pool())
            .await?;
        rows.iter().map(document_from).collect()
    }

    /// Gives a tenant's document the title the user chose (it then wins over the file's own title);
    /// false when there is no such document.
    pub async fn set_user_title(
        &self,
        tenant_id: &str,
        id: &str,
        title: &str,
    ) -> Result<bool, sqlx::Error> {
        let done = sqlx::query(
            "UPDATE documents SET user_title = $1, updated_at = $2 WHERE tenant_id = $3 AND id = $4",
        )
        .bind(title)
        .bind(now_ms())
        .bind(tenant_id)
        .bind(id)
        .execute(self.pool())
        .await?;
        Ok(done.rows_affected() > 0)
    }

    /// A page of a tenant's documents, newest first, and the total matching the filters.
    pub async fn list_documents(
        &self,
        tenant_id: &str,
        q: &DocumentQuery,
    ) -> Result<(Vec<Document>, i64), sqlx::Error> {
        let filter = "FROM documents d LEFT JOIN collections c ON c.id = d.collection_id \
             WHERE d.tenant_id = $1 AND ($2 IS NULL OR c.name = $2) AND ($3 IS NULL OR d.status = $3) \
             AND ($4 IS NULL OR LOWER(d.file_name) LIKE $4 ESCAPE '\\' \
             OR LOWER(COALESCE(d.user_title, d.title, '')) LIKE $4 ESCAPE '\\')";
        let like = q.search.as_deref().map(contains_pattern);
        let total: i64 = sqlx::query(AssertSqlSafe(format!("SELECT COUNT(*) AS n {filter}")))
            .bind(tenant_id)
            .bind(q.collection.as_deref())
            .bind(q.status.as_deref())
            .bind(like.as_deref())
            .fetch_one(self.pool())
            .await?
            .try_get("n")?;
        let sql = format!(
            "SELECT {DOC_COLUMNS} {filter} ORDER BY d.created_at DESC, d.id LIMIT $5 OFFSET $6"
        );
        let rows = sqlx::query(AssertSqlSafe(sql))
            .bind(tenant_id)
            .bind(q.collection.as_deref())
            .bind(q.status.as_deref())
            .bind(like.as_deref())
            .bind(q.limit)
            .bind(q.offset)
            .fetch_all(self.pool())
            .await?;
        let docs = rows.iter().map(document_from).collect::<Result<_, _>>()?;
        Ok((docs, total))
    }

    /// How many of a tenant's documents are in each status.
    pub async fn document_counts(
        &self,
        tenant_id: &str,
    ) -> Result<std::collections::BTreeMap<String, i64>, sqlx::Error> {
        let rows = sqlx::query(
            "SELECT status, COUNT(*) AS n FROM documents WHERE tenant_id = $1 GROUP BY status",
        )
        .bind(tenant_id)
        .fetch_all(self.pool())
        .await?;
        rows.iter()
            .map(|r| Ok((r.try_get("status")?, r.try_get("n")?)))
            .collect()
    }

    /// Ids of every document that is not ready (their index entries must not exist).
    pub async fn unready_document_ids(&self) -> Result<Vec<(String, String)>, sqlx::Error> {
        let rows = sqlx::query("SELECT tenant_id, id FROM documents WHERE status <> $1")
            .bind(status::READY)
            .fetch_all(self.pool())
            .await?;
        rows.iter()
            .map(|r| Ok((r.try_get("tenant_id")?, r.try_get("id")?)))
            .collect()
    }

    /// Sets a document's status and error (and drops the chunk count of one that is not ready).
    pub async fn set_document_status(
        &self,
        id: &str,
        status: &str,
        error: Option<&str>,
    ) -> Result<(), sqlx::Error> {
        sqlx::query(SET_STATUS)
            .bind(status)
            .bind(error)
            .bind(now_ms())
            .bind(id)
            .execute(self.pool())
            .await?;
        Ok(())
    }

    /// Records what parsing and chunking learned, and the extracted text with its page starts.
    pub async fn set_document_facts(
        &self,
        id: &str,
        facts: &DocumentFacts,
        text: &str,
        page_starts_json: &str,
    ) -> Result<(), sqlx::Error> {
        let mut tx = self.pool().begin().await?;
        sqlx::query(
            "UPDATE documents SET format = $1, title = $2, page_count = $3, char_count = $4, \
             token_count = $5, counted_by = $6, chunk_count = $7, updated_at = $8 WHERE id = $9",
        )
        .bind(&facts.format)
        .bind(&facts.title)
        .bind(facts.page_count)
        .bind(facts.char_count)
        .bind(facts.token_count)
        .bind(&facts.counted_by)
        .bind(facts.chunk_count)
        .bind(now_ms())
        .bind(id)
        .execute(&mut *tx)
        .await?;
        sqlx::query("DELETE FROM document_texts WHERE document_id = $1")
            .bind(id)
            .execute(&mut *tx)
            .await?;
        sqlx::query(
            "INSERT INTO document_texts (document_id, text, page_starts) VALUES ($1, $2, $3)",
        )
        .bind(id)
        .bind(text)
        .bind(page_starts_json)
        .execute(&mut *tx)
        .await?;
        tx.commit().await
    }

    /// The extracted text of a document and its page starts (JSON array of character offsets).
    pub async fn document_text(&self, id: &str) -> Result<Option<(String, String)>, sqlx::Error> {
        let row =
            sqlx::query("SELECT text, page_starts FROM document_texts WHERE document_id = $1")
                .bind(id)
                .fetch_optional(self.pool())
                .await?;
        row.map(|r| Ok((r.try_get("text")?, r.try_get("page_starts")?)))
            .transpose()
    }

    /// Deletes a tenant's document with its text, chunks and jobs, and logs the change for the other
    /// replicas' indexes (`origin`: this process's instance id); false when there is none.
    pub async fn delete_document(
        &self,
        tenant_id: &str,
        id: &str,
        origin: &str,
    ) -> Result<bool, sqlx::Error> {
        let mut tx = self.pool().begin().await?;
        for table in ["chunks", "document_texts", "jobs", "answer_documents"] {
            sqlx::query(AssertSqlSafe(format!(
                "DELETE FROM {table} WHERE document_id = $1"
            )))
            .bind(id)
            .execute(&mut *tx)
            .await?;
        }
        let done = sqlx::query("DELETE FROM documents WHERE tenant_id = $1 AND id = $2")
            .bind(tenant_id)
            .bind(id)
            .execute(&mut *tx)
            .await?;
        if done.rows_affected() == 0 {
            tx.rollback().await?;
            return Ok(false);
        }
        super::index_changes::append_deleted(&mut tx, self.dialect(), (tenant_id, id), origin)
            .await?;
        tx.commit().await?;
        Ok(true)
    }
}

/// The `LIKE` pattern (escape character `\`) matching text that contains `search`, lower-cased, with
/// `%`, `_` and `\` standing for themselves.
fn contains_pattern(search: &str) -> String {
    let mut pattern = String::from("%");
    for c in search.to_lowercase().chars() {
        if matches!(c, '%' | '_' | '\\') {
            pattern.push('\\');
        }
        pattern.push(c);
    }
    pattern.push('%');
    pattern
}

#[cfg(test)]
mod tests {
    use super::contains_pattern;

    #[test]
    fn like_wildcards_in_a_search_stand_for_themselves() {
        assert_eq!(contains_pattern("Report"), "%report%");
        assert_eq!(contains_pattern("%"), "%\\%%");
        assert_eq!(contains_pattern("a_b"), "%a\\_b%");
        assert_eq!(contains_pattern("c:\\x"), "%c:\\\\x%");
    }
}
