//! `GET /healthz` (the process answers), `GET /readyz` (database and engine usable) and
//! `GET /metrics` (Prometheus text format). None needs a key.

use actix_web::{HttpResponse, web};
use serde_json::json;

use crate::state::AppState;

/// Liveness.
#[utoipa::path(get, path = "/healthz", tag = "operations", responses((status = 200, description = "alive")))]
pub async fn healthz() -> HttpResponse {
    HttpResponse::Ok().json(json!({ "status": "ok" }))
}

/// Readiness: the database answers and the engine thread runs.
#[utoipa::path(get, path = "/readyz", tag = "operations",
    responses((status = 200, description = "ready"), (status = 503, description = "not ready")))]
pub async fn readyz(state: web::Data<AppState>) -> HttpResponse {
    let database = state.db.ping().await;
    let engine = state.engine.is_running();
    let body = json!({
        "status": if database && engine { "ready" } else { "not ready" },
        "database": database,
        "engine": engine,
        "shutting_down": state.shutdown.is_cancelled(),
    });
    if database && engine && !state.shutdown.is_cancelled() {
        HttpResponse::Ok().json(body)
    } else {
        HttpResponse::ServiceUnavailable()
            .insert_header(("Retry-After", "5"))
            .json(body)
    }
}

/// Prometheus metrics.
#[utoipa::path(get, path = "/metrics", tag = "operations", responses((status = 200, description = "Prometheus text format")))]
pub async fn metrics(state: web::Data<AppState>) -> HttpResponse {
    let jobs = state.db.job_counts().await.unwrap_or_default();
    let text = state.metrics.render(&state.engine.stats(), &jobs);
    HttpResponse::Ok()
        .content_type("text/plain; version=0.0.4")
        .body(text)
}

/// Routes of this file.
pub fn routes(cfg: &mut web::ServiceConfig) {
    cfg.route("/healthz", web::get().to(healthz))
        .route("/readyz", web::get().to(readyz))
        .route("/metrics", web::get().to(metrics));
}
