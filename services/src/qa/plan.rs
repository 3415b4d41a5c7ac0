//! Planning an answer: retrieve, build the prompts the policy may need, measure the router's signals
//! (sizes, the KV prefix cache, retrieval strength), and let the router decide.

use std::sync::Arc;

use super::prompt::{self, Prepared, Retrieval};
use super::router::{self, Decision, Signals};
use super::types::{AskInput, RouteChoice};
use crate::api::error::ApiError;
use crate::db::documents::Document;
use crate::state::AppState;

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

/// Plans the answer to `input` over `docs`.
pub async fn plan(
    state: &Arc<AppState>,
    tenant_id: &str,
    input: &AskInput,
    docs: &[Document],
    max_tokens: usize,
) -> Result<Plan, ApiError> {
    let question = input.question.as_str();
    let scope_tokens: usize = docs
        .iter()
        .map(|d| d.token_count.unwrap_or(0) as usize)
        .sum();
    let estimate = scope_tokens + PER_DOCUMENT_OVERHEAD * docs.len() + LONG_OVERHEAD + max_tokens;
    let rag_budget = prompt::rag_budget(state, question, max_tokens)?;
    let (retrieval, rag) = if input.route == RouteChoice::Long {
        (Retrieval::default(), None)
    } else {
        let r = prompt::retrieve(state, tenant_id, question, docs).await?;
        let p = prompt::rag(state, question, docs, &r, max_tokens)?;
        (r, Some(p))
    };
    let limit = state.max_context.min(state.kv_capacity_tokens);
    let long = if input.route != RouteChoice::Rag && estimate <= limit + LONG_OVERHEAD {
        Some(prompt::long(state, question, docs).await?)
    } else {
        None
    };
    let window = state.max_context.min(state.kv_capacity_tokens);
    let long = long.filter(|l| l.prompt.len() + max_tokens <= window);
    if input.route == RouteChoice::Long && long.is_none() {
        return Err(ApiError::validation(format!(
            "the scope's {scope_tokens} tokens, with the question and {max_tokens} answer tokens, do \
             not fit the model's window of {window} tokens (context {}, KV cache {}): use route=rag \
             or auto",
            state.max_context, state.kv_capacity_tokens
        )));
    }
    let cached = |p: &Option<Prepared>| {
        let prompt = p.as_ref().map(|p| p.prompt.clone());
        let engine = state.engine.clone();
        let namespace = super::cache_namespace(tenant_id);
        async move {
            match prompt {
                Some(prompt) => engine
                    .cached_prefix_len(prompt, namespace)
                    .await
                    .unwrap_or(0),
                None => 0,
            }
        }
    };
    let cached_long_tokens = cached(&long).await;
    let cached_rag_tokens = cached(&rag).await;
    let signals = Signals {
        scope_tokens,
        rag_budget,
        fits_rag_budget: scope_tokens + PER_DOCUMENT_OVERHEAD * docs.len() <= rag_budget,
        fits_model_window: long.is_some(),
        global_question: router::is_global_question(question),
        cached_long_tokens,
        top_bm25_score: rag.as_ref().map(|_| retrieval.top_bm25),
        rag_cost_tokens: rag
            .as_ref()
            .map_or(0, |p| p.prompt.len().saturating_sub(cached_rag_tokens)),
        long_cost_tokens: long
            .as_ref()
            .map_or(0, |p| p.prompt.len().saturating_sub(cached_long_tokens)),
    };
    let (decision, reasons) = router::decide(input.route, &signals);
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
