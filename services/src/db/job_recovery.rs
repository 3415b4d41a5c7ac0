//! Taking back the ingestion jobs of a process that stopped beating their heartbeat (a crash): each is
//! requeued, or failed after repeated interruptions. Only other processes' jobs are taken, and only
//! while their heartbeat is still stale at the moment of the change.

use sqlx::AssertSqlSafe;

use super::jobs::{JOB_COLUMNS, Job, job_from, status};
use super::{Db, now_ms};

impl Db {
    /// Running jobs of other workers than `own_worker` whose heartbeat stopped before `stale_before`
    /// (a crashed process): each is requeued, or failed once it has been tried `max_attempts` times.
    /// A process never takes back a job it is running itself, and a job whose heartbeat came back
    /// between the look and the change is left alone. Returns the jobs changed.
    pub async fn recover_stale_jobs(
        &self,
        stale_before: i64,
        max_attempts: i64,
        own_worker: &str,
    ) -> Result<Vec<Job>, sqlx::Error> {
        let sql = format!(
            "SELECT {JOB_COLUMNS} FROM jobs WHERE status = $1 AND COALESCE(heartbeat_at, 0) < $2 \
             AND COALESCE(worker, '') <> $3"
        );
        let rows = sqlx::query(AssertSqlSafe(sql))
            .bind(status::RUNNING)
            .bind(stale_before)
            .bind(own_worker)
            .fetch_all(self.pool())
            .await?;
        let mut changed = Vec::new();
        for row in &rows {
            let job = job_from(row)?;
            if self.settle_stale(&job, stale_before, max_attempts).await? {
                changed.push(job);
            }
        }
        Ok(changed)
    }

    /// Requeues (or fails, after `max_attempts`) one stale job, provided it is still running with a
    /// stale heartbeat; false when it changed meanwhile.
    async fn settle_stale(
        &self,
        job: &Job,
        stale_before: i64,
        max_attempts: i64,
    ) -> Result<bool, sqlx::Error> {
        let done = if job.attempts >= max_attempts {
            let reason = format!(
                "the ingestion was interrupted {} times (the server stopped while it ran)",
                job.attempts
            );
            sqlx::query(
                "UPDATE jobs SET status = $1, error = $2, finished_at = $3 \
                 WHERE id = $4 AND status = $5 AND COALESCE(heartbeat_at, 0) < $6",
            )
            .bind(status::FAILED)
            .bind(reason)
            .bind(now_ms())
            .bind(&job.id)
            .bind(status::RUNNING)
            .bind(stale_before)
            .execute(self.pool())
            .await?
        } else {
            sqlx::query(
                "UPDATE jobs SET status = $1, error = $2, worker = NULL, progress = 0 \
                 WHERE id = $3 AND status = $4 AND COALESCE(heartbeat_at, 0) < $5",
            )
            .bind(status::QUEUED)
            .bind("resumed after the server stopped during ingestion")
            .bind(&job.id)
            .bind(status::RUNNING)
            .bind(stale_before)
            .execute(self.pool())
            .await?
        };
        Ok(done.rows_affected() == 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::tenants::LOCAL_TENANT;
    use crate::db::test_support;

    /// A fresh SQLite database with one job, claimed by `worker` (so running, heartbeat now).
    async fn a_job_running_under(worker: &str) -> (tempfile::TempDir, Db, Job) {
        let (dir, db) = test_support::local_database().await;
        let job = test_support::claimed_job(&db, "d1", worker).await;
        (dir, db, job)
    }

    async fn status_of(db: &Db, job: &Job) -> String {
        db.job(LOCAL_TENANT, &job.id).await.unwrap().unwrap().status
    }

    #[tokio::test]
    async fn a_process_never_takes_back_a_job_it_is_running_itself() {
        let (_dir, db, job) = a_job_running_under("this-process").await;
        let every_beat_is_stale = now_ms() + 60_000;
        let taken = db
            .recover_stale_jobs(every_beat_is_stale, 3, "this-process")
            .await
            .unwrap();
        assert!(taken.is_empty());
        assert_eq!(status_of(&db, &job).await, status::RUNNING);
        let taken = db
            .recover_stale_jobs(every_beat_is_stale, 3, "another-process")
            .await
            .unwrap();
        assert_eq!(taken.len(), 1);
        assert_eq!(status_of(&db, &job).await, status::QUEUED);
    }

    #[tokio::test]
    async fn a_job_whose_heartbeat_came_back_after_the_look_is_left_running() {
        let (_dir, db, job) = a_job_running_under("a-crashed-process").await;
        let before_its_last_beat = job.started_at.unwrap() - 1;
        assert!(
            !db.settle_stale(&job, before_its_last_beat, 3)
                .await
                .unwrap()
        );
        assert_eq!(status_of(&db, &job).await, status::RUNNING);
    }

    #[tokio::test]
    async fn a_job_interrupted_too_often_is_failed_with_the_count() {
        let (_dir, db, job) = a_job_running_under("a-crashed-process").await;
        let taken = db
            .recover_stale_jobs(now_ms() + 60_000, 1, "this-process")
            .await
            .unwrap();
        assert_eq!(taken.len(), 1);
        let failed = db.job(LOCAL_TENANT, &job.id).await.unwrap().unwrap();
        assert_eq!(failed.status, status::FAILED);
        assert!(failed.error.unwrap().contains("interrupted 1 times"));
    }
}
