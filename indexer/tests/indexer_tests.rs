//! The indexer's integration tests, one module a file, built and linked as one test binary and run in
//! one process, whose threads take the tests of every file together.

mod chunk_support;
mod common;
mod parse_support;

mod bm25_chinese;
mod bm25_index;
mod bm25_scifact;
mod chunk_budget;
mod chunk_real_data;
mod chunk_sentence_stats;
mod chunk_sentences;
mod dense_index;
mod eval_metrics;
mod hybrid_fusion;
mod parse_bounds;
mod parse_errors;
mod parse_formats;
mod parse_pdf_graph;
