//! `GET /v1/info`: what a client needs to know before signing in — the version, whether a key is
//! needed (local single-user mode), and the limits it should respect. No key needed; nothing secret.

use actix_web::web;
use serde::Serialize;
use utoipa::ToSchema;

use crate::adapter::AdapterInfo;
use crate::state::AppState;

/// The server's public facts.
#[derive(Debug, Serialize, ToSchema)]
pub struct ServerInfo {
    /// docqa's version.
    pub version: &'static str,
    /// Requests without a key act as the local user.
    pub local_mode: bool,
    /// Largest upload (all files of one request together), in bytes.
    pub max_upload_bytes: u64,
    /// Longest question, in characters.
    pub max_question_chars: usize,
    /// Longest question, in generator tokens.
    pub max_question_tokens: usize,
    /// Tokens of the RAG path's window.
    pub rag_window: usize,
    /// Most tokens an answer may have.
    pub max_answer_tokens: usize,
    /// The generator's context length in tokens (the long path's limit).
    pub max_context: usize,
    /// The context the generator was trained with (smaller than `max_context` under RoPE scaling).
    pub trained_context: usize,
    /// The generator's name.
    pub model: String,
    /// The LoRA adapter merged into the generator: its name and SHA-256, or the name `none`.
    pub adapter: AdapterInfo,
    /// The ranks the generator is split over (`--tensor-parallel`; 1: whole on one device).
    pub tensor_parallel: usize,
}

/// Version, sign-in mode and limits.
#[utoipa::path(get, path = "/v1/info", tag = "operations",
    responses((status = 200, body = ServerInfo)))]
pub async fn info(state: web::Data<AppState>) -> web::Json<ServerInfo> {
    web::Json(ServerInfo {
        version: env!("CARGO_PKG_VERSION"),
        local_mode: state.local_mode,
        max_upload_bytes: state.config.max_upload_bytes,
        max_question_chars: crate::qa::MAX_QUESTION_CHARS,
        max_question_tokens: crate::qa::MAX_QUESTION_TOKENS,
        rag_window: state.config.rag_window(),
        max_answer_tokens: state.config.max_answer_tokens(),
        max_context: state.max_context,
        trained_context: state.trained_context,
        model: state.model_name.clone(),
        adapter: state.adapter.clone(),
        tensor_parallel: state.config.tensor_parallel.unwrap_or(1),
    })
}

/// Routes of this file.
pub fn routes(cfg: &mut web::ServiceConfig) {
    cfg.route("/v1/info", web::get().to(info));
}
