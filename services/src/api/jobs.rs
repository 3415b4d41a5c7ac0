//! `/v1/jobs/{id}`: an ingestion job's state, steps and progress; and cancelling it.

use actix_web::web;
use serde::Serialize;
use utoipa::ToSchema;

use super::auth::TenantCaller;
use super::error::{ApiError, ApiResult, ErrorBody};
use crate::db::jobs::{Job, STEPS, status};
use crate::db::rfc3339;
use crate::state::AppState;

/// One step of an ingestion.
#[derive(Debug, Serialize, ToSchema)]
pub struct StepState {
    /// `parse`, `chunk`, `embed` or `index`.
    pub name: &'static str,
    /// `pending`, `running`, `done`, `failed` or `cancelled`.
    pub state: &'static str,
}

/// A job as the API shows it.
#[derive(Debug, Serialize, ToSchema)]
pub struct JobView {
    /// Job id.
    pub job_id: String,
    /// The document it ingests.
    pub document_id: String,
    /// `queued`, `running`, `succeeded`, `failed` or `cancelled`.
    pub status: String,
    /// Current (or last) step.
    pub step: String,
    /// Percentage done, 0..=100.
    pub percent: f64,
    /// Every step and its state.
    pub steps: Vec<StepState>,
    /// Why it failed (or a note on a resumed job).
    pub error: Option<String>,
    /// Times a worker started it.
    pub attempts: i64,
    /// Creation time (RFC 3339).
    pub created_at: String,
    /// Last start (RFC 3339).
    pub started_at: Option<String>,
    /// End (RFC 3339).
    pub finished_at: Option<String>,
}

fn step_states(job: &Job) -> Vec<StepState> {
    let current = STEPS.iter().position(|s| *s == job.step).unwrap_or(0);
    STEPS
        .iter()
        .enumerate()
        .map(|(i, name)| {
            let state = match job.status.as_str() {
                status::SUCCEEDED => "done",
                _ if i < current => "done",
                status::QUEUED => "pending",
                _ if i > current => "pending",
                status::RUNNING => "running",
                status::FAILED => "failed",
                _ => "cancelled",
            };
            StepState { name, state }
        })
        .collect()
}

impl From<Job> for JobView {
    fn from(job: Job) -> Self {
        JobView {
            steps: step_states(&job),
            percent: (job.progress * 1000.0).round() / 10.0,
            job_id: job.id,
            document_id: job.document_id,
            status: job.status,
            step: job.step,
            error: job.error,
            attempts: job.attempts,
            created_at: rfc3339(job.created_at),
            started_at: job.started_at.map(rfc3339),
            finished_at: job.finished_at.map(rfc3339),
        }
    }
}

async fn find(state: &AppState, caller: &TenantCaller, id: &str) -> ApiResult<Job> {
    state
        .db
        .job(&caller.tenant_id, id)
        .await?
        .ok_or_else(|| ApiError::not_found("job", id))
}

/// An ingestion job's status.
#[utoipa::path(get, path = "/v1/jobs/{id}", tag = "jobs",
    responses((status = 200, body = JobView), (status = 404, body = ErrorBody)))]
pub async fn get(
    state: web::Data<AppState>,
    caller: TenantCaller,
    id: web::Path<String>,
) -> ApiResult<web::Json<JobView>> {
    let job = find(&state, &caller, &id).await?;
    Ok(web::Json(job.into()))
}

/// Cancel a queued or running job; its document becomes `cancelled` and is never searchable.
#[utoipa::path(post, path = "/v1/jobs/{id}/cancel", tag = "jobs",
    responses((status = 200, body = JobView), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)))]
pub async fn cancel(
    state: web::Data<AppState>,
    caller: TenantCaller,
    id: web::Path<String>,
) -> ApiResult<web::Json<JobView>> {
    let job = find(&state, &caller, &id).await?;
    if !state
        .db
        .cancel_job(&caller.tenant_id, &id, &job.document_id)
        .await?
    {
        return Err(ApiError::conflict(format!(
            "job {id} has already ended ({})",
            job.status
        )));
    }
    let job = find(&state, &caller, &id).await?;
    Ok(web::Json(job.into()))
}

/// Routes of this file.
pub fn routes(cfg: &mut web::ServiceConfig) {
    cfg.route("/v1/jobs/{id}", web::get().to(get))
        .route("/v1/jobs/{id}/cancel", web::post().to(cancel));
}
