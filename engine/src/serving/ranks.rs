//! The other ranks of a tensor-parallel engine. Each runs in a thread of its own with its part of the
//! model, its own KV pool and workspace (the same block ids as rank 0's, its share of the KV heads),
//! and runs every forward pass rank 0 runs, on the same batch; the collectives inside the passes join
//! them. Rank 0 stays in the engine's thread and its logits are the ones sampled, so the scheduler,
//! the prefix cache and the samplers above see one model. A whole model has no followers.
//!
//! Between passes a follower also reads and writes whole KV blocks of its pool when the tiered cache
//! copies blocks down or brings them back ([`super::group_blocks`]).

use std::sync::Arc;
use std::sync::mpsc::{Receiver, Sender, channel};
use std::thread::JoinHandle;

use crate::backend::{Backend, KvShape};
use crate::error::{EngineError, Result};
use crate::kv::tiers::{BlockBuf, BlockBytes};
use crate::models::llama::{Llama, WorkspaceSize};
use crate::models::{Batch, KvPool};

/// Ranks 1.. of a group, each waiting for the next command.
pub(crate) struct Followers {
    ranks: Vec<Follower>,
}

/// What the engine asks of a follower.
enum Command {
    /// One forward pass over the batch.
    Pass(Arc<Batch>),
    /// The rank's share of these KV blocks, one heap record each.
    Read(Vec<u32>),
    /// Writes the rank's share of these KV blocks from the records, waiting until they are written.
    Write(Vec<u32>, Vec<BlockBytes>),
}

/// A follower's answer to a command: the records it read (none for the other commands).
type Reply = Result<Vec<BlockBuf>>;

struct Follower {
    commands: Option<Sender<Command>>,
    done: Receiver<Reply>,
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

    /// How many followers there are (the group's size less rank 0).
    pub(crate) fn len(&self) -> usize {
        self.ranks.len()
    }

    /// Hands `batch` to every follower; each starts its forward pass at once.
    pub(crate) fn start(&self, batch: &Arc<Batch>) -> Result<()> {
        self.send_each(|| Command::Pass(Arc::clone(batch)))
    }

    /// Waits until every follower has issued its pass (or set up, after [`Followers::spawn`]); the
    /// first error any of them met.
    pub(crate) fn finish(&self) -> Result<()> {
        self.replies().map(|_| ())
    }

    /// Asks every follower for its share of `blocks` (answered by [`Followers::records_read`]).
    pub(crate) fn start_reading(&self, blocks: &[u32]) -> Result<()> {
        self.send_each(|| Command::Read(blocks.to_vec()))
    }

    /// The records each follower read, ranks 1.. in order, each in the order of the blocks asked for.
    pub(crate) fn records_read(&self) -> Result<Vec<Vec<BlockBuf>>> {
        self.replies()
    }

    /// Has follower `r` (rank `r + 1`) write `shares[r][i]` into block `blocks[i]`, all of them at
    /// once ([`Followers::finish`] waits until every share is written).
    pub(crate) fn start_writing(&self, blocks: &[u32], shares: Vec<Vec<BlockBytes>>) -> Result<()> {
        let mut shares = shares.into_iter();
        self.send_each(|| Command::Write(blocks.to_vec(), shares.next().unwrap_or_default()))
    }

    fn send_each(&self, mut command: impl FnMut() -> Command) -> Result<()> {
        for rank in &self.ranks {
            let sent = rank.commands.as_ref().map(|c| c.send(command()));
            if !matches!(sent, Some(Ok(()))) {
                return Err(gone());
            }
        }
        Ok(())
    }

    /// Every follower's reply to the last command, in rank order; the first error any of them met
    /// (after all have answered, so none is left mid-command).
    fn replies(&self) -> Result<Vec<Vec<BlockBuf>>> {
        let mut first = Ok(Vec::with_capacity(self.ranks.len()));
        for rank in &self.ranks {
            let reply = rank.done.recv().unwrap_or_else(|_| Err(gone()));
            match (&mut first, reply) {
                (Ok(all), Ok(records)) => all.push(records),
                (Ok(_), Err(e)) => first = Err(e),
                (Err(_), _) => {}
            }
        }
        first
    }
}

/// Rank 0 of `ranks` and the others, in order; fails when none is given (`needing` says what needs a
/// model) or when they are not the whole group rank 0 belongs to.
pub(crate) fn leader_and_others<B: Backend>(
    ranks: Vec<Llama<B>>,
    needing: &str,
) -> Result<(Llama<B>, Vec<Llama<B>>)> {
    let mut ranks = ranks.into_iter();
    let model = ranks
        .next()
        .ok_or_else(|| EngineError::InvalidConfig(format!("{needing} needs a model")))?;
    let others: Vec<Llama<B>> = ranks.collect();
    if others.len() + 1 != model.shard().world {
        return Err(EngineError::InvalidConfig(format!(
            "{} ranks given for a tensor-parallel group of {}",
            others.len() + 1,
            model.shard().world
        )));
    }
    Ok((model, others))
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
        let (commands, inbox) = channel::<Command>();
        let (report, done) = channel();
        let rank = model.shard().rank;
        let thread = std::thread::Builder::new()
            .name(format!("docqa-rank-{rank}"))
            .spawn(move || follow(model, (shape, size), inbox, report))
            .map_err(|e| EngineError::Internal(format!("starting rank {rank}'s thread: {e}")))?;
        Ok(Follower {
            commands: Some(commands),
            done,
            thread: Some(thread),
        })
    }
}

/// A follower's thread: set up, say so, then carry out commands until the engine goes.
fn follow<B: Backend>(
    model: Llama<B>,
    (shape, size): (KvShape, WorkspaceSize),
    inbox: Receiver<Command>,
    report: Sender<Reply>,
) {
    let setup = KvPool::new(&model.backend, model.config.num_hidden_layers, shape)
        .and_then(|kv| Ok((kv, model.workspace(size)?)));
    let (mut kv, mut ws) = match setup {
        Ok(parts) => {
            let _ = report.send(Ok(Vec::new()));
            parts
        }
        Err(e) => {
            let _ = report.send(Err(e));
            return;
        }
    };
    for command in inbox {
        let reply = match command {
            Command::Pass(batch) => pass(&model, &batch, &mut kv, &mut ws).map(|_| Vec::new()),
            Command::Read(blocks) => read_share(&model.backend, &kv, &blocks),
            Command::Write(blocks, records) => kv
                .write_blocks(&model.backend, &blocks, &records)
                .and_then(|()| model.backend.wait_kv_writes(0))
                .map(|()| Vec::new()),
        };
        if report.send(reply).is_err() {
            return;
        }
    }
}

/// One forward pass; a panic in it stops the group (so rank 0 is not left waiting in a collective)
/// and is reported as an error.
fn pass<B: Backend>(
    model: &Llama<B>,
    batch: &Batch,
    kv: &mut KvPool<B>,
    ws: &mut crate::models::workspace::LlamaWorkspace<B>,
) -> Result<usize> {
    let pass = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        model.forward(batch, kv, ws)
    }));
    pass.unwrap_or_else(|_| {
        let why = format!("rank {} panicked in a forward pass", model.shard().rank);
        model.stop_group(&why);
        Err(EngineError::Internal(why))
    })
}

/// This rank's share of `blocks`, in heap records whose bytes are all there on return.
pub(super) fn read_share<B: Backend>(
    backend: &B,
    kv: &KvPool<B>,
    blocks: &[u32],
) -> Result<Vec<BlockBuf>> {
    let mut records: Vec<BlockBuf> = blocks
        .iter()
        .map(|_| BlockBuf::from(vec![0; kv.block_bytes()]))
        .collect();
    kv.read_blocks(backend, blocks, &mut records)?;
    match records.iter().all(BlockBuf::settle) {
        true => Ok(records),
        false => Err(EngineError::Internal(
            "reading KV blocks from the device failed".into(),
        )),
    }
}

impl Drop for Followers {
    fn drop(&mut self) {
        for rank in &mut self.ranks {
            rank.commands = None; // closes the inbox: the thread's loop ends
        }
        for rank in &mut self.ranks {
            if let Some(thread) = rank.thread.take() {
                let _ = thread.join();
            }
        }
    }
}
