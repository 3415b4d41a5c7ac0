//! The HTTP API: one file per resource, each with a `routes` function, plus the shared pieces
//! ([`error`], [`auth`], [`sse`], [`upload`]), the OpenAPI document ([`openapi`]) and the browser UI
//! ([`web_ui`]).

pub mod admin;
pub mod ask;
pub mod auth;
pub mod disposition;
pub mod document_text;
pub mod document_title;
pub mod documents;
pub mod duplicates;
pub mod error;
pub mod health;
pub mod history;
pub mod info;
pub mod jobs;
pub mod kv_cache;
pub mod openai;
pub mod openapi;
pub mod search;
pub mod sse;
pub mod stats;
pub mod upload;
pub mod web_ui;

use actix_web::web;

use error::{ApiError, extraction_error, json_error};

/// Largest JSON request body.
const MAX_JSON_BYTES: usize = 1 << 20;

/// Every route, and request-parsing failures answered with the API's error body.
pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.app_data(
        web::JsonConfig::default()
            .limit(MAX_JSON_BYTES)
            .error_handler(|err, _| json_error(&err)),
    )
    .app_data(
        web::QueryConfig::default()
            .error_handler(|err, _| extraction_error(format!("invalid query string: {err}"))),
    )
    .app_data(
        web::PathConfig::default()
            .error_handler(|err, _| extraction_error(format!("invalid path: {err}"))),
    )
    .configure(documents::routes)
    .configure(document_title::routes)
    .configure(kv_cache::routes)
    .configure(document_text::routes)
    .configure(history::routes)
    .configure(jobs::routes)
    .configure(ask::routes)
    .configure(search::routes)
    .configure(stats::routes)
    .configure(openai::routes)
    .configure(admin::routes)
    .configure(health::routes)
    .configure(openapi::routes)
    .configure(info::routes)
    .configure(web_ui::routes)
    .default_service(web::to(no_route));
}

/// A request no route took: 405 when the path is served with other methods (each route's method is
/// a guard of its resource, so a wrong method falls through to here), else 404.
async fn no_route(req: actix_web::HttpRequest) -> Result<actix_web::HttpResponse, ApiError> {
    if req.resource_map().has_resource(req.path()) {
        return Err(ApiError::method_not_allowed(
            req.method().as_str(),
            req.path(),
        ));
    }
    Err(ApiError::not_found("route", req.path()))
}
