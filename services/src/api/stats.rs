//! `GET /v1/stats`: a tenant's documents by status, and its chunks as the database and each search index
//! count them (equal when the indexes agree with the database).

use actix_web::web;
use serde::Serialize;
use utoipa::ToSchema;

use super::auth::TenantCaller;
use super::error::{ApiError, ApiResult};
use crate::state::AppState;

/// A tenant's counts.
#[derive(Debug, Serialize, ToSchema)]
pub struct TenantStats {
    /// Documents per status.
    pub documents: std::collections::BTreeMap<String, i64>,
    /// Chunks of ready documents in the database.
    pub database_chunks: i64,
    /// Chunks in the BM25 index.
    pub bm25_chunks: u64,
    /// Chunks in the dense index.
    pub dense_chunks: usize,
}

/// Counts of the caller's documents and chunks.
#[utoipa::path(get, path = "/v1/stats", tag = "documents", responses((status = 200, body = TenantStats)))]
pub async fn stats(
    state: web::Data<AppState>,
    caller: TenantCaller,
) -> ApiResult<web::Json<TenantStats>> {
    let documents = state.db.document_counts(&caller.tenant_id).await?;
    let database_chunks = state.db.ready_chunk_count(&caller.tenant_id).await?;
    let index = state
        .indexes
        .get(&state.db, &caller.tenant_id)
        .await
        .map_err(ApiError::internal)?;
    let (bm25_chunks, dense_chunks) = index.read().unwrap_or_else(|e| e.into_inner()).counts();
    Ok(web::Json(TenantStats {
        documents,
        database_chunks,
        bm25_chunks,
        dense_chunks,
    }))
}

/// Routes of this file.
pub fn routes(cfg: &mut web::ServiceConfig) {
    cfg.route("/v1/stats", web::get().to(stats));
}
