//! Loaders for the evaluation data: BEIR-style retrieval folders and QA JSON Lines files.
//!
//! Retrieval folder: `corpus.jsonl` (`id`, `title`, `text`), `queries.jsonl` (`id`, `text`),
//! `qrels.tsv` (`query-id TAB doc-id TAB relevance`, no header). QA file: one document per line
//! with its questions and their gold evidence snippets.

use std::collections::HashMap;
use std::path::Path;

use serde::Deserialize;
use serde::de::DeserializeOwned;

use super::metrics::Judgements;
use crate::{IndexerError, Result};

/// One corpus passage.
#[derive(Debug, Clone, Deserialize)]
pub struct Passage {
    /// Passage id (as in the qrels).
    pub id: String,
    /// Title (may be empty).
    #[serde(default)]
    pub title: String,
    /// Body text.
    pub text: String,
}

impl Passage {
    /// What is indexed for the passage: title and body, as BEIR does.
    pub fn indexed_text(&self) -> String {
        if self.title.is_empty() {
            self.text.clone()
        } else {
            format!("{}\n{}", self.title, self.text)
        }
    }
}

/// One query.
#[derive(Debug, Clone, Deserialize)]
pub struct Query {
    /// Query id (as in the qrels).
    pub id: String,
    /// Query text.
    pub text: String,
}

/// A BEIR-style retrieval dataset.
#[derive(Debug, Clone)]
pub struct RetrievalDataset {
    /// Folder name.
    pub name: String,
    /// The passages.
    pub corpus: Vec<Passage>,
    /// The queries.
    pub queries: Vec<Query>,
    /// Judgements per query id.
    pub qrels: HashMap<String, Judgements>,
}

fn invalid(path: &Path, reason: impl Into<String>) -> IndexerError {
    IndexerError::InvalidDataset {
        path: path.display().to_string(),
        reason: reason.into(),
    }
}

/// Reads a JSON Lines file (blank lines ignored), naming the line of any error.
pub fn read_jsonl<T: DeserializeOwned>(path: &Path) -> Result<Vec<T>> {
    let text = std::fs::read_to_string(path).map_err(|e| invalid(path, e.to_string()))?;
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| {
            serde_json::from_str(l).map_err(|e| invalid(path, format!("line {}: {e}", i + 1)))
        })
        .collect()
}

/// Reads `qrels.tsv` (no header line).
pub fn read_qrels(path: &Path) -> Result<HashMap<String, Judgements>> {
    let text = std::fs::read_to_string(path).map_err(|e| invalid(path, e.to_string()))?;
    let mut qrels: HashMap<String, Judgements> = HashMap::new();
    for (i, line) in text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
    {
        let cols: Vec<&str> = line.split('\t').collect();
        let [q, d, r] = cols[..] else {
            return Err(invalid(
                path,
                format!("line {}: expected 3 tab-separated columns", i + 1),
            ));
        };
        let rel: i32 = r.trim().parse().map_err(|_| {
            invalid(
                path,
                format!("line {}: relevance {r:?} is not an integer", i + 1),
            )
        })?;
        qrels
            .entry(q.to_string())
            .or_default()
            .insert(d.to_string(), rel);
    }
    Ok(qrels)
}

impl RetrievalDataset {
    /// Loads the dataset in `dir`.
    pub fn load(dir: &Path) -> Result<Self> {
        let name = dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        Ok(Self {
            name,
            corpus: read_jsonl(&dir.join("corpus.jsonl"))?,
            queries: read_jsonl(&dir.join("queries.jsonl"))?,
            qrels: read_qrels(&dir.join("qrels.tsv"))?,
        })
    }

    /// The queries that have at least one relevant passage (the ones that are scored).
    pub fn judged_queries(&self) -> Vec<&Query> {
        self.queries
            .iter()
            .filter(|q| {
                self.qrels
                    .get(&q.id)
                    .is_some_and(|j| j.values().any(|&r| r > 0))
            })
            .collect()
    }
}

/// One question of a QA file.
#[derive(Debug, Clone, Deserialize)]
pub struct QaQuestion {
    /// Question id.
    pub id: String,
    /// Question text.
    pub question: String,
    /// Reference answers (for multiple choice: the letter, then the option's text; none when
    /// unanswerable).
    #[serde(default)]
    pub answers: Vec<String>,
    /// Kind (`extractive`, `free-form`, `multiple-choice`, `unanswerable`).
    #[serde(default)]
    pub kind: String,
    /// Gold evidence snippets (verbatim text of the document), possibly none.
    #[serde(default)]
    pub evidence: Vec<String>,
}

/// One long document of a QA file with its questions.
#[derive(Debug, Clone, Deserialize)]
pub struct QaDocument {
    /// Document id.
    pub id: String,
    /// The dataset it comes from.
    #[serde(default)]
    pub source: String,
    /// Title.
    #[serde(default)]
    pub title: String,
    /// Full text.
    pub text: String,
    /// Questions about it.
    #[serde(default)]
    pub questions: Vec<QaQuestion>,
}

/// Loads a QA JSON Lines file.
pub fn load_qa(path: &Path) -> Result<Vec<QaDocument>> {
    read_jsonl(path)
}
