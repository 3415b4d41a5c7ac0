//! The index change log: one row each time what the search indexes must hold changes (a document became
//! ready, or was deleted), written in the transaction that makes the change, so the log and the
//! documents never disagree. Every replica follows the log in `seq` order (`crate::follower`) to keep
//! its own indexes in step with the database.
//!
//! On PostgreSQL a writer locks the table before it appends and holds the lock until it commits: a row's
//! `seq` is then taken only after every smaller one is committed, so a reader that has seen `seq` N has
//! seen everything below it. SQLite has one writer at a time anyway.

use sqlx::{Any, Row, Transaction};

use super::{Db, Dialect, now_ms};

/// Kinds of change.
pub mod kind {
    /// The document's chunks became searchable (its ingestion succeeded).
    pub const READY: &str = "ready";
    /// The document and its chunks were deleted.
    pub const DELETED: &str = "deleted";
}

/// One row of the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexChange {
    /// Position in the log (increasing).
    pub seq: i64,
    /// The document's tenant.
    pub tenant_id: String,
    /// The document.
    pub document_id: String,
    /// One of [`kind`].
    pub kind: String,
    /// The instance id of the process that made the change.
    pub origin: String,
}

/// Appends a ready change for the document of job `job_id`, its origin the job's worker; call only in
/// the transaction that makes the document ready.
pub(super) async fn append_ready(
    tx: &mut Transaction<'_, Any>,
    dialect: Dialect,
    job_id: &str,
) -> Result<(), sqlx::Error> {
    lock_for_append(tx, dialect).await?;
    sqlx::query(
        "INSERT INTO index_changes (tenant_id, document_id, kind, origin, created_at) \
         SELECT tenant_id, document_id, $1, COALESCE(worker, ''), $2 FROM jobs WHERE id = $3",
    )
    .bind(kind::READY)
    .bind(now_ms())
    .bind(job_id)
    .execute(&mut **tx)
    .await?;
    Ok(())
}

/// Appends a deleted change made by `origin`; call only in the transaction that deletes the document.
pub(super) async fn append_deleted(
    tx: &mut Transaction<'_, Any>,
    dialect: Dialect,
    (tenant_id, document_id): (&str, &str),
    origin: &str,
) -> Result<(), sqlx::Error> {
    lock_for_append(tx, dialect).await?;
    sqlx::query(
        "INSERT INTO index_changes (tenant_id, document_id, kind, origin, created_at) \
         VALUES ($1, $2, $3, $4, $5)",
    )
    .bind(tenant_id)
    .bind(document_id)
    .bind(kind::DELETED)
    .bind(origin)
    .bind(now_ms())
    .execute(&mut **tx)
    .await?;
    Ok(())
}

/// PostgreSQL: serialises appenders until commit, so `seq` order is commit order. Readers (plain
/// SELECTs) are not blocked.
async fn lock_for_append(
    tx: &mut Transaction<'_, Any>,
    dialect: Dialect,
) -> Result<(), sqlx::Error> {
    if dialect == Dialect::Postgres {
        sqlx::query("LOCK TABLE index_changes IN EXCLUSIVE MODE")
            .execute(&mut **tx)
            .await?;
    }
    Ok(())
}

impl Db {
    /// Up to `limit` changes after `after`, in order.
    pub async fn index_changes_after(
        &self,
        after: i64,
        limit: i64,
    ) -> Result<Vec<IndexChange>, sqlx::Error> {
        let rows = sqlx::query(
            "SELECT seq, tenant_id, document_id, kind, origin FROM index_changes \
             WHERE seq > $1 ORDER BY seq LIMIT $2",
        )
        .bind(after)
        .bind(limit)
        .fetch_all(self.pool())
        .await?;
        rows.iter()
            .map(|r| {
                Ok(IndexChange {
                    seq: r.try_get("seq")?,
                    tenant_id: r.try_get("tenant_id")?,
                    document_id: r.try_get("document_id")?,
                    kind: r.try_get("kind")?,
                    origin: r.try_get("origin")?,
                })
            })
            .collect()
    }

    /// The last change's position (0 for an empty log).
    pub async fn last_index_change(&self) -> Result<i64, sqlx::Error> {
        let row = sqlx::query("SELECT MAX(seq) AS n FROM index_changes")
            .fetch_one(self.pool())
            .await?;
        Ok(row.try_get::<Option<i64>, _>("n")?.unwrap_or(0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::tenants::LOCAL_TENANT;
    use crate::db::test_support;

    async fn a_database_with_a_running_job(worker: &str) -> (tempfile::TempDir, Db, String) {
        let (dir, db) = test_support::local_database().await;
        let job = test_support::claimed_job(&db, "d1", worker).await;
        (dir, db, job.id)
    }

    fn change(seq: i64, kind: &str, origin: &str) -> IndexChange {
        IndexChange {
            seq,
            tenant_id: LOCAL_TENANT.into(),
            document_id: "d1".into(),
            kind: kind.into(),
            origin: origin.into(),
        }
    }

    #[tokio::test]
    async fn a_document_made_ready_then_deleted_is_logged_twice_in_order_with_each_origin() {
        let (_dir, db, job) = a_database_with_a_running_job("replica-a").await;
        assert_eq!(db.last_index_change().await.unwrap(), 0);
        assert!(db.complete_ingestion(&job, "d1").await.unwrap());
        assert!(
            db.delete_document(LOCAL_TENANT, "d1", "replica-b")
                .await
                .unwrap()
        );
        let log = db.index_changes_after(0, 10).await.unwrap();
        assert_eq!(
            log,
            vec![
                change(1, kind::READY, "replica-a"),
                change(2, kind::DELETED, "replica-b")
            ]
        );
        assert_eq!(db.last_index_change().await.unwrap(), 2);
        assert_eq!(db.index_changes_after(1, 10).await.unwrap().len(), 1);
    }

    #[tokio::test]
    async fn a_failed_or_cancelled_ingestion_and_a_missing_document_log_nothing() {
        let (_dir, db, job) = a_database_with_a_running_job("replica-a").await;
        assert!(db.fail_ingestion(&job, "d1", "broken").await.unwrap());
        assert!(!db.complete_ingestion(&job, "d1").await.unwrap());
        assert!(
            !db.delete_document(LOCAL_TENANT, "nothing", "replica-a")
                .await
                .unwrap()
        );
        assert!(db.index_changes_after(0, 10).await.unwrap().is_empty());
    }
}
