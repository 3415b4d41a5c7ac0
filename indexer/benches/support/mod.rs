//! Helpers shared by the indexer's benchmarks.

#![allow(dead_code)]

pub mod corpus;
pub mod engine_embedder;
