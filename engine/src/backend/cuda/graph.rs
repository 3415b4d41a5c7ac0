//! Recording ops into CUDA graphs and replaying them: a decode step of a small model is hundreds of
//! short kernels, and launching them one by one from the host costs more than running them.
//!
//! Capture is thread-local: an op from this thread that cannot be recorded (a synchronising copy, an
//! allocation outside the stream) fails the capture with an error instead of running. The backend's
//! scratch buffers only grow; a growth replaces a buffer recorded graphs point at, so it moves the
//! backend's graph epoch and the owners of older graphs drop them.

use std::sync::atomic::Ordering;

use cudarc::driver::CudaGraph;
use cudarc::driver::sys::{CUgraphInstantiate_flags, CUstreamCaptureMode};

use super::{CudaBackend, cuda_err};
use crate::error::{EngineError, Result};

/// A recorded, instantiated graph on the backend's stream.
pub struct CudaGraphExec(CudaGraph);

// SAFETY: a graph may move between threads; it is only launched through `&mut` access to the
// workspace that owns it, so no two threads use it at once (CUDA's rule for graph objects).
unsafe impl Send for CudaGraphExec {}

impl CudaBackend {
    /// Switches the recording of decode steps on or off (on by default; `DOCQA_CUDA_GRAPHS=0` starts
    /// with it off). Graphs recorded before stay valid; owners stop recording and replaying new ones.
    pub fn set_graphs(&self, on: bool) {
        self.graphs.store(on, Ordering::Relaxed);
    }

    /// Marks the recorded graphs stale (a buffer they point at was replaced).
    pub(super) fn bump_graph_epoch(&self) {
        self.epoch.fetch_add(1, Ordering::Relaxed);
    }

    pub(super) fn graphs_on(&self) -> bool {
        self.graphs.load(Ordering::Relaxed)
    }

    pub(super) fn epoch_now(&self) -> u64 {
        self.epoch.load(Ordering::Relaxed)
    }

    pub(super) fn capture_begin(&self) -> Result<()> {
        self.dev
            .stream
            .begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
            .map_err(cuda_err)
    }

    pub(super) fn capture_end(&self) -> Result<CudaGraphExec> {
        let graph = self
            .dev
            .stream
            .end_capture(CUgraphInstantiate_flags(0))
            .map_err(cuda_err)?;
        graph
            .map(CudaGraphExec)
            .ok_or_else(|| EngineError::Cuda("the stream capture recorded no graph".into()))
    }

    pub(super) fn graph_launch(&self, graph: &CudaGraphExec) -> Result<()> {
        graph.0.launch().map_err(cuda_err)
    }
}
