//! `GET /v1/documents/{id}/text`: a ready document's extracted text and where each page starts, which
//! is what citations' character spans point into. The page's document view reads it.

use actix_web::web;
use serde::Serialize;
use utoipa::ToSchema;

use super::auth::TenantCaller;
use super::documents::find;
use super::error::{ApiError, ApiResult, ErrorBody};
use crate::db::documents::{Document, status};
use crate::state::AppState;

/// A document's text.
#[derive(Debug, Serialize, ToSchema)]
pub struct DocumentText {
    /// The document.
    pub document: Document,
    /// The extracted text; citations' `char_start`/`char_end` count characters (Unicode scalar values)
    /// into it.
    pub text: String,
    /// Character offset at which each page starts (page 1 first).
    pub page_starts: Vec<usize>,
}

/// The extracted text of a ready document.
#[utoipa::path(get, path = "/v1/documents/{id}/text", tag = "documents",
    responses((status = 200, body = DocumentText), (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody, description = "the document is not ready")))]
pub async fn document_text(
    state: web::Data<AppState>,
    caller: TenantCaller,
    id: web::Path<String>,
) -> ApiResult<web::Json<DocumentText>> {
    let document = find(&state, &caller, &id).await?;
    if document.status != status::READY {
        return Err(ApiError::conflict(format!(
            "document {} is {}: its text is available once ingestion succeeds",
            document.id, document.status
        )));
    }
    let (text, page_starts) = state.db.document_text(&document.id).await?.ok_or_else(|| {
        ApiError::internal(format!("the text of document {} is missing", document.id))
    })?;
    let page_starts = serde_json::from_str(&page_starts).unwrap_or_else(|_| vec![0]);
    Ok(web::Json(DocumentText {
        document,
        text,
        page_starts,
    }))
}

/// Routes of this file.
pub fn routes(cfg: &mut web::ServiceConfig) {
    cfg.route("/v1/documents/{id}/text", web::get().to(document_text));
}
