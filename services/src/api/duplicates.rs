//! Duplicate uploads: a file whose SHA-256 equals one of the tenant's documents is refused with `409
//! duplicate_document`, naming the document it repeats, unless the upload says `?allow_duplicate=true`.
//! Nothing of a refused upload is kept; the client asks the user and sends it again if they want a copy.

use actix_web::HttpResponse;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::error::ApiResult;
use super::upload::Received;
use crate::db::documents::Document;
use crate::state::AppState;

/// Query of an upload.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
pub struct UploadParams {
    /// Store files even when the tenant already has a document with the same content.
    #[serde(default)]
    pub allow_duplicate: bool,
}

/// One uploaded file that repeats a stored document.
#[derive(Debug, Serialize, ToSchema)]
pub struct Duplicate {
    /// The uploaded file's name.
    pub file_name: String,
    /// The earliest stored document with the same content.
    pub existing: Document,
}

/// `409` answer to an upload that repeats stored documents.
#[derive(Debug, Serialize, ToSchema)]
pub struct DuplicateUpload {
    /// `duplicate_document`.
    pub error_type: &'static str,
    /// Which files repeat which documents, and how to add them anyway.
    pub message: String,
    /// Every repeated file.
    pub duplicates: Vec<Duplicate>,
}

/// The uploaded files that repeat one of the tenant's documents.
pub async fn find_duplicates(
    state: &AppState,
    tenant_id: &str,
    received: &Received,
) -> ApiResult<Vec<Duplicate>> {
    let mut found = Vec::new();
    for file in &received.files {
        let same = state
            .db
            .documents_with_checksum(tenant_id, &file.sha256)
            .await?;
        if let Some(existing) = same.into_iter().next() {
            found.push(Duplicate {
                file_name: file.file_name.clone(),
                existing,
            });
        }
    }
    Ok(found)
}

/// The `409` response naming the repeated documents.
pub fn refusal(duplicates: Vec<Duplicate>) -> HttpResponse {
    let listed: Vec<String> = duplicates
        .iter()
        .map(|d| {
            let title = d.existing.title.as_deref().unwrap_or(&d.existing.file_name);
            format!(
                "{} has the same content as \"{title}\" ({})",
                d.file_name, d.existing.id
            )
        })
        .collect();
    HttpResponse::Conflict().json(DuplicateUpload {
        error_type: "duplicate_document",
        message: format!(
            "{}; nothing was stored. Upload again with ?allow_duplicate=true to keep a second copy.",
            listed.join("; ")
        ),
        duplicates,
    })
}
