//! Real text for the indexer's benchmarks: every document of `qa/*.jsonl` (each once) and the
//! SciFact passages, the QA questions as queries, and the generator's tokenizer to count tokens
//! the way the service does.
//!
//! The data folder is the evaluation data's (`$DOCQA_DATA`, else `../shared/data` beside the checkout;
//! see `tests/support/test_data.rs`); the models folder is the engine's (`$DOCQA_MODELS_DIR`, else the
//! user's cache).

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use docqa_indexer::eval::dataset::{RetrievalDataset, load_qa};

/// One document of the benchmark corpus.
pub struct Document {
    pub id: String,
    pub text: String,
}

/// One question about one document.
pub struct Question {
    pub document_id: String,
    pub text: String,
}

#[path = "../../../tests/support/test_data.rs"]
mod test_data;

/// The evaluation data folder, or why it cannot be read.
pub fn data_dir() -> Result<PathBuf, String> {
    let dir = test_data::evaluation_dir();
    if dir.join("qa").is_dir() {
        Ok(dir)
    } else {
        Err(format!(
            "the evaluation data is not at {} (set DOCQA_DATA)",
            dir.display()
        ))
    }
}

/// The QA files of `data/qa`, in name order.
fn qa_files(data: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(data.join("qa"))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .collect();
    files.sort();
    Ok(files)
}

/// Every document of the QA files (a document shared by several files counted once), with the
/// questions about them.
pub fn qa_corpus(data: &Path) -> docqa_indexer::Result<(Vec<Document>, Vec<Question>)> {
    let (mut docs, mut questions, mut seen) = (Vec::new(), Vec::new(), HashSet::new());
    for file in qa_files(data)? {
        for doc in load_qa(&file)? {
            if !seen.insert(doc.id.clone()) {
                continue;
            }
            questions.extend(doc.questions.iter().map(|q| Question {
                document_id: doc.id.clone(),
                text: q.question.clone(),
            }));
            docs.push(Document {
                id: doc.id,
                text: doc.text,
            });
        }
    }
    Ok((docs, questions))
}

/// The SciFact passages as documents (title and body) and its queries.
pub fn scifact_corpus(data: &Path) -> docqa_indexer::Result<(Vec<Document>, Vec<String>)> {
    let set = RetrievalDataset::load(&data.join("retrieval/scifact"))?;
    let docs = set
        .corpus
        .iter()
        .map(|p| Document {
            id: format!("scifact-{}", p.id),
            text: p.indexed_text(),
        })
        .collect();
    Ok((docs, set.queries.into_iter().map(|q| q.text).collect()))
}

/// The generator's tokenizer (`smollm2-135m-instruct/tokenizer.json` in the models folder).
pub fn generator_tokenizer() -> Result<tokenizers::Tokenizer, String> {
    let path = docqa_engine::fetch::default_models_dir()
        .join("smollm2-135m-instruct")
        .join("tokenizer.json");
    tokenizers::Tokenizer::from_file(&path)
        .map_err(|e| format!("{}: {e} (run `docqa models fetch`)", path.display()))
}

/// The embedder's folder (`all-minilm-l6-v2` in the models folder).
pub fn embedder_dir() -> PathBuf {
    docqa_engine::fetch::default_models_dir().join("all-minilm-l6-v2")
}

/// Total size in bytes of the files under `dir`.
pub fn disk_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(|e| e.ok())
                .map(|e| match e.metadata() {
                    Ok(m) if m.is_dir() => disk_bytes(&e.path()),
                    Ok(m) => m.len(),
                    Err(_) => 0,
                })
                .sum()
        })
        .unwrap_or(0)
}

/// The process's resident set (`VmRSS`) and its peak (`VmHWM`), in bytes.
pub fn resident_bytes() -> (u64, u64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .map_or(0, |kb| kb * 1024)
    };
    (field("VmRSS:"), field("VmHWM:"))
}
