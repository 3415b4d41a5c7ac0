//! The disk tier's writer: a thread that writes the blocks pushed out of host memory to files, in the
//! order they come, so the engine thread never waits for a disk (only for room in a bounded queue when
//! the disk falls far behind). Deletions pass through it too, after the writes queued before them.

use std::sync::mpsc::{self, Receiver, SyncSender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use super::BlockBytes;
use super::disk::DiskTier;
use super::record::BlockOwner;
use crate::kv::block_hash::BlockHash;
use crate::kv::manager::CacheNamespace;

/// Blocks waiting for the disk at most (a few GiB of an 8B model's KV).
const QUEUE: usize = 1024;

enum Job {
    Write {
        hash: BlockHash,
        owner: BlockOwner,
        bytes: BlockBytes,
    },
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
    for job in jobs {
        match job {
            Job::Write { hash, owner, bytes } => {
                if !bytes.settle() {
                    lock(&disk).dequeue(hash);
                    tracing::warn!(
                        "a KV block's copy from the device failed; it is not written to disk"
                    );
                    continue;
                }
                let pending = lock(&disk).begin_write(hash, owner, bytes.len());
                let written = pending.and_then(|p| {
                    let result = p.write(&bytes);
                    lock(&disk).finish_write(p, result)
                });
                lock(&disk).dequeue(hash);
                if let Err(e) = written {
                    tracing::warn!(error = %e, "a KV block could not be written to the disk tier; it is dropped");
                }
            }
            Job::Settle { hash, namespace } => lock(&disk).settle_forgotten(hash, namespace),
            Job::Flush(done) => {
                let _ = done.send(());
            }
        }
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
        self.send(Job::Write { hash, owner, bytes });
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
