//! A group of CPU ranks in one process, one thread each: the reference the sharded forward pass is
//! checked against (on GPUs the collectives are NCCL's, `nccl`).
//!
//! Each collective puts the rank's values in its slot, waits for every rank, and reads all the slots
//! in rank order, so every rank computes the same sums in the same order.

use std::sync::{Arc, Barrier, Mutex};

use super::{Collective, Shard};
use crate::backend::cpu::CpuBackend;
use crate::error::Result;

struct Exchange {
    barrier: Barrier,
    slots: Mutex<Vec<Vec<f32>>>,
}

/// One rank of a [`ThreadGroup::new`] group.
pub struct ThreadGroup {
    shard: Shard,
    exchange: Arc<Exchange>,
}

impl ThreadGroup {
    /// The `world` ranks of one group, rank 0 first; each goes to the thread that runs that rank.
    pub fn new(world: usize) -> Vec<ThreadGroup> {
        let exchange = Arc::new(Exchange {
            barrier: Barrier::new(world),
            slots: Mutex::new(vec![Vec::new(); world]),
        });
        (0..world)
            .map(|rank| ThreadGroup {
                shard: Shard { rank, world },
                exchange: Arc::clone(&exchange),
            })
            .collect()
    }

    /// Puts `values` in this rank's slot, lets `read` see every rank's once all have, then waits
    /// until every rank has read before a slot may change again.
    fn exchange(&self, values: &[f32], read: impl FnOnce(&[Vec<f32>])) {
        let e = &self.exchange;
        {
            let mut slots = e.slots.lock().unwrap_or_else(|p| p.into_inner());
            slots[self.shard.rank].clear();
            slots[self.shard.rank].extend_from_slice(values);
        }
        e.barrier.wait();
        read(&e.slots.lock().unwrap_or_else(|p| p.into_inner()));
        e.barrier.wait();
    }
}

impl Collective<CpuBackend> for ThreadGroup {
    fn shard(&self) -> Shard {
        self.shard
    }

    fn all_reduce_sum(&self, _: &CpuBackend, x: &mut Vec<f32>, n: usize) -> Result<()> {
        let mine = x[..n].to_vec();
        self.exchange(&mine, |slots| {
            x[..n].copy_from_slice(&slots[0]);
            for slot in &slots[1..] {
                x[..n].iter_mut().zip(slot).for_each(|(s, v)| *s += v);
            }
        });
        Ok(())
    }

    fn all_gather_cols(
        &self,
        _: &CpuBackend,
        part: &Vec<f32>,
        (rows, width): (usize, usize),
        _stacked: &mut Vec<f32>,
        out: &mut Vec<f32>,
    ) -> Result<()> {
        let world = self.shard.world;
        self.exchange(&part[..rows * width], |slots| {
            for (rank, slot) in slots.iter().enumerate() {
                for (r, row) in slot.chunks_exact(width).enumerate() {
                    out[(r * world + rank) * width..][..width].copy_from_slice(row);
                }
            }
        });
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn on_every_rank<T: Send>(world: usize, f: impl Fn(ThreadGroup) -> T + Sync) -> Vec<T> {
        std::thread::scope(|s| {
            let handles: Vec<_> = ThreadGroup::new(world)
                .into_iter()
                .map(|g| s.spawn(|| f(g)))
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        })
    }

    #[test]
    fn every_rank_ends_with_the_sum_of_all_ranks() {
        let sums = on_every_rank(3, |g| {
            let r = g.shard().rank as f32;
            let mut x = vec![r, 10.0 * r, 7.0, 99.0];
            g.all_reduce_sum(&CpuBackend::new(), &mut x, 3).unwrap();
            x
        });
        for x in sums {
            assert_eq!(x, [3.0, 30.0, 21.0, 99.0]);
        }
    }

    #[test]
    fn gathered_columns_put_each_ranks_part_side_by_side_in_every_row() {
        let outs = on_every_rank(2, |g| {
            let r = g.shard().rank as f32;
            let part = vec![r, r + 0.5, 10.0 + r, 10.5 + r]; // 2 rows of 2
            let mut out = vec![0.0; 8];
            let b = CpuBackend::new();
            g.all_gather_cols(&b, &part, (2, 2), &mut Vec::new(), &mut out)
                .unwrap();
            out
        });
        for out in outs {
            assert_eq!(out, [0.0, 0.5, 1.0, 1.5, 10.0, 10.5, 11.0, 11.5]);
        }
    }

    #[test]
    fn repeated_collectives_do_not_mix_their_steps() {
        let results = on_every_rank(4, |g| {
            let b = CpuBackend::new();
            let mut x = vec![0.0; 1];
            for step in 0..50 {
                x[0] = (g.shard().rank * step) as f32;
                g.all_reduce_sum(&b, &mut x, 1).unwrap();
                assert_eq!(x[0], (6 * step) as f32);
            }
            x[0]
        });
        assert_eq!(results, [294.0; 4]);
    }
}
