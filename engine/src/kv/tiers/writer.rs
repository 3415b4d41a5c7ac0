//! The disk tier's writer: a thread that writes the blocks pushed out of host memory to files, several
//! at once, so the engine thread never waits for a disk (only for room in a bounded queue when the disk
//! falls far behind). Deletions pass through it too, after the writes queued before them.

use std::sync::mpsc::{self, Receiver, SyncSender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use rayon::prelude::*;

use super::BlockBytes;
use super::disk::DiskTier;
use super::record::BlockOwner;
use crate::kv::block_hash::BlockHash;
use crate::kv::manager::CacheNamespace;

/// Blocks waiting for the disk at most (a few GiB of an 8B model's KV).
pub(crate) const QUEUE: usize = 1024;

/// Files written at once. Each write ends with an fsync, and a disk commits several in parallel: on
/// the H200 machine's virtual disk, 2,048 files of 2 MiB took 4.5 s from one writer and 2.0 s from 16.
const WRITERS: usize = 8;

/// Writes taken off the queue together at most; a batch ends before a block already in it.
const BATCH: usize = 8 * WRITERS;

/// One block on its way to a file.
struct Write {
    hash: BlockHash,
    owner: BlockOwner,
    bytes: BlockBytes,
}

enum Job {
    Write(Write),
    Settle {
        hash: Option<BlockHash>,
        namespace: Option<CacheNamespace>,
    },
    Flush(mpsc::Sender<()>),
}

/// The writer thread of one disk tier; dropping it finishes the queued writes.
#[derive(Debug)]
pub(crate) struct DiskWriter {
    jobs: Option<SyncSender<Job>>,
    thread: Option<JoinHandle<()>>,
}

fn lock(disk: &Mutex<DiskTier>) -> std::sync::MutexGuard<'_, DiskTier> {
    disk.lock().unwrap_or_else(|e| e.into_inner())
}

fn run(disk: Arc<Mutex<DiskTier>>, jobs: Receiver<Job>) {
    let writers = rayon::ThreadPoolBuilder::new()
        .num_threads(WRITERS)
        .thread_name(|i| format!("docqa-kv-disk-{i}"))
        .build();
    let mut next = None;
    while let Some(job) = next.take().or_else(|| jobs.recv().ok()) {
        match job {
            Job::Write(first) => {
                let (batch, after) = take_batch(first, &jobs);
                next = after;
                match &writers {
                    Ok(pool) => pool.install(|| batch.par_iter().for_each(|w| write(&disk, w))),
                    Err(_) => batch.iter().for_each(|w| write(&disk, w)),
                }
            }
            Job::Settle { hash, namespace } => lock(&disk).settle_forgotten(hash, namespace),
            Job::Flush(done) => {
                let _ = done.send(());
            }
        }
    }
}

/// `first` and the writes queued right behind it, up to [`BATCH`] of distinct blocks; the job that
/// ended the batch, if it ended on one.
fn take_batch(first: Write, jobs: &Receiver<Job>) -> (Vec<Write>, Option<Job>) {
    let mut batch = vec![first];
    while batch.len() < BATCH {
        match jobs.try_recv() {
            Ok(Job::Write(w)) if batch.iter().all(|b| b.hash != w.hash) => batch.push(w),
            Ok(other) => return (batch, Some(other)),
            Err(_) => break,
        }
    }
    (batch, None)
}

/// Writes one block's file, once its copy from the device is done.
fn write(disk: &Mutex<DiskTier>, w: &Write) {
    if !w.bytes.settle() {
        lock(disk).dequeue(w.hash);
        tracing::warn!("a KV block's copy from the device failed; it is not written to disk");
        return;
    }
    let pending = lock(disk).begin_write(w.hash, w.owner, w.bytes.len());
    let written = pending.and_then(|p| {
        let result = p.write(&w.bytes);
        lock(disk).finish_write(p, result)
    });
    lock(disk).dequeue(w.hash);
    if let Err(e) = written {
        tracing::warn!(error = %e, "a KV block could not be written to the disk tier; it is dropped");
    }
}

impl DiskWriter {
    /// Starts the writer of `disk`.
    pub fn spawn(disk: Arc<Mutex<DiskTier>>) -> std::io::Result<Self> {
        let (jobs, rx) = mpsc::sync_channel(QUEUE);
        let thread = std::thread::Builder::new()
            .name("docqa-kv-disk".into())
            .spawn(move || run(disk, rx))?;
        Ok(DiskWriter {
            jobs: Some(jobs),
            thread: Some(thread),
        })
    }

    fn send(&self, job: Job) {
        if let Some(jobs) = &self.jobs {
            let _ = jobs.send(job);
        }
    }

    /// Queues a block's write (the caller has entered it with [`DiskTier::enqueue`]).
    pub fn write(&self, hash: BlockHash, owner: BlockOwner, bytes: BlockBytes) {
        self.send(Job::Write(Write { hash, owner, bytes }));
    }

    /// Queues a block's write if the queue has room now (the caller has entered it with
    /// [`DiskTier::enqueue`], and takes it out again when this returns false).
    pub fn try_write(&self, hash: BlockHash, owner: BlockOwner, bytes: BlockBytes) -> bool {
        self.jobs.as_ref().is_some_and(|jobs| {
            jobs.try_send(Job::Write(Write { hash, owner, bytes }))
                .is_ok()
        })
    }

    /// Queues the end of a forgetting (see [`DiskTier::forget`]), after the writes queued before it.
    pub fn settle(&self, hash: Option<BlockHash>, namespace: Option<CacheNamespace>) {
        self.send(Job::Settle { hash, namespace });
    }

    /// Waits until every write queued so far is done.
    pub fn flush(&self) {
        let (done, wait) = mpsc::channel();
        self.send(Job::Flush(done));
        let _ = wait.recv();
    }
}

impl Drop for DiskWriter {
    fn drop(&mut self) {
        self.jobs = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kv::tiers::BlockBuf;

    fn write_of(hash: u128) -> Job {
        Job::Write(Write {
            hash: BlockHash(hash),
            owner: BlockOwner::from(0),
            bytes: Arc::new(BlockBuf::from(vec![0u8; 4])),
        })
    }

    fn hashes(batch: &[Write]) -> Vec<u128> {
        batch.iter().map(|w| w.hash.0).collect()
    }

    #[test]
    fn a_batch_of_writes_ends_before_a_deletion_or_a_block_already_in_it() {
        let (tx, rx) = mpsc::sync_channel(16);
        for job in [write_of(2), write_of(3), write_of(2), write_of(4)] {
            tx.send(job).unwrap();
        }
        tx.send(Job::Settle {
            hash: Some(BlockHash(4)),
            namespace: None,
        })
        .unwrap();
        let Job::Write(first) = write_of(1) else {
            unreachable!()
        };
        let (batch, after) = take_batch(first, &rx);
        assert_eq!(hashes(&batch), [1, 2, 3]);
        let Some(Job::Write(again)) = after else {
            panic!("the repeated block ends the batch and comes next");
        };
        assert_eq!(again.hash.0, 2);
        let (batch, after) = take_batch(again, &rx);
        assert_eq!(hashes(&batch), [2, 4]);
        assert!(
            matches!(after, Some(Job::Settle { .. })),
            "the deletion waits for the batch"
        );
    }
}
