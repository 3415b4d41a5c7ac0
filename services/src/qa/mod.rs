//! Answering a question: resolve its scope ([`scope`]), plan the route ([`plan`], [`router`]), build the
//! prompt ([`prompt`], the long path's document tokens kept by [`long_tokens`]), generate with the engine,
//! recognise refusals, written ([`unanswerable`]) or told by the answer's token probabilities
//! ([`abstention`]), and cite ([`citations`]). [`start`] returns once the first
//! generation is admitted (so overload and bad input are answered as errors), then runs on its own task and
//! streams [`AskEvent`]s; dropping the receiver cancels the generation.
//!
//! Self-Route: the RAG attempt is generated without streaming; when it says the passages cannot answer,
//! or its probabilities do not support it, the long path answers instead, and only that answer is
//! streamed.

pub mod abstention;
pub mod citations;
pub mod conversation;
pub mod long_tokens;
pub mod plan;
pub mod progress;
pub mod prompt;
pub mod router;
pub mod scope;
pub mod templates;
#[cfg(test)]
mod test_tokenizers;
pub mod types;
pub mod unanswerable;

use std::sync::Arc;
use std::time::Instant;

use docqa_engine::kv::manager::CacheScope;
use docqa_engine::sampling::SamplingParams;
use docqa_engine::serving::{FinishReason, GenerateRequest, GenerationEvent, TokenStream};
use serde_json::json;
use tokio::sync::mpsc;

use crate::api::error::ApiError;
use crate::db::answers::{AnswerOutcome, NewQuestion};
use crate::state::AppState;
use plan::Plan;
use prompt::Prepared;
use router::Decision;
pub use types::{
    AskEvent, AskInput, FinalAnswer, MAX_QUESTION_CHARS, MAX_QUESTION_TOKENS, RouteChoice, Scope,
    Timings, Usage,
};

/// Validates, plans, admits the first generation, then answers on a background task.
pub async fn start(
    state: Arc<AppState>,
    tenant_id: String,
    input: AskInput,
) -> Result<mpsc::Receiver<AskEvent>, ApiError> {
    let started = Instant::now();
    let max_tokens = input.validate(state.config.max_answer_tokens(), |q| {
        state
            .tokenizer
            .encode(q, false)
            .map_or(usize::MAX, |ids| ids.len())
    })?;
    let mut input = input;
    if let Some(earlier) = &input.follow_up_of {
        input.turns = conversation::turns_ending_with(&state, &tenant_id, earlier).await?;
    }
    let docs = scope::resolve(&state, &tenant_id, &input.scope).await?;
    let plan = plan::plan(&state, &tenant_id, &input, &docs, max_tokens).await?;
    let first = first_prompt(&plan)?;
    let params = SamplingParams {
        temperature: input.temperature.unwrap_or(0.0),
        max_tokens,
        seed: input.seed,
        stop_on_repetition: true,
        ..SamplingParams::default()
    };
    let answer_id = crate::db::new_id();
    let scope_json = serde_json::to_value(&input.scope).unwrap_or_default();
    let document_ids: Vec<&str> = docs.iter().map(|d| d.id.as_str()).collect();
    let question = NewQuestion {
        text: &input.question,
        scope: &scope_json,
        route_requested: input.route.as_str(),
        follow_up_of: input.follow_up_of.as_deref(),
    };
    state
        .db
        .insert_answer(&answer_id, &tenant_id, &question, &document_ids)
        .await?;
    let stream = match admit(&state, &tenant_id, &first, &params).await {
        Ok(s) => s,
        Err(err) => {
            let _ = state.db.fail_answer(&answer_id, &err.message).await;
            state
                .metrics
                .observe_answer(first.route.as_str(), false, 0.0);
            return Err(err);
        }
    };
    let (tx, rx) = mpsc::channel(64);
    let refusal_starts = abstention::refusal_starts(&state.tokenizer);
    let answering = Answering {
        refusal_starts,
        state,
        tenant_id,
        answer_id,
        input,
        plan,
        params,
        started,
        usage: Usage::default(),
        first_token_ms: None,
    };
    tokio::spawn(answering.run(stream, tx));
    Ok(rx)
}

fn first_prompt(plan: &Plan) -> Result<Prepared, ApiError> {
    let p = match plan.decision {
        Decision::Route(types::Route::Long) => plan.long.as_ref(),
        Decision::Route(types::Route::Rag) | Decision::SelfRoute => plan.rag.as_ref(),
    };
    p.cloned()
        .ok_or_else(|| ApiError::internal("the router chose a path without a prompt"))
}

/// The tenant's prefix-cache namespace: its requests share cached KV with each other only, so the
/// speed of an answer reveals nothing about what other tenants have read.
pub fn cache_namespace(tenant_id: &str) -> u64 {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(tenant_id.as_bytes());
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    u64::from_le_bytes(first)
}

/// How a prompt uses the KV cache: the tenant's namespace, the sink window of a streaming long prompt,
/// and whether it is a one-off RAG prompt (asked once: written through to the lower tiers, it would
/// take their room and bandwidth from the documents the long path reads again).
pub fn cache_scope(namespace: u64, prepared: &Prepared) -> CacheScope {
    CacheScope {
        namespace,
        sink_window: prepared.sink_window,
        transient: prepared.route == types::Route::Rag,
        scratch: false,
    }
}

async fn admit(
    state: &AppState,
    tenant_id: &str,
    prepared: &Prepared,
    params: &SamplingParams,
) -> Result<TokenStream, ApiError> {
    let mut request = GenerateRequest::new(prepared.prompt.clone(), params.clone());
    request.cache_scope = cache_scope(cache_namespace(tenant_id), prepared);
    // The measures need the top log-probabilities of each step, a pass over the vocabulary on the
    // host; an answer is measured only when a threshold is set.
    if state.config.abstention_threshold > 0.0 {
        request.top_logprobs = abstention::TOP_LOGPROBS;
    }
    Ok(state.engine.generate(request).await?)
}

/// One generation's result.
struct Generated {
    text: String,
    reason: FinishReason,
    /// Each answer step's token and most likely tokens, for the abstention check.
    steps: Vec<abstention::Step>,
}

/// The text a prompt generated, and whether the answer is a refusal (written, or unsupported by its
/// token probabilities).
struct Answered {
    prepared: Prepared,
    generated: Generated,
    fallback: bool,
    refused: bool,
}

/// The caller went away, or the engine failed.
enum Stop {
    Disconnected,
    Failed(ApiError),
}

struct Answering {
    state: Arc<AppState>,
    /// Token ids a refusal starts with ([`abstention::refusal_starts`]).
    refusal_starts: Vec<u32>,
    tenant_id: String,
    answer_id: String,
    input: AskInput,
    plan: Plan,
    params: SamplingParams,
    started: Instant,
    usage: Usage,
    first_token_ms: Option<u64>,
}

impl Answering {
    async fn run(mut self, stream: TokenStream, tx: mpsc::Sender<AskEvent>) {
        let gen_start = Instant::now();
        let result = self.answer(stream, &tx).await;
        let event = match result {
            Ok(answered) => self.finish(answered, gen_start).await,
            Err(Stop::Disconnected) => {
                let _ = self.state.db.stop_answer(&self.answer_id).await;
                return;
            }
            Err(Stop::Failed(err)) => {
                let _ = self
                    .state
                    .db
                    .fail_answer(&self.answer_id, &err.message)
                    .await;
                self.state.metrics.observe_answer("none", false, 0.0);
                AskEvent::Error(err)
            }
        };
        let _ = tx.send(event).await;
    }

    /// Whether `generated` is a refusal: it says so, or the abstention check finds its tokens
    /// unsupported. The check goes into the answer's signals, and an abstention into its reasons.
    fn refuses(&mut self, route: types::Route, generated: &Generated) -> bool {
        let written = unanswerable::says_unanswerable(&generated.text);
        let check = abstention::check(
            route,
            &generated.steps,
            &self.refusal_starts,
            self.state.config.abstention_threshold,
        );
        if let Some(c) = check {
            self.plan.signals.abstention.push(c);
            if c.abstained && !written {
                self.plan.reasons.push(abstention::reason(&c));
            }
        }
        written || check.is_some_and(|c| c.abstained)
    }

    /// Generates on the chosen path; under Self-Route, falls back to the long path when the RAG
    /// attempt refuses. Returns the prompt used, the text, whether a fallback happened, and whether
    /// the answer is a refusal.
    async fn answer(
        &mut self,
        stream: TokenStream,
        tx: &mpsc::Sender<AskEvent>,
    ) -> Result<Answered, Stop> {
        let first = first_prompt(&self.plan).map_err(Stop::Failed)?;
        if self.plan.decision != Decision::SelfRoute {
            let generated = self.generate(stream, tx, true).await?;
            let refused = self.refuses(first.route, &generated);
            return Ok(Answered {
                prepared: first,
                generated,
                fallback: false,
                refused,
            });
        }
        let attempt = self.generate(stream, tx, false).await?;
        let attempt_refused = self.refuses(first.route, &attempt);
        let long = self.plan.long.clone();
        match long {
            Some(long) if attempt_refused => {
                self.plan.reasons.push(
                    "the most relevant passages did not hold the answer, so the whole document was read"
                        .into(),
                );
                let stream = admit(&self.state, &self.tenant_id, &long, &self.params)
                    .await
                    .map_err(Stop::Failed)?;
                let generated = self.generate(stream, tx, true).await?;
                let refused = self.refuses(long.route, &generated);
                Ok(Answered {
                    prepared: long,
                    generated,
                    fallback: true,
                    refused,
                })
            }
            long => {
                self.plan.reasons.push(if long.is_none() && attempt_refused {
                    format!(
                        "the most relevant passages did not hold the answer, and the whole text is \
                         more than the model reads at once here ({} tokens)",
                        router::thousands(self.plan.signals.model_window)
                    )
                } else {
                    "the most relevant passages held the answer".into()
                });
                self.first_token_ms.get_or_insert_with(|| ms(self.started));
                if !attempt.text.is_empty()
                    && tx
                        .send(AskEvent::Token(attempt.text.clone()))
                        .await
                        .is_err()
                {
                    return Err(Stop::Disconnected);
                }
                Ok(Answered {
                    prepared: first,
                    generated: attempt,
                    fallback: false,
                    refused: attempt_refused,
                })
            }
        }
    }

    /// Runs one generation, sending its reading progress, and its text as it comes when
    /// `stream_text` (a caller that went away ends it: [`Stop::Disconnected`]).
    async fn generate(
        &mut self,
        mut stream: TokenStream,
        tx: &mpsc::Sender<AskEvent>,
        stream_text: bool,
    ) -> Result<Generated, Stop> {
        let mut text = String::new();
        let mut steps = Vec::new();
        let mut reading = progress::Reading::default();
        loop {
            // A caller that goes away ends the generation at once, not at its next event.
            let event = tokio::select! {
                event = stream.next() => event,
                () = tx.closed() => return Err(Stop::Disconnected),
            };
            let Some(event) = event else { break };
            match event {
                GenerationEvent::Progress { computed, total } => {
                    let read = reading.note(computed, total, Instant::now());
                    if tx.send(AskEvent::Progress(read)).await.is_err() {
                        return Err(Stop::Disconnected);
                    }
                }
                GenerationEvent::Token {
                    id,
                    text: piece,
                    top_logprobs,
                } => {
                    steps.push(abstention::Step {
                        token: id,
                        top: top_logprobs,
                    });
                    if piece.is_empty() {
                        continue;
                    }
                    text.push_str(&piece);
                    if stream_text {
                        self.first_token_ms.get_or_insert_with(|| ms(self.started));
                        if tx.send(AskEvent::Token(piece)).await.is_err() {
                            return Err(Stop::Disconnected);
                        }
                    }
                }
                GenerationEvent::Finished {
                    reason,
                    text: tail,
                    usage,
                } => {
                    if stream_text && !tail.is_empty() {
                        let _ = tx.send(AskEvent::Token(tail.clone())).await;
                    }
                    text.push_str(&tail);
                    self.usage.prompt_tokens += usage.prompt_tokens;
                    self.usage.cached_prompt_tokens += usage.cached_prompt_tokens;
                    self.usage.completion_tokens += usage.completion_tokens;
                    return Ok(Generated {
                        text,
                        reason,
                        steps,
                    });
                }
                GenerationEvent::Failed { message } => {
                    return Err(Stop::Failed(ApiError::from(
                        docqa_engine::EngineError::Internal(message),
                    )));
                }
            }
        }
        Err(Stop::Failed(ApiError::internal(
            "the engine ended a request without finishing it",
        )))
    }

    async fn finish(self, answered: Answered, gen_start: Instant) -> AskEvent {
        let Answered {
            prepared,
            generated,
            fallback,
            refused,
        } = answered;
        let text = generated.text.trim().to_string();
        let answerable = !refused;
        let citations = if answerable {
            citations::cite(&self.state, &self.tenant_id, &text, &prepared).await
        } else {
            Vec::new()
        };
        let timings = Timings {
            retrieval_ms: self.plan.retrieval_ms,
            prompt_ms: prepared.prompt_ms,
            first_token_ms: self.first_token_ms.unwrap_or_else(|| ms(self.started)),
            generation_ms: ms(gen_start),
            total_ms: ms(self.started),
        };
        let final_answer = FinalAnswer {
            answer_id: self.answer_id.clone(),
            question: self.input.question.clone(),
            answer: if answerable {
                text
            } else {
                prompt::NOT_FOUND.to_string()
            },
            answerable,
            route: prepared.route,
            route_reasons: self.plan.reasons.clone(),
            self_route_fallback: fallback,
            signals: self.plan.signals.clone(),
            citations,
            passages: prepared
                .sources
                .iter()
                .map(|s| types::Passage {
                    number: s.number,
                    document_id: s.chunk.document_id.clone(),
                    chunk_id: s.chunk.id,
                    ordinal: s.chunk.ordinal,
                    page_start: s.chunk.page_start,
                    page_end: s.chunk.page_end,
                })
                .collect(),
            finish_reason: generated.reason.as_str().to_string(),
            timings,
            usage: self.usage,
        };
        self.record(&final_answer).await;
        AskEvent::Done(Box::new(final_answer))
    }

    async fn record(&self, a: &FinalAnswer) {
        let reasons = json!(a.route_reasons);
        let cites = serde_json::to_value(&a.citations).unwrap_or_default();
        let times = json!({ "timings": a.timings, "signals": a.signals, "self_route_fallback": a.self_route_fallback });
        let outcome = AnswerOutcome {
            route: a.route.as_str(),
            route_reasons: &reasons,
            text: &a.answer,
            citations: &cites,
            timings: &times,
            prompt_tokens: a.usage.prompt_tokens as i64,
            cached_tokens: a.usage.cached_prompt_tokens as i64,
            completion_tokens: a.usage.completion_tokens as i64,
        };
        if let Err(error) = self
            .state
            .db
            .complete_answer(&self.answer_id, &outcome)
            .await
        {
            tracing::error!(%error, "cannot store an answer");
        }
        let support = a.signals.abstention.last().map(|c| c.support);
        tracing::info!(answer = %a.answer_id, route = a.route.as_str(), fallback = a.self_route_fallback,
            answerable = a.answerable, support, total_ms = a.timings.total_ms, "answered");
        self.state.metrics.observe_answer(
            a.route.as_str(),
            true,
            a.timings.total_ms as f64 / 1000.0,
        );
    }
}

fn ms(since: Instant) -> u64 {
    since.elapsed().as_millis() as u64
}
