//! Answering a question: resolve its scope, choose the path (RAG window or whole document), build the
//! prompt, generate with the engine, then cite. [`start`] runs the answer on its own task and streams
//! [`AskEvent`]s; dropping the receiver cancels the generation.
//!
//! Files: [`scope`] (which documents, which route and why), [`prompt`] (filling the window),
//! [`citations`] (which sources the answer used), [`types`] (request and answer shapes).

pub mod citations;
pub mod prompt;
pub mod scope;
pub mod types;

use std::sync::Arc;
use std::time::Instant;

use docqa_engine::sampling::SamplingParams;
use docqa_engine::serving::{FinishReason, GenerateRequest, GenerationEvent};
use serde_json::json;
use tokio::sync::mpsc;

use crate::api::error::ApiError;
use crate::db::answers::AnswerOutcome;
use crate::state::AppState;
pub use types::{AskEvent, AskInput, FinalAnswer, RouteChoice, Scope, Timings, Usage};

/// Validates the question, prepares the prompt (errors here are answered before any streaming), then
/// generates on a background task that sends tokens and the final answer.
pub async fn start(
    state: Arc<AppState>,
    tenant_id: String,
    input: AskInput,
) -> Result<mpsc::Receiver<AskEvent>, ApiError> {
    let started = Instant::now();
    let max_tokens = input.validate(state.config.max_answer_tokens)?;
    let docs = scope::resolve(&state, &tenant_id, &input.scope).await?;
    let plan = scope::choose_route(&state, &docs, input.route, max_tokens)?;
    let prepared = prompt::prepare(&state, &tenant_id, &input, &docs, plan, max_tokens).await?;
    let answer_id = crate::db::new_id();
    let scope_json = serde_json::to_value(&input.scope).unwrap_or_default();
    state
        .db
        .insert_answer(
            &answer_id,
            &tenant_id,
            &input.question,
            &scope_json,
            input.route.as_str(),
        )
        .await?;
    let params = SamplingParams {
        temperature: input.temperature.unwrap_or(0.0),
        max_tokens,
        seed: input.seed,
        ..SamplingParams::default()
    };
    let request = GenerateRequest::new(prepared.prompt.clone(), params);
    let stream = match state.engine.generate(request).await {
        Ok(s) => s,
        Err(e) => {
            let err = ApiError::from(e);
            let _ = state.db.fail_answer(&answer_id, &err.message).await;
            state
                .metrics
                .observe_answer(prepared.route.as_str(), false, 0.0);
            return Err(err);
        }
    };
    let (tx, rx) = mpsc::channel(64);
    let ctx = Generation {
        state,
        tenant_id,
        answer_id,
        prepared,
        started,
        input,
    };
    tokio::spawn(ctx.run(stream, tx));
    Ok(rx)
}

struct Generation {
    state: Arc<AppState>,
    tenant_id: String,
    answer_id: String,
    prepared: prompt::Prepared,
    started: Instant,
    input: AskInput,
}

impl Generation {
    async fn run(self, mut stream: docqa_engine::serving::TokenStream, tx: mpsc::Sender<AskEvent>) {
        let gen_start = Instant::now();
        let mut text = String::new();
        let mut first_token_ms = None;
        while let Some(event) = stream.next().await {
            match event {
                GenerationEvent::Token { text: piece, .. } => {
                    first_token_ms.get_or_insert_with(|| ms(self.started));
                    if piece.is_empty() {
                        continue;
                    }
                    text.push_str(&piece);
                    if tx.send(AskEvent::Token(piece)).await.is_err() {
                        // The caller went away: dropping the stream cancels the generation.
                        let _ = self
                            .state
                            .db
                            .fail_answer(&self.answer_id, "the caller disconnected")
                            .await;
                        return;
                    }
                }
                GenerationEvent::Finished {
                    reason,
                    text: tail,
                    usage,
                } => {
                    text.push_str(&tail);
                    if !tail.is_empty() {
                        let _ = tx.send(AskEvent::Token(tail)).await;
                    }
                    let timings = Timings {
                        retrieval_ms: self.prepared.retrieval_ms,
                        prompt_ms: self.prepared.prompt_ms,
                        first_token_ms: first_token_ms.unwrap_or_else(|| ms(self.started)),
                        generation_ms: ms(gen_start),
                        total_ms: ms(self.started),
                    };
                    let usage = Usage {
                        prompt_tokens: usage.prompt_tokens,
                        cached_prompt_tokens: usage.cached_prompt_tokens,
                        completion_tokens: usage.completion_tokens,
                    };
                    let answer = self.finish(text, reason, timings, usage).await;
                    let _ = tx.send(answer).await;
                    return;
                }
                GenerationEvent::Failed { message } => {
                    let _ = self.state.db.fail_answer(&self.answer_id, &message).await;
                    self.state
                        .metrics
                        .observe_answer(self.prepared.route.as_str(), false, 0.0);
                    let err = ApiError::from(docqa_engine::EngineError::Internal(message));
                    let _ = tx.send(AskEvent::Error(err)).await;
                    return;
                }
            }
        }
    }

    async fn finish(
        self,
        text: String,
        reason: FinishReason,
        timings: Timings,
        usage: Usage,
    ) -> AskEvent {
        let citations = citations::cite(&self.state, &self.tenant_id, &text, &self.prepared).await;
        let route = self.prepared.route;
        let final_answer = FinalAnswer {
            answer_id: self.answer_id.clone(),
            question: self.input.question.clone(),
            answer: text.trim().to_string(),
            route,
            route_reasons: self.prepared.reasons.clone(),
            citations,
            finish_reason: match reason {
                FinishReason::Stop => "stop",
                FinishReason::Length => "length",
                FinishReason::Cancelled => "cancelled",
            }
            .to_string(),
            timings,
            usage,
        };
        let reasons = json!(final_answer.route_reasons);
        let cites = serde_json::to_value(&final_answer.citations).unwrap_or_default();
        let times = serde_json::to_value(final_answer.timings).unwrap_or_default();
        let outcome = AnswerOutcome {
            route: route.as_str(),
            route_reasons: &reasons,
            text: &final_answer.answer,
            citations: &cites,
            timings: &times,
            prompt_tokens: usage.prompt_tokens as i64,
            cached_tokens: usage.cached_prompt_tokens as i64,
            completion_tokens: usage.completion_tokens as i64,
        };
        if let Err(error) = self
            .state
            .db
            .complete_answer(&self.answer_id, &outcome)
            .await
        {
            tracing::error!(%error, "cannot store an answer");
        }
        self.state
            .metrics
            .observe_answer(route.as_str(), true, timings.total_ms as f64 / 1000.0);
        AskEvent::Done(Box::new(final_answer))
    }
}

fn ms(since: Instant) -> u64 {
    since.elapsed().as_millis() as u64
}
