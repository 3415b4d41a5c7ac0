//! Evaluation datasets in docqa's JSON Lines format (read by the indexer's loader, which the
//! within-document retrieval evaluation shares): one document per line, with its questions.
//!
//! ```json
//! {"id": "...", "source": "squad_v2", "title": "...", "text": "...",
//!  "questions": [{"id": "...", "question": "...", "answers": ["..."], "kind": "extractive",
//!                 "evidence": ["..."]}]}
//! ```
//!
//! `kind` is `extractive`, `free-form`, `multiple-choice` (answers: the letter, then the option text) or
//! `unanswerable` (no answers). `evidence` lists text spans of the document that support the answer.
//!
//! The simpler form for users' own data is a directory of documents (any format docqa ingests) with a
//! `questions.jsonl` beside them, one question per line, naming its document's file ([`load_directory`]):
//!
//! ```json
//! {"document": "lease.pdf", "question": "When does the lease end?", "answers": ["31 March 2031"]}
//! ```

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use serde::Deserialize;

pub use docqa_indexer::eval::dataset::{QaDocument as EvalDocument, QaQuestion as EvalQuestion};

/// The questions file of the directory form.
pub const QUESTIONS_FILE: &str = "questions.jsonl";

/// A dataset: its documents with their questions, and for the directory form the file of each document
/// (by document id), uploaded as it is instead of the document's text.
#[derive(Debug, Default)]
pub struct Dataset {
    /// Documents in order, each with its questions.
    pub documents: Vec<EvalDocument>,
    /// Original files by document id (directory form only).
    pub files: HashMap<String, PathBuf>,
}

/// Reads a dataset: a JSON Lines file, or a directory of documents with a `questions.jsonl`.
pub fn load(path: &Path) -> anyhow::Result<Dataset> {
    if path.is_dir() {
        return load_directory(path);
    }
    let documents = docqa_indexer::eval::dataset::load_qa(path)
        .map_err(|e| anyhow::anyhow!("reading {}: {e}", path.display()))?;
    Ok(Dataset {
        documents,
        files: HashMap::new(),
    })
}

/// One line of `questions.jsonl`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct QuestionLine {
    /// File name of the document, relative to the directory.
    document: String,
    question: String,
    #[serde(default)]
    answers: Vec<String>,
    /// Defaults to `extractive`, or `unanswerable` when there are no answers.
    kind: Option<String>,
    #[serde(default)]
    evidence: Vec<String>,
    /// Defaults to `<document>#<line number>`.
    id: Option<String>,
}

/// Reads the directory form: questions grouped by document, documents in order of first mention.
pub fn load_directory(dir: &Path) -> anyhow::Result<Dataset> {
    let questions_path = dir.join(QUESTIONS_FILE);
    let text = std::fs::read_to_string(&questions_path).with_context(|| {
        format!(
            "a dataset directory needs {QUESTIONS_FILE}: cannot read {}",
            questions_path.display()
        )
    })?;
    let mut set = Dataset::default();
    let mut index: HashMap<String, usize> = HashMap::new();
    for (n, line) in text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
    {
        let q: QuestionLine = serde_json::from_str(line).with_context(|| {
            format!(
                "{}:{}: not a question line",
                questions_path.display(),
                n + 1
            )
        })?;
        let file = dir.join(&q.document);
        if q.document.contains("..") || !file.is_file() {
            bail!(
                "{}:{}: no document file {:?} in {}",
                questions_path.display(),
                n + 1,
                q.document,
                dir.display()
            );
        }
        let d = *index.entry(q.document.clone()).or_insert_with(|| {
            set.files.insert(q.document.clone(), file.clone());
            set.documents.push(EvalDocument {
                id: q.document.clone(),
                source: dir
                    .file_name()
                    .map(|s| s.to_string_lossy().into_owned())
                    .unwrap_or_default(),
                title: q.document.clone(),
                text: String::new(),
                questions: Vec::new(),
            });
            set.documents.len() - 1
        });
        let kind = q.kind.unwrap_or_else(|| {
            if q.answers.is_empty() {
                "unanswerable"
            } else {
                "extractive"
            }
            .to_string()
        });
        set.documents[d].questions.push(EvalQuestion {
            id: q.id.unwrap_or_else(|| format!("{}#{}", q.document, n + 1)),
            question: q.question,
            answers: q.answers,
            kind,
            evidence: q.evidence,
        });
    }
    if set.documents.is_empty() {
        bail!("{} holds no questions", questions_path.display());
    }
    Ok(set)
}

/// A seeded sample of at most `limit` questions (all when None), as (document index, question index),
/// in dataset order so each document's questions run together.
pub fn sample(docs: &[EvalDocument], limit: Option<usize>, seed: u64) -> Vec<(usize, usize)> {
    let mut all: Vec<(usize, usize)> = docs
        .iter()
        .enumerate()
        .flat_map(|(d, doc)| (0..doc.questions.len()).map(move |q| (d, q)))
        .collect();
    if let Some(n) = limit.filter(|&n| n < all.len()) {
        let mut state = seed ^ 0x9E37_79B9_7F4A_7C15;
        let mut next = move || {
            // xorshift64*: a small, fixed generator so a seed means the same sample everywhere.
            state ^= state >> 12;
            state ^= state << 25;
            state ^= state >> 27;
            state.wrapping_mul(0x2545_F491_4F6C_DD1D)
        };
        for i in (1..all.len()).rev() {
            let j = (next() % (i as u64 + 1)) as usize;
            all.swap(i, j);
        }
        all.truncate(n);
        all.sort_unstable();
    }
    all
}

#[cfg(test)]
mod tests {
    use super::*;

    fn docs(counts: &[usize]) -> Vec<EvalDocument> {
        counts
            .iter()
            .enumerate()
            .map(|(d, &n)| EvalDocument {
                id: format!("d{d}"),
                source: "s".into(),
                title: String::new(),
                text: "t".into(),
                questions: (0..n)
                    .map(|q| EvalQuestion {
                        id: format!("d{d}q{q}"),
                        question: "?".into(),
                        answers: vec![],
                        kind: "free-form".into(),
                        evidence: vec![],
                    })
                    .collect(),
            })
            .collect()
    }

    #[test]
    fn a_directory_with_a_questions_file_groups_questions_by_document() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("lease.md"),
            "# Lease\n\nThe lease ends in 2031.",
        )
        .unwrap();
        std::fs::write(dir.path().join("memo.txt"), "A memo.").unwrap();
        std::fs::write(
            dir.path().join(QUESTIONS_FILE),
            concat!(
                r#"{"document": "lease.md", "question": "When does it end?", "answers": ["2031"]}"#, "\n",
                r#"{"document": "memo.txt", "question": "Who signed?", "answers": []}"#, "\n\n",
                r#"{"document": "lease.md", "question": "Rent?", "answers": ["none"], "kind": "free-form", "id": "r"}"#, "\n",
            ),
        )
        .unwrap();
        let set = load(dir.path()).unwrap();
        let ids: Vec<&str> = set.documents.iter().map(|d| d.id.as_str()).collect();
        assert_eq!(ids, ["lease.md", "memo.txt"]);
        let lease = &set.documents[0].questions;
        assert_eq!(
            (lease[0].id.as_str(), lease[0].kind.as_str()),
            ("lease.md#1", "extractive")
        );
        assert_eq!(
            (lease[1].id.as_str(), lease[1].kind.as_str()),
            ("r", "free-form")
        );
        assert_eq!(set.documents[1].questions[0].kind, "unanswerable");
        assert_eq!(set.files["memo.txt"], dir.path().join("memo.txt"));
    }

    #[test]
    fn a_question_naming_a_missing_file_is_refused_with_its_line() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join(QUESTIONS_FILE),
            r#"{"document": "absent.pdf", "question": "?", "answers": ["x"]}"#,
        )
        .unwrap();
        let err = format!("{:#}", load(dir.path()).unwrap_err());
        assert!(
            err.contains("questions.jsonl:1") && err.contains("absent.pdf"),
            "{err}"
        );
        let err = format!(
            "{:#}",
            load(tempfile::tempdir().unwrap().path()).unwrap_err()
        );
        assert!(err.contains("needs questions.jsonl"), "{err}");
    }

    #[test]
    fn a_seeded_sample_repeats_and_differs_between_seeds() {
        let d = docs(&[10, 20, 30]);
        let a = sample(&d, Some(12), 7);
        assert_eq!(a.len(), 12);
        assert_eq!(a, sample(&d, Some(12), 7));
        assert_ne!(a, sample(&d, Some(12), 8));
        assert!(a.windows(2).all(|w| w[0] < w[1]), "dataset order");
        assert_eq!(sample(&d, None, 7).len(), 60);
    }
}
