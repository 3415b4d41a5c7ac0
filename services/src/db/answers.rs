//! Questions and their answers: the question, its scope, the route taken and why, the answer text,
//! citations, timings and token counts. JSON-shaped parts are stored as JSON text.

use std::collections::HashMap;

use serde_json::Value;
use sqlx::any::AnyRow;
use sqlx::{AssertSqlSafe, Row};

use super::{Db, now_ms};

/// Answer states.
pub mod status {
    /// Being generated.
    pub const RUNNING: &str = "running";
    /// Complete.
    pub const SUCCEEDED: &str = "succeeded";
    /// Failed; `error` says why.
    pub const FAILED: &str = "failed";
    /// The caller stopped it (closed the stream) before it was complete.
    pub const STOPPED: &str = "stopped";
}

/// The error of an answer cut off by a server crash, recorded at the next start.
pub const INTERRUPTED: &str = "interrupted: the server stopped while it was answering; ask again";

/// A stored answer.
#[derive(Debug, Clone)]
pub struct AnswerRow {
    /// Answer id.
    pub id: String,
    /// The question.
    pub question: String,
    /// Scope as asked (JSON).
    pub scope: Value,
    /// Route asked for: `auto`, `rag` or `long`.
    pub route_requested: String,
    /// Route taken.
    pub route: Option<String>,
    /// Why that route (JSON array of strings).
    pub route_reasons: Value,
    /// `running`, `succeeded`, `failed` or `stopped`.
    pub status: String,
    /// The answer text.
    pub text: Option<String>,
    /// Citations (JSON array).
    pub citations: Value,
    /// Timings in milliseconds (JSON object).
    pub timings: Value,
    /// Prompt tokens.
    pub prompt_tokens: Option<i64>,
    /// Prompt tokens served from the KV prefix cache.
    pub cached_tokens: Option<i64>,
    /// Generated tokens.
    pub completion_tokens: Option<i64>,
    /// Why it failed.
    pub error: Option<String>,
    /// Asked at (Unix ms).
    pub created_at: i64,
    /// Finished at (Unix ms).
    pub finished_at: Option<i64>,
    /// The answer this question follows up.
    pub follow_up_of: Option<String>,
}

/// A question as asked.
#[derive(Debug, Clone)]
pub struct NewQuestion<'a> {
    /// Its text.
    pub text: &'a str,
    /// Scope as asked (JSON).
    pub scope: &'a Value,
    /// Route asked for.
    pub route_requested: &'a str,
    /// The answer it follows up.
    pub follow_up_of: Option<&'a str>,
}

/// What a finished answer records.
#[derive(Debug, Clone)]
pub struct AnswerOutcome<'a> {
    /// Route taken.
    pub route: &'a str,
    /// Why (JSON array).
    pub route_reasons: &'a Value,
    /// Text.
    pub text: &'a str,
    /// Citations (JSON array).
    pub citations: &'a Value,
    /// Timings (JSON object).
    pub timings: &'a Value,
    /// Prompt tokens.
    pub prompt_tokens: i64,
    /// Cached prompt tokens.
    pub cached_tokens: i64,
    /// Generated tokens.
    pub completion_tokens: i64,
}

fn json_column(r: &AnyRow, name: &str, empty: Value) -> Result<Value, sqlx::Error> {
    let text: Option<String> = r.try_get(name)?;
    Ok(text
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or(empty))
}

fn answer_from(r: &AnyRow) -> Result<AnswerRow, sqlx::Error> {
    Ok(AnswerRow {
        id: r.try_get("id")?,
        question: r.try_get("question")?,
        scope: json_column(r, "scope", Value::Null)?,
        route_requested: r.try_get("route_requested")?,
        route: r.try_get("route")?,
        route_reasons: json_column(r, "route_reasons", Value::Array(vec![]))?,
        status: r.try_get("status")?,
        text: r.try_get("text")?,
        citations: json_column(r, "citations", Value::Array(vec![]))?,
        timings: json_column(r, "timings", Value::Object(Default::default()))?,
        prompt_tokens: r.try_get("prompt_tokens")?,
        cached_tokens: r.try_get("cached_tokens")?,
        completion_tokens: r.try_get("completion_tokens")?,
        error: r.try_get("error")?,
        created_at: r.try_get("created_at")?,
        finished_at: r.try_get("finished_at")?,
        follow_up_of: r.try_get("follow_up_of")?,
    })
}

impl Db {
    /// Records a question being answered, and the documents it is asked about.
    pub async fn insert_answer(
        &self,
        id: &str,
        tenant_id: &str,
        question: &NewQuestion<'_>,
        document_ids: &[&str],
    ) -> Result<(), sqlx::Error> {
        let mut tx = self.pool().begin().await?;
        sqlx::query(
            "INSERT INTO answers (id, tenant_id, question, scope, route_requested, status, created_at, \
             follow_up_of) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
        )
        .bind(id)
        .bind(tenant_id)
        .bind(question.text)
        .bind(question.scope.to_string())
        .bind(question.route_requested)
        .bind(status::RUNNING)
        .bind(now_ms())
        .bind(question.follow_up_of)
        .execute(&mut *tx)
        .await?;
        for document_id in document_ids {
            sqlx::query("INSERT INTO answer_documents (answer_id, document_id) VALUES ($1, $2)")
                .bind(id)
                .bind(*document_id)
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await
    }

    /// Records a completed answer.
    pub async fn complete_answer(
        &self,
        id: &str,
        o: &AnswerOutcome<'_>,
    ) -> Result<(), sqlx::Error> {
        sqlx::query(
            "UPDATE answers SET status = $1, route = $2, route_reasons = $3, text = $4, citations = $5, \
             timings = $6, prompt_tokens = $7, cached_tokens = $8, completion_tokens = $9, \
             finished_at = $10 WHERE id = $11",
        )
        .bind(status::SUCCEEDED)
        .bind(o.route)
        .bind(o.route_reasons.to_string())
        .bind(o.text)
        .bind(o.citations.to_string())
        .bind(o.timings.to_string())
        .bind(o.prompt_tokens)
        .bind(o.cached_tokens)
        .bind(o.completion_tokens)
        .bind(now_ms())
        .bind(id)
        .execute(self.pool())
        .await?;
        Ok(())
    }

    /// Records a failed answer.
    pub async fn fail_answer(&self, id: &str, error: &str) -> Result<(), sqlx::Error> {
        self.end_answer(id, status::FAILED, Some(error)).await
    }

    /// Marks an answer stopped by its caller.
    pub async fn stop_answer(&self, id: &str) -> Result<(), sqlx::Error> {
        self.end_answer(id, status::STOPPED, None).await
    }

    async fn end_answer(
        &self,
        id: &str,
        status: &str,
        error: Option<&str>,
    ) -> Result<(), sqlx::Error> {
        sqlx::query("UPDATE answers SET status = $1, error = $2, finished_at = $3 WHERE id = $4")
            .bind(status)
            .bind(error)
            .bind(now_ms())
            .bind(id)
            .execute(self.pool())
            .await?;
        Ok(())
    }

    /// Settles the answers a stopped process left `running`: those asked before `started_before` (this
    /// process's start, before it served anything) become `failed` with [`INTERRUPTED`]. Returns how
    /// many. Answers record no owner: with SQLite one process owns the database, so these are all
    /// its previous life's. With PostgreSQL another live replica may still be writing an answer
    /// asked before this start; it shows as interrupted until that replica records its end, which
    /// overwrites the mark (the updates that end an answer do not check its status).
    pub async fn settle_interrupted_answers(
        &self,
        started_before: i64,
    ) -> Result<u64, sqlx::Error> {
        let done = sqlx::query(
            "UPDATE answers SET status = $1, error = $2, finished_at = $3 \
             WHERE status = $4 AND created_at < $5",
        )
        .bind(status::FAILED)
        .bind(INTERRUPTED)
        .bind(now_ms())
        .bind(status::RUNNING)
        .bind(started_before)
        .execute(self.pool())
        .await?;
        Ok(done.rows_affected())
    }

    /// A tenant's answer.
    pub async fn answer(
        &self,
        tenant_id: &str,
        id: &str,
    ) -> Result<Option<AnswerRow>, sqlx::Error> {
        let row = sqlx::query("SELECT * FROM answers WHERE tenant_id = $1 AND id = $2")
            .bind(tenant_id)
            .bind(id)
            .fetch_optional(self.pool())
            .await?;
        row.as_ref().map(answer_from).transpose()
    }

    /// A tenant's answers, newest first: those asked about any of `document_ids`, or all of them when
    /// the list is empty.
    pub async fn answers_about(
        &self,
        tenant_id: &str,
        document_ids: &[String],
        limit: i64,
    ) -> Result<Vec<AnswerRow>, sqlx::Error> {
        let sql = if document_ids.is_empty() {
            "SELECT a.* FROM answers a WHERE a.tenant_id = $1 \
             ORDER BY a.created_at DESC, a.id DESC LIMIT $2"
                .to_string()
        } else {
            format!(
                "SELECT a.* FROM answers a WHERE a.tenant_id = $1 AND a.id IN \
                 (SELECT d.answer_id FROM answer_documents d WHERE d.document_id IN ({})) \
                 ORDER BY a.created_at DESC, a.id DESC LIMIT $2",
                placeholders(3, document_ids.len())
            )
        };
        let mut query = sqlx::query(AssertSqlSafe(sql)).bind(tenant_id).bind(limit);
        for id in document_ids {
            query = query.bind(id);
        }
        let rows = query.fetch_all(self.pool()).await?;
        rows.iter().map(answer_from).collect()
    }

    /// The documents each of these answers was asked about, by answer id.
    pub async fn documents_of_answers(
        &self,
        answer_ids: &[String],
    ) -> Result<HashMap<String, Vec<String>>, sqlx::Error> {
        let mut by_answer: HashMap<String, Vec<String>> = HashMap::new();
        if answer_ids.is_empty() {
            return Ok(by_answer);
        }
        let sql = format!(
            "SELECT answer_id, document_id FROM answer_documents WHERE answer_id IN ({}) \
             ORDER BY answer_id, document_id",
            placeholders(1, answer_ids.len())
        );
        let mut query = sqlx::query(AssertSqlSafe(sql));
        for id in answer_ids {
            query = query.bind(id);
        }
        for row in query.fetch_all(self.pool()).await? {
            by_answer
                .entry(row.try_get("answer_id")?)
                .or_default()
                .push(row.try_get("document_id")?);
        }
        Ok(by_answer)
    }
}

/// `$first, $first+1, …`: `n` numbered bind parameters.
fn placeholders(first: usize, n: usize) -> String {
    (first..first + n)
        .map(|i| format!("${i}"))
        .collect::<Vec<_>>()
        .join(", ")
}
