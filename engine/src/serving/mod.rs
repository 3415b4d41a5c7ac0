//! Serving: the engine core loop ([`EngineCore`]: scheduler, KV cache manager, model, samplers) and its
//! actor handle ([`EngineHandle`]: a thread that owns the core, token streams, cancellation, embeddings,
//! stats).

pub mod config;
pub mod core;
mod group_blocks;
pub mod handle;
pub(crate) mod ranks;
pub mod request;
pub mod stats;
pub mod step_cost;
mod tier_moves;
pub mod warm_up;

pub use config::{EngineConfig, KvBudget};
pub use core::EngineCore;
pub use handle::{EngineHandle, TokenStream};
pub use request::{FinishReason, GenerateRequest, GenerationEvent, Usage};
pub use stats::EngineStats;
pub use warm_up::{Calibration, WARM_UP_NAMESPACE, WINDOWED_CALIBRATION_WITHIN, WarmUp};
