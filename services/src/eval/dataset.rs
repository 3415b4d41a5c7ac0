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

pub use docqa_indexer::eval::dataset::{QaDocument as EvalDocument, QaQuestion as EvalQuestion};

/// Reads a dataset file.
pub fn load(path: &std::path::Path) -> anyhow::Result<Vec<EvalDocument>> {
    docqa_indexer::eval::dataset::load_qa(path)
        .map_err(|e| anyhow::anyhow!("reading {}: {e}", path.display()))
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
