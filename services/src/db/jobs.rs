//! Ingestion jobs: one per uploaded document, claimed by a worker, stepped through
//! parse → chunk → embed → index, with progress, a heartbeat and a reason when it fails.

use serde::Serialize;
use sqlx::any::AnyRow;
use sqlx::{Any, AssertSqlSafe, Row, Transaction};

use super::{Db, now_ms};

/// Job states.
pub mod status {
    /// Waiting for a worker.
    pub const QUEUED: &str = "queued";
    /// A worker is on it.
    pub const RUNNING: &str = "running";
    /// Done: the document is searchable.
    pub const SUCCEEDED: &str = "succeeded";
    /// Failed; `error` says why.
    pub const FAILED: &str = "failed";
    /// Cancelled by a caller.
    pub const CANCELLED: &str = "cancelled";
}

/// The steps of an ingestion, in order.
pub const STEPS: [&str; 4] = ["parse", "chunk", "embed", "index"];

/// A job row.
#[derive(Debug, Clone)]
pub struct Job {
    /// Job id.
    pub id: String,
    /// Owner.
    pub tenant_id: String,
    /// The document it ingests.
    pub document_id: String,
    /// One of [`status`].
    pub status: String,
    /// Current (or last) step.
    pub step: String,
    /// Fraction of the whole job done, 0..=1.
    pub progress: f64,
    /// Why it failed.
    pub error: Option<String>,
    /// Times a worker started it.
    pub attempts: i64,
    /// Creation time (Unix ms).
    pub created_at: i64,
    /// Last start (Unix ms).
    pub started_at: Option<i64>,
    /// End (Unix ms).
    pub finished_at: Option<i64>,
}

/// Jobs per state, for metrics.
#[derive(Debug, Clone, Default, Serialize)]
pub struct JobCounts {
    /// Queued.
    pub queued: i64,
    /// Running.
    pub running: i64,
    /// Succeeded.
    pub succeeded: i64,
    /// Failed.
    pub failed: i64,
    /// Cancelled.
    pub cancelled: i64,
}

pub(super) const JOB_COLUMNS: &str = "id, tenant_id, document_id, status, step, progress, error, attempts, \
     created_at, started_at, finished_at";

pub(super) fn job_from(r: &AnyRow) -> Result<Job, sqlx::Error> {
    Ok(Job {
        id: r.try_get("id")?,
        tenant_id: r.try_get("tenant_id")?,
        document_id: r.try_get("document_id")?,
        status: r.try_get("status")?,
        step: r.try_get("step")?,
        progress: r.try_get("progress")?,
        error: r.try_get("error")?,
        attempts: r.try_get("attempts")?,
        created_at: r.try_get("created_at")?,
        started_at: r.try_get("started_at")?,
        finished_at: r.try_get("finished_at")?,
    })
}

impl Db {
    pub(super) async fn insert_job(
        &self,
        tx: &mut Transaction<'_, Any>,
        id: &str,
        tenant_id: &str,
        document_id: &str,
        now: i64,
    ) -> Result<(), sqlx::Error> {
        sqlx::query(
            "INSERT INTO jobs (id, tenant_id, document_id, status, step, progress, created_at) \
             VALUES ($1, $2, $3, $4, $5, 0, $6)",
        )
        .bind(id)
        .bind(tenant_id)
        .bind(document_id)
        .bind(status::QUEUED)
        .bind(STEPS[0])
        .bind(now)
        .execute(&mut **tx)
        .await?;
        Ok(())
    }

    /// A tenant's job.
    pub async fn job(&self, tenant_id: &str, id: &str) -> Result<Option<Job>, sqlx::Error> {
        let sql = format!("SELECT {JOB_COLUMNS} FROM jobs WHERE tenant_id = $1 AND id = $2");
        let row = sqlx::query(AssertSqlSafe(sql))
            .bind(tenant_id)
            .bind(id)
            .fetch_optional(self.pool())
            .await?;
        row.as_ref().map(job_from).transpose()
    }

    /// The job of a document (the latest, if there were several).
    pub async fn job_of_document(&self, document_id: &str) -> Result<Option<Job>, sqlx::Error> {
        let sql = format!(
            "SELECT {JOB_COLUMNS} FROM jobs WHERE document_id = $1 ORDER BY created_at DESC LIMIT 1"
        );
        let row = sqlx::query(AssertSqlSafe(sql))
            .bind(document_id)
            .fetch_optional(self.pool())
            .await?;
        row.as_ref().map(job_from).transpose()
    }

    /// Claims the oldest queued job for `worker`; None when the queue is empty.
    pub async fn claim_job(&self, worker: &str) -> Result<Option<Job>, sqlx::Error> {
        loop {
            let row = sqlx::query(
                "SELECT id FROM jobs WHERE status = $1 ORDER BY created_at, id LIMIT 1",
            )
            .bind(status::QUEUED)
            .fetch_optional(self.pool())
            .await?;
            let Some(row) = row else { return Ok(None) };
            let id: String = row.try_get("id")?;
            let now = now_ms();
            let claimed = sqlx::query(
                "UPDATE jobs SET status = $1, worker = $2, heartbeat_at = $3, started_at = $3, \
                 attempts = attempts + 1, step = $4, progress = 0, error = NULL \
                 WHERE id = $5 AND status = $6",
            )
            .bind(status::RUNNING)
            .bind(worker)
            .bind(now)
            .bind(STEPS[0])
            .bind(&id)
            .bind(status::QUEUED)
            .execute(self.pool())
            .await?;
            if claimed.rows_affected() == 1 {
                let sql = format!("SELECT {JOB_COLUMNS} FROM jobs WHERE id = $1");
                let row = sqlx::query(AssertSqlSafe(sql))
                    .bind(&id)
                    .fetch_one(self.pool())
                    .await?;
                return Ok(Some(job_from(&row)?));
            }
            // Another worker took it first: look again.
        }
    }

    /// Records a running job's step and progress (and its heartbeat); false when the job is no
    /// longer running (cancelled).
    pub async fn job_progress(
        &self,
        id: &str,
        step: &str,
        progress: f64,
    ) -> Result<bool, sqlx::Error> {
        let done = sqlx::query(
            "UPDATE jobs SET step = $1, progress = $2, heartbeat_at = $3 WHERE id = $4 AND status = $5",
        )
        .bind(step)
        .bind(progress)
        .bind(now_ms())
        .bind(id)
        .bind(status::RUNNING)
        .execute(self.pool())
        .await?;
        Ok(done.rows_affected() == 1)
    }

    /// Beats a running job's heartbeat (nothing else changes); false when it is no longer running.
    pub async fn job_heartbeat(&self, id: &str) -> Result<bool, sqlx::Error> {
        let done = sqlx::query("UPDATE jobs SET heartbeat_at = $1 WHERE id = $2 AND status = $3")
            .bind(now_ms())
            .bind(id)
            .bind(status::RUNNING)
            .execute(self.pool())
            .await?;
        Ok(done.rows_affected() == 1)
    }

    /// Puts a running job back in the queue. After a clean shutdown the attempt does not count
    /// (`count_attempt` false); after a crash it does.
    pub async fn requeue_job(
        &self,
        id: &str,
        reason: &str,
        count_attempt: bool,
    ) -> Result<(), sqlx::Error> {
        sqlx::query(
            "UPDATE jobs SET status = $1, error = $2, worker = NULL, progress = 0, \
             attempts = attempts - $3 WHERE id = $4 AND status = $5",
        )
        .bind(status::QUEUED)
        .bind(reason)
        .bind(i64::from(!count_attempt))
        .bind(id)
        .bind(status::RUNNING)
        .execute(self.pool())
        .await?;
        Ok(())
    }

    /// Cancels a queued or running job and its document, in one transaction, so a crash can never
    /// leave the job cancelled and its document processing; false when the job had already ended.
    /// A running job's worker stops at its next checkpoint and removes what it had indexed.
    pub async fn cancel_job(
        &self,
        tenant_id: &str,
        id: &str,
        document_id: &str,
    ) -> Result<bool, sqlx::Error> {
        let now = now_ms();
        let mut tx = self.pool().begin().await?;
        let done = sqlx::query(
            "UPDATE jobs SET status = $1, error = $2, finished_at = $3 \
             WHERE tenant_id = $4 AND id = $5 AND status IN ($6, $7)",
        )
        .bind(status::CANCELLED)
        .bind("cancelled by the caller")
        .bind(now)
        .bind(tenant_id)
        .bind(id)
        .bind(status::QUEUED)
        .bind(status::RUNNING)
        .execute(&mut *tx)
        .await?;
        let settled = (
            super::documents::status::CANCELLED,
            Some("ingestion cancelled"),
        );
        settle_document(tx, done.rows_affected(), document_id, settled, now).await
    }

    /// How many jobs are in each state.
    pub async fn job_counts(&self) -> Result<JobCounts, sqlx::Error> {
        let rows = sqlx::query("SELECT status, COUNT(*) AS n FROM jobs GROUP BY status")
            .fetch_all(self.pool())
            .await?;
        let mut c = JobCounts::default();
        for r in &rows {
            let n: i64 = r.try_get("n")?;
            match r.try_get::<String, _>("status")?.as_str() {
                status::QUEUED => c.queued = n,
                status::RUNNING => c.running = n,
                status::SUCCEEDED => c.succeeded = n,
                status::FAILED => c.failed = n,
                status::CANCELLED => c.cancelled = n,
                _ => {}
            }
        }
        Ok(c)
    }
}

impl Db {
    /// Marks a running job succeeded and its document ready, and logs the change for the other
    /// replicas' indexes, in one transaction; false (and no change) when the job was no longer running,
    /// e.g. cancelled meanwhile.
    pub async fn complete_ingestion(
        &self,
        job_id: &str,
        document_id: &str,
    ) -> Result<bool, sqlx::Error> {
        self.end_ingestion(job_id, document_id, None).await
    }

    /// Fails a running job and its document with `reason`, in one transaction (nobody sees the
    /// job failed and its document still processing); false (and no change) when the job was no
    /// longer running.
    pub async fn fail_ingestion(
        &self,
        job_id: &str,
        document_id: &str,
        reason: &str,
    ) -> Result<bool, sqlx::Error> {
        self.end_ingestion(job_id, document_id, Some(reason)).await
    }

    /// Ends a running job and settles its document in one transaction: succeeded and ready without a
    /// failure reason, failed and failed with one.
    async fn end_ingestion(
        &self,
        job_id: &str,
        document_id: &str,
        failure: Option<&str>,
    ) -> Result<bool, sqlx::Error> {
        let (job_to, document_to) = match failure {
            None => (status::SUCCEEDED, super::documents::status::READY),
            Some(_) => (status::FAILED, super::documents::status::FAILED),
        };
        let (step, progress) = match failure {
            None => (Some(STEPS[3]), Some(1.0_f64)),
            Some(_) => (None, None),
        };
        let now = now_ms();
        let mut tx = self.pool().begin().await?;
        let done = sqlx::query(
            "UPDATE jobs SET status = $1, error = $2, finished_at = $3, step = COALESCE($4, step), \
             progress = COALESCE($5, progress) WHERE id = $6 AND status = $7",
        )
        .bind(job_to)
        .bind(failure)
        .bind(now)
        .bind(step)
        .bind(progress)
        .bind(job_id)
        .bind(status::RUNNING)
        .execute(&mut *tx)
        .await?;
        if failure.is_none() && done.rows_affected() == 1 {
            super::index_changes::append_ready(&mut tx, self.dialect(), job_id).await?;
        }
        settle_document(
            tx,
            done.rows_affected(),
            document_id,
            (document_to, failure),
            now,
        )
        .await
    }
}

/// The second half of ending a job: when the job's update took (`jobs_ended` is 1), its document gets
/// `status` and `error` in the same transaction, which commits; otherwise (the job had already ended)
/// nothing changes and the answer is false.
async fn settle_document(
    mut tx: Transaction<'_, Any>,
    jobs_ended: u64,
    document_id: &str,
    (status, error): (&str, Option<&str>),
    now: i64,
) -> Result<bool, sqlx::Error> {
    if jobs_ended != 1 {
        tx.rollback().await?;
        return Ok(false);
    }
    sqlx::query(super::documents::SET_STATUS)
        .bind(status)
        .bind(error)
        .bind(now)
        .bind(document_id)
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(true)
}
