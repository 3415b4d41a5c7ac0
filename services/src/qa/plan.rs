//! Planning an answer: retrieve, build the prompts the policy may need, measure the router's signals
//! (sizes, the KV prefix cache, retrieval strength), and let the router decide.

use std::sync::Arc;

use super::conversation;
use super::prompt::{self, Asked, Prepared, Retrieval};
use super::router::{self, Decision, Signals};
use super::types::{AskInput, RouteChoice};
use crate::api::error::ApiError;
use crate::db::documents::Document;
use crate::state::AppState;
use docqa_engine::serving::EngineConfig;
use docqa_engine::serving::stats::PromptRead;

/// Prompt tokens a document's title line and separators add to the long prompt, for the estimate made
/// before the prompt is built.
const PER_DOCUMENT_OVERHEAD: usize = 24;
/// Instructions, question and chat-template markers of the long prompt, for the same estimate.
const LONG_OVERHEAD: usize = 160;

/// The router's decision with everything needed to carry it out.
#[derive(Debug, Clone)]
pub struct Plan {
    /// What to do.
    pub decision: Decision,
    /// Why, in words.
    pub reasons: Vec<String>,
    /// What the router measured.
    pub signals: Signals,
    /// The RAG prompt (unless the long path was asked for).
    pub rag: Option<Prepared>,
    /// The long prompt (when the scope fits the model's window and the policy may use it).
    pub long: Option<Prepared>,
    /// Retrieval time.
    pub retrieval_ms: u64,
}

/// The long prompt over `docs`; when it and the answer do not fit `window`, it streams through a sink
/// window.
async fn long_prompt(
    state: &Arc<AppState>,
    question: &Asked<'_>,
    docs: &[Document],
    max_tokens: usize,
    window: usize,
) -> Result<Prepared, ApiError> {
    let mut long = prompt::long(state, question, docs).await?;
    if long.prompt.len() + max_tokens > window {
        let streaming = prompt::streaming_window(state);
        if streaming.window < EngineConfig::default().block_size {
            return Err(ApiError::validation(format!(
                "the scope does not fit the model's window of {window} tokens and the KV cache ({} \
                 tokens) is too small to stream it: use route=rag or auto",
                state.kv_capacity_tokens
            )));
        }
        long.sink_window = Some(streaming);
    }
    Ok(long)
}

/// How the long path reads a scope beyond the model's trained context, in words (None within it).
fn long_context_reason(state: &AppState, long: &Prepared, max_tokens: usize) -> Option<String> {
    if let Some(w) = long.sink_window {
        return Some(format!(
            "the text is longer than the model can hold ({} tokens), so it is read through a \
             sliding window: the model keeps the first {} tokens and the last {}, and answers from the \
             end of the text",
            state.max_context.min(state.kv_capacity_tokens),
            w.num_sink_tokens,
            w.window
        ));
    }
    (long.prompt.len() + max_tokens > state.trained_context).then(|| {
        format!(
            "the text is longer than the model was trained to read ({} tokens), so its positions \
             are stretched (YaRN RoPE scaling ×{}, up to {} tokens)",
            state.trained_context, state.config.rope_factor, state.max_context
        )
    })
}

/// Plans the answer to `input` over `docs`.
pub async fn plan(
    state: &Arc<AppState>,
    tenant_id: &str,
    input: &AskInput,
    docs: &[Document],
    max_tokens: usize,
) -> Result<Plan, ApiError> {
    let turns = conversation::prompt_turns(&input.turns);
    let question = Asked {
        question: &input.question,
        turns: &turns,
    };
    let scope_tokens: usize = docs
        .iter()
        .map(|d| d.token_count.unwrap_or(0) as usize)
        .sum();
    let estimate = scope_tokens + PER_DOCUMENT_OVERHEAD * docs.len() + LONG_OVERHEAD + max_tokens;
    let rag_budget = prompt::rag_budget(state, &question, max_tokens)?;
    let (retrieval, rag) = if input.route == RouteChoice::Long {
        (Retrieval::default(), None)
    } else {
        let query = conversation::retrieval_query(&input.turns, &input.question);
        let r = prompt::retrieve(state, tenant_id, &query, docs).await?;
        let p = prompt::rag(state, &question, docs, &r, max_tokens)?;
        (r, Some(p))
    };
    let window = state.max_context.min(state.kv_capacity_tokens);
    let long = match input.route {
        RouteChoice::Rag => None,
        RouteChoice::Long => Some(long_prompt(state, &question, docs, max_tokens, window).await?),
        RouteChoice::Auto if estimate <= window + LONG_OVERHEAD => {
            Some(prompt::long(state, &question, docs).await?)
                .filter(|l| l.prompt.len() + max_tokens <= window)
        }
        RouteChoice::Auto => None,
    };
    let cached = |p: &Option<Prepared>| {
        let namespace = super::cache_namespace(tenant_id);
        let lookup = p
            .as_ref()
            .map(|p| (p.prompt.clone(), super::cache_scope(namespace, p)));
        let engine = state.engine.clone();
        async move {
            match lookup {
                Some((prompt, scope)) => engine.cached_prefix_len(prompt, scope).await.unwrap_or(0),
                None => 0,
            }
        }
    };
    let cached_long_tokens = cached(&long).await;
    let cached_rag_tokens = cached(&rag).await;
    let stats = state.engine.stats();
    // What each prompt should take to read, past its cached prefix, at the engine's measured pace.
    let reading = |p: &Option<Prepared>, cached: usize| {
        p.as_ref().and_then(|p| {
            stats.prefill_seconds(PromptRead {
                cached,
                tokens: p.prompt.len().saturating_sub(cached),
                window: p.sink_window,
            })
        })
    };
    let signals = Signals {
        scope_tokens,
        rag_budget,
        fits_rag_budget: scope_tokens + PER_DOCUMENT_OVERHEAD * docs.len() <= rag_budget,
        fits_model_window: long.as_ref().is_some_and(|l| l.sink_window.is_none()),
        model_window: window,
        global_question: router::is_global_question(&input.question),
        cached_long_tokens,
        top_bm25_score: rag.as_ref().map(|_| retrieval.top_bm25),
        rag_cost_tokens: rag
            .as_ref()
            .map_or(0, |p| p.prompt.len().saturating_sub(cached_rag_tokens)),
        long_cost_tokens: long
            .as_ref()
            .map_or(0, |p| p.prompt.len().saturating_sub(cached_long_tokens)),
        prefill_tokens_per_second: stats.prefill_tokens_per_second(),
        rag_seconds: reading(&rag, cached_rag_tokens),
        long_seconds: reading(&long, cached_long_tokens),
        abstention: Vec::new(),
    };
    let (decision, mut reasons) = router::decide(input.route, &signals);
    if decision == Decision::Route(super::types::Route::Long)
        && let Some(l) = &long
    {
        reasons.extend(long_context_reason(state, l, max_tokens));
    }
    tracing::info!(?decision, ?signals, "route decided");
    Ok(Plan {
        decision,
        reasons,
        signals,
        rag,
        long,
        retrieval_ms: retrieval.ms,
    })
}
