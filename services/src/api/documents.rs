//! `/v1/documents`: upload (multipart, several files, optional collection), list with filters and
//! paging, get, download the original, delete (chunks, index entries and the original go too). Renames
//! are in [`super::document_title`], duplicate uploads in [`super::duplicates`].

use actix_multipart::Multipart;
use actix_web::http::StatusCode;
use actix_web::http::header::CONTENT_LENGTH;
use actix_web::{HttpRequest, HttpResponse, web};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::auth::TenantCaller;
use super::duplicates::{DuplicateUpload, UploadParams, find_duplicates, refusal};
use super::error::{ApiError, ApiResult, ErrorBody};
use super::upload::{Received, ReceivedFile, receive};
use crate::db::documents::{Document, DocumentQuery, NewDocument};
use crate::db::new_id;
use crate::state::AppState;

/// One accepted file.
#[derive(Debug, Serialize, ToSchema)]
pub struct Accepted {
    /// The new document.
    pub document_id: String,
    /// Its ingestion job (follow it at `/v1/jobs/{job_id}`).
    pub job_id: String,
    /// File name.
    pub file_name: String,
}

/// `202` answer to an upload.
#[derive(Debug, Serialize, ToSchema)]
pub struct UploadResponse {
    /// The job of the first file.
    pub job_id: String,
    /// The document of the first file.
    pub document_id: String,
    /// Every file, in upload order.
    pub documents: Vec<Accepted>,
}

/// Longest `q` of the document list: file names and titles are short.
const MAX_SEARCH_CHARS: usize = 1000;

/// Filters and paging of `GET /v1/documents`.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
pub struct ListParams {
    /// Only this collection.
    pub collection: Option<String>,
    /// Only this status (`processing`, `ready`, `failed`, `cancelled`).
    pub status: Option<String>,
    /// File name or title contains this text (at most 1,000 characters).
    pub q: Option<String>,
    /// Page size, 1..=500 (default 50).
    pub limit: Option<i64>,
    /// Documents to skip (default 0).
    pub offset: Option<i64>,
}

/// A page of documents.
#[derive(Debug, Serialize, ToSchema)]
pub struct DocumentList {
    /// The documents, newest first.
    pub documents: Vec<Document>,
    /// How many match the filters.
    pub total: i64,
    /// Page size used.
    pub limit: i64,
    /// Offset used.
    pub offset: i64,
}

/// Upload documents (multipart `file` parts, optional `collection` field). A file with the same content
/// as one of the tenant's documents is refused (`409`, nothing stored) unless `allow_duplicate=true`.
#[utoipa::path(post, path = "/v1/documents", tag = "documents", params(UploadParams),
    request_body(content_type = "multipart/form-data", description = "one or more files, and optionally a `collection` text field"),
    responses((status = 202, body = UploadResponse), (status = 409, body = DuplicateUpload), (status = 413, body = ErrorBody),
        (status = 415, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn upload(
    state: web::Data<AppState>,
    caller: TenantCaller,
    req: HttpRequest,
    params: web::Query<UploadParams>,
    payload: Multipart,
) -> ApiResult<HttpResponse> {
    let max = state.config.max_upload_bytes;
    let declared = req
        .headers()
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > max.saturating_mul(4).max(max + (1 << 20))) {
        return Err(ApiError::too_large(format!(
            "the upload is larger than the limit of {max} bytes"
        )));
    }
    let tenant_dir = state.originals_dir.join(&caller.tenant_id);
    tokio::fs::create_dir_all(&tenant_dir)
        .await
        .map_err(|e| ApiError::internal(format!("cannot create {}: {e}", tenant_dir.display())))?;
    let received = receive(payload, &tenant_dir, max).await?;
    if received.files.is_empty() {
        return Err(ApiError::validation(
            "no file in the upload: send multipart parts with a file name",
        ));
    }
    if let Err(e) = check_types(&received).await {
        received.discard().await;
        return Err(e);
    }
    if !params.allow_duplicate {
        let duplicates = match find_duplicates(&state, &caller.tenant_id, &received).await {
            Ok(found) => found,
            Err(e) => {
                received.discard().await;
                return Err(e);
            }
        };
        if !duplicates.is_empty() {
            received.discard().await;
            return Ok(refusal(duplicates));
        }
    }
    let mut accepted = Vec::new();
    for file in &received.files {
        accepted.push(record(&state, &caller, received.collection.as_deref(), file).await?);
    }
    state.jobs_queued.notify_waiters();
    tracing::info!(tenant = %caller.tenant_id, key = %caller.key_id, files = accepted.len(), "upload accepted");
    let first = &accepted[0];
    let body = UploadResponse {
        job_id: first.job_id.clone(),
        document_id: first.document_id.clone(),
        documents: accepted,
    };
    Ok(HttpResponse::Accepted().json(body))
}

/// Refuses empty files and files docqa cannot read, judged from each stored file as a whole (a DOCX's
/// zip directory is at its end).
async fn check_types(received: &Received) -> ApiResult<()> {
    for f in &received.files {
        if f.size == 0 {
            return Err(ApiError::validation(format!("{} is empty", f.file_name)));
        }
        let (path, name, mime) = (
            f.temp_path.clone(),
            f.file_name.clone(),
            f.content_type.clone(),
        );
        tokio::task::spawn_blocking(move || {
            let file = std::fs::File::open(&path)
                .map_err(|e| ApiError::internal(format!("cannot read the upload: {e}")))?;
            docqa_indexer::detect_file_format(
                std::io::BufReader::new(file),
                Some(&name),
                mime.as_deref(),
            )
            .map_err(|e| ApiError::unsupported_type(format!("{name}: {e}")))
        })
        .await
        .map_err(|e| ApiError::internal(format!("cannot check the upload: {e}")))??;
    }
    Ok(())
}

/// Moves the file to its final place, then records the document and its queued job.
async fn record(
    state: &AppState,
    caller: &TenantCaller,
    collection: Option<&str>,
    file: &ReceivedFile,
) -> ApiResult<Accepted> {
    let document_id = new_id();
    let path = state.original_path(&caller.tenant_id, &document_id);
    tokio::fs::rename(&file.temp_path, &path)
        .await
        .map_err(|e| ApiError::internal(format!("cannot store the upload: {e}")))?;
    let new = NewDocument {
        tenant_id: &caller.tenant_id,
        collection,
        file_name: &file.file_name,
        content_type: file.content_type.as_deref(),
        size_bytes: file.size as i64,
        sha256: &file.sha256,
    };
    match state.db.create_document_with_job(&document_id, &new).await {
        Ok(job_id) => Ok(Accepted {
            document_id,
            job_id,
            file_name: file.file_name.clone(),
        }),
        Err(e) => {
            let _ = tokio::fs::remove_file(&path).await;
            Err(e.into())
        }
    }
}

/// List documents.
#[utoipa::path(get, path = "/v1/documents", tag = "documents", params(ListParams),
    responses((status = 200, body = DocumentList)))]
pub async fn list(
    state: web::Data<AppState>,
    caller: TenantCaller,
    params: web::Query<ListParams>,
) -> ApiResult<web::Json<DocumentList>> {
    let p = params.into_inner();
    let limit = p.limit.unwrap_or(50);
    if !(1..=500).contains(&limit) {
        return Err(ApiError::validation("`limit` must be between 1 and 500"));
    }
    let offset = p.offset.unwrap_or(0);
    if offset < 0 {
        return Err(ApiError::validation("`offset` must not be negative"));
    }
    if p.q
        .as_ref()
        .is_some_and(|q| q.chars().count() > MAX_SEARCH_CHARS)
    {
        return Err(ApiError::validation(format!(
            "`q` is longer than {MAX_SEARCH_CHARS} characters"
        )));
    }
    let query = DocumentQuery {
        collection: p.collection,
        status: p.status,
        search: p.q,
        limit,
        offset,
    };
    let (documents, total) = state.db.list_documents(&caller.tenant_id, &query).await?;
    Ok(web::Json(DocumentList {
        documents,
        total,
        limit,
        offset,
    }))
}

/// A document and its latest job.
#[derive(Debug, Serialize, ToSchema)]
pub struct DocumentDetail {
    /// The document.
    #[serde(flatten)]
    pub document: Document,
    /// Its latest ingestion job.
    pub job_id: Option<String>,
}

/// Get one document.
#[utoipa::path(get, path = "/v1/documents/{id}", tag = "documents",
    responses((status = 200, body = DocumentDetail), (status = 404, body = ErrorBody)))]
pub async fn get(
    state: web::Data<AppState>,
    caller: TenantCaller,
    id: web::Path<String>,
) -> ApiResult<web::Json<DocumentDetail>> {
    let document = find(&state, &caller, &id).await?;
    let job_id = state.db.job_of_document(&id).await?.map(|j| j.id);
    Ok(web::Json(DocumentDetail { document, job_id }))
}

/// The caller's document, or 404.
pub async fn find(state: &AppState, caller: &TenantCaller, id: &str) -> ApiResult<Document> {
    state
        .db
        .document(&caller.tenant_id, id)
        .await?
        .ok_or_else(|| ApiError::not_found("document", id))
}

/// Download the original file.
#[utoipa::path(get, path = "/v1/documents/{id}/original", tag = "documents",
    responses((status = 200, description = "the file as uploaded"), (status = 404, body = ErrorBody)))]
pub async fn download(
    state: web::Data<AppState>,
    caller: TenantCaller,
    id: web::Path<String>,
) -> ApiResult<HttpResponse> {
    let doc = find(&state, &caller, &id).await?;
    let path = state.original_path(&caller.tenant_id, &doc.id);
    let bytes = tokio::fs::read(&path).await.map_err(|e| {
        ApiError::internal(format!("the original of {} is unreadable: {e}", doc.id))
    })?;
    let disposition = super::disposition::attachment(&doc.file_name);
    Ok(HttpResponse::build(StatusCode::OK)
        .content_type(
            doc.content_type
                .clone()
                .unwrap_or_else(|| "application/octet-stream".into()),
        )
        .insert_header(disposition)
        .insert_header(("X-Content-SHA256", doc.sha256.clone()))
        .body(bytes))
}

/// Delete a document with its chunks, index entries and original.
#[utoipa::path(delete, path = "/v1/documents/{id}", tag = "documents",
    responses((status = 204), (status = 404, body = ErrorBody)))]
pub async fn delete(
    state: web::Data<AppState>,
    caller: TenantCaller,
    id: web::Path<String>,
) -> ApiResult<HttpResponse> {
    let doc = find(&state, &caller, &id).await?;
    // The long path's cached KV of this document goes first, while its text is still readable.
    super::kv_cache::forget_cached_kv(&state, &caller.tenant_id, &doc).await;
    if let Some(job) = state.db.job_of_document(&doc.id).await?
        && !crate::ingest::is_final(&job.status)
    {
        state
            .db
            .cancel_job(&caller.tenant_id, &job.id, &doc.id)
            .await?;
    }
    if !state
        .db
        .delete_document(&caller.tenant_id, &doc.id, &state.instance_id)
        .await?
    {
        return Err(ApiError::not_found("document", &id));
    }
    crate::ingest::discard_index_entries(&state, &caller.tenant_id, &doc.id).await;
    let _ = tokio::fs::remove_file(state.original_path(&caller.tenant_id, &doc.id)).await;
    Ok(HttpResponse::NoContent().finish())
}

/// Routes of this file.
pub fn routes(cfg: &mut web::ServiceConfig) {
    cfg.route("/v1/documents", web::post().to(upload))
        .route("/v1/documents", web::get().to(list))
        .route("/v1/documents/{id}", web::get().to(get))
        .route("/v1/documents/{id}", web::delete().to(delete))
        .route("/v1/documents/{id}/original", web::get().to(download));
}
