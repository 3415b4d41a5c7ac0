//! A group of CPU ranks in one process, one thread each: the reference the sharded forward pass is
//! checked against (on GPUs the collectives are NCCL's, `nccl`).
//!
//! Each collective puts the rank's values in its slot, waits for every rank, and reads all the slots
//! in rank order, so every rank computes the same sums in the same order.

use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use super::collective::stopped;
use super::{Collective, Shard};
use crate::backend::cpu::CpuBackend;
use crate::error::Result;

/// What the ranks share: their slots, and a barrier that a stopped group opens with an error.
struct Exchange {
    state: Mutex<State>,
    turn: Condvar,
}

struct State {
    slots: Vec<Vec<f32>>,
    /// Ranks waiting at the barrier now.
    arrived: usize,
    /// How many times the barrier has opened.
    opened: u64,
    /// Why the group stopped, once it has.
    stopped: Option<String>,
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
            state: Mutex::new(State {
                slots: vec![Vec::new(); world],
                arrived: 0,
                opened: 0,
                stopped: None,
            }),
            turn: Condvar::new(),
        });
        (0..world)
            .map(|rank| ThreadGroup {
                shard: Shard { rank, world },
                exchange: Arc::clone(&exchange),
            })
            .collect()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.exchange
            .state
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }

    /// Waits until every rank has arrived (the last to arrive opens the barrier), or fails once the
    /// group has stopped.
    fn barrier<'a>(&'a self, mut state: MutexGuard<'a, State>) -> Result<MutexGuard<'a, State>> {
        if let Some(why) = &state.stopped {
            return Err(stopped(why));
        }
        let round = state.opened;
        state.arrived += 1;
        if state.arrived == self.shard.world {
            state.arrived = 0;
            state.opened += 1;
            self.exchange.turn.notify_all();
            return Ok(state);
        }
        while state.opened == round && state.stopped.is_none() {
            state = self
                .exchange
                .turn
                .wait(state)
                .unwrap_or_else(|p| p.into_inner());
        }
        match (&state.stopped, state.opened == round) {
            (Some(why), true) => Err(stopped(why)),
            _ => Ok(state),
        }
    }

    /// Puts `values` in this rank's slot, lets `read` see every rank's once all have, then waits
    /// until every rank has read before a slot may change again.
    fn exchange(&self, values: &[f32], read: impl FnOnce(&[Vec<f32>])) -> Result<()> {
        let mut state = self.lock();
        if let Some(why) = &state.stopped {
            return Err(stopped(why));
        }
        state.slots[self.shard.rank].clear();
        state.slots[self.shard.rank].extend_from_slice(values);
        let state = self.barrier(state)?;
        read(&state.slots);
        self.barrier(state).map(drop)
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
        })
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
        })
    }

    fn abort(&self, why: &str) {
        let mut state = self.lock();
        if state.stopped.is_none() {
            state.stopped = Some(why.to_string());
        }
        self.exchange.turn.notify_all();
    }

    fn stopped(&self) -> Option<String> {
        self.lock().stopped.clone()
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
    fn a_rank_that_stops_the_group_frees_the_ranks_waiting_for_it_with_its_reason() {
        let results = on_every_rank(3, |g| {
            let b = CpuBackend::new();
            let mut x = vec![1.0; 2];
            g.all_reduce_sum(&b, &mut x, 2).unwrap();
            if g.shard().rank == 1 {
                g.abort("rank 1 failed: out of memory");
                return Err("aborted".to_string());
            }
            // Ranks 0 and 2 wait here for rank 1, which never comes.
            g.all_reduce_sum(&b, &mut x, 2).map_err(|e| e.to_string())
        });
        assert_eq!(results[1], Err("aborted".to_string()));
        for r in [0, 2] {
            let e = results[r].clone().unwrap_err();
            assert!(e.contains("rank 1 failed: out of memory"), "{e}");
        }
    }

    #[test]
    fn a_stopped_group_fails_every_later_collective_at_once() {
        let g = ThreadGroup::new(2).remove(0);
        assert_eq!(g.stopped(), None);
        g.abort("first reason");
        g.abort("second reason");
        assert_eq!(g.stopped().as_deref(), Some("first reason"));
        let b = CpuBackend::new();
        let e = g
            .all_reduce_sum(&b, &mut vec![0.0], 1)
            .unwrap_err()
            .to_string();
        assert!(e.contains("first reason") && !e.contains("second"), "{e}");
        let gathered =
            g.all_gather_cols(&b, &vec![0.0], (1, 1), &mut Vec::new(), &mut vec![0.0; 2]);
        assert!(gathered.is_err());
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
