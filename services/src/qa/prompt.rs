//! Building prompts.
//!
//! RAG: hybrid retrieval over the scope gives candidates; whole chunks are taken best first while the
//! budget (window minus question and answer allowance) has room, then laid out **in document order** and
//! numbered so the answer can cite them. Long: every document of the scope in full, the question last,
//! so the documents' KV blocks are prefix-cached and a later question computes only itself.

use std::sync::Arc;
use std::time::Instant;

use docqa_engine::kv::manager::SinkWindow;
use docqa_engine::serving::EngineConfig;
use docqa_engine::text::ChatMessage;
use docqa_indexer::{Retriever, SearchFilter, SearchMode};

use super::conversation::Turn;
use super::templates::{TEXTS, fill};
use super::types::Route;
use crate::api::error::ApiError;
use crate::db::chunks::ChunkRow;
use crate::db::documents::Document;
use crate::state::AppState;

/// What the answer says when the passages or the document do not hold the answer (`prompts.json`'s
/// `not_found`, checked by a test).
pub const NOT_FOUND: &str = "Not found in the document.";

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

/// The candidates retrieval found for a question.
#[derive(Debug, Clone, Default)]
pub struct Retrieval {
    /// Candidate chunks, best first.
    pub chunks: Vec<ChunkRow>,
    /// Best BM25 score among them (0 when BM25 found nothing).
    pub top_bm25: f32,
    /// Time spent.
    pub ms: u64,
}

/// A prompt ready for the engine.
#[derive(Debug, Clone)]
pub struct Prepared {
    /// The path.
    pub route: Route,
    /// Prompt token ids (chat template applied).
    pub prompt: Vec<u32>,
    /// RAG: the numbered sources, in document order. Long: empty.
    pub sources: Vec<Source>,
    /// The scope's documents (long: the ones read, in prompt order).
    pub documents: Vec<Document>,
    /// Time spent building and tokenising the prompt.
    pub prompt_ms: u64,
    /// Long path over a scope beyond the model's window: the sink window it streams through.
    pub sink_window: Option<SinkWindow>,
}

/// A question as a prompt asks it: its text, and the conversation turns it follows (oldest first).
#[derive(Debug, Clone, Copy)]
pub struct Asked<'a> {
    /// The question.
    pub question: &'a str,
    /// Earlier turns, as [`super::conversation::prompt_turns`] keeps them.
    pub turns: &'a [Turn],
}

impl<'a> Asked<'a> {
    /// A question that follows nothing.
    pub fn alone(question: &'a str) -> Self {
        Asked {
            question,
            turns: &[],
        }
    }
}

/// The two chat messages of a prompt.
pub fn messages(system: &str, user: String) -> [ChatMessage; 2] {
    [
        ChatMessage::new("system", system),
        ChatMessage::new("user", user),
    ]
}

/// The chat messages of a prompt that follows earlier turns: the system message, each turn's question
/// and answer, then `user`.
pub fn conversation(system: &str, turns: &[Turn], user: String) -> Vec<ChatMessage> {
    let mut chat = vec![ChatMessage::new("system", system)];
    for t in turns {
        chat.push(ChatMessage::new("user", t.question.as_str()));
        chat.push(ChatMessage::new("assistant", t.answer.as_str()));
    }
    chat.push(ChatMessage::new("user", user));
    chat
}

fn encode(
    state: &AppState,
    system: &str,
    turns: &[Turn],
    user: String,
) -> Result<Vec<u32>, ApiError> {
    let text = state
        .tokenizer
        .apply_chat_template(&conversation(system, turns, user), true)
        .map_err(ApiError::internal)?;
    state
        .tokenizer
        .encode(&text, false)
        .map_err(ApiError::internal)
}

/// A document's title, or its file name when it has none.
pub fn title_of(doc: &Document) -> String {
    doc.title.clone().unwrap_or_else(|| doc.file_name.clone())
}

/// Hybrid search of the question over the scope's documents.
pub async fn retrieve(
    state: &Arc<AppState>,
    tenant_id: &str,
    question: &str,
    docs: &[Document],
) -> Result<Retrieval, ApiError> {
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
    let query = question.to_string();
    let k = state.config.rag_candidates.max(1);
    let hits = tokio::task::spawn_blocking(move || {
        let r = index.read().unwrap_or_else(|e| e.into_inner());
        r.search(&query, k, SearchMode::Hybrid, &filter)
    })
    .await
    .map_err(ApiError::internal)??;
    let top_bm25 = hits
        .iter()
        .flat_map(|h| &h.sources)
        .filter(|s| s.retriever == Retriever::Bm25)
        .map(|s| s.score)
        .fold(0.0_f32, f32::max);
    let ids: Vec<i64> = hits.iter().map(|h| h.chunk_id as i64).collect();
    let chunks = state.db.chunks_by_ids(tenant_id, &ids).await?;
    Ok(Retrieval {
        chunks,
        top_bm25,
        ms: started.elapsed().as_millis() as u64,
    })
}

/// One numbered source of a RAG prompt: its number, title, pages and text.
pub fn source_block(number: usize, title: &str, pages: (i64, i64), text: &str) -> String {
    let pages = if pages.0 == pages.1 {
        fill(&TEXTS.one_page, &[("page", &pages.0.to_string())])
    } else {
        let (first, last) = (pages.0.to_string(), pages.1.to_string());
        fill(&TEXTS.page_range, &[("first", &first), ("last", &last)])
    };
    fill(
        &TEXTS.source_block,
        &[
            ("number", &number.to_string()),
            ("title", title),
            ("pages", &pages),
            ("text", text.trim()),
        ],
    )
}

fn chunk_block(number: usize, title: &str, chunk: &ChunkRow) -> String {
    source_block(
        number,
        title,
        (chunk.page_start, chunk.page_end),
        &chunk.text,
    )
}

/// The RAG user message: the source blocks, then the question.
pub fn rag_user(blocks: &str, question: &str) -> String {
    fill(
        &TEXTS.rag_user,
        &[("sources", blocks), ("question", question.trim())],
    )
}

/// The RAG system message.
pub fn rag_system() -> &'static str {
    &TEXTS.rag_system
}

/// The long path's system message.
pub fn long_system() -> &'static str {
    &TEXTS.long_system
}

/// The long path's user message: the documents (see [`long_documents`]), a space, the question.
pub fn long_user(documents: &str, question: &str) -> String {
    format!("{documents} {}", question.trim())
}

/// The RAG window in tokens (prompt and answer).
pub fn rag_window(state: &AppState) -> usize {
    state.config.rag_window().min(state.max_context)
}

/// Prompt tokens left for passages in the RAG window.
pub fn rag_budget(
    state: &AppState,
    asked: &Asked<'_>,
    max_tokens: usize,
) -> Result<usize, ApiError> {
    let user = rag_user("", asked.question);
    let base = encode(state, rag_system(), asked.turns, user)?.len();
    Ok(rag_window(state).saturating_sub(max_tokens + base))
}

/// The RAG prompt: the best candidates that fit the budget, laid out in document order.
pub fn rag(
    state: &AppState,
    asked: &Asked<'_>,
    docs: &[Document],
    retrieval: &Retrieval,
    max_tokens: usize,
) -> Result<Prepared, ApiError> {
    let started = Instant::now();
    let window = rag_window(state);
    let budget = rag_budget(state, asked, max_tokens)?;
    if budget == 0 {
        return Err(ApiError::validation(format!(
            "the question and {max_tokens} answer tokens leave no room for sources in the \
             {window}-token RAG window"
        )));
    }
    let title = |c: &ChunkRow| {
        docs.iter()
            .find(|d| d.id == c.document_id)
            .map(title_of)
            .unwrap_or_default()
    };
    let mut chosen: Vec<&ChunkRow> = Vec::new();
    let mut used = 0;
    for chunk in &retrieval.chunks {
        let cost = state
            .tokenizer
            .encode(&chunk_block(99, &title(chunk), chunk), false)
            .map_err(ApiError::internal)?
            .len();
        if used + cost <= budget {
            used += cost;
            chosen.push(chunk);
        }
    }
    let doc_rank = |c: &ChunkRow| docs.iter().position(|d| d.id == c.document_id);
    chosen.sort_by_key(|c| (doc_rank(c), c.ordinal));
    let mut sources: Vec<Source> = chosen
        .into_iter()
        .enumerate()
        .map(|(i, c)| Source {
            number: i + 1,
            chunk: c.clone(),
            title: title(c),
        })
        .collect();
    let render = |sources: &[Source]| -> Result<Vec<u32>, ApiError> {
        let blocks: String = sources
            .iter()
            .map(|s| chunk_block(s.number, &s.title, &s.chunk))
            .collect();
        encode(
            state,
            rag_system(),
            asked.turns,
            rag_user(&blocks, asked.question),
        )
    };
    let mut prompt = render(&sources)?;
    // Tokens can merge across block boundaries: never exceed the window.
    while prompt.len() + max_tokens > window && !sources.is_empty() {
        let worst = retrieval
            .chunks
            .iter()
            .rev()
            .find_map(|c| sources.iter().position(|s| s.chunk.id == c.id))
            .unwrap_or(sources.len() - 1);
        sources.remove(worst);
        for (i, s) in sources.iter_mut().enumerate() {
            s.number = i + 1;
        }
        prompt = render(&sources)?;
    }
    Ok(Prepared {
        route: Route::Rag,
        prompt,
        sources,
        documents: docs.to_vec(),
        prompt_ms: started.elapsed().as_millis() as u64,
        sink_window: None,
    })
}

/// The long prompt's user message up to the question: the documents, then `Question:`.
pub fn long_documents(docs: &[(String, String)]) -> String {
    let mut user = String::new();
    for (i, (title, text)) in docs.iter().enumerate() {
        let text = text.trim();
        user.push_str(&if docs.len() == 1 {
            fill(&TEXTS.long_document, &[("title", title), ("text", text)])
        } else {
            let number = (i + 1).to_string();
            fill(
                &TEXTS.long_document_numbered,
                &[("number", &number), ("title", title), ("text", text)],
            )
        });
    }
    user.push_str(&TEXTS.long_question_marker);
    user
}

async fn texts(state: &AppState, docs: &[Document]) -> Result<Vec<(String, String)>, ApiError> {
    let mut out = Vec::with_capacity(docs.len());
    for doc in docs {
        let (text, _) = state
            .db
            .document_text(&doc.id)
            .await?
            .ok_or_else(|| ApiError::not_found("document text", &doc.id))?;
        out.push((title_of(doc), text));
    }
    Ok(out)
}

/// The long prompt: every document of the scope, oldest first, then the question (after the documents:
/// the conversation's first question, then its turns).
pub async fn long(
    state: &AppState,
    asked: &Asked<'_>,
    docs: &[Document],
) -> Result<Prepared, ApiError> {
    let started = Instant::now();
    let mut ordered = docs.to_vec();
    ordered.sort_by(|a, b| (a.created_at, &a.id).cmp(&(b.created_at, &b.id)));
    let documents = long_documents(&texts(state, &ordered).await?);
    let ids: Vec<&str> = ordered.iter().map(|d| d.id.as_str()).collect();
    let prompt = state
        .long_prompt_tokens
        .encode(
            &state.tokenizer,
            &ids,
            long_system(),
            &documents,
            asked.turns,
            asked.question.trim(),
        )
        .map_err(ApiError::internal)?;
    Ok(Prepared {
        route: Route::Long,
        prompt,
        sources: Vec::new(),
        documents: ordered,
        prompt_ms: started.elapsed().as_millis() as u64,
        sink_window: None,
    })
}

/// Sink tokens of the long path's window over scopes longer than the model's window (StreamingLLM's 4).
pub const STREAMING_SINK_TOKENS: usize = 4;

/// The window the long path streams through when a scope does not fit the model's window: the sinks and
/// as many recent tokens as the context holds, less what the KV cache needs beside them (one engine
/// step's prompt tokens and two partial blocks).
pub fn streaming_window(state: &AppState) -> SinkWindow {
    streaming_window_for(
        state.max_context,
        state.kv_capacity_tokens,
        state.step_tokens,
    )
}

/// [`streaming_window`] of a model's context, a KV cache's capacity and the prompt tokens an engine
/// step computes, in tokens.
pub fn streaming_window_for(
    max_context: usize,
    kv_capacity_tokens: usize,
    step_tokens: usize,
) -> SinkWindow {
    let block_size = EngineConfig::default().block_size;
    let cache_room = kv_capacity_tokens.saturating_sub(step_tokens + 2 * block_size);
    let window = max_context
        .min(cache_room)
        .saturating_sub(STREAMING_SINK_TOKENS);
    SinkWindow {
        num_sink_tokens: STREAMING_SINK_TOKENS,
        window,
    }
}

/// The tokens a long prompt over `doc` alone starts with (everything before the question), whose
/// cached KV is dropped when the document is deleted.
pub async fn long_prefix(state: &AppState, doc: &Document) -> Result<Vec<u32>, ApiError> {
    let mut prompt = long(state, &Asked::alone(""), std::slice::from_ref(doc))
        .await?
        .prompt;
    // The question and the chat template's closing markers follow the document: drop a block's worth
    // so only tokens shared with every question on this document remain.
    prompt.truncate(prompt.len().saturating_sub(32));
    Ok(prompt)
}

#[cfg(test)]
mod tests {
    use super::*;
    use docqa_engine::kv::manager::{KvCacheConfig, KvCacheManager};

    /// The engine's own check of whether a read of `tokens` through `window`, `step` tokens a step,
    /// ever fits a pool of `capacity` tokens.
    fn engine_fits(capacity: usize, tokens: usize, step: usize, window: SinkWindow) -> bool {
        let block_size = EngineConfig::default().block_size;
        let kv = KvCacheManager::new(KvCacheConfig {
            block_size,
            num_blocks: capacity / block_size,
            enable_prefix_caching: true,
            cache_salt: 0,
        })
        .unwrap();
        kv.can_ever_fit(tokens, step, Some(window))
    }

    #[test]
    fn a_streaming_window_leaves_room_for_the_devices_step_in_a_kv_cache_smaller_than_the_context()
    {
        let (context, capacity) = (131_072, 40_960);
        for step in [256, 512, 2048, 8192] {
            let window = streaming_window_for(context, capacity, step);
            assert!(
                engine_fits(capacity, 1_000_000, step, window),
                "a window of {} tokens read {step} tokens a step does not fit {capacity} tokens",
                window.window
            );
            assert!(
                !engine_fits(
                    capacity,
                    1_000_000,
                    step,
                    SinkWindow {
                        window: window.window + 16,
                        ..window
                    }
                ),
                "a window of {} tokens leaves a block unused at {step} tokens a step",
                window.window
            );
        }
    }

    #[test]
    fn a_streaming_window_is_the_models_context_where_the_kv_cache_holds_more() {
        let window = streaming_window_for(8_192, 1_000_000, 2048);
        assert_eq!(window.num_sink_tokens, STREAMING_SINK_TOKENS);
        assert_eq!(window.window, 8_192 - STREAMING_SINK_TOKENS);
    }
}
