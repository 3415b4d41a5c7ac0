//! The other ranks of a tensor-parallel engine. Each runs in a thread of its own with its part of the
//! model, its own KV pool and workspace (the same block ids as rank 0's, its share of the KV heads),
//! and runs every forward pass rank 0 runs, on the same batch; the collectives inside the passes join
//! them. Rank 0 stays in the engine's thread and its logits are the ones sampled, so the scheduler,
//! the prefix cache and the samplers above see one model. A whole model has no followers.

use std::sync::Arc;
use std::sync::mpsc::{Receiver, Sender, channel};
use std::thread::JoinHandle;

use crate::backend::{Backend, KvShape};
use crate::error::{EngineError, Result};
use crate::models::llama::{Llama, WorkspaceSize};
use crate::models::{Batch, KvPool};

/// Ranks 1.. of a group, each waiting for the next batch.
pub(crate) struct Followers {
    ranks: Vec<Follower>,
}

struct Follower {
    batches: Option<Sender<Arc<Batch>>>,
    done: Receiver<Result<usize>>,
    thread: Option<JoinHandle<()>>,
}

impl Followers {
    /// Starts one thread per model (ranks 1.. in order), each allocating its KV pool of `shape` and a
    /// workspace of `size` before it takes batches; fails when any of them could not.
    pub(crate) fn spawn<B: Backend + 'static>(
        models: Vec<Llama<B>>,
        shape: KvShape,
        size: WorkspaceSize,
    ) -> Result<Self> {
        let ranks: Vec<Follower> = models
            .into_iter()
            .map(|model| Follower::spawn(model, shape, size))
            .collect::<Result<_>>()?;
        let followers = Followers { ranks };
        followers.finish()?;
        Ok(followers)
    }

    /// Hands `batch` to every follower; each starts its forward pass at once.
    pub(crate) fn start(&self, batch: &Arc<Batch>) -> Result<()> {
        for rank in &self.ranks {
            let sent = rank.batches.as_ref().map(|b| b.send(Arc::clone(batch)));
            if !matches!(sent, Some(Ok(()))) {
                return Err(gone());
            }
        }
        Ok(())
    }

    /// Waits until every follower has issued its pass (or set up, after [`Followers::spawn`]); the
    /// first error any of them met.
    pub(crate) fn finish(&self) -> Result<()> {
        let mut first = Ok(());
        for rank in &self.ranks {
            let done = rank.done.recv().unwrap_or_else(|_| Err(gone()));
            if let (Ok(()), Err(e)) = (&first, done) {
                first = Err(e);
            }
        }
        first
    }
}

fn gone() -> EngineError {
    EngineError::Internal("a tensor-parallel rank's thread has stopped".into())
}

impl Follower {
    fn spawn<B: Backend + 'static>(
        model: Llama<B>,
        shape: KvShape,
        size: WorkspaceSize,
    ) -> Result<Self> {
        let (batches, inbox) = channel::<Arc<Batch>>();
        let (report, done) = channel();
        let rank = model.shard().rank;
        let thread = std::thread::Builder::new()
            .name(format!("docqa-rank-{rank}"))
            .spawn(move || follow(model, (shape, size), inbox, report))
            .map_err(|e| EngineError::Internal(format!("starting rank {rank}'s thread: {e}")))?;
        Ok(Follower {
            batches: Some(batches),
            done,
            thread: Some(thread),
        })
    }
}

/// A follower's thread: set up, say so, then one forward pass per batch until the engine goes.
fn follow<B: Backend>(
    model: Llama<B>,
    (shape, size): (KvShape, WorkspaceSize),
    inbox: Receiver<Arc<Batch>>,
    report: Sender<Result<usize>>,
) {
    let setup = KvPool::new(&model.backend, model.config.num_hidden_layers, shape)
        .and_then(|kv| Ok((kv, model.workspace(size)?)));
    let (mut kv, mut ws) = match setup {
        Ok(parts) => {
            let _ = report.send(Ok(0));
            parts
        }
        Err(e) => {
            let _ = report.send(Err(e));
            return;
        }
    };
    for batch in inbox {
        let pass = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            model.forward(&batch, &mut kv, &mut ws)
        }));
        let pass = pass.unwrap_or_else(|_| {
            let why = format!("rank {} panicked in a forward pass", model.shard().rank);
            model.stop_group(&why);
            Err(EngineError::Internal(why))
        });
        if report.send(pass).is_err() {
            return;
        }
    }
}

impl Drop for Followers {
    fn drop(&mut self) {
        for rank in &mut self.ranks {
            rank.batches = None; // closes the inbox: the thread's loop ends
        }
        for rank in &mut self.ranks {
            if let Some(thread) = rank.thread.take() {
                let _ = thread.join();
            }
        }
    }
}
