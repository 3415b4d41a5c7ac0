//! Where a persistent decode step's time goes (`decode_step.cu`): with profiling on, every block
//! notes the GPU's global timer at the step's start, at each grid barrier (when it arrived and when
//! it went on) and at the end. From those, each phase of a layer gets the time its blocks worked
//! (from leaving one barrier to reaching the next), the slowest block's, and the barrier's own
//! latency after the last block arrived. For the kernel lab (`gpu-check`), not for serving: the
//! timer ticks in tens of nanoseconds, against phases of microseconds.

use std::sync::atomic::Ordering;

use cudarc::driver::{CudaSlice, DevicePtr};

use super::{CudaBackend, cuda_err};
use crate::error::{EngineError, Result};

/// Phases of a layer, in order: q/k/v, attention, output, gate/up, down.
pub const PHASES: usize = 5;
/// Their names, for reports.
pub const PHASE_NAMES: [&str; PHASES] = ["q/k/v", "attention", "output", "gate/up", "down"];

/// The profile buffer and the step shape it was last written for.
#[derive(Default)]
pub(super) struct Profiling {
    on: bool,
    buffer: Option<CudaSlice<u64>>,
    shape: (usize, usize),
}

impl Profiling {
    /// The buffer's address for a step of `layers` layers on `blocks` blocks, or 0 when off.
    pub(super) fn address(
        &mut self,
        be: &CudaBackend,
        layers: usize,
        blocks: usize,
    ) -> Result<u64> {
        if !self.on {
            return Ok(0);
        }
        let need = (PHASES * layers + 1) * blocks * 2 + ATTENTION_MARKS * layers;
        if self.buffer.as_ref().is_none_or(|b| b.len() < need) {
            self.buffer = Some(be.zeros(need)?);
        }
        self.shape = (layers, blocks);
        let buffer = self.buffer.as_ref().expect("set above");
        Ok(buffer.device_ptr(&be.dev.stream).0)
    }
}

/// Times noted in the attention phase of each layer, for KV head 0 (`attention_phase` in the
/// kernel says which).
pub const ATTENTION_MARKS: usize = 8;

/// One step's notes: `times[entry][block] = (arrived, left)` in nanoseconds, entry 0 the start,
/// entry `n + 1` grid barrier `n`, the last the end.
pub struct StepProfile {
    /// The step's layers.
    pub layers: usize,
    /// Its blocks.
    pub blocks: usize,
    times: Vec<u64>,
    marks: Vec<u64>,
}

/// One phase's times, averaged over the layers (nanoseconds).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct PhaseTime {
    /// The blocks' mean time from leaving the barrier before to arriving at the one after.
    pub mean_work: f64,
    /// The slowest block's.
    pub max_work: f64,
    /// From the last block's arrival to the blocks' mean departure (zero after the last phase).
    pub barrier: f64,
}

impl StepProfile {
    fn at(&self, entry: usize, block: usize) -> (u64, u64) {
        let i = 2 * (entry * self.blocks + block);
        (self.times[i], self.times[i + 1])
    }

    /// The attention marks of KV head 0, each after the first (its split 0's start), in
    /// nanoseconds, the mean over the layers.
    pub fn attention_marks(&self) -> [f64; ATTENTION_MARKS] {
        let mut out = [0.0; ATTENTION_MARKS];
        for layer in self.marks.chunks_exact(ATTENTION_MARKS) {
            for (k, o) in out.iter_mut().enumerate() {
                *o += layer[k] as f64 - layer[0] as f64;
            }
        }
        out.map(|v| v / self.layers.max(1) as f64)
    }

    /// Each block's work in the product phases (all but attention) over the step, in nanoseconds:
    /// where a block's share of rows is the same as every other's, the spread is the SMs' own.
    pub fn product_work_by_block(&self) -> Vec<f64> {
        (0..self.blocks)
            .map(|b| {
                (1..=PHASES * self.layers)
                    .filter(|e| (e - 1) % PHASES != 1)
                    .map(|e| self.at(e, b).0.saturating_sub(self.at(e - 1, b).1) as f64)
                    .sum()
            })
            .collect()
    }

    /// From the first block's start to the last block's end.
    pub fn total_ns(&self) -> u64 {
        let last = PHASES * self.layers;
        let start = (0..self.blocks).map(|b| self.at(0, b).1).min().unwrap_or(0);
        let end = (0..self.blocks)
            .map(|b| self.at(last, b).0)
            .max()
            .unwrap_or(0);
        end.saturating_sub(start)
    }

    /// Each phase's times, averaged over the layers.
    pub fn phases(&self) -> [PhaseTime; PHASES] {
        let mut sums = [PhaseTime::default(); PHASES];
        let mut barriers = [0usize; PHASES];
        for entry in 1..=PHASES * self.layers {
            let phase = &mut sums[(entry - 1) % PHASES];
            let work: Vec<f64> = (0..self.blocks)
                .map(|b| self.at(entry, b).0.saturating_sub(self.at(entry - 1, b).1) as f64)
                .collect();
            phase.mean_work += work.iter().sum::<f64>() / self.blocks.max(1) as f64;
            phase.max_work += work.iter().cloned().fold(0.0, f64::max);
            if entry < PHASES * self.layers {
                let last_in = (0..self.blocks)
                    .map(|b| self.at(entry, b).0)
                    .max()
                    .unwrap_or(0);
                let out: f64 = (0..self.blocks).map(|b| self.at(entry, b).1 as f64).sum();
                phase.barrier += out / self.blocks.max(1) as f64 - last_in as f64;
                barriers[(entry - 1) % PHASES] += 1;
            }
        }
        for (p, n) in sums.iter_mut().zip(barriers) {
            p.mean_work /= self.layers.max(1) as f64;
            p.max_work /= self.layers.max(1) as f64;
            p.barrier /= n.max(1) as f64;
        }
        sums
    }
}

impl CudaBackend {
    /// Makes persistent decode steps note their phases' times (`on`); graphs recorded before are
    /// recorded again.
    pub fn set_persistent_profile(&self, on: bool) -> Result<()> {
        self.persistent.lock().map_err(|_| poisoned())?.profiling.on = on;
        self.bump_graph_epoch();
        Ok(())
    }

    /// The notes of the last persistent step run with profiling on, once the stream has run it.
    pub fn persistent_profile(&self) -> Result<Option<StepProfile>> {
        self.dev.stream.synchronize().map_err(cuda_err)?;
        let state = self.persistent.lock().map_err(|_| poisoned())?;
        let p = &state.profiling;
        let (Some(buffer), (layers, blocks)) = (&p.buffer, p.shape) else {
            return Ok(None);
        };
        if layers == 0 || self.persistent_decode_runs.load(Ordering::Relaxed) == 0 {
            return Ok(None);
        }
        let mut times = self.dev.stream.clone_dtoh(buffer).map_err(cuda_err)?;
        times.truncate((PHASES * layers + 1) * blocks * 2 + ATTENTION_MARKS * layers);
        let marks = times.split_off((PHASES * layers + 1) * blocks * 2);
        Ok(Some(StepProfile {
            layers,
            blocks,
            times,
            marks,
        }))
    }
}

pub(super) fn poisoned() -> EngineError {
    EngineError::Internal("the persistent decode's state lock is poisoned".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A profile of `layers` layers on two blocks where block b works `work[phase] + b` ns in each
    /// phase and every barrier lets the blocks go `barrier` ns after the last arrives.
    fn synthetic(layers: usize, work: [u64; PHASES], barrier: u64) -> StepProfile {
        let blocks = 2;
        let entries = PHASES * layers + 1;
        let mut times = vec![0u64; entries * blocks * 2];
        let mut left = [1000u64, 1000];
        for b in 0..blocks {
            times[2 * b] = 1000;
            times[2 * b + 1] = 1000;
        }
        for e in 1..entries {
            let arrived: Vec<u64> = (0..blocks)
                .map(|b| left[b] + work[(e - 1) % PHASES] + b as u64)
                .collect();
            let go = arrived.iter().max().unwrap() + if e + 1 < entries { barrier } else { 0 };
            for b in 0..blocks {
                let i = 2 * (e * blocks + b);
                times[i] = arrived[b];
                times[i + 1] = if e + 1 < entries { go } else { arrived[b] };
                left[b] = times[i + 1];
            }
        }
        StepProfile {
            layers,
            blocks,
            times,
            marks: Vec::new(),
        }
    }

    #[test]
    fn the_phases_split_a_step_into_each_phases_work_and_its_barriers_wait() {
        let p = synthetic(3, [400, 100, 200, 900, 500], 50);
        let phases = p.phases();
        for (k, w) in [400.0, 100.0, 200.0, 900.0, 500.0].iter().enumerate() {
            // Block 1 works 1 ns longer; block 0 also waits out that 1 ns before its barrier's 50.
            assert_eq!(phases[k].max_work, w + 1.0, "phase {k}");
            assert_eq!(phases[k].mean_work, w + 0.5, "phase {k}");
            assert_eq!(phases[k].barrier, 50.0, "phase {k}");
        }
        // Three layers of 2,105 ns of the slower block's work (2,100 and 1 a phase), and 50 ns
        // at each of the 14 barriers.
        assert_eq!(p.total_ns(), 3 * 2105 + 14 * 50);
    }
}
