//! Dropping cached KV on demand, for the caller's tenant only:
//! - `DELETE /v1/documents/{id}/kv-cache`: the long path's cached KV of one document (whole reads and
//!   sink-window reads alike), so the next long read computes it anew; deleting a document does the same
//!   first;
//! - `DELETE /v1/kv-cache`: everything the tenant has cached, RAG prompts included. Evaluations use it to
//!   time each route from a cold cache.
//!
//! The blocks stay in the pool and are handed out again like any free block; other tenants' caches are
//! untouched.

use actix_web::{HttpResponse, web};
use serde::Serialize;
use utoipa::ToSchema;

use docqa_engine::kv::manager::CacheScope;

use super::auth::TenantCaller;
use super::documents::find;
use super::error::{ApiResult, ErrorBody};
use crate::db::documents::{Document, status};
use crate::state::AppState;

/// What dropping a document's cached KV freed.
#[derive(Debug, Serialize, ToSchema)]
pub struct CacheDropped {
    /// The document.
    pub document_id: String,
    /// KV blocks taken out of the prefix cache (0 when none were cached).
    pub dropped_blocks: usize,
}

/// What dropping a tenant's cached KV freed.
#[derive(Debug, Serialize, ToSchema)]
pub struct TenantCacheDropped {
    /// KV blocks taken out of the prefix cache (0 when none were cached).
    pub dropped_blocks: usize,
}

/// Drop all of the caller's cached KV (long-path documents and RAG prompts alike).
#[utoipa::path(delete, path = "/v1/kv-cache", tag = "documents",
    responses((status = 200, body = TenantCacheDropped), (status = 401, body = ErrorBody)))]
pub async fn drop_tenant_cache(
    state: web::Data<AppState>,
    caller: TenantCaller,
) -> ApiResult<HttpResponse> {
    let namespace = crate::qa::cache_namespace(&caller.tenant_id);
    let dropped_blocks = state.engine.forget_namespace(namespace).await.unwrap_or(0);
    tracing::info!(tenant = %caller.tenant_id, dropped_blocks, "dropped the tenant's cached KV");
    Ok(HttpResponse::Ok().json(TenantCacheDropped { dropped_blocks }))
}

/// Drop the document's cached KV (the long path's prefix cache), keeping the document.
#[utoipa::path(delete, path = "/v1/documents/{id}/kv-cache", tag = "documents",
    responses((status = 200, body = CacheDropped), (status = 404, body = ErrorBody)))]
pub async fn drop_cache(
    state: web::Data<AppState>,
    caller: TenantCaller,
    id: web::Path<String>,
) -> ApiResult<HttpResponse> {
    let doc = find(&state, &caller, &id).await?;
    let dropped_blocks = forget_cached_kv(&state, &caller.tenant_id, &doc).await;
    Ok(HttpResponse::Ok().json(CacheDropped {
        document_id: doc.id,
        dropped_blocks,
    }))
}

/// Takes the KV blocks of `doc`'s long prompt prefix, read whole or through the sink window, out of
/// `tenant_id`'s prefix cache; returns how many went. A document not yet ready has none.
pub async fn forget_cached_kv(state: &AppState, tenant_id: &str, doc: &Document) -> usize {
    if doc.status != status::READY {
        return 0;
    }
    let Ok(prefix) = crate::qa::prompt::long_prefix(state, doc).await else {
        return 0;
    };
    let namespace = crate::qa::cache_namespace(tenant_id);
    let streaming = crate::qa::prompt::streaming_window(state);
    let mut forgotten = 0;
    for sink_window in [None, Some(streaming)] {
        let scope = CacheScope {
            namespace,
            sink_window,
            transient: false,
            scratch: false,
        };
        forgotten += state
            .engine
            .forget_prefix(prefix.clone(), scope)
            .await
            .unwrap_or(0);
    }
    tracing::info!(document = %doc.id, forgotten, "dropped the document's cached KV blocks");
    forgotten
}

/// Routes of this file.
pub fn routes(cfg: &mut web::ServiceConfig) {
    cfg.route("/v1/documents/{id}/kv-cache", web::delete().to(drop_cache))
        .route("/v1/kv-cache", web::delete().to(drop_tenant_cache));
}
