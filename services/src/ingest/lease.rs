//! A running job's lease: a task that beats the job's heartbeat every third of `--job-lease-secs` for
//! as long as the job runs in this process, whichever step it is in (a large document's parse, or
//! embedding on a slow CPU, reports no progress for a long time). Dropping the lease stops the beat,
//! so it ends with the job however the job ends, a panic included.

use std::sync::Arc;
use std::time::Duration;

use crate::state::AppState;

/// The heartbeat of one running job; beats until dropped.
pub struct Lease {
    beating: tokio::task::JoinHandle<()>,
}

impl Lease {
    /// Starts beating `job_id`'s heartbeat.
    pub fn keep(state: Arc<AppState>, job_id: String) -> Lease {
        let lease_ms = state.config.job_lease_secs.max(1) * 1000;
        let period = Duration::from_millis((lease_ms / 3).max(100));
        let beating = tokio::spawn(async move {
            loop {
                tokio::time::sleep(period).await;
                match state.db.job_heartbeat(&job_id).await {
                    Ok(true) => {}
                    // Cancelled or settled: the job's run notices at its next checkpoint.
                    Ok(false) => return,
                    Err(error) => {
                        tracing::warn!(job = %job_id, %error, "cannot beat the ingestion job's heartbeat");
                    }
                }
            }
        });
        Lease { beating }
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.beating.abort();
    }
}
