//! BM25 retrieval over a tantivy index persisted in a directory.
//!
//! One tantivy document per chunk: `chunk_id` (u64, indexed and stored), `document_id` and
//! `collection` (raw strings, for deletes and filters) and `text` (analysed by
//! [`ChineseSegmentation::analyzer`], term frequencies only: no phrase queries are needed).
//! Queries are analysed the same way and run as a disjunction of term queries (tantivy's BM25,
//! k1 = 1.2, b = 0.75); a query term repeated n times is boosted n times, as in Lucene.

mod index;
pub mod tokenizer;

pub use index::{Bm25Config, Bm25Index};
pub use tokenizer::{ChineseSegmentation, MixedScriptTokenizer};
