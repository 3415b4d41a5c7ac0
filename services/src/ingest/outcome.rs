//! Recording how a job's run ended, so that the job and its document always agree: a success was
//! recorded with the run's last transaction; a failure fails both; a shutdown requeues the job; and a
//! job that stopped running under this worker (cancelled by a caller, or failed by another process's
//! recovery) gives its final state to the document. A job taken over by another worker is left to it.

use std::sync::Arc;

use super::discard_index_entries;
use super::pipeline::Stop;
use crate::db::documents::status as doc_status;
use crate::db::jobs::{Job, status as job_status};
use crate::state::AppState;

/// Records the end of `job`'s run.
pub(super) async fn record(
    state: &Arc<AppState>,
    job: &Job,
    outcome: Result<(), Stop>,
) -> Result<(), sqlx::Error> {
    let db = &state.db;
    match outcome {
        Ok(()) => Ok(()),
        Err(Stop::Shutdown) => {
            discard_index_entries(state, &job.tenant_id, &job.document_id).await;
            db.requeue_job(
                &job.id,
                "interrupted by a server shutdown; resumes on the next start",
                false,
            )
            .await
        }
        Err(Stop::Failed(reason)) => {
            tracing::warn!(job = %job.id, %reason, "ingestion failed");
            if db
                .fail_ingestion(&job.id, &job.document_id, &reason)
                .await?
            {
                discard_index_entries(state, &job.tenant_id, &job.document_id).await;
                Ok(())
            } else {
                follow_the_job(state, job).await
            }
        }
        Err(Stop::NotRunning) => follow_the_job(state, job).await,
    }
}

/// The job is no longer running under this worker: its document takes the job's final state. A job
/// queued or running again belongs to another worker, which settles the document itself.
async fn follow_the_job(state: &Arc<AppState>, job: &Job) -> Result<(), sqlx::Error> {
    let Some(now) = state.db.job(&job.tenant_id, &job.id).await? else {
        // Deleted with its document, perhaps through another replica: what this run indexed goes.
        discard_index_entries(state, &job.tenant_id, &job.document_id).await;
        return Ok(());
    };
    let (status, reason) = match now.status.as_str() {
        job_status::CANCELLED => (doc_status::CANCELLED, "ingestion cancelled".to_string()),
        job_status::FAILED => (
            doc_status::FAILED,
            now.error.unwrap_or_else(|| "ingestion failed".into()),
        ),
        other => {
            tracing::warn!(job = %job.id, status = other, "the ingestion job was taken over; leaving it to its new run");
            return Ok(());
        }
    };
    discard_index_entries(state, &job.tenant_id, &job.document_id).await;
    state
        .db
        .set_document_status(&job.document_id, status, Some(&reason))
        .await
}
