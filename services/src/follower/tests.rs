//! The follower against a real SQLite database and real indexes (a four-number toy embedder): what two
//! replicas sharing one database see of each other's changes.

use std::path::Path;
use std::sync::Arc;

use docqa_indexer::Embedder;

use super::*;
use crate::db::chunks::NewChunk;
use crate::db::tenants::LOCAL_TENANT;

/// Four numbers from a text's length: enough for the dense index.
struct ToyEmbedder;

impl Embedder for ToyEmbedder {
    fn dim(&self) -> usize {
        4
    }
    fn embed(&self, texts: &[&str]) -> docqa_indexer::Result<Vec<Vec<f32>>> {
        Ok(texts
            .iter()
            .map(|t| vec![1.0, t.len() as f32, 0.5, 0.25])
            .collect())
    }
}

/// A replica's own indexes under `dir`.
fn indexes(dir: &Path) -> TenantIndexes {
    TenantIndexes::new(dir.join("indexes"), Arc::new(ToyEmbedder))
}

fn chunk(ordinal: i64, text: &str) -> NewChunk {
    NewChunk {
        ordinal,
        text: text.into(),
        char_start: 0,
        char_end: text.len() as i64,
        page_start: 1,
        page_end: 1,
        token_count: 3,
        embedding: vec![1.0, 2.0, 3.0, 4.0],
    }
}

/// Ingests document `id` as `worker` would: chunks stored, job completed (so a ready change logged).
async fn ingest(db: &Db, id: &str, worker: &str) {
    let job = crate::db::test_support::claimed_job(db, id, worker).await;
    let chunks = [chunk(0, "the harbour dues"), chunk(1, "were paid in full")];
    db.replace_chunks(LOCAL_TENANT, id, &chunks).await.unwrap();
    assert!(db.complete_ingestion(&job.id, id).await.unwrap());
}

async fn counts(db: &Db, indexes: &TenantIndexes) -> (u64, usize) {
    let index = indexes.get(db, LOCAL_TENANT).await.unwrap();
    index.read().unwrap().counts()
}

/// A database and a replica "replica-b" whose index of the local tenant is open (and empty).
async fn setup() -> (tempfile::TempDir, Db, TenantIndexes, Position) {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open_sqlite(&dir.path().join("docqa.db")).await.unwrap();
    db.ensure_local_tenant().await.unwrap();
    let b = indexes(dir.path());
    std::fs::create_dir_all(dir.path().join("indexes")).unwrap();
    let position = Position::load(&dir.path().join("indexes"), &db)
        .await
        .unwrap();
    assert_eq!(counts(&db, &b).await, (0, 0));
    (dir, db, b, position)
}

#[tokio::test]
async fn a_document_made_ready_by_another_replica_is_indexed_here() {
    let (_dir, db, b, mut position) = setup().await;
    ingest(&db, "d1", "replica-a").await;
    let synced = catch_up(&db, &b, "replica-b", &mut position).await.unwrap();
    assert_eq!(synced, 1);
    assert_eq!(counts(&db, &b).await, (2, 2));
    assert_eq!(position.seq(), 1);
    let again = catch_up(&db, &b, "replica-b", &mut position).await.unwrap();
    assert_eq!(again, 0, "a change is applied once");
}

#[tokio::test]
async fn a_document_this_process_made_ready_is_not_indexed_a_second_time() {
    let (_dir, db, b, mut position) = setup().await;
    ingest(&db, "d1", "replica-b").await;
    let synced = catch_up(&db, &b, "replica-b", &mut position).await.unwrap();
    assert_eq!(synced, 0);
    assert_eq!(
        counts(&db, &b).await,
        (0, 0),
        "the ingestion indexes its own chunks"
    );
    assert_eq!(position.seq(), 1, "the position moves past it all the same");
}

#[tokio::test]
async fn a_deletion_is_applied_on_every_replica_its_origin_included() {
    let (_dir, db, b, mut position) = setup().await;
    ingest(&db, "d1", "replica-a").await;
    ingest(&db, "d2", "replica-a").await;
    catch_up(&db, &b, "replica-b", &mut position).await.unwrap();
    assert_eq!(counts(&db, &b).await, (4, 4));
    assert!(
        db.delete_document(LOCAL_TENANT, "d1", "replica-b")
            .await
            .unwrap()
    );
    let synced = catch_up(&db, &b, "replica-b", &mut position).await.unwrap();
    assert_eq!(synced, 1);
    assert_eq!(counts(&db, &b).await, (2, 2));
}

#[tokio::test]
async fn a_ready_change_read_after_its_document_was_deleted_indexes_nothing() {
    let (_dir, db, b, mut position) = setup().await;
    ingest(&db, "d1", "replica-a").await;
    assert!(
        db.delete_document(LOCAL_TENANT, "d1", "replica-a")
            .await
            .unwrap()
    );
    let synced = catch_up(&db, &b, "replica-b", &mut position).await.unwrap();
    assert_eq!(synced, 2);
    assert_eq!(counts(&db, &b).await, (0, 0));
    assert_eq!(position.seq(), 2);
}

#[tokio::test]
async fn a_new_replica_starts_at_the_end_of_the_log_and_a_known_one_where_it_stopped() {
    let (dir, db, _b, mut position) = setup().await;
    ingest(&db, "d1", "replica-a").await;
    position.advance(1).unwrap();
    ingest(&db, "d2", "replica-a").await;
    let known = Position::load(&dir.path().join("indexes"), &db)
        .await
        .unwrap();
    assert_eq!(known.seq(), 1);
    let fresh_dir = tempfile::tempdir().unwrap();
    let fresh = Position::load(fresh_dir.path(), &db).await.unwrap();
    assert_eq!(fresh.seq(), 2);
}

#[tokio::test]
async fn a_follower_whose_database_is_gone_reports_it_and_keeps_its_position() {
    let (_dir, db, b, mut position) = setup().await;
    ingest(&db, "d1", "replica-a").await;
    db.close().await;
    let result = catch_up(&db, &b, "replica-b", &mut position).await;
    assert!(matches!(result, Err(IndexOpenError::Db(_))), "{result:?}");
    assert_eq!(position.seq(), 0);
}

#[tokio::test]
async fn concurrent_first_uses_of_a_tenants_index_open_it_once_and_both_succeed() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open_sqlite(&dir.path().join("docqa.db")).await.unwrap();
    db.ensure_local_tenant().await.unwrap();
    ingest(&db, "doc-a", "worker-a").await;
    let indexes = indexes(dir.path());
    let (first, second) = tokio::join!(
        indexes.get(&db, LOCAL_TENANT),
        indexes.get(&db, LOCAL_TENANT)
    );
    let (first, second) = (first.unwrap(), second.unwrap());
    assert!(Arc::ptr_eq(&first, &second), "one index, opened once");
    assert_eq!(first.read().unwrap().counts(), (2, 2));
}
