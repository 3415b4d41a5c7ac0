//! OpenAI-compatible endpoints, so existing OpenAI clients can ask docqa: `POST /v1/chat/completions`
//! (streaming with `data: [DONE]`, or not) and `GET /v1/models`.
//!
//! The last user message is the question. The model picks the route: `docqa` (auto), `docqa-rag` or
//! `docqa-long`. The scope goes in the extension field `docqa` of the request
//! (`{"docqa": {"document_ids": […]}}` or `{"collection": …}`); the answer's citations, route and
//! reasons come back in the `docqa` field of the response (of the last chunk when streaming).

use actix_web::{HttpResponse, web};
use bytes::Bytes;
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::sync::mpsc;
use utoipa::ToSchema;

use super::ask::collect;
use super::auth::TenantCaller;
use super::error::{ApiError, ApiResult, ErrorBody};
use super::sse;
use crate::db::now_ms;
use crate::qa::conversation::Turn;
use crate::qa::{self, AskEvent, AskInput, FinalAnswer, RouteChoice, Scope};
use crate::state::AppState;

/// The models offered, with the route each stands for.
const MODELS: [(&str, RouteChoice); 3] = [
    ("docqa", RouteChoice::Auto),
    ("docqa-rag", RouteChoice::Rag),
    ("docqa-long", RouteChoice::Long),
];

/// One chat message.
#[derive(Debug, Deserialize, ToSchema)]
pub struct ChatMessageIn {
    /// `system`, `user` or `assistant`.
    pub role: String,
    /// Text, or a list of parts of which the `text` ones are used.
    #[schema(value_type = Object)]
    pub content: Value,
}

/// `POST /v1/chat/completions`. Fields other OpenAI clients send and docqa does not use are ignored.
#[derive(Debug, Deserialize, ToSchema)]
pub struct ChatRequest {
    /// `docqa`, `docqa-rag` or `docqa-long`.
    pub model: String,
    /// The conversation; the last user message is the question, and the user/assistant pairs before it
    /// are the turns it follows up.
    pub messages: Vec<ChatMessageIn>,
    /// Stream chunks as server-sent events.
    #[serde(default)]
    pub stream: bool,
    /// Most answer tokens.
    #[serde(default, alias = "max_completion_tokens")]
    pub max_tokens: Option<usize>,
    /// Sampling temperature.
    #[serde(default)]
    pub temperature: Option<f32>,
    /// Random seed.
    #[serde(default)]
    pub seed: Option<u64>,
    /// docqa's extension: which documents to answer from.
    #[serde(default)]
    pub docqa: Option<Scope>,
}

fn text_of(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

fn ask_input(req: &ChatRequest) -> ApiResult<AskInput> {
    let route = MODELS
        .iter()
        .find(|(name, _)| *name == req.model)
        .map(|(_, r)| *r)
        .ok_or_else(|| {
            ApiError::validation(format!(
                "unknown model {:?}: use docqa, docqa-rag or docqa-long",
                req.model
            ))
        })?;
    let last_user = req
        .messages
        .iter()
        .rposition(|m| m.role == "user")
        .ok_or_else(|| ApiError::validation("`messages` holds no user message"))?;
    Ok(AskInput {
        question: text_of(&req.messages[last_user].content),
        scope: req.docqa.clone().unwrap_or_default(),
        route,
        stream: req.stream,
        max_tokens: req.max_tokens,
        temperature: req.temperature,
        seed: req.seed,
        follow_up_of: None,
        turns: earlier_turns(&req.messages[..last_user]),
    })
}

/// The chat before the question as turns: each assistant message with the user message before it.
fn earlier_turns(messages: &[ChatMessageIn]) -> Vec<Turn> {
    messages
        .windows(2)
        .filter(|pair| pair[0].role == "user" && pair[1].role == "assistant")
        .map(|pair| Turn {
            question: text_of(&pair[0].content),
            answer: text_of(&pair[1].content),
        })
        .collect()
}

fn extension(a: &FinalAnswer) -> Value {
    json!({
        "answer_id": a.answer_id,
        "answerable": a.answerable,
        "route": a.route,
        "self_route_fallback": a.self_route_fallback,
        "route_reasons": a.route_reasons,
        "citations": a.citations,
        "timings": a.timings,
    })
}

fn usage(a: &FinalAnswer) -> Value {
    json!({
        "prompt_tokens": a.usage.prompt_tokens,
        "completion_tokens": a.usage.completion_tokens,
        "total_tokens": a.usage.prompt_tokens + a.usage.completion_tokens,
        "prompt_tokens_details": { "cached_tokens": a.usage.cached_prompt_tokens },
    })
}

/// An OpenAI-style chat completion answered from the documents.
#[utoipa::path(post, path = "/v1/chat/completions", tag = "openai", request_body = ChatRequest,
    responses((status = 200, description = "a chat.completion object, or chat.completion.chunk events"),
        (status = 422, body = ErrorBody)))]
pub async fn chat_completions(
    state: web::Data<AppState>,
    caller: TenantCaller,
    body: web::Json<ChatRequest>,
) -> ApiResult<HttpResponse> {
    let req = body.into_inner();
    let input = ask_input(&req)?;
    let id = format!("chatcmpl-{}", uuid::Uuid::new_v4().simple());
    let created = now_ms() / 1000;
    let events = qa::start(state.into_inner(), caller.tenant_id, input).await?;
    if req.stream {
        return Ok(sse::response(stream_chunks(events, id, created, req.model)));
    }
    let answer = collect(events).await?;
    Ok(HttpResponse::Ok().json(json!({
        "id": id,
        "object": "chat.completion",
        "created": created,
        "model": req.model,
        "choices": [{
            "index": 0,
            "message": { "role": "assistant", "content": answer.answer },
            "finish_reason": answer.finish_reason,
        }],
        "usage": usage(&answer),
        "docqa": extension(&answer),
    })))
}

fn stream_chunks(
    mut events: mpsc::Receiver<AskEvent>,
    id: String,
    created: i64,
    model: String,
) -> mpsc::Receiver<Bytes> {
    let (tx, rx) = mpsc::channel(64);
    tokio::spawn(async move {
        let chunk = |delta: Value, finish: Value, extra: &[(&str, Value)]| {
            let mut v = json!({
                "id": id, "object": "chat.completion.chunk", "created": created, "model": model,
                "choices": [{ "index": 0, "delta": delta, "finish_reason": finish }],
            });
            for (k, x) in extra {
                v[*k] = x.clone();
            }
            sse::frame(None, &v.to_string())
        };
        if tx
            .send(chunk(
                json!({ "role": "assistant", "content": "" }),
                Value::Null,
                &[],
            ))
            .await
            .is_err()
        {
            return;
        }
        while let Some(ev) = sse::next_event(&mut events, &tx).await {
            let frames = match ev {
                // A comment line, which SSE clients skip: it keeps the connection visibly alive
                // while the prompt is read, and a closed one is noticed at once.
                AskEvent::Progress(p) => vec![sse::comment(&format!(
                    "reading {} of {} prompt tokens",
                    p.read, p.total
                ))],
                AskEvent::Token(text) => vec![chunk(json!({ "content": text }), Value::Null, &[])],
                AskEvent::Done(a) => vec![
                    chunk(
                        json!({}),
                        json!(a.finish_reason),
                        &[("docqa", extension(&a)), ("usage", usage(&a))],
                    ),
                    sse::frame(None, "[DONE]"),
                ],
                AskEvent::Error(e) => vec![
                    sse::frame(
                        None,
                        &json!({ "error": { "message": e.message, "type": e.error_type } })
                            .to_string(),
                    ),
                    sse::frame(None, "[DONE]"),
                ],
            };
            for f in frames {
                if tx.send(f).await.is_err() {
                    return;
                }
            }
        }
    });
    rx
}

/// The models docqa answers as.
#[utoipa::path(get, path = "/v1/models", tag = "openai", responses((status = 200, description = "an OpenAI model list")))]
pub async fn models(state: web::Data<AppState>, _caller: TenantCaller) -> HttpResponse {
    let data: Vec<Value> = MODELS
        .iter()
        .map(|(name, route)| {
            json!({
                "id": name, "object": "model", "created": 0, "owned_by": "docqa",
                "docqa": { "route": route, "generator": state.model_name },
            })
        })
        .collect();
    HttpResponse::Ok().json(json!({ "object": "list", "data": data }))
}

/// Routes of this file.
pub fn routes(cfg: &mut web::ServiceConfig) {
    cfg.route("/v1/chat/completions", web::post().to(chat_completions))
        .route("/v1/models", web::get().to(models));
}
