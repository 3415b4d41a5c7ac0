//! The persisted BM25 index: open or create, add, delete by document, commit, search.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Mutex;

use tantivy::collector::TopDocs;
use tantivy::query::{
    BooleanQuery, BoostQuery, ConstScoreQuery, Occur, Query, TermQuery, TermSetQuery,
};
use tantivy::schema::{
    Field, IndexRecordOption, NumericOptions, STORED, STRING, Schema, TextFieldIndexing,
    TextOptions, Value,
};
use tantivy::tokenizer::TextAnalyzer;
use tantivy::{Index, IndexReader, IndexWriter, ReloadPolicy, TantivyDocument, Term};

use super::tokenizer::{ChineseSegmentation, analyze};
use crate::record::{ChunkRecord, ScoredChunk, SearchFilter};
use crate::{IndexerError, Result};

/// Memory budget of the single indexing thread (tantivy splits segments beyond it).
const WRITER_MEMORY_BYTES: usize = 64 * 1024 * 1024;

/// Options fixed when a BM25 index is created (an existing index keeps its own).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Bm25Config {
    /// How Chinese text is segmented.
    pub chinese: ChineseSegmentation,
}

#[derive(Debug, Clone, Copy)]
struct Fields {
    chunk_id: Field,
    document_id: Field,
    collection: Field,
    text: Field,
}

/// A BM25 index of chunks, stored in one directory.
pub struct Bm25Index {
    reader: IndexReader,
    writer: Mutex<IndexWriter>,
    fields: Fields,
    segmentation: ChineseSegmentation,
}

fn schema(seg: ChineseSegmentation) -> Schema {
    let mut b = Schema::builder();
    b.add_u64_field(
        "chunk_id",
        NumericOptions::default().set_indexed().set_stored(),
    );
    b.add_text_field("document_id", STRING | STORED);
    b.add_text_field("collection", STRING);
    let indexing = TextFieldIndexing::default()
        .set_tokenizer(seg.tokenizer_name())
        .set_index_option(IndexRecordOption::WithFreqs);
    b.add_text_field(
        "text",
        TextOptions::default().set_indexing_options(indexing),
    );
    b.build()
}

fn corrupt(dir: &Path, reason: impl Into<String>) -> IndexerError {
    IndexerError::CorruptIndex {
        path: dir.display().to_string(),
        reason: reason.into(),
    }
}

fn fields_of(schema: &Schema, dir: &Path) -> Result<(Fields, ChineseSegmentation)> {
    let get = |name: &str| {
        schema
            .get_field(name)
            .map_err(|_| corrupt(dir, format!("missing field {name}")))
    };
    let fields = Fields {
        chunk_id: get("chunk_id")?,
        document_id: get("document_id")?,
        collection: get("collection")?,
        text: get("text")?,
    };
    let tokenizer = match schema.get_field_entry(fields.text).field_type() {
        tantivy::schema::FieldType::Str(opts) => opts
            .get_indexing_options()
            .map(|o| o.tokenizer().to_string()),
        _ => None,
    };
    let seg = [ChineseSegmentation::Jieba, ChineseSegmentation::Bigram]
        .into_iter()
        .find(|s| tokenizer.as_deref() == Some(s.tokenizer_name()))
        .ok_or_else(|| corrupt(dir, format!("unknown text tokenizer {tokenizer:?}")))?;
    Ok((fields, seg))
}

impl Bm25Index {
    /// Opens the index in `dir`, creating it (with `config`) if the directory holds none.
    pub fn open(dir: &Path, config: Bm25Config) -> Result<Self> {
        std::fs::create_dir_all(dir)?;
        let index = if dir.join("meta.json").exists() {
            Index::open_in_dir(dir)?
        } else {
            Index::create_in_dir(dir, schema(config.chinese))?
        };
        for seg in [ChineseSegmentation::Jieba, ChineseSegmentation::Bigram] {
            index
                .tokenizers()
                .register(seg.tokenizer_name(), seg.analyzer());
        }
        let (fields, segmentation) = fields_of(&index.schema(), dir)?;
        let writer = index.writer_with_num_threads(1, WRITER_MEMORY_BYTES)?;
        let reader = index
            .reader_builder()
            .reload_policy(ReloadPolicy::Manual)
            .try_into()?;
        Ok(Self {
            reader,
            writer: Mutex::new(writer),
            fields,
            segmentation,
        })
    }

    /// The Chinese segmentation this index was created with.
    pub fn segmentation(&self) -> ChineseSegmentation {
        self.segmentation
    }

    fn writer(&self) -> std::sync::MutexGuard<'_, IndexWriter> {
        // A panic while holding the lock leaves tantivy's writer usable: take it back.
        self.writer.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Adds (or replaces, by chunk id) chunks. Visible to searches after [`Self::commit`].
    pub fn add(&self, records: &[ChunkRecord]) -> Result<()> {
        let writer = self.writer();
        let f = self.fields;
        for r in records {
            writer.delete_term(Term::from_field_u64(f.chunk_id, r.chunk_id));
            let mut doc = TantivyDocument::default();
            doc.add_u64(f.chunk_id, r.chunk_id);
            doc.add_text(f.document_id, &r.document_id);
            if let Some(c) = &r.collection {
                doc.add_text(f.collection, c);
            }
            doc.add_text(f.text, &r.text);
            writer.add_document(doc)?;
        }
        Ok(())
    }

    /// Deletes every chunk of a document. Takes effect at the next [`Self::commit`].
    pub fn delete_document(&self, document_id: &str) -> Result<()> {
        let term = Term::from_field_text(self.fields.document_id, document_id);
        self.writer().delete_term(term);
        Ok(())
    }

    /// Deletes every chunk. Takes effect at the next [`Self::commit`].
    pub fn clear(&self) -> Result<()> {
        self.writer().delete_all_documents()?;
        Ok(())
    }

    /// Makes pending additions and deletions durable and visible to searches.
    pub fn commit(&self) -> Result<()> {
        self.writer().commit()?;
        self.reader.reload()?;
        Ok(())
    }

    /// Number of searchable chunks (as of the last commit).
    pub fn len(&self) -> u64 {
        self.reader.searcher().num_docs()
    }

    /// Whether no chunk is searchable.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The query's index terms, with their multiplicity.
    pub fn query_terms(&self, query: &str) -> BTreeMap<String, usize> {
        let mut analyzer: TextAnalyzer = self.segmentation.analyzer();
        let mut counts = BTreeMap::new();
        for t in analyze(&mut analyzer, query) {
            *counts.entry(t).or_insert(0) += 1;
        }
        counts
    }

    fn text_query(&self, query: &str) -> Option<Box<dyn Query>> {
        let clauses: Vec<(Occur, Box<dyn Query>)> = self
            .query_terms(query)
            .into_iter()
            .map(|(term, n)| {
                let t = Term::from_field_text(self.fields.text, &term);
                let q: Box<dyn Query> = Box::new(TermQuery::new(t, IndexRecordOption::WithFreqs));
                let q: Box<dyn Query> = if n > 1 {
                    Box::new(BoostQuery::new(q, n as f32))
                } else {
                    q
                };
                (Occur::Should, q)
            })
            .collect();
        (!clauses.is_empty()).then(|| Box::new(BooleanQuery::new(clauses)) as Box<dyn Query>)
    }

    fn filter_clauses(&self, filter: &SearchFilter) -> Vec<(Occur, Box<dyn Query>)> {
        let mut clauses: Vec<(Occur, Box<dyn Query>)> = Vec::new();
        if let Some(ids) = &filter.document_ids {
            let terms = ids
                .iter()
                .map(|d| Term::from_field_text(self.fields.document_id, d));
            let q = ConstScoreQuery::new(Box::new(TermSetQuery::new(terms)), 0.0);
            clauses.push((Occur::Must, Box::new(q)));
        }
        if let Some(c) = &filter.collection {
            let t = Term::from_field_text(self.fields.collection, c);
            let q = TermQuery::new(t, IndexRecordOption::Basic);
            clauses.push((
                Occur::Must,
                Box::new(ConstScoreQuery::new(Box::new(q), 0.0)),
            ));
        }
        clauses
    }

    /// The `k` best chunks for `query` among those passing `filter`, best first.
    pub fn search(&self, query: &str, k: usize, filter: &SearchFilter) -> Result<Vec<ScoredChunk>> {
        let Some(text) = self.text_query(query) else {
            return Ok(Vec::new());
        };
        if k == 0 {
            return Ok(Vec::new());
        }
        let mut clauses = self.filter_clauses(filter);
        let query: Box<dyn Query> = if clauses.is_empty() {
            text
        } else {
            clauses.push((Occur::Must, text));
            Box::new(BooleanQuery::new(clauses))
        };
        let searcher = self.reader.searcher();
        let top = searcher.search(&query, &TopDocs::with_limit(k).order_by_score())?;
        let mut out = Vec::with_capacity(top.len());
        for (score, addr) in top {
            let doc: TantivyDocument = searcher.doc(addr)?;
            let chunk_id = doc.get_first(self.fields.chunk_id).and_then(|v| v.as_u64());
            let document_id = doc
                .get_first(self.fields.document_id)
                .and_then(|v| v.as_str());
            let (Some(chunk_id), Some(document_id)) = (chunk_id, document_id) else {
                return Err(corrupt(Path::new("bm25"), "stored document lacks its ids"));
            };
            out.push(ScoredChunk {
                chunk_id,
                document_id: document_id.to_string(),
                score,
            });
        }
        Ok(out)
    }
}
