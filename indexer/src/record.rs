//! What goes into the search indexes and what comes out: chunk records, filters and hits.

use serde::{Deserialize, Serialize};

/// One chunk as it is indexed: both retrievers index exactly these fields.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChunkRecord {
    /// Stable id of the chunk (the database's chunk row id).
    pub chunk_id: u64,
    /// Id of the document the chunk belongs to.
    pub document_id: String,
    /// Optional collection the document belongs to.
    pub collection: Option<String>,
    /// The text that is searched (for titled passages: title, newline, body).
    pub text: String,
}

/// Restricts a search to some documents and/or one collection. Empty filter = everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SearchFilter {
    /// Only chunks of these documents (`None` = any document; `Some(vec![])` = nothing).
    pub document_ids: Option<Vec<String>>,
    /// Only chunks of this collection.
    pub collection: Option<String>,
}

impl SearchFilter {
    /// A filter that keeps only the chunks of one document.
    pub fn document(id: impl Into<String>) -> Self {
        Self {
            document_ids: Some(vec![id.into()]),
            collection: None,
        }
    }

    /// Whether the filter keeps nothing out.
    pub fn is_empty(&self) -> bool {
        self.document_ids.is_none() && self.collection.is_none()
    }

    /// Whether a chunk of `document_id` in `collection` passes the filter.
    pub fn matches(&self, document_id: &str, collection: Option<&str>) -> bool {
        let doc_ok = self
            .document_ids
            .as_ref()
            .is_none_or(|ids| ids.iter().any(|d| d == document_id));
        let coll_ok = self
            .collection
            .as_deref()
            .is_none_or(|c| collection == Some(c));
        doc_ok && coll_ok
    }
}

/// The two retrievers behind hybrid search.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Retriever {
    /// Lexical BM25 over the tantivy index.
    Bm25,
    /// Dense cosine similarity over the HNSW index.
    Dense,
}

impl std::fmt::Display for Retriever {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Retriever::Bm25 => "bm25",
            Retriever::Dense => "dense",
        })
    }
}

/// A chunk as one retriever ranked it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ScoredChunk {
    /// The chunk's id.
    pub chunk_id: u64,
    /// Its document.
    pub document_id: String,
    /// The retriever's own score (BM25 score, or cosine similarity).
    pub score: f32,
}

/// How one retriever placed a hit.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RetrieverHit {
    /// Which retriever.
    pub retriever: Retriever,
    /// 1-based rank in that retriever's list.
    pub rank: usize,
    /// That retriever's raw score.
    pub score: f32,
}

/// One search result: the fused score and where it came from.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Hit {
    /// The chunk's id.
    pub chunk_id: u64,
    /// Its document.
    pub document_id: String,
    /// Final score (fused for hybrid search, the retriever's score otherwise); higher is better.
    pub score: f32,
    /// Every retriever that returned this chunk, with its rank and score.
    pub sources: Vec<RetrieverHit>,
}
