//! Which tokenizer counted each document's tokens, and the recount of those another one counted.

use sqlx::Row;

use super::documents::status;
use super::{Db, now_ms};

impl Db {
    /// Ids of up to `limit` ready documents after `after` (in id order) whose tokens were counted by a
    /// tokenizer other than `tokenizer`, or by one not recorded.
    pub async fn documents_counted_by_another(
        &self,
        tokenizer: &str,
        after: &str,
        limit: i64,
    ) -> Result<Vec<String>, sqlx::Error> {
        let rows = sqlx::query(
            "SELECT id FROM documents WHERE status = $1 AND (counted_by IS NULL OR counted_by <> $2) \
             AND id > $3 ORDER BY id LIMIT $4",
        )
        .bind(status::READY)
        .bind(tokenizer)
        .bind(after)
        .bind(limit)
        .fetch_all(self.pool())
        .await?;
        rows.iter().map(|r| r.try_get("id")).collect()
    }

    /// Sets a ready document's token count as `tokenizer` counted it; false when it is no longer
    /// ready (deleted meanwhile, say).
    pub async fn set_token_count(
        &self,
        id: &str,
        tokens: i64,
        tokenizer: &str,
    ) -> Result<bool, sqlx::Error> {
        let done = sqlx::query(
            "UPDATE documents SET token_count = $1, counted_by = $2, updated_at = $3 \
             WHERE id = $4 AND status = $5",
        )
        .bind(tokens)
        .bind(tokenizer)
        .bind(now_ms())
        .bind(id)
        .bind(status::READY)
        .execute(self.pool())
        .await?;
        Ok(done.rows_affected() > 0)
    }
}
