//! Building the prompt. RAG: retrieve candidates with hybrid search over the scope, then add whole
//! chunks, best first, while the window (prompt plus answer budget) has room; each is numbered so the
//! answer can cite it. Long: the whole document, placed before the question so that later questions
//! about the same document reuse its KV cache.

use std::sync::Arc;
use std::time::Instant;

use docqa_engine::text::ChatMessage;
use docqa_indexer::{SearchFilter, SearchMode};

use super::scope::Plan;
use super::types::{AskInput, Route};
use crate::api::error::ApiError;
use crate::db::chunks::ChunkRow;
use crate::db::documents::Document;
use crate::state::AppState;

const RAG_SYSTEM: &str = "You answer questions using only the numbered sources given. Cite the sources \
you use with their numbers in square brackets, like [1]. If the sources do not hold the answer, say \
that you do not know.";

const LONG_SYSTEM: &str = "You answer questions about the document given, using only that document. \
If the document does not hold the answer, say that you do not know.";

/// A chunk placed in a RAG prompt.
#[derive(Debug, Clone)]
pub struct Source {
    /// Its number in the prompt, from 1.
    pub number: usize,
    /// The chunk.
    pub chunk: ChunkRow,
    /// Its document's title.
    pub title: String,
}

/// A prompt ready for the engine.
#[derive(Debug, Clone)]
pub struct Prepared {
    /// The path.
    pub route: Route,
    /// Why.
    pub reasons: Vec<String>,
    /// Prompt token ids (chat template applied).
    pub prompt: Vec<u32>,
    /// RAG: the numbered sources. Long: empty.
    pub sources: Vec<Source>,
    /// Long: the document read.
    pub document: Option<Document>,
    /// Time spent retrieving.
    pub retrieval_ms: u64,
    /// Time spent building and tokenising the prompt.
    pub prompt_ms: u64,
}

/// Builds the prompt for the chosen path.
pub async fn prepare(
    state: &Arc<AppState>,
    tenant_id: &str,
    input: &AskInput,
    docs: &[Document],
    plan: Plan,
    max_tokens: usize,
) -> Result<Prepared, ApiError> {
    match plan.route {
        Route::Rag => rag(state, tenant_id, input, docs, plan, max_tokens).await,
        Route::Long => long(state, input, &docs[0], plan, max_tokens).await,
    }
}

fn encode(state: &AppState, system: &str, user: &str) -> Result<Vec<u32>, ApiError> {
    let messages = [
        ChatMessage::new("system", system),
        ChatMessage::new("user", user),
    ];
    let text = state
        .tokenizer
        .apply_chat_template(&messages, true)
        .map_err(ApiError::internal)?;
    state
        .tokenizer
        .encode(&text, false)
        .map_err(ApiError::internal)
}

fn source_block(number: usize, title: &str, chunk: &ChunkRow) -> String {
    let pages = if chunk.page_start == chunk.page_end {
        format!("page {}", chunk.page_start)
    } else {
        format!("pages {}-{}", chunk.page_start, chunk.page_end)
    };
    format!("[{number}] {title} ({pages})\n{}\n\n", chunk.text.trim())
}

fn rag_user(blocks: &str, question: &str) -> String {
    format!("Sources:\n\n{blocks}Question: {}", question.trim())
}

async fn rag(
    state: &Arc<AppState>,
    tenant_id: &str,
    input: &AskInput,
    docs: &[Document],
    plan: Plan,
    max_tokens: usize,
) -> Result<Prepared, ApiError> {
    let started = Instant::now();
    let index = state
        .indexes
        .get(&state.db, tenant_id)
        .await
        .map_err(ApiError::internal)?;
    let filter = SearchFilter {
        document_ids: Some(docs.iter().map(|d| d.id.clone()).collect()),
        collection: None,
    };
    let question = input.question.clone();
    let k = state.config.rag_candidates.max(1);
    let hits = tokio::task::spawn_blocking(move || {
        let r = index.read().unwrap_or_else(|e| e.into_inner());
        r.search(&question, k, SearchMode::Hybrid, &filter)
    })
    .await
    .map_err(ApiError::internal)??;
    let ids: Vec<i64> = hits.iter().map(|h| h.chunk_id as i64).collect();
    let chunks = state.db.chunks_by_ids(tenant_id, &ids).await?;
    let retrieval_ms = started.elapsed().as_millis() as u64;

    let started = Instant::now();
    let window = state.config.rag_window.min(state.max_context);
    let base = encode(state, RAG_SYSTEM, &rag_user("", &input.question))?.len();
    let budget = window.saturating_sub(max_tokens + base);
    if budget == 0 {
        return Err(ApiError::validation(format!(
            "the question and {max_tokens} answer tokens leave no room for sources in the \
             {window}-token RAG window"
        )));
    }
    let mut used = 0;
    let mut sources = Vec::new();
    let mut blocks = String::new();
    for chunk in chunks {
        let title = docs
            .iter()
            .find(|d| d.id == chunk.document_id)
            .and_then(|d| d.title.clone())
            .unwrap_or_default();
        let block = source_block(sources.len() + 1, &title, &chunk);
        let cost = state
            .tokenizer
            .encode(&block, false)
            .map_err(ApiError::internal)?
            .len();
        if used + cost > budget {
            continue; // a shorter chunk further down may still fit
        }
        used += cost;
        blocks.push_str(&block);
        sources.push(Source {
            number: sources.len() + 1,
            chunk,
            title,
        });
    }
    let mut prompt = encode(state, RAG_SYSTEM, &rag_user(&blocks, &input.question))?;
    // Tokens can merge across block boundaries; never exceed the window.
    while prompt.len() + max_tokens > window && sources.pop().is_some() {
        blocks = sources
            .iter()
            .map(|s| source_block(s.number, &s.title, &s.chunk))
            .collect();
        prompt = encode(state, RAG_SYSTEM, &rag_user(&blocks, &input.question))?;
    }
    let mut reasons = plan.reasons;
    reasons.push(format!(
        "retrieval (BM25 + dense, fused) found {} candidate chunks; {} fit the {window}-token window",
        hits.len(),
        sources.len()
    ));
    Ok(Prepared {
        route: Route::Rag,
        reasons,
        prompt,
        sources,
        document: None,
        retrieval_ms,
        prompt_ms: started.elapsed().as_millis() as u64,
    })
}

async fn long(
    state: &Arc<AppState>,
    input: &AskInput,
    doc: &Document,
    plan: Plan,
    max_tokens: usize,
) -> Result<Prepared, ApiError> {
    let started = Instant::now();
    let (text, _) = state
        .db
        .document_text(&doc.id)
        .await?
        .ok_or_else(|| ApiError::not_found("document text", &doc.id))?;
    let title = doc.title.clone().unwrap_or_else(|| doc.file_name.clone());
    let user = format!(
        "Document: {title}\n\n{}\n\nQuestion: {}",
        text.trim(),
        input.question.trim()
    );
    let prompt = encode(state, LONG_SYSTEM, &user)?;
    if prompt.len() + max_tokens > state.max_context {
        return Err(ApiError::validation(format!(
            "the document's prompt has {} tokens; with {max_tokens} answer tokens it does not fit the \
             model's {}-token window: use route=rag",
            prompt.len(),
            state.max_context
        )));
    }
    Ok(Prepared {
        route: Route::Long,
        reasons: plan.reasons,
        prompt,
        sources: Vec::new(),
        document: Some(doc.clone()),
        retrieval_ms: 0,
        prompt_ms: started.elapsed().as_millis() as u64,
    })
}
