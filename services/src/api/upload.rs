//! Receiving uploaded files: each multipart file part is streamed to a temporary file next to the
//! originals while its size is counted and its SHA-256 computed; over the request's byte limit the
//! upload is refused (413). The kind of file is then checked on the stored file as a whole (415 for
//! types docqa cannot read) before anything is recorded. Temporary files a crash left behind are
//! removed at the next start.

use std::path::{Path, PathBuf};

use actix_multipart::Multipart;
use futures_util::StreamExt;
use sha2::{Digest, Sha256};
use tokio::io::AsyncWriteExt;

use super::error::ApiError;

/// Name prefix of the temporary files uploads are written to, beside the originals.
const TEMP_PREFIX: &str = "upload-";

/// Removes the temporary upload files a stopped process left under `originals_dir` (one folder per
/// tenant): those last written before `started` (an upload in flight in another process sharing the
/// directory is still being written). Returns how many.
pub fn remove_leftovers(originals_dir: &Path, started: std::time::SystemTime) -> usize {
    let tenants = std::fs::read_dir(originals_dir)
        .into_iter()
        .flatten()
        .flatten();
    let files = tenants.flat_map(|t| std::fs::read_dir(t.path()).into_iter().flatten().flatten());
    files
        .filter(|f| f.file_name().to_string_lossy().starts_with(TEMP_PREFIX))
        .filter(|f| {
            f.metadata()
                .and_then(|m| m.modified())
                .is_ok_and(|t| t < started)
        })
        .filter(|f| std::fs::remove_file(f.path()).is_ok())
        .count()
}

/// A file received and stored in a temporary place.
#[derive(Debug)]
pub struct ReceivedFile {
    /// File name given by the client (path parts removed).
    pub file_name: String,
    /// Content type given by the client.
    pub content_type: Option<String>,
    /// Where it was written.
    pub temp_path: PathBuf,
    /// Its size.
    pub size: u64,
    /// SHA-256, hex.
    pub sha256: String,
}

/// Everything a multipart upload carried.
#[derive(Debug, Default)]
pub struct Received {
    /// The files, in order.
    pub files: Vec<ReceivedFile>,
    /// The `collection` field, if given.
    pub collection: Option<String>,
}

impl Received {
    /// Removes the temporary files (after a refusal).
    pub async fn discard(&self) {
        for f in &self.files {
            let _ = tokio::fs::remove_file(&f.temp_path).await;
        }
    }
}

/// Reads a multipart body into temporary files under `tmp_dir`, at most `max_bytes` in all.
pub async fn receive(
    mut payload: Multipart,
    tmp_dir: &Path,
    max_bytes: u64,
) -> Result<Received, ApiError> {
    let mut received = Received::default();
    let mut total = 0u64;
    while let Some(field) = payload.next().await {
        let result = match field {
            Ok(field) => read_field(field, tmp_dir, max_bytes, &mut total, &mut received).await,
            Err(e) => Err(multipart_error(e)),
        };
        if let Err(e) = result {
            received.discard().await;
            if e.status == actix_web::http::StatusCode::PAYLOAD_TOO_LARGE {
                drain(&mut payload).await;
            }
            return Err(e);
        }
    }
    Ok(received)
}

fn multipart_error(e: actix_multipart::MultipartError) -> ApiError {
    use actix_multipart::MultipartError as E;
    match e {
        E::ContentTypeMissing | E::ContentTypeParse | E::ContentTypeIncompatible => {
            ApiError::unsupported_type("uploads are sent as multipart/form-data")
        }
        other => ApiError::validation(format!("malformed multipart body: {other}")),
    }
}

/// Reads and drops the rest of the body (bounded), so the client sees the error response instead of
/// a reset connection.
async fn drain(payload: &mut Multipart) {
    let mut budget: u64 = 256 << 20;
    while let Some(Ok(mut field)) = payload.next().await {
        while let Some(Ok(bytes)) = field.next().await {
            budget = budget.saturating_sub(bytes.len() as u64);
            if budget == 0 {
                return;
            }
        }
    }
}

async fn read_field(
    mut field: actix_multipart::Field,
    tmp_dir: &Path,
    max_bytes: u64,
    total: &mut u64,
    received: &mut Received,
) -> Result<(), ApiError> {
    let name = field.name().unwrap_or_default().to_string();
    let file_name = field
        .content_disposition()
        .and_then(|cd| cd.get_filename())
        .map(clean_file_name);
    match (name.as_str(), file_name) {
        ("collection", None) => {
            let mut value = Vec::new();
            while let Some(chunk) = field.next().await {
                let chunk =
                    chunk.map_err(|e| ApiError::validation(format!("malformed field: {e}")))?;
                value.extend_from_slice(&chunk);
                if value.len() > 256 {
                    return Err(ApiError::validation(
                        "`collection` is longer than 256 bytes",
                    ));
                }
            }
            let value = String::from_utf8(value)
                .map_err(|_| ApiError::validation("`collection` is not UTF-8 text"))?;
            let value = value.trim().to_string();
            if !value.is_empty() {
                received.collection = Some(value);
            }
            Ok(())
        }
        (_, Some(file_name)) => {
            let content_type = field.content_type().map(|m| m.essence_str().to_string());
            let file = write_temp(&mut field, tmp_dir, max_bytes, total).await;
            let (temp_path, size, sha256) = file?;
            received.files.push(ReceivedFile {
                file_name,
                content_type,
                temp_path,
                size,
                sha256,
            });
            Ok(())
        }
        (other, None) => Err(ApiError::validation(format!(
            "unexpected form field {other:?}: send files (with a file name) and optionally `collection`"
        ))),
    }
}

async fn write_temp(
    field: &mut actix_multipart::Field,
    tmp_dir: &Path,
    max_bytes: u64,
    total: &mut u64,
) -> Result<(PathBuf, u64, String), ApiError> {
    let path = tmp_dir.join(format!("{TEMP_PREFIX}{}", uuid::Uuid::new_v4()));
    let mut out = tokio::fs::File::create(&path)
        .await
        .map_err(|e| ApiError::internal(format!("cannot store the upload: {e}")))?;
    let mut hasher = Sha256::new();
    let mut size = 0u64;
    let written: Result<(), ApiError> = async {
        while let Some(chunk) = field.next().await {
            let chunk =
                chunk.map_err(|e| ApiError::validation(format!("upload interrupted: {e}")))?;
            size += chunk.len() as u64;
            *total += chunk.len() as u64;
            if *total > max_bytes {
                return Err(ApiError::too_large(format!(
                    "the upload is larger than the limit of {max_bytes} bytes"
                )));
            }
            hasher.update(&chunk);
            out.write_all(&chunk)
                .await
                .map_err(|e| ApiError::internal(format!("cannot store the upload: {e}")))?;
        }
        out.sync_all()
            .await
            .map_err(|e| ApiError::internal(format!("cannot store the upload: {e}")))
    }
    .await;
    if let Err(e) = written {
        let _ = tokio::fs::remove_file(&path).await;
        return Err(e);
    }
    Ok((path, size, hex::encode(hasher.finalize())))
}

/// The last path component of a client-given file name, without control characters.
fn clean_file_name(name: &str) -> String {
    let base = name.rsplit(['/', '\\']).next().unwrap_or(name);
    let cleaned: String = base.chars().filter(|c| !c.is_control()).take(255).collect();
    if cleaned.trim().is_empty() {
        "upload".to_string()
    } else {
        cleaned
    }
}

#[cfg(test)]
mod tests {
    use super::{clean_file_name, remove_leftovers};

    #[test]
    fn leftover_temporary_uploads_are_removed_and_originals_kept() {
        let dir = tempfile::tempdir().unwrap();
        let tenant = dir.path().join("tenant-a");
        std::fs::create_dir_all(&tenant).unwrap();
        std::fs::write(tenant.join("upload-1234"), b"half an upload").unwrap();
        std::fs::write(tenant.join("0c1e-document-id"), b"an original").unwrap();
        let started = std::time::SystemTime::now() + std::time::Duration::from_secs(1);
        assert_eq!(remove_leftovers(dir.path(), started), 1);
        assert!(!tenant.join("upload-1234").exists());
        assert!(tenant.join("0c1e-document-id").exists());
    }

    #[test]
    fn a_temporary_upload_written_after_the_start_is_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        let tenant = dir.path().join("tenant-a");
        std::fs::create_dir_all(&tenant).unwrap();
        let started = std::time::SystemTime::now() - std::time::Duration::from_secs(60);
        std::fs::write(tenant.join("upload-5678"), b"in flight").unwrap();
        assert_eq!(remove_leftovers(dir.path(), started), 0);
        assert!(tenant.join("upload-5678").exists());
    }

    #[test]
    fn client_file_names_lose_their_directories_and_control_characters() {
        assert_eq!(clean_file_name("../../etc/passwd"), "passwd");
        assert_eq!(clean_file_name("C:\\docs\\report.pdf"), "report.pdf");
        assert_eq!(clean_file_name("a\u{0}b.txt"), "ab.txt");
        assert_eq!(clean_file_name("/"), "upload");
    }
}
