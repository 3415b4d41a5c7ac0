//! `POST /v1/ask` (JSON, or server-sent events with `stream: true`) and `GET /v1/answers/{id}`.

use actix_web::{HttpResponse, web};
use bytes::Bytes;
use serde::Serialize;
use serde_json::{Value, json};
use tokio::sync::mpsc;
use utoipa::ToSchema;

use super::auth::TenantCaller;
use super::error::{ApiError, ApiResult, ErrorBody};
use super::sse;
use crate::db::answers::AnswerRow;
use crate::db::rfc3339;
use crate::qa::{self, AskEvent, AskInput, FinalAnswer};
use crate::state::AppState;

/// Ask a question. With `stream: true` the answer comes as server-sent events: `progress` events while
/// the model reads the prompt (`{"read": …, "total": …, "eta_ms": …}`, after each chunk), `token`
/// events (`{"text": …}`), then one `answer` event with the [`FinalAnswer`] (or an `error` event).
#[utoipa::path(post, path = "/v1/ask", tag = "questions", request_body = AskInput,
    responses((status = 200, body = FinalAnswer, description = "the answer (or an event stream)"),
        (status = 404, body = ErrorBody), (status = 409, body = ErrorBody), (status = 422, body = ErrorBody),
        (status = 429, body = ErrorBody), (status = 503, body = ErrorBody)))]
pub async fn ask(
    state: web::Data<AppState>,
    caller: TenantCaller,
    body: web::Json<AskInput>,
) -> ApiResult<HttpResponse> {
    let input = body.into_inner();
    let stream = input.stream;
    let events = qa::start(state.into_inner(), caller.tenant_id, input).await?;
    if stream {
        Ok(sse::response(forward(events)))
    } else {
        Ok(HttpResponse::Ok().json(collect(events).await?))
    }
}

/// Waits for the final answer.
pub async fn collect(mut events: mpsc::Receiver<AskEvent>) -> ApiResult<FinalAnswer> {
    while let Some(ev) = events.recv().await {
        match ev {
            AskEvent::Progress(_) | AskEvent::Token(_) => {}
            AskEvent::Done(answer) => return Ok(*answer),
            AskEvent::Error(e) => return Err(e),
        }
    }
    Err(ApiError::internal("the answer ended without a result"))
}

/// Turns answer events into SSE frames. When the response body is dropped (the caller went away),
/// this stops at once, without waiting for the next event, and dropping `events` stops the answer.
fn forward(mut events: mpsc::Receiver<AskEvent>) -> mpsc::Receiver<Bytes> {
    let (tx, rx) = mpsc::channel(64);
    tokio::spawn(async move {
        while let Some(ev) = sse::next_event(&mut events, &tx).await {
            let frame = match &ev {
                AskEvent::Progress(p) => sse::frame(
                    Some("progress"),
                    &serde_json::to_string(p).unwrap_or_default(),
                ),
                AskEvent::Token(text) => {
                    sse::frame(Some("token"), &json!({ "text": text }).to_string())
                }
                AskEvent::Done(answer) => sse::frame(
                    Some("answer"),
                    &serde_json::to_string(answer).unwrap_or_default(),
                ),
                AskEvent::Error(e) => sse::frame(
                    Some("error"),
                    &serde_json::to_string(&e.body()).unwrap_or_default(),
                ),
            };
            if tx.send(frame).await.is_err() {
                return; // client gone: dropping `events` cancels the generation
            }
        }
    });
    rx
}

/// A stored answer.
#[derive(Debug, Serialize, ToSchema)]
pub struct AnswerView {
    /// Answer id.
    pub answer_id: String,
    /// The question.
    pub question: String,
    /// Scope as asked.
    #[schema(value_type = Object)]
    pub scope: Value,
    /// Route asked for.
    pub route_requested: String,
    /// Route taken.
    pub route: Option<String>,
    /// Why.
    #[schema(value_type = Vec<String>)]
    pub route_reasons: Value,
    /// `running`, `succeeded`, `failed`, or `stopped` (the caller closed the stream first).
    pub status: String,
    /// The answer.
    pub answer: Option<String>,
    /// Citations.
    #[schema(value_type = Vec<Object>)]
    pub citations: Value,
    /// Timings (ms).
    #[schema(value_type = Object)]
    pub timings: Value,
    /// Prompt tokens.
    pub prompt_tokens: Option<i64>,
    /// Prompt tokens from the prefix cache.
    pub cached_prompt_tokens: Option<i64>,
    /// Answer tokens.
    pub completion_tokens: Option<i64>,
    /// Why it failed.
    pub error: Option<String>,
    /// Asked at (RFC 3339).
    pub created_at: String,
    /// Finished at (RFC 3339).
    pub finished_at: Option<String>,
    /// The documents the question was asked about.
    pub document_ids: Vec<String>,
    /// The answer this question followed up.
    pub follow_up_of: Option<String>,
}

/// A stored answer, by id.
#[utoipa::path(get, path = "/v1/answers/{id}", tag = "questions",
    responses((status = 200, body = AnswerView), (status = 404, body = ErrorBody)))]
pub async fn get_answer(
    state: web::Data<AppState>,
    caller: TenantCaller,
    id: web::Path<String>,
) -> ApiResult<web::Json<AnswerView>> {
    let a = state
        .db
        .answer(&caller.tenant_id, &id)
        .await?
        .ok_or_else(|| ApiError::not_found("answer", &id))?;
    let mut documents = state
        .db
        .documents_of_answers(std::slice::from_ref(&a.id))
        .await?;
    let document_ids = documents.remove(&a.id).unwrap_or_default();
    Ok(web::Json(AnswerView::new(a, document_ids)))
}

impl AnswerView {
    /// The view of a stored answer asked about `document_ids`.
    pub fn new(a: AnswerRow, document_ids: Vec<String>) -> Self {
        AnswerView {
            answer_id: a.id,
            question: a.question,
            scope: a.scope,
            route_requested: a.route_requested,
            route: a.route,
            route_reasons: a.route_reasons,
            status: a.status,
            answer: a.text,
            citations: a.citations,
            timings: a.timings,
            prompt_tokens: a.prompt_tokens,
            cached_prompt_tokens: a.cached_tokens,
            completion_tokens: a.completion_tokens,
            error: a.error,
            created_at: rfc3339(a.created_at),
            finished_at: a.finished_at.map(rfc3339),
            document_ids,
            follow_up_of: a.follow_up_of,
        }
    }
}

/// Routes of this file.
pub fn routes(cfg: &mut web::ServiceConfig) {
    cfg.route("/v1/ask", web::post().to(ask))
        .route("/v1/answers/{id}", web::get().to(get_answer));
}
