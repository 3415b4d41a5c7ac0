//! The engine as an actor: a thread owns the [`EngineCore`] and steps it while there is work; callers talk to
//! it through channels.
//!
//! `generate` answers admission at once (a typed error when the request can never fit or the queue is full)
//! and then streams [`GenerationEvent`]s. Dropping a [`TokenStream`] cancels its request and frees its KV
//! blocks. Embeddings run on a second thread that owns the embedder, so they never wait behind generation.

use std::collections::HashMap;
use std::sync::mpsc as std_mpsc;
use std::sync::{Arc, Mutex};

use tokio::sync::{mpsc, oneshot};

use super::core::EngineCore;
use super::request::{GenerateRequest, GenerationEvent};
use super::stats::EngineStats;
use crate::backend::Backend;
use crate::error::{EngineError, Result};
use crate::kv::manager::{CacheNamespace, CacheScope, RequestId};
use crate::models::bert::BertEmbedder;

enum Command {
    Generate {
        request: GenerateRequest,
        admitted: oneshot::Sender<Result<RequestId>>,
        events: mpsc::UnboundedSender<GenerationEvent>,
    },
    Cancel(RequestId),
    CachedPrefix {
        prompt: Vec<u32>,
        scope: CacheScope,
        reply: oneshot::Sender<usize>,
    },
    ForgetPrefix {
        tokens: Vec<u32>,
        scope: CacheScope,
        reply: oneshot::Sender<usize>,
    },
    ForgetNamespace {
        namespace: CacheNamespace,
        reply: oneshot::Sender<usize>,
    },
    PersistKv {
        reply: oneshot::Sender<Result<usize>>,
    },
}

struct EmbedJob {
    texts: Vec<String>,
    reply: oneshot::Sender<Result<Vec<Vec<f32>>>>,
}

/// A cloneable handle to a running engine.
#[derive(Clone)]
pub struct EngineHandle {
    commands: std_mpsc::Sender<Command>,
    embeds: Option<std_mpsc::Sender<EmbedJob>>,
    stats: Arc<Mutex<EngineStats>>,
    alive: std::sync::Weak<()>,
}

/// The events of one request. Dropping it cancels the request.
pub struct TokenStream {
    id: RequestId,
    events: mpsc::UnboundedReceiver<GenerationEvent>,
    commands: std_mpsc::Sender<Command>,
    done: bool,
}

impl TokenStream {
    /// The engine's id of this request.
    pub fn id(&self) -> RequestId {
        self.id
    }

    /// The next event; None after the last.
    pub async fn next(&mut self) -> Option<GenerationEvent> {
        let ev = self.events.recv().await;
        self.note(&ev);
        ev
    }

    /// The next event, blocking the calling thread (not for use inside an async runtime).
    pub fn blocking_next(&mut self) -> Option<GenerationEvent> {
        let ev = self.events.blocking_recv();
        self.note(&ev);
        ev
    }

    fn note(&mut self, ev: &Option<GenerationEvent>) {
        if matches!(
            ev,
            None | Some(GenerationEvent::Finished { .. } | GenerationEvent::Failed { .. })
        ) {
            self.done = true;
        }
    }
}

impl Drop for TokenStream {
    fn drop(&mut self) {
        if !self.done {
            let _ = self.commands.send(Command::Cancel(self.id));
        }
    }
}

impl EngineHandle {
    /// Start the engine thread for `core`, and an embedding thread when `embedder` is given.
    pub fn spawn<B: Backend + 'static>(
        core: EngineCore<B>,
        embedder: Option<BertEmbedder>,
    ) -> Result<Self> {
        let (commands, rx) = std_mpsc::channel();
        let stats = Arc::new(Mutex::new(core.stats()));
        let engine_stats = Arc::clone(&stats);
        let token = Arc::new(());
        let alive = Arc::downgrade(&token);
        let spawn_err =
            |e: std::io::Error| EngineError::Internal(format!("cannot start engine thread: {e}"));
        // The threads end by themselves once every handle and stream is dropped and no work is left.
        std::thread::Builder::new()
            .name("docqa-engine".into())
            .spawn(move || {
                let _alive = token;
                run_engine(core, rx, engine_stats)
            })
            .map_err(spawn_err)?;
        let embeds = match embedder {
            Some(model) => {
                let (tx, rx) = std_mpsc::channel();
                std::thread::Builder::new()
                    .name("docqa-embedder".into())
                    .spawn(move || run_embedder(model, rx))
                    .map_err(spawn_err)?;
                Some(tx)
            }
            None => None,
        };
        Ok(EngineHandle {
            commands,
            embeds,
            stats,
            alive,
        })
    }

    /// Queue a generation; fails at once if the engine refuses it (too large, overloaded, bad prompt).
    pub async fn generate(&self, request: GenerateRequest) -> Result<TokenStream> {
        let (rx_admit, mut stream) = self.submit(request)?;
        stream.id = rx_admit.await.map_err(|_| stopped())??;
        stream.done = false;
        Ok(stream)
    }

    /// [`EngineHandle::generate`] for callers outside an async runtime.
    pub fn generate_blocking(&self, request: GenerateRequest) -> Result<TokenStream> {
        let (rx_admit, mut stream) = self.submit(request)?;
        stream.id = rx_admit.blocking_recv().map_err(|_| stopped())??;
        stream.done = false;
        Ok(stream)
    }

    fn submit(
        &self,
        request: GenerateRequest,
    ) -> Result<(oneshot::Receiver<Result<RequestId>>, TokenStream)> {
        let (admitted, rx_admit) = oneshot::channel();
        let (events, rx_events) = mpsc::unbounded_channel();
        self.commands
            .send(Command::Generate {
                request,
                admitted,
                events,
            })
            .map_err(|_| stopped())?;
        let stream = TokenStream {
            id: 0,
            events: rx_events,
            commands: self.commands.clone(),
            done: true,
        };
        Ok((rx_admit, stream))
    }

    /// Embeddings of `texts` (unit length), from the embedding thread.
    pub async fn embed(&self, texts: Vec<String>) -> Result<Vec<Vec<f32>>> {
        let tx = self
            .embeds
            .as_ref()
            .ok_or_else(|| EngineError::InvalidConfig("no embedder loaded".into()))?;
        let (reply, rx) = oneshot::channel();
        tx.send(EmbedJob { texts, reply }).map_err(|_| stopped())?;
        rx.await.map_err(|_| stopped())?
    }

    /// How many leading tokens of `prompt` the prefix cache holds now (what a request would not have to
    /// compute).
    pub async fn cached_prefix_len(&self, prompt: Vec<u32>, scope: CacheScope) -> Result<usize> {
        let (reply, rx) = oneshot::channel();
        self.commands
            .send(Command::CachedPrefix {
                prompt,
                scope,
                reply,
            })
            .map_err(|_| stopped())?;
        rx.await.map_err(|_| stopped())
    }

    /// Drops the prefix-cache entries of `tokens`' full blocks (a deleted document's KV); returns how
    /// many blocks were forgotten.
    pub async fn forget_prefix(&self, tokens: Vec<u32>, scope: CacheScope) -> Result<usize> {
        let (reply, rx) = oneshot::channel();
        self.commands
            .send(Command::ForgetPrefix {
                tokens,
                scope,
                reply,
            })
            .map_err(|_| stopped())?;
        rx.await.map_err(|_| stopped())
    }

    /// Drops every cached KV block of `namespace` (a tenant's whole prefix cache); returns how many
    /// blocks were forgotten.
    pub async fn forget_namespace(&self, namespace: CacheNamespace) -> Result<usize> {
        let (reply, rx) = oneshot::channel();
        self.commands
            .send(Command::ForgetNamespace { namespace, reply })
            .map_err(|_| stopped())?;
        rx.await.map_err(|_| stopped())
    }

    /// Copies every cached KV block down to the lower tiers and on to disk, so the next start on the
    /// same disk tier finds them (called at a graceful shutdown); returns how many blocks the disk
    /// tier then holds.
    pub async fn persist_kv(&self) -> Result<usize> {
        let (reply, rx) = oneshot::channel();
        self.commands
            .send(Command::PersistKv { reply })
            .map_err(|_| stopped())?;
        rx.await.map_err(|_| stopped())?
    }

    /// Whether the engine thread is still running (it stops only when every handle is gone, or by a
    /// bug).
    pub fn is_running(&self) -> bool {
        self.alive.upgrade().is_some()
    }

    /// The engine's latest stats snapshot.
    pub fn stats(&self) -> EngineStats {
        self.stats.lock().map(|s| *s).unwrap_or_default()
    }
}

fn stopped() -> EngineError {
    EngineError::Internal("the engine thread has stopped".into())
}

/// How long an idle engine thread with copies pending (blocks to copy down under write-through, or
/// disk writes under way) waits for a command before copying more and publishing its counters.
const IDLE_COPY_POLL: std::time::Duration = std::time::Duration::from_millis(5);

/// The engine thread: take commands (blocking while idle), step while there is work.
fn run_engine<B: Backend>(
    mut core: EngineCore<B>,
    rx: std_mpsc::Receiver<Command>,
    stats: Arc<Mutex<EngineStats>>,
) {
    let mut streams: HashMap<RequestId, mpsc::UnboundedSender<GenerationEvent>> = HashMap::new();
    let mut copies_pending = false;
    loop {
        let first = if core.has_work() {
            rx.try_recv().ok()
        } else if copies_pending {
            match rx.recv_timeout(IDLE_COPY_POLL) {
                Err(std_mpsc::RecvTimeoutError::Timeout) => {
                    copies_pending = core.copy_down_while_idle().unwrap_or_else(|e| {
                        tracing::warn!(error = %e, "KV blocks could not be copied down");
                        false
                    });
                    publish(&stats, &core);
                    continue;
                }
                got => got.ok(),
            }
        } else {
            rx.recv().ok()
        };
        let Some(first) = first.or_else(|| core.has_work().then_some(Command::Cancel(0))) else {
            // Every handle is gone and nothing is running: keep what the KV cache holds for the next
            // start (a no-op without lower tiers).
            if let Err(e) = core.persist_kv() {
                tracing::warn!(error = %e, "the KV cache could not be copied down at shutdown");
            }
            return;
        };
        for cmd in std::iter::once(first).chain(rx.try_iter()) {
            accept(&mut core, &mut streams, cmd);
        }
        let closed: Vec<RequestId> = streams
            .iter()
            .filter(|(_, s)| s.is_closed())
            .map(|(id, _)| *id)
            .collect();
        for id in closed {
            streams.remove(&id);
            let _ = core.abort(id);
        }
        if core.has_work() {
            match core.step() {
                Ok(events) => deliver(&mut core, &mut streams, events),
                Err(e) => fail_all(&mut core, &mut streams, &e),
            }
            if let Some(why) = core.group_stopped() {
                // Every later step would fail the same way: the thread ends, so the handles report
                // the engine stopped (readiness fails) and new requests are refused at once.
                tracing::error!(%why, "the tensor-parallel group has stopped; the engine stops");
                return;
            }
        }
        copies_pending = !core.has_work() && core.copies_pending();
        publish(&stats, &core);
    }
}

/// Makes `core`'s counters visible to the handles.
fn publish<B: Backend>(stats: &Mutex<EngineStats>, core: &EngineCore<B>) {
    if let Ok(mut s) = stats.lock() {
        *s = core.stats();
    }
}

fn accept<B: Backend>(
    core: &mut EngineCore<B>,
    streams: &mut HashMap<RequestId, mpsc::UnboundedSender<GenerationEvent>>,
    cmd: Command,
) {
    match cmd {
        Command::Generate {
            request,
            admitted,
            events,
        } => match core.add_request(request) {
            Ok(id) => {
                if admitted.send(Ok(id)).is_ok() {
                    streams.insert(id, events);
                } else {
                    let _ = core.abort(id);
                }
            }
            Err(e) => {
                let _ = admitted.send(Err(e));
            }
        },
        Command::Cancel(id) => {
            if streams.remove(&id).is_some() {
                let _ = core.abort(id);
            }
        }
        Command::CachedPrefix {
            prompt,
            scope,
            reply,
        } => {
            let _ = reply.send(core.cached_prefix_len(&prompt, scope));
        }
        Command::ForgetPrefix {
            tokens,
            scope,
            reply,
        } => {
            let _ = reply.send(core.forget_prefix(&tokens, scope));
        }
        Command::ForgetNamespace { namespace, reply } => {
            let _ = reply.send(core.forget_namespace(namespace));
        }
        Command::PersistKv { reply } => {
            let _ = reply.send(core.persist_kv());
        }
    }
}

fn deliver<B: Backend>(
    core: &mut EngineCore<B>,
    streams: &mut HashMap<RequestId, mpsc::UnboundedSender<GenerationEvent>>,
    events: Vec<(RequestId, GenerationEvent)>,
) {
    for (id, ev) in events {
        let last = matches!(ev, GenerationEvent::Finished { .. });
        let delivered = streams.get(&id).is_some_and(|s| s.send(ev).is_ok());
        if last {
            streams.remove(&id);
        } else if !delivered {
            streams.remove(&id);
            let _ = core.abort(id);
        }
    }
}

fn fail_all<B: Backend>(
    core: &mut EngineCore<B>,
    streams: &mut HashMap<RequestId, mpsc::UnboundedSender<GenerationEvent>>,
    error: &EngineError,
) {
    tracing::error!(%error, "engine step failed; failing every running request");
    for (id, s) in streams.drain() {
        let _ = s.send(GenerationEvent::Failed {
            message: error.to_string(),
        });
        let _ = core.abort(id);
    }
}

fn run_embedder(model: BertEmbedder, rx: std_mpsc::Receiver<EmbedJob>) {
    for job in rx {
        let texts: Vec<&str> = job.texts.iter().map(String::as_str).collect();
        let _ = job.reply.send(model.embed(&texts));
    }
}
