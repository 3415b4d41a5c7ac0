//! `GET /v1/documents/{id}/answers`: the questions asked about one document and their answers, newest
//! first, for the page's history and for clients that show past answers.

use actix_web::web;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::ask::AnswerView;
use super::auth::TenantCaller;
use super::documents::find;
use super::error::{ApiError, ApiResult, ErrorBody};
use crate::state::AppState;

/// Query of the history.
#[derive(Debug, Deserialize, IntoParams)]
pub struct HistoryParams {
    /// Most answers (1..=200, default 50).
    pub limit: Option<i64>,
}

/// A document's answers.
#[derive(Debug, Serialize, ToSchema)]
pub struct History {
    /// Newest first.
    pub answers: Vec<AnswerView>,
}

/// The questions asked about a document (alone or with others), newest first.
#[utoipa::path(get, path = "/v1/documents/{id}/answers", tag = "questions", params(HistoryParams),
    responses((status = 200, body = History), (status = 404, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn document_answers(
    state: web::Data<AppState>,
    caller: TenantCaller,
    id: web::Path<String>,
    params: web::Query<HistoryParams>,
) -> ApiResult<web::Json<History>> {
    let limit = params.limit.unwrap_or(50);
    if !(1..=200).contains(&limit) {
        return Err(ApiError::validation("`limit` must be between 1 and 200"));
    }
    let doc = find(&state, &caller, &id).await?;
    let rows = state
        .db
        .answers_of_document(&caller.tenant_id, &doc.id, limit)
        .await?;
    Ok(web::Json(History {
        answers: rows.into_iter().map(AnswerView::from).collect(),
    }))
}

/// Routes of this file.
pub fn routes(cfg: &mut web::ServiceConfig) {
    cfg.route(
        "/v1/documents/{id}/answers",
        web::get().to(document_answers),
    );
}
