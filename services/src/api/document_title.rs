//! `PATCH /v1/documents/{id}`: the user renames a document. The title they give is shown instead of the
//! one found in the file (a PDF's metadata title is often a form name such as "Exhibit 99.1"), and
//! ingestion never overwrites it.

use actix_web::web;
use serde::Deserialize;
use utoipa::ToSchema;

use super::auth::TenantCaller;
use super::documents::find;
use super::error::{ApiError, ApiResult, ErrorBody};
use crate::db::documents::Document;
use crate::state::AppState;

/// Longest title, in characters.
pub const MAX_TITLE_CHARS: usize = 300;

/// What a rename changes.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DocumentChanges {
    /// The new title (1 to 300 characters after trimming).
    pub title: String,
}

/// Rename a document.
#[utoipa::path(patch, path = "/v1/documents/{id}", tag = "documents", request_body = DocumentChanges,
    responses((status = 200, body = Document), (status = 404, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn rename(
    state: web::Data<AppState>,
    caller: TenantCaller,
    id: web::Path<String>,
    changes: web::Json<DocumentChanges>,
) -> ApiResult<web::Json<Document>> {
    let title = checked_title(&changes.title)?;
    if !state
        .db
        .set_user_title(&caller.tenant_id, &id, &title)
        .await?
    {
        return Err(ApiError::not_found("document", &id));
    }
    Ok(web::Json(find(&state, &caller, &id).await?))
}

/// The title trimmed, or why it cannot be one.
fn checked_title(title: &str) -> ApiResult<String> {
    let title = title.split_whitespace().collect::<Vec<_>>().join(" ");
    if title.is_empty() {
        return Err(ApiError::validation("`title` must not be empty"));
    }
    let n = title.chars().count();
    if n > MAX_TITLE_CHARS {
        return Err(ApiError::validation(format!(
            "`title` has {n} characters; the limit is {MAX_TITLE_CHARS}"
        )));
    }
    Ok(title)
}

/// Routes of this file.
pub fn routes(cfg: &mut web::ServiceConfig) {
    cfg.route("/v1/documents/{id}", web::patch().to(rename));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_title_is_trimmed_and_its_inner_whitespace_collapsed() {
        assert_eq!(
            checked_title("  PepsiCo\n Q1   2023 ").unwrap(),
            "PepsiCo Q1 2023"
        );
    }

    #[test]
    fn an_empty_or_overlong_title_is_refused() {
        assert!(checked_title(" \t ").is_err());
        assert!(checked_title(&"x".repeat(MAX_TITLE_CHARS + 1)).is_err());
        assert!(checked_title(&"题".repeat(MAX_TITLE_CHARS)).is_ok());
    }
}
