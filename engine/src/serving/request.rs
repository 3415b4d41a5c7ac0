//! What callers hand the serving engine and what comes back: requests, streamed events, finish reasons.

use std::time::Duration;

use crate::kv::manager::{CacheNamespace, CacheScope, SinkWindow};
use crate::sampling::SamplingParams;

/// A generation request: prompt token ids and how to sample.
#[derive(Debug, Clone, PartialEq)]
pub struct GenerateRequest {
    /// The prompt, already tokenised (chat template applied where wanted).
    pub prompt: Vec<u32>,
    /// Sampling and stopping.
    pub params: SamplingParams,
    /// How many of the most likely tokens to report, with their log-probabilities, at each step (0: none).
    pub top_logprobs: usize,
    /// The prefix-cache namespace (only requests of the same namespace share cached KV: one per tenant,
    /// so cache hits reveal nothing across tenants; 0 by default) and the sink window, if the request
    /// streams through one (dense by default).
    pub cache_scope: CacheScope,
}

impl GenerateRequest {
    /// A request for `prompt` with `params` and no log-probabilities.
    pub fn new(prompt: Vec<u32>, params: SamplingParams) -> Self {
        GenerateRequest {
            prompt,
            params,
            top_logprobs: 0,
            cache_scope: CacheScope::default(),
        }
    }

    /// The same request in prefix-cache namespace `namespace`.
    pub fn in_cache_namespace(mut self, namespace: CacheNamespace) -> Self {
        self.cache_scope.namespace = namespace;
        self
    }

    /// The same request streaming through `window` (StreamingLLM): attention sees the first
    /// `num_sink_tokens` and the last `window` tokens, so the prompt may be longer than the model's
    /// context and KV memory stays bounded.
    pub fn with_sink_window(mut self, window: SinkWindow) -> Self {
        self.cache_scope.sink_window = Some(window);
        self
    }
}

/// Why a request ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FinishReason {
    /// An end-of-sequence token, a stop token or a stop string.
    Stop,
    /// `max_tokens` reached, or the model's context window is full.
    Length,
    /// The caller cancelled (or dropped its stream).
    Cancelled,
    /// The generation fell into a loop, one block of tokens repeated back to back (only with
    /// `SamplingParams::stop_on_repetition`).
    Loop,
}

impl FinishReason {
    /// The reason as the API names it: `stop`, `length`, `cancelled` or `loop`.
    pub fn as_str(self) -> &'static str {
        match self {
            FinishReason::Stop => "stop",
            FinishReason::Length => "length",
            FinishReason::Cancelled => "cancelled",
            FinishReason::Loop => "loop",
        }
    }
}

/// Token accounting and timings of one finished request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Usage {
    /// Tokens in the prompt.
    pub prompt_tokens: usize,
    /// Prompt tokens whose KV came from the prefix cache instead of being computed.
    pub cached_prompt_tokens: usize,
    /// Tokens generated.
    pub completion_tokens: usize,
    /// Times the request was preempted and recomputed.
    pub preemptions: u32,
    /// From admission to the first generated token.
    pub time_to_first_token: Duration,
    /// From admission to the end.
    pub total_time: Duration,
}

/// One event of a request's stream.
#[derive(Debug, Clone, PartialEq)]
pub enum GenerationEvent {
    /// A generated token and the text it completes (empty while a multi-byte character or a possible stop
    /// string is still forming).
    Token {
        /// The token id.
        id: u32,
        /// Text safe to show now.
        text: String,
        /// The most likely tokens at this step and their log-probabilities (model distribution before
        /// sampling adjustments), most likely first; empty unless asked for.
        top_logprobs: Vec<(u32, f32)>,
    },
    /// A chunk of the prompt was read (prefill): `computed` of its `total` tokens are in the KV cache,
    /// counting those the prefix cache supplied. Sent after each chunk but the last, whose event is the
    /// first token.
    Progress {
        /// Prompt tokens in the KV cache now.
        computed: usize,
        /// Tokens in the prompt.
        total: usize,
    },
    /// The request ended; no event follows.
    Finished {
        /// Why it ended.
        reason: FinishReason,
        /// Text held back until the end (a stop-string prefix that never completed).
        text: String,
        /// Accounting.
        usage: Usage,
    },
    /// The request failed inside the engine; no event follows.
    Failed {
        /// What went wrong.
        message: String,
    },
}
