//! Ingestion workers: take queued jobs from the database and run them through
//! parse → chunk → embed → index ([`pipeline`]). Jobs left running by a crashed process are recovered
//! (requeued, or failed after repeated interruptions); on shutdown a running job is put back in the
//! queue, so it resumes on the next start.

mod lease;
mod outcome;
mod pipeline;
pub mod recount;
pub mod sandbox;

use std::sync::Arc;
use std::time::Duration;

use crate::db::jobs::status as job_status;
use crate::db::now_ms;
use crate::state::AppState;

pub use pipeline::discard_index_entries;

/// A job is failed instead of requeued after this many interrupted attempts.
pub const MAX_ATTEMPTS: i64 = 3;

/// Runs `workers` ingestion workers and the stale-job sweeper until shutdown; returns when all stopped.
pub async fn run(state: Arc<AppState>, workers: usize) {
    let mut tasks = Vec::new();
    for n in 0..workers.max(1) {
        tasks.push(tokio::spawn(worker(Arc::clone(&state), n)));
    }
    tasks.push(tokio::spawn(sweeper(Arc::clone(&state))));
    for t in tasks {
        let _ = t.await;
    }
}

async fn worker(state: Arc<AppState>, n: usize) {
    tracing::debug!(worker = n, "ingestion worker started");
    while !state.shutdown.is_cancelled() {
        match state.db.claim_job(&state.instance_id).await {
            Ok(Some(job)) => pipeline::run_job(&state, job).await,
            Ok(None) => {
                tokio::select! {
                    _ = state.jobs_queued.notified() => {}
                    _ = tokio::time::sleep(Duration::from_secs(2)) => {}
                    _ = state.shutdown.cancelled() => {}
                }
            }
            Err(error) => {
                tracing::warn!(%error, "cannot claim an ingestion job");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    }
}

/// Requeues jobs whose worker stopped beating (another replica crashed); never this process's own.
async fn sweeper(state: Arc<AppState>) {
    let lease = Duration::from_secs(state.config.job_lease_secs.max(1));
    loop {
        tokio::select! {
            _ = tokio::time::sleep(lease / 2) => {}
            _ = state.shutdown.cancelled() => return,
        }
        let stale_before = now_ms() - lease.as_millis() as i64;
        match state
            .db
            .recover_stale_jobs(stale_before, MAX_ATTEMPTS, &state.instance_id)
            .await
        {
            Ok(jobs) if !jobs.is_empty() => {
                after_recovery(&state, &jobs).await;
            }
            Ok(_) => {}
            Err(error) => tracing::warn!(%error, "cannot sweep stale ingestion jobs"),
        }
    }
}

/// At start: every job still marked running was interrupted (with SQLite this process owns the
/// database, so all of them; with PostgreSQL only those whose heartbeat is older than the lease). None
/// is this process's: its instance id is new.
pub async fn recover_at_start(state: &AppState, owns_database: bool) -> Result<(), sqlx::Error> {
    let stale_before = if owns_database {
        i64::MAX
    } else {
        now_ms() - (state.config.job_lease_secs as i64) * 1000
    };
    let jobs = state
        .db
        .recover_stale_jobs(stale_before, MAX_ATTEMPTS, &state.instance_id)
        .await?;
    after_recovery(state, &jobs).await;
    Ok(())
}

async fn after_recovery(state: &AppState, jobs: &[crate::db::jobs::Job]) {
    for job in jobs {
        tracing::warn!(job = %job.id, document = %job.document_id, "recovered an interrupted ingestion job");
        if job.attempts >= MAX_ATTEMPTS {
            let _ = state
                .db
                .set_document_status(
                    &job.document_id,
                    crate::db::documents::status::FAILED,
                    Some("ingestion was interrupted repeatedly"),
                )
                .await;
        }
        discard_index_entries(state, &job.tenant_id, &job.document_id).await;
    }
    if jobs.iter().any(|j| j.attempts < MAX_ATTEMPTS) {
        state.jobs_queued.notify_waiters();
    }
}

/// Whether a job status is final.
pub fn is_final(status: &str) -> bool {
    matches!(
        status,
        job_status::SUCCEEDED | job_status::FAILED | job_status::CANCELLED
    )
}
