//! Within-document evaluation on the QA files: is the gold evidence among the top chunks of
//! the question's own document?
//!
//! Every document is cut into chunks (by the caller's chunker, or [`sentence_windows`]); all
//! chunks of the file go into one index and each question is searched with a filter on its own
//! document. Each evidence snippet is located verbatim in the document text (first occurrence;
//! snippets not found are counted and skipped).
//!
//! **Hit rule.** A chunk *covers* an evidence span when their byte ranges overlap by at least
//! half of the shorter of the two: a short evidence sentence must be at least half inside the
//! chunk, and a long evidence paragraph split over several chunks is covered by any chunk lying
//! mostly inside it. For a question, recall@k = share of its located evidence snippets covered
//! by at least one of its top-k chunks; the report averages over questions with evidence.

use std::collections::HashMap;
use std::fmt;
use std::ops::Range;
use std::path::Path;
use std::sync::Arc;

use super::dataset::load_qa;
use super::runner::{EvalIndex, EvalOptions};
use crate::Result;
use crate::dense::Embedder;
use crate::record::{ChunkRecord, SearchFilter};

/// Cut-off depths reported.
pub const DEPTHS: [usize; 3] = [5, 10, 20];

/// A chunker for the evaluation: text → byte ranges of its chunks.
pub type Chunker<'a> = &'a dyn Fn(&str) -> Vec<Range<usize>>;

/// Recall of one retriever at [`DEPTHS`].
#[derive(Debug, Clone, PartialEq)]
pub struct WithinDocScores {
    /// `bm25`, `dense` or `hybrid`.
    pub retriever: String,
    /// Mean recall at 5, 10 and 20.
    pub recall: [f64; 3],
}

/// The result of [`evaluate_within_document`].
#[derive(Debug, Clone, PartialEq)]
pub struct WithinDocReport {
    /// File name.
    pub file: String,
    /// Documents and chunks indexed.
    pub documents: usize,
    /// Chunks indexed.
    pub chunks: usize,
    /// Questions scored (those with located evidence).
    pub questions: usize,
    /// Evidence snippets that could not be found verbatim in their document.
    pub evidence_not_found: usize,
    /// One line per retriever.
    pub lines: Vec<WithinDocScores>,
}

impl WithinDocReport {
    /// The line of a retriever, by name.
    pub fn line(&self, retriever: &str) -> Option<&WithinDocScores> {
        self.lines.iter().find(|l| l.retriever == retriever)
    }
}

impl fmt::Display for WithinDocReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{} ({} documents, {} chunks, {} questions, {} evidence not found)",
            self.file, self.documents, self.chunks, self.questions, self.evidence_not_found
        )?;
        writeln!(
            f,
            "{:<9} {:>8} {:>8} {:>8}",
            "retriever", "R@5", "R@10", "R@20"
        )?;
        for l in &self.lines {
            writeln!(
                f,
                "{:<9} {:>8.4} {:>8.4} {:>8.4}",
                l.retriever, l.recall[0], l.recall[1], l.recall[2]
            )?;
        }
        Ok(())
    }
}

/// Whether chunk `c` covers evidence `e` under the hit rule above.
pub fn covers(c: &Range<usize>, e: &Range<usize>) -> bool {
    let overlap = c.end.min(e.end).saturating_sub(c.start.max(e.start));
    let shorter = c.len().min(e.len());
    shorter > 0 && 2 * overlap >= shorter
}

fn is_terminator(c: char, next: Option<char>) -> bool {
    match c {
        '\n' | '。' | '！' | '？' | '；' => true,
        '.' | '!' | '?' => next.is_none_or(char::is_whitespace),
        _ => false,
    }
}

/// Byte ranges of sentences (terminator included; whitespace between sentences is skipped).
fn sentences(text: &str) -> Vec<Range<usize>> {
    let mut out = Vec::new();
    let mut start = None;
    let mut chars = text.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        if start.is_none() && !c.is_whitespace() {
            start = Some(i);
        }
        let next = chars.peek().map(|&(_, n)| n);
        if let Some(s) = start.filter(|_| is_terminator(c, next)) {
            out.push(s..i + c.len_utf8());
            start = None;
        }
    }
    if let Some(s) = start {
        out.push(s..text.len());
    }
    out
}

/// Evaluation stand-in chunker: consecutive sentences packed into chunks of at most
/// `max_chars` characters (a longer sentence is cut at `max_chars`). The product's chunker uses
/// generator tokens; pass it as a [`Chunker`] to evaluate it instead.
pub fn sentence_windows(text: &str, max_chars: usize) -> Vec<Range<usize>> {
    let max_chars = max_chars.max(1);
    let mut pieces = Vec::new();
    for s in sentences(text) {
        let bounds: Vec<usize> = text[s.clone()]
            .char_indices()
            .map(|(i, _)| s.start + i)
            .step_by(max_chars)
            .chain(std::iter::once(s.end))
            .collect();
        for w in bounds.windows(2) {
            pieces.push((w[0]..w[1], text[w[0]..w[1]].chars().count()));
        }
    }
    let mut chunks: Vec<Range<usize>> = Vec::new();
    let mut current: Option<(Range<usize>, usize)> = None;
    for (r, n) in pieces {
        current = match current {
            Some((c, m)) if m + text[c.end..r.start].chars().count() + n <= max_chars => {
                let gap = text[c.end..r.start].chars().count();
                Some((c.start..r.end, m + gap + n))
            }
            Some((c, _)) => {
                chunks.push(c);
                Some((r, n))
            }
            None => Some((r, n)),
        };
    }
    chunks.extend(current.map(|(c, _)| c));
    chunks
}

/// Evaluates within-document retrieval on the QA file at `path`.
pub fn evaluate_within_document(
    path: &Path,
    chunker: Chunker<'_>,
    embedder: Option<Arc<dyn Embedder>>,
    options: EvalOptions,
) -> Result<WithinDocReport> {
    let docs = load_qa(path)?;
    let mut records = Vec::new();
    let mut spans: HashMap<u64, Range<usize>> = HashMap::new();
    for d in &docs {
        for r in chunker(&d.text) {
            let chunk_id = records.len() as u64;
            records.push(ChunkRecord {
                chunk_id,
                document_id: d.id.clone(),
                collection: None,
                text: d.text[r.clone()].to_string(),
            });
            spans.insert(chunk_id, r);
        }
    }
    let mut index = EvalIndex::build(&records, embedder, options)?;
    let mut not_found = 0;
    let mut cases = Vec::new();
    for d in &docs {
        for q in d.questions.iter().filter(|q| !q.evidence.is_empty()) {
            let located: Vec<Range<usize>> = q
                .evidence
                .iter()
                .filter_map(|e| d.text.find(e.as_str()).map(|s| s..s + e.len()))
                .collect();
            not_found += q.evidence.len() - located.len();
            if !located.is_empty() {
                cases.push((d.id.as_str(), q.question.as_str(), located));
            }
        }
    }
    let texts: Vec<&str> = cases.iter().map(|c| c.1).collect();
    let vectors = index.embed_queries(&texts)?;
    let max_k = DEPTHS[DEPTHS.len() - 1];
    let mut sums: Vec<(&'static str, [f64; 3])> = Vec::new();
    for (i, (doc, question, evidence)) in cases.iter().enumerate() {
        let filter = SearchFilter::document(*doc);
        let rankings = index.rank(question, vectors.get(i).map(Vec::as_slice), max_k, &filter)?;
        for (j, (name, list)) in rankings.lists.into_iter().enumerate() {
            if sums.len() <= j {
                sums.push((name, [0.0; 3]));
            }
            let ranked: Vec<&Range<usize>> =
                list.iter().filter_map(|c| spans.get(&c.chunk_id)).collect();
            for (slot, &k) in DEPTHS.iter().enumerate() {
                let top = &ranked[..k.min(ranked.len())];
                let covered = evidence
                    .iter()
                    .filter(|e| top.iter().any(|c| covers(c, e)))
                    .count();
                sums[j].1[slot] += covered as f64 / evidence.len() as f64;
            }
        }
    }
    let n = cases.len().max(1) as f64;
    let lines = sums
        .into_iter()
        .map(|(name, s)| WithinDocScores {
            retriever: name.to_string(),
            recall: s.map(|x| x / n),
        })
        .collect();
    let file = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    Ok(WithinDocReport {
        file,
        documents: docs.len(),
        chunks: records.len(),
        questions: cases.len(),
        evidence_not_found: not_found,
        lines,
    })
}
