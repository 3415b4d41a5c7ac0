//! `docqa serve`: prepares the data directory, models, database, engine and indexes, recovers what a crash
//! left behind, starts the ingestion workers, the index follower and the HTTP server, and on SIGINT/SIGTERM
//! stops accepting requests, lets running ones finish, and puts a running ingestion back in the queue.

use std::io::Write;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix_web::dev::Service;
use actix_web::{App, HttpServer, web};
use anyhow::Context;
use docqa_engine::adapter::Adapter;
use docqa_engine::config::RopeScaling;
use docqa_engine::parallel::Grouped;
use docqa_engine::serving::{EngineConfig, EngineCore, EngineHandle, WINDOWED_CALIBRATION_WITHIN};
use docqa_engine::text::TextTokenizer;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::adapter::AdapterInfo;
use crate::api::auth::RateLimits;
use crate::cli::models::fetch_for_serve;
use crate::config::{LongContext, ServeConfig};
use crate::db::{Db, Dialect, tenants};
use crate::device::{GeneratorBackend, load_generator};
use crate::embedder::EngineEmbedder;
use crate::indexes::TenantIndexes;
use crate::metrics::Metrics;
use crate::state::AppState;

/// Runs the server until it is told to stop.
pub async fn run(config: ServeConfig) -> anyhow::Result<()> {
    run_with(config, |_| {}).await
}

/// Runs the server, calling `on_ready` with its addresses once it listens (used by an in-process
/// evaluation, which binds port 0).
pub async fn run_with(
    config: ServeConfig,
    on_ready: impl FnOnce(&[std::net::SocketAddr]),
) -> anyhow::Result<()> {
    let backend = config
        .device
        .open(config.cpu_decode_weights, config.tensor_parallel)?;
    let data_dir = config.data_dir();
    for sub in ["originals", "indexes"] {
        std::fs::create_dir_all(data_dir.join(sub))
            .with_context(|| format!("creating {}", data_dir.join(sub).display()))?;
    }
    let models_dir = crate::cli::models::models_dir_or_default(config.models_dir.clone());
    eprintln!("docqa: checking models in {}", models_dir.display());
    let models = {
        let (dir, model) = (models_dir.clone(), config.model.clone());
        tokio::task::spawn_blocking(move || fetch_for_serve(&dir, model.as_deref())).await??
    };
    let db = open_database(&config, &data_dir).await?;
    bootstrap_keys(&db, &config).await?;
    let local_mode = config.local_mode_enabled();
    if local_mode {
        db.ensure_local_tenant().await?;
        bootstrap_local_key(&db).await?;
    }
    let started = Instant::now();
    let adapter = crate::adapter::load(config.adapter.as_ref(), models.reader.as_deref())?;
    let adapter_info = AdapterInfo::of(adapter.as_ref());
    let StartedEngine {
        engine,
        tokenizer,
        max_context,
        trained_context,
    } = start_engine(&config, &models.generator, adapter.as_ref(), backend)?;
    drop(adapter);
    let engine_stats = engine.stats();
    let kv_capacity_tokens = engine_stats.total_blocks * EngineConfig::default().block_size;
    eprintln!("docqa: the KV cache holds {kv_capacity_tokens} tokens");
    let bert = config.device.load_embedder(&models.embedder)?;
    eprintln!(
        "docqa: models loaded in {:.1} s; adapter {}{}",
        started.elapsed().as_secs_f64(),
        adapter_info.name,
        adapter_info
            .sha256
            .as_ref()
            .map(|sum| format!(" (sha256 {sum})"))
            .unwrap_or_default()
    );
    let embedder = Arc::new(EngineEmbedder::new(bert));
    let state = web::Data::new(AppState {
        indexes: TenantIndexes::new(data_dir.join("indexes"), embedder),
        originals_dir: data_dir.join("originals"),
        rate_limits: RateLimits::new(config.rate_limit_per_minute),
        model_name: models
            .generator
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
        adapter: adapter_info,
        db,
        engine,
        tokenizer,
        generator_dir: models.generator.clone(),
        tokenizer_id: crate::ingest::recount::tokenizer_id(&models.generator)?,
        long_prompt_tokens: Default::default(),
        max_context,
        trained_context,
        kv_capacity_tokens,
        step_tokens: engine_stats.step_tokens,
        metrics: Metrics::new(),
        jobs_queued: Notify::new(),
        shutdown: CancellationToken::new(),
        local_mode,
        instance_id: uuid::Uuid::new_v4().to_string(),
        config: config.clone(),
    });
    // Read before anything opens an index: a new data directory starts at the log's end.
    let position = crate::follower::Position::load(&data_dir.join("indexes"), &state.db).await?;
    recover(&state).await?;
    tokio::spawn(crate::follower::run(state.clone().into_inner(), position));
    tokio::spawn(recount_token_counts(state.clone().into_inner()));
    let workers = tokio::spawn(crate::ingest::run(
        state.clone().into_inner(),
        config.ingest_workers,
    ));
    let (server, addrs) = http_server(state.clone(), &config)?;
    on_ready(&addrs);
    for addr in addrs {
        println!("docqa listening on http://{addr}");
    }
    if local_mode {
        println!("docqa: local mode: requests without an API key act as the local user");
    }
    let _ = std::io::stdout().flush();
    server.await?;
    eprintln!("docqa: stopping; waiting for ingestion workers");
    state.shutdown.cancel();
    if tokio::time::timeout(Duration::from_secs(60), workers)
        .await
        .is_err()
    {
        eprintln!("docqa: ingestion workers did not stop within 60 s");
    }
    match state.engine.persist_kv().await {
        Ok(blocks) if blocks > 0 => {
            eprintln!("docqa: {blocks} cached KV blocks kept for the next start")
        }
        Ok(_) => {}
        Err(e) => eprintln!("docqa: the KV cache could not be kept for the next start: {e}"),
    }
    state.db.close().await;
    Ok(())
}

/// Recounts the documents another generator's tokenizer counted ([`crate::ingest::recount`]).
async fn recount_token_counts(state: Arc<AppState>) {
    match crate::ingest::recount::recount_stale(state).await {
        Ok(0) => {}
        Ok(1) => eprintln!("docqa: recounted 1 document's tokens for this generator"),
        Ok(n) => eprintln!("docqa: recounted {n} documents' tokens for this generator"),
        Err(e) => eprintln!("docqa: recounting documents' tokens for this generator failed: {e:#}"),
    }
}

async fn open_database(config: &ServeConfig, data_dir: &Path) -> anyhow::Result<Db> {
    match &config.database_url {
        Some(url) => Db::connect(url)
            .await
            .with_context(|| "connecting to the database given by --database-url".to_string()),
        None => {
            let path = data_dir.join("docqa.db");
            Db::open_sqlite(&path)
                .await
                .with_context(|| format!("opening {}", path.display()))
        }
    }
}

/// Makes sure an admin key exists: the one given, or a new one printed once.
async fn bootstrap_keys(db: &Db, config: &ServeConfig) -> anyhow::Result<()> {
    if let Some(key) = &config.admin_key {
        if key.len() < 16 {
            anyhow::bail!("the admin key must have at least 16 characters");
        }
        if db.key_owner(key).await?.is_none() {
            let inserted = db
                .insert_key(key, None, "admin (from configuration)", true)
                .await;
            // Another replica starting on the same database at the same moment may have stored it first.
            if let Err(error) = inserted
                && db.key_owner(key).await?.is_none()
            {
                return Err(error.into());
            }
        }
        return Ok(());
    }
    if !db.has_admin_key().await? {
        let key = tenants::generate_key();
        db.insert_key(&key, None, "admin (bootstrap)", true).await?;
        eprintln!("docqa: created the admin API key; it is shown only this once:\n\n    {key}\n");
    }
    Ok(())
}

/// Gives the local user a key on first start, printed once: clients that always send a key (the OpenAI
/// SDK) need one even in local mode. `docqa keys create` makes more.
async fn bootstrap_local_key(db: &Db) -> anyhow::Result<()> {
    if !db.list_keys(Some(tenants::LOCAL_TENANT)).await?.is_empty() {
        return Ok(());
    }
    let key = tenants::generate_key();
    db.insert_key(
        &key,
        Some(tenants::LOCAL_TENANT),
        "local (first start)",
        false,
    )
    .await?;
    eprintln!(
        "docqa: created an API key for the local user, for clients that always send one (such as \
         the OpenAI SDK); it is shown only this once (`docqa keys create` makes another):\n\n    \
         {key}\n"
    );
    Ok(())
}

/// The generator's engine thread and what the service needs to know of it.
struct StartedEngine {
    engine: EngineHandle,
    tokenizer: Arc<TextTokenizer>,
    /// Longest span attention may cover (the trained context, or more with `--long-context yarn`).
    max_context: usize,
    /// The context the model was trained with.
    trained_context: usize,
}

/// Loads the generator (with the adapter merged) on the backend `--device` opened and starts its
/// engine thread.
fn start_engine(
    config: &ServeConfig,
    generator: &Path,
    adapter: Option<&Adapter>,
    backend: GeneratorBackend,
) -> anyhow::Result<StartedEngine> {
    match backend {
        GeneratorBackend::Cpu(cpu) => spawn_engine(cpu, config, generator, adapter),
        #[cfg(feature = "cuda")]
        GeneratorBackend::Cuda(cuda) => spawn_engine(cuda, config, generator, adapter),
    }
}

fn spawn_engine<B: Grouped>(
    backends: Vec<B>,
    config: &ServeConfig,
    generator: &Path,
    adapter: Option<&Adapter>,
) -> anyhow::Result<StartedEngine> {
    let split = config.tensor_parallel.is_some();
    let mut ranks = load_generator(backends, split, generator, adapter)?;
    let trained_context = ranks[0].config.max_position_embeddings;
    if config.long_context == LongContext::Yarn {
        if config.rope_factor <= 1.0 || !config.rope_factor.is_finite() {
            anyhow::bail!(
                "--rope-factor must be above 1 with --long-context yarn, got {}",
                config.rope_factor
            );
        }
        let context = (trained_context as f64 * config.rope_factor) as usize;
        for model in &mut ranks {
            model.extend_context(
                RopeScaling::yarn(config.rope_factor, trained_context),
                context,
            );
        }
    }
    let engine_config = EngineConfig {
        kv_cache: config.device.kv_budget(
            config.kv_cache_mib,
            config.gpu_memory_share,
            config.tensor_parallel.unwrap_or(1),
        ),
        kv_dtype: config.device.kv_dtype(config.kv_dtype),
        max_waiting: config.max_waiting,
        max_num_batched_tokens: config.device.defaults().prefill_chunk,
        weights_fingerprint: crate::kv_tiers::fingerprint(
            config,
            generator,
            &AdapterInfo::of(adapter),
        )?,
        ..EngineConfig::default()
    };
    let mut core = EngineCore::with_ranks(
        ranks,
        TextTokenizer::from_model_dir(generator)?,
        &engine_config,
    )?;
    core.attach_tiers(&crate::kv_tiers::tier_settings(config, &config.data_dir()))?;
    if let Some(tokens) = core.tokens_lower_tiers_keep() {
        eprintln!(
            "docqa: the KV tiers (host memory and disk) keep the first {tokens} tokens of a document's KV"
        );
    }
    if config.device.defaults().warm_up {
        let warm = core.warm_up().context("warming the engine up")?;
        eprintln!(
            "docqa: the engine warmed up in {:.1} s ({} prompt tokens read, {} decoded)",
            warm.took.as_secs_f64(),
            warm.prompt_tokens,
            warm.decoded_tokens
        );
        calibrate(&mut core)?;
    }
    let max_context = core.max_context();
    let tokenizer = Arc::new(TextTokenizer::from_model_dir(generator)?);
    Ok(StartedEngine {
        engine: EngineHandle::spawn(core, None)?,
        tokenizer,
        max_context,
        trained_context,
    })
}

/// Measures the engine's prefill steps before the first question, so that its reading-time
/// estimates rest on reads of several steps (and through the long path's sink window, where that is
/// quick) rather than on the first short prompts alone.
fn calibrate<B: Grouped>(core: &mut EngineCore<B>) -> anyhow::Result<()> {
    let stats = core.stats();
    let kv_capacity_tokens = stats.total_blocks * EngineConfig::default().block_size;
    let window = crate::qa::prompt::streaming_window_for(
        core.max_context(),
        kv_capacity_tokens,
        stats.step_tokens,
    );
    let calibration = core
        .calibrate(Some(window), WINDOWED_CALIBRATION_WITHIN)
        .context("calibrating the reading-time estimates")?;
    let through_window = match calibration.windowed_tokens {
        0 => String::new(),
        tokens => format!(" and {tokens} through the long path's sink window"),
    };
    eprintln!(
        "docqa: reading-time estimates calibrated in {:.2} s ({} prompt tokens read{through_window})",
        calibration.took.as_secs_f64(),
        calibration.dense_tokens,
    );
    Ok(())
}

/// Jobs a crash left running are requeued (or failed), answers it cut off are settled as interrupted,
/// its temporary uploads are removed, and no index keeps entries of a document that is not ready.
async fn recover(state: &web::Data<AppState>) -> anyhow::Result<()> {
    let owns_database = state.db.dialect() == Dialect::Sqlite;
    crate::ingest::recover_at_start(state, owns_database).await?;
    let answers = state
        .db
        .settle_interrupted_answers(crate::db::now_ms())
        .await?;
    let uploads =
        crate::api::upload::remove_leftovers(&state.originals_dir, std::time::SystemTime::now());
    if answers + uploads as u64 > 0 {
        tracing::warn!(
            answers,
            uploads,
            "settled interrupted answers and removed leftover uploads"
        );
    }
    for (tenant_id, document_id) in state.db.unready_document_ids().await? {
        crate::ingest::discard_index_entries(state, &tenant_id, &document_id).await;
    }
    Ok(())
}

fn http_server(
    state: web::Data<AppState>,
    config: &ServeConfig,
) -> anyhow::Result<(actix_web::dev::Server, Vec<std::net::SocketAddr>)> {
    let server = HttpServer::new(move || {
        App::new()
            .app_data(state.clone())
            .wrap(actix_web::middleware::from_fn(
                crate::api::auth::identify_first,
            ))
            .wrap_fn(|req, srv| {
                let started = Instant::now();
                let method = req.method().to_string();
                let route = req.match_pattern().unwrap_or_else(|| "unmatched".into());
                let state = req.app_data::<web::Data<AppState>>().cloned();
                let fut = srv.call(req);
                async move {
                    let res = fut.await?;
                    if let Some(state) = state {
                        let status = res.status().as_u16();
                        let secs = started.elapsed().as_secs_f64();
                        state.metrics.observe_http(&method, &route, status, secs);
                    }
                    Ok(res)
                }
            })
            .configure(crate::api::configure)
    })
    .workers(config.http_workers.max(1))
    .shutdown_timeout(30)
    .bind(config.bind)
    .with_context(|| format!("binding {}", config.bind))?;
    let addrs = server.addrs();
    Ok((server.run(), addrs))
}
