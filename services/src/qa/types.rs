//! The shapes of a question and its answer, as the API sends and returns them.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::api::error::ApiError;

/// Which documents a question is about. Empty: every ready document of the tenant.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Scope {
    /// Only these documents.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub document_ids: Option<Vec<String>>,
    /// Only the documents of this collection.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub collection: Option<String>,
}

/// The path asked for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum RouteChoice {
    /// docqa decides per question.
    #[default]
    Auto,
    /// Retrieval fills the RAG window with the best chunks.
    Rag,
    /// The model reads the whole document.
    Long,
}

impl RouteChoice {
    /// `auto`, `rag` or `long`.
    pub fn as_str(self) -> &'static str {
        match self {
            RouteChoice::Auto => "auto",
            RouteChoice::Rag => "rag",
            RouteChoice::Long => "long",
        }
    }
}

/// The path taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Route {
    /// Retrieval-augmented: the best chunks in a bounded window.
    Rag,
    /// Long context: the whole document in the prompt (its KV cache is reused by later questions).
    Long,
}

impl Route {
    /// `rag` or `long`.
    pub fn as_str(self) -> &'static str {
        match self {
            Route::Rag => "rag",
            Route::Long => "long",
        }
    }
}

/// `POST /v1/ask`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AskInput {
    /// The question.
    pub question: String,
    /// Which documents to answer from.
    #[serde(default)]
    pub scope: Scope,
    /// `auto` (default), `rag` or `long`.
    #[serde(default)]
    pub route: RouteChoice,
    /// Stream server-sent events (`token` events, then one `answer` event).
    #[serde(default)]
    pub stream: bool,
    /// Most answer tokens (default and maximum set by the server).
    #[serde(default)]
    pub max_tokens: Option<usize>,
    /// Sampling temperature (0: greedy, the default).
    #[serde(default)]
    pub temperature: Option<f32>,
    /// Random seed for sampling.
    #[serde(default)]
    pub seed: Option<u64>,
    /// The id of an earlier answer this question follows up: the conversation up to it goes into the
    /// prompt (its last few turns), so "and the rent?" is understood.
    #[serde(default)]
    pub follow_up_of: Option<String>,
    /// The conversation so far, oldest first (from `follow_up_of`, or an OpenAI chat's messages).
    #[serde(skip)]
    pub turns: Vec<super::conversation::Turn>,
}

/// Most characters accepted in a question (checked first: it needs no tokenizer).
pub const MAX_QUESTION_CHARS: usize = 4000;

/// Most generator tokens accepted in a question: what the question costs the engine. Four thousand
/// characters of prose are about a thousand tokens, within the bound; characters the tokenizer splits
/// into bytes (combining marks, rare scripts, emoji) take several tokens each, and hit it first.
pub const MAX_QUESTION_TOKENS: usize = 1536;

impl AskInput {
    /// Checks the values, counting the question's tokens with `count_tokens`; returns the
    /// answer-token budget.
    pub fn validate(
        &self,
        max_answer_tokens: usize,
        count_tokens: impl FnOnce(&str) -> usize,
    ) -> Result<usize, ApiError> {
        let q = self.question.trim();
        if q.is_empty() {
            return Err(ApiError::validation("`question` must not be empty"));
        }
        if q.chars().count() > MAX_QUESTION_CHARS {
            return Err(ApiError::validation(format!(
                "`question` is longer than {MAX_QUESTION_CHARS} characters"
            )));
        }
        let tokens = count_tokens(q);
        if tokens > MAX_QUESTION_TOKENS {
            return Err(ApiError::validation(format!(
                "`question` is {tokens} tokens long, more than {MAX_QUESTION_TOKENS}"
            )));
        }
        if let Some(t) = self.temperature
            && !(0.0..=2.0).contains(&t)
        {
            return Err(ApiError::validation(
                "`temperature` must be between 0 and 2",
            ));
        }
        if self.scope.document_ids.as_ref().is_some_and(Vec::is_empty) {
            return Err(ApiError::validation(
                "`scope.document_ids` must not be empty",
            ));
        }
        match self.max_tokens {
            None => Ok(max_answer_tokens),
            Some(0) => Err(ApiError::validation("`max_tokens` must be at least 1")),
            Some(n) if n > max_answer_tokens => Err(ApiError::validation(format!(
                "`max_tokens` is at most {max_answer_tokens}"
            ))),
            Some(n) => Ok(n),
        }
    }
}

/// A source the answer rests on: where in which document.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Citation {
    /// The `[n]` the prompt numbered it with (RAG path), or its rank (long path).
    pub source: usize,
    /// Document id.
    pub document_id: String,
    /// Document title.
    pub title: String,
    /// Chunk id.
    pub chunk_id: i64,
    /// First page of the span (1-based).
    pub page_start: i64,
    /// Last page of the span.
    pub page_end: i64,
    /// Span start, a character offset into the document's extracted text.
    pub char_start: i64,
    /// Span end (exclusive).
    pub char_end: i64,
    /// The beginning of the span's text.
    pub snippet: String,
    /// The sentence of the span that best supports the answer.
    pub quote: String,
    /// Whether the answer names this source (`[n]`); otherwise it was matched to the answer text.
    pub cited_in_text: bool,
}

/// A passage the RAG prompt held, by its number.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Passage {
    /// Its `[n]` in the prompt.
    pub number: usize,
    /// Document id.
    pub document_id: String,
    /// Chunk id.
    pub chunk_id: i64,
    /// Position of the chunk in its document, from 0.
    pub ordinal: i64,
    /// First page.
    pub page_start: i64,
    /// Last page.
    pub page_end: i64,
}

/// Where the time went, in milliseconds.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, ToSchema)]
pub struct Timings {
    /// Searching the indexes.
    pub retrieval_ms: u64,
    /// Building and tokenising the prompt.
    pub prompt_ms: u64,
    /// From the request to the first answer token.
    pub first_token_ms: u64,
    /// Generating.
    pub generation_ms: u64,
    /// The whole request.
    pub total_ms: u64,
}

/// Token counts.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, ToSchema)]
pub struct Usage {
    /// Prompt tokens.
    pub prompt_tokens: usize,
    /// Of those, served from the KV prefix cache.
    pub cached_prompt_tokens: usize,
    /// Answer tokens.
    pub completion_tokens: usize,
}

/// A complete answer.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct FinalAnswer {
    /// Id for `GET /v1/answers/{id}`.
    pub answer_id: String,
    /// The question.
    pub question: String,
    /// The answer text (`Not found in the document.` when the documents do not hold the answer).
    pub answer: String,
    /// False when the answer says the documents do not hold it.
    pub answerable: bool,
    /// The path taken.
    pub route: Route,
    /// Why that path.
    pub route_reasons: Vec<String>,
    /// Self-Route tried the RAG path first and fell back to the long path.
    pub self_route_fallback: bool,
    /// What the router measured.
    pub signals: super::router::Signals,
    /// Sources.
    pub citations: Vec<Citation>,
    /// The passages the RAG prompt held, in prompt (document) order; empty on the long path.
    pub passages: Vec<Passage>,
    /// Why generation ended: `stop` (the model finished), `length` (the answer cap, or the model's
    /// window, was reached), `loop` (the answer began repeating itself and was ended) or `cancelled`.
    pub finish_reason: String,
    /// Timings.
    pub timings: Timings,
    /// Tokens.
    pub usage: Usage,
}

/// How far the model has read a prompt (prefill), sent after each chunk.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, ToSchema)]
pub struct ReadProgress {
    /// Prompt tokens read (the KV prefix cache's included).
    pub read: usize,
    /// Tokens in the prompt.
    pub total: usize,
    /// The time left to read the rest, in milliseconds, at the rate of this prompt's chunks so far
    /// (absent after the first chunk).
    pub eta_ms: Option<u64>,
}

/// What an answering task sends.
#[derive(Debug)]
pub enum AskEvent {
    /// The model read another chunk of the prompt.
    Progress(ReadProgress),
    /// Answer text as it is generated.
    Token(String),
    /// The complete answer (last event).
    Done(Box<FinalAnswer>),
    /// It failed (last event).
    Error(ApiError),
}
