//! Retrieval evaluation: dataset loaders, BEIR metrics, corpus-level evaluation
//! ([`evaluate_retrieval`]) and within-document evaluation on the QA files
//! ([`evaluate_within_document`]).

pub mod dataset;
pub mod metrics;
pub mod retrieval;
pub mod runner;
pub mod within_doc;

pub use retrieval::{RetrievalReport, RetrieverScores, evaluate_retrieval};
pub use runner::EvalOptions;
pub use within_doc::{WithinDocReport, evaluate_within_document, sentence_windows};
