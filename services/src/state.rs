//! What every request handler and background worker shares.

use std::path::PathBuf;
use std::sync::Arc;

use docqa_engine::serving::EngineHandle;
use docqa_engine::text::TextTokenizer;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::api::auth::RateLimits;
use crate::config::ServeConfig;
use crate::db::Db;
use crate::indexes::TenantIndexes;
use crate::metrics::Metrics;

/// The service's shared state.
pub struct AppState {
    /// Settings.
    pub config: ServeConfig,
    /// The database.
    pub db: Db,
    /// Per-tenant search indexes.
    pub indexes: TenantIndexes,
    /// The generator, behind its engine thread.
    pub engine: EngineHandle,
    /// The generator's tokenizer (token counts, prompts).
    pub tokenizer: Arc<TextTokenizer>,
    /// The generator's model directory (the parse worker loads its tokenizer from there).
    pub generator_dir: PathBuf,
    /// The digest that names the generator's tokenizer in the documents it counted
    /// ([`crate::ingest::recount::tokenizer_id`]).
    pub tokenizer_id: String,
    /// Tokens of the long prompts' document parts, for the next question on the same documents.
    pub long_prompt_tokens: crate::qa::long_tokens::LongPromptTokens,
    /// The generator's context window, in tokens (stretched by `--long-context yarn`).
    pub max_context: usize,
    /// The context the generator was trained with.
    pub trained_context: usize,
    /// Tokens the whole KV cache holds (one request can never be longer).
    pub kv_capacity_tokens: usize,
    /// Prompt tokens the engine computes in one step: a read through the sink window holds them in
    /// the KV cache beside the window.
    pub step_tokens: usize,
    /// Name of the generator model, as `/v1/models` reports it.
    pub model_name: String,
    /// The LoRA adapter merged into the generator (`none` for the base model).
    pub adapter: crate::adapter::AdapterInfo,
    /// Metrics.
    pub metrics: Metrics,
    /// Per-key rate limits.
    pub rate_limits: RateLimits,
    /// Where uploaded originals are kept: `<dir>/<tenant>/<document id>`.
    pub originals_dir: PathBuf,
    /// Wakes the ingestion workers when a job is queued.
    pub jobs_queued: Notify,
    /// Cancelled when the server shuts down.
    pub shutdown: CancellationToken,
    /// Whether requests without a key act as the local tenant.
    pub local_mode: bool,
    /// This process's id, recorded on the jobs it runs.
    pub instance_id: String,
}

impl AppState {
    /// Path of a document's original file.
    pub fn original_path(&self, tenant_id: &str, document_id: &str) -> PathBuf {
        self.originals_dir.join(tenant_id).join(document_id)
    }
}
