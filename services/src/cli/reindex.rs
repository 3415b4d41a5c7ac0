//! `docqa reindex`: rebuilds every tenant's search indexes (or one tenant's) from the database's chunks
//! and stored vectors, so the database stays the source of truth. Run it with the server stopped (or on a
//! replica's own data directory); the server also rebuilds an index by itself when its size disagrees
//! with the database.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use clap::Args;
use docqa_engine::models::bert::BertEmbedder;

use super::database::DatabaseArgs;
use crate::embedder::EngineEmbedder;
use crate::indexes::{TenantIndexes, rebuild};

/// `docqa reindex`.
#[derive(Debug, Args)]
pub struct ReindexArgs {
    #[command(flatten)]
    database: DatabaseArgs,
    /// Only this tenant.
    #[arg(long)]
    tenant: Option<String>,
    /// Directory holding the model directories.
    #[arg(long, env = "DOCQA_MODELS_DIR")]
    models_dir: Option<PathBuf>,
}

/// Runs `docqa reindex`.
pub fn run(args: ReindexArgs) -> anyhow::Result<()> {
    actix_web::rt::System::new().block_on(reindex(args))
}

async fn reindex(args: ReindexArgs) -> anyhow::Result<()> {
    let data_dir = args.database.data_dir();
    let db = args.database.open().await?;
    let models = super::models::fetch_with_progress(&super::models::models_dir_or_default(
        args.models_dir.clone(),
    ))?;
    let bert = BertEmbedder::load(&models.embedder)
        .with_context(|| format!("loading {}", models.embedder.display()))?;
    let indexes = TenantIndexes::new(
        data_dir.join("indexes"),
        Arc::new(EngineEmbedder::new(bert)),
    );
    let tenants: Vec<String> = match &args.tenant {
        Some(t) => vec![t.clone()],
        None => db.list_tenants().await?.into_iter().map(|t| t.id).collect(),
    };
    for tenant in tenants {
        let index = indexes.get(&db, &tenant).await?;
        rebuild(&db, &tenant, &index).await?;
        let (bm25, dense) = index.read().unwrap_or_else(|e| e.into_inner()).counts();
        println!(
            "tenant {tenant}: {} chunks in the database, bm25 {bm25}, dense {dense}",
            db.ready_chunk_count(&tenant).await?
        );
    }
    db.close().await;
    Ok(())
}
