//! `POST /v1/search`: hybrid (or BM25 / dense) search over a tenant's ready documents, returning
//! chunks with their document, pages and span.

use actix_web::web;
use docqa_indexer::{SearchFilter, SearchMode};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::auth::TenantCaller;
use super::error::{ApiError, ApiResult, ErrorBody};
use crate::qa::{Scope, scope};
use crate::state::AppState;

/// A search request.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SearchInput {
    /// The query text.
    pub query: String,
    /// Which documents to search (default: all ready documents).
    #[serde(default)]
    pub scope: Scope,
    /// How many chunks, 1..=100 (default 10).
    #[serde(default)]
    pub k: Option<usize>,
    /// `hybrid` (default), `bm25` or `dense`.
    #[serde(default)]
    pub mode: Option<String>,
}

/// One chunk found.
#[derive(Debug, Serialize, ToSchema)]
pub struct SearchHit {
    /// Chunk id.
    pub chunk_id: i64,
    /// Document id.
    pub document_id: String,
    /// Position of the chunk in its document, from 0.
    pub ordinal: i64,
    /// Score (fused for hybrid); higher is better.
    pub score: f32,
    /// The chunk text.
    pub text: String,
    /// First page.
    pub page_start: i64,
    /// Last page.
    pub page_end: i64,
    /// Span start (characters).
    pub char_start: i64,
    /// Span end.
    pub char_end: i64,
}

/// Search results.
#[derive(Debug, Serialize, ToSchema)]
pub struct SearchResults {
    /// Best first.
    pub hits: Vec<SearchHit>,
}

/// Search the tenant's ready documents.
#[utoipa::path(post, path = "/v1/search", tag = "questions", request_body = SearchInput,
    responses((status = 200, body = SearchResults), (status = 404, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn search(
    state: web::Data<AppState>,
    caller: TenantCaller,
    body: web::Json<SearchInput>,
) -> ApiResult<web::Json<SearchResults>> {
    let input = body.into_inner();
    if input.query.trim().is_empty() {
        return Err(ApiError::validation("`query` must not be empty"));
    }
    let k = input.k.unwrap_or(10);
    if !(1..=100).contains(&k) {
        return Err(ApiError::validation("`k` must be between 1 and 100"));
    }
    let mode = match input.mode.as_deref().unwrap_or("hybrid") {
        "hybrid" => SearchMode::Hybrid,
        "bm25" => SearchMode::Bm25,
        "dense" => SearchMode::Dense,
        other => {
            return Err(ApiError::validation(format!(
                "unknown `mode` {other:?}: use hybrid, bm25 or dense"
            )));
        }
    };
    let docs = match scope::resolve(&state, &caller.tenant_id, &input.scope).await {
        Ok(docs) => docs,
        Err(e) if e.status == actix_web::http::StatusCode::UNPROCESSABLE_ENTITY => {
            return Ok(web::Json(SearchResults { hits: Vec::new() }));
        }
        Err(e) => return Err(e),
    };
    let index = state
        .indexes
        .get(&state.db, &caller.tenant_id)
        .await
        .map_err(ApiError::internal)?;
    let filter = SearchFilter {
        document_ids: Some(docs.into_iter().map(|d| d.id).collect()),
        collection: None,
    };
    let query = input.query;
    let hits = tokio::task::spawn_blocking(move || {
        let r = index.read().unwrap_or_else(|e| e.into_inner());
        r.search(&query, k, mode, &filter)
    })
    .await
    .map_err(ApiError::internal)??;
    let ids: Vec<i64> = hits.iter().map(|h| h.chunk_id as i64).collect();
    let chunks = state.db.chunks_by_ids(&caller.tenant_id, &ids).await?;
    let hits = chunks
        .into_iter()
        .filter_map(|c| {
            let score = hits.iter().find(|h| h.chunk_id as i64 == c.id)?.score;
            Some(SearchHit {
                chunk_id: c.id,
                document_id: c.document_id,
                ordinal: c.ordinal,
                score,
                text: c.text,
                page_start: c.page_start,
                page_end: c.page_end,
                char_start: c.char_start,
                char_end: c.char_end,
            })
        })
        .collect();
    Ok(web::Json(SearchResults { hits }))
}

/// Routes of this file.
pub fn routes(cfg: &mut web::ServiceConfig) {
    cfg.route("/v1/search", web::post().to(search));
}
