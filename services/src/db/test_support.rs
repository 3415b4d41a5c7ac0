//! Test helpers over a real SQLite database: a fresh one with the local tenant, and a document whose
//! ingestion job a given worker has claimed.

use super::Db;
use super::documents::NewDocument;
use super::jobs::Job;
use super::tenants::LOCAL_TENANT;

/// A fresh SQLite database in a temporary directory, with the local tenant.
pub async fn local_database() -> (tempfile::TempDir, Db) {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open_sqlite(&dir.path().join("docqa.db")).await.unwrap();
    db.ensure_local_tenant().await.unwrap();
    (dir, db)
}

/// Document `id` of the local tenant, uploaded, its job claimed by `worker` (running, heartbeat now).
pub async fn claimed_job(db: &Db, id: &str, worker: &str) -> Job {
    let doc = NewDocument {
        tenant_id: LOCAL_TENANT,
        collection: None,
        file_name: "a.txt",
        content_type: None,
        size_bytes: 1,
        sha256: id,
    };
    db.create_document_with_job(id, &doc).await.unwrap();
    db.claim_job(worker).await.unwrap().unwrap()
}
