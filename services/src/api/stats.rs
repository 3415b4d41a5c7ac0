//! `GET /v1/stats`: a tenant's documents by status, and its chunks as the database and each search index
//! count them (equal when the indexes agree with the database), and the engine's KV cache tiers.

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
    /// The generator's KV cache and its lower tiers, for the whole engine (all tenants).
    pub kv_cache: KvCacheStats,
}

/// The engine's KV cache: the device pool and the lower tiers behind it.
#[derive(Debug, Serialize, ToSchema)]
pub struct KvCacheStats {
    /// Blocks in the device pool.
    pub device_blocks: usize,
    /// Of those, blocks held by running requests.
    pub device_blocks_used: usize,
    /// Whether host-memory or disk tiers are set up.
    pub tiers_attached: bool,
    /// Blocks in host memory.
    pub host_blocks: u64,
    /// Bytes in host memory.
    pub host_bytes: u64,
    /// Blocks on disk.
    pub disk_blocks: u64,
    /// Bytes on disk.
    pub disk_bytes: u64,
    /// Blocks brought back from host memory since start.
    pub host_hits: u64,
    /// Blocks brought back from disk since start.
    pub disk_hits: u64,
    /// Bytes copied from the device down since start.
    pub bytes_offloaded: u64,
    /// Bytes written to disk since start.
    pub bytes_to_disk: u64,
    /// Bytes brought back to the device since start.
    pub bytes_reloaded: u64,
    /// Blocks pushed out of host memory since start.
    pub host_evictions: u64,
    /// Block files deleted to stay under the disk limit since start.
    pub disk_evictions: u64,
    /// Block files that failed to write or read back damaged since start.
    pub disk_errors: u64,
}

impl KvCacheStats {
    fn of(engine: &docqa_engine::serving::EngineStats) -> Self {
        let t = &engine.tiers;
        KvCacheStats {
            device_blocks: engine.total_blocks,
            device_blocks_used: engine.used_blocks,
            tiers_attached: engine.tiers_attached,
            host_blocks: t.host_blocks,
            host_bytes: t.host_bytes,
            disk_blocks: t.disk_blocks,
            disk_bytes: t.disk_bytes,
            host_hits: t.host_hits,
            disk_hits: t.disk_hits,
            bytes_offloaded: t.bytes_offloaded,
            bytes_to_disk: t.bytes_to_disk,
            bytes_reloaded: t.bytes_reloaded,
            host_evictions: t.host_evictions,
            disk_evictions: t.disk_evictions,
            disk_errors: t.disk_errors,
        }
    }
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
        kv_cache: KvCacheStats::of(&state.engine.stats()),
    }))
}

/// Routes of this file.
pub fn routes(cfg: &mut web::ServiceConfig) {
    cfg.route("/v1/stats", web::get().to(stats));
}
