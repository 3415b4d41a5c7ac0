//! The OpenAPI document, generated from the handlers' annotations and served at `/openapi.json`, and
//! a docs page at `/docs` that renders it with a few lines of script (no network needed).

use actix_web::{HttpResponse, web};
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};

use super::{
    admin, ask, document_text, document_title, documents, health, history, info, jobs, kv_cache,
    openai, search, stats,
};

/// The API description.
#[derive(OpenApi)]
#[openapi(
    info(title = "docqa", description = "Question answering over long documents: upload documents, \
        follow their ingestion, ask questions answered with citations by a RAG path or a \
        long-context path. Every error has the body `{\"error_type\", \"message\"}`."),
    paths(
        documents::upload, documents::list, documents::get, document_title::rename, documents::download, documents::delete,
        kv_cache::drop_cache, kv_cache::drop_tenant_cache, document_text::document_text, history::document_answers, history::answers,
        jobs::get, jobs::cancel,
        ask::ask, ask::get_answer, search::search, stats::stats,
        openai::chat_completions, openai::models,
        admin::create_tenant, admin::list_tenants, admin::create_key, admin::list_keys, admin::revoke_key,
        health::healthz, health::readyz, health::metrics, info::info,
    ),
    modifiers(&BearerAuth),
    security(("api_key" = [])),
)]
pub struct ApiDoc;

struct BearerAuth;

impl Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "api_key",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
    }
}

async fn openapi_json() -> HttpResponse {
    HttpResponse::Ok().json(ApiDoc::openapi())
}

async fn docs_page() -> HttpResponse {
    HttpResponse::Ok()
        .content_type("text/html; charset=utf-8")
        .body(include_str!("docs.html"))
}

/// Routes of this file.
pub fn routes(cfg: &mut web::ServiceConfig) {
    cfg.route("/openapi.json", web::get().to(openapi_json))
        .route("/docs", web::get().to(docs_page));
}
