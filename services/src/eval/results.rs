//! Per-question results: scored from an answer, appended to `results.jsonl` as they come, and read back
//! so an interrupted run resumes without asking anything twice.

use std::collections::HashSet;
use std::io::Write;
use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::dataset::{EvalDocument, EvalQuestion};
use super::metrics;
use crate::qa::abstention::AbstentionCheck;

/// One question answered on one route.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct QuestionResult {
    /// Dataset file stem.
    pub dataset: String,
    /// The document's `source`.
    pub source: String,
    /// The dataset's document id.
    pub document: String,
    /// Tokens of the document.
    pub document_tokens: u64,
    /// The dataset's question id.
    pub question_id: String,
    /// Question kind.
    pub kind: String,
    /// Route asked for.
    pub route_requested: String,
    /// Route taken.
    pub route: String,
    /// Self-Route fell back to long.
    pub self_route_fallback: bool,
    /// The answer.
    pub answer: String,
    /// The answer did not say "not found".
    pub answerable: bool,
    /// The metric that fits the kind (F1, ROUGE-L, accuracy, or abstention), 0..=1.
    pub score: f64,
    /// Exact match (extractive).
    pub exact_match: Option<f64>,
    /// Token F1 (extractive; characters for Chinese).
    pub f1: Option<f64>,
    /// ROUGE-L (free-form).
    pub rouge_l: Option<f64>,
    /// Whether an answer citation quotes gold evidence (when evidence is given).
    pub cites_evidence: Option<bool>,
    /// Share of the evidence spans found in the top 10 retrieved chunks.
    pub evidence_recall_at_10: Option<f64>,
    /// Time to first token.
    pub first_token_ms: u64,
    /// Total time.
    pub total_ms: u64,
    /// Prompt tokens.
    pub prompt_tokens: u64,
    /// Of those, from the KV prefix cache.
    pub cached_tokens: u64,
    /// Answer tokens.
    pub completion_tokens: u64,
    /// Why the question failed (then the scores are 0).
    pub error: Option<String>,
    /// The answer's abstention checks (the router's signals), one per generation.
    #[serde(default)]
    pub abstention: Vec<AbstentionCheck>,
    /// The adapter merged into the server's generator (`none`, or `NAME@DIGEST12`; absent when the
    /// server did not say).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adapter: Option<String>,
}

impl QuestionResult {
    /// The key a run resumes by.
    pub fn key(&self) -> String {
        key(&self.question_id, &self.route_requested)
    }
}

/// The resume key of a question on a route.
pub fn key(question_id: &str, route: &str) -> String {
    format!("{question_id}\u{1f}{route}")
}

/// Whether `part` is (mostly) inside `container`: 60% of its words occur there (for Chinese, one holds
/// the other).
pub fn supports(container: &str, part: &str) -> bool {
    if metrics::is_chinese(part) {
        let c = metrics::normalize(container).replace(' ', "");
        let p = metrics::normalize(part).replace(' ', "");
        return !p.is_empty() && (c.contains(&p) || p.contains(&c));
    }
    let words: HashSet<String> = metrics::normalize(container)
        .split_whitespace()
        .map(str::to_string)
        .collect();
    let p: Vec<String> = metrics::normalize(part)
        .split_whitespace()
        .map(str::to_string)
        .collect();
    !p.is_empty() && p.iter().filter(|w| words.contains(*w)).count() * 10 >= p.len() * 6
}

/// Share of `evidence` spans that some chunk of `chunks` overlaps (an evidence span is found when a
/// chunk holds most of its words).
pub fn evidence_recall(evidence: &[String], chunks: &[String]) -> Option<f64> {
    if evidence.is_empty() {
        return None;
    }
    let found = evidence
        .iter()
        .filter(|e| chunks.iter().any(|c| supports(c, e)))
        .count();
    Some(found as f64 / evidence.len() as f64)
}

/// Scores an answer to `q`.
pub fn score(
    dataset: &str,
    doc: &EvalDocument,
    document_tokens: u64,
    q: &EvalQuestion,
    route_requested: &str,
    answer: &Value,
    evidence_recall_at_10: Option<f64>,
) -> QuestionResult {
    let text = answer["answer"].as_str().unwrap_or_default().to_string();
    let answerable = answer["answerable"].as_bool().unwrap_or(true);
    // Citation markers are where the answer came from, not what it says: scored without them.
    let said = crate::qa::citations::without_markers(&text);
    let (mut em, mut f1, mut rouge) = (None, None, None);
    let score = match q.kind.as_str() {
        "unanswerable" => f64::from(u8::from(!answerable)),
        "multiple-choice" => metrics::multiple_choice(&said, &q.answers),
        "extractive" => {
            em = Some(metrics::exact_match(&said, &q.answers));
            let v = metrics::f1(&said, &q.answers);
            f1 = Some(v);
            v
        }
        _ => {
            let v = metrics::rouge_l(&said, &q.answers);
            rouge = Some(v);
            v
        }
    };
    let quotes: Vec<String> = answer["citations"]
        .as_array()
        .map(|cs| {
            cs.iter()
                .filter_map(|c| c["quote"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    let cites_evidence = (!q.evidence.is_empty()).then(|| {
        quotes
            .iter()
            .any(|quote| q.evidence.iter().any(|e| supports(e, quote)))
    });
    let u = |k: &str| answer["usage"][k].as_u64().unwrap_or(0);
    let t = |k: &str| answer["timings"][k].as_u64().unwrap_or(0);
    QuestionResult {
        dataset: dataset.to_string(),
        source: doc.source.clone(),
        document: doc.id.clone(),
        document_tokens,
        question_id: q.id.clone(),
        kind: q.kind.clone(),
        route_requested: route_requested.to_string(),
        route: answer["route"].as_str().unwrap_or_default().to_string(),
        self_route_fallback: answer["self_route_fallback"].as_bool().unwrap_or(false),
        answer: text,
        answerable,
        score,
        exact_match: em,
        f1,
        rouge_l: rouge,
        cites_evidence,
        evidence_recall_at_10,
        first_token_ms: t("first_token_ms"),
        total_ms: t("total_ms"),
        prompt_tokens: u("prompt_tokens"),
        cached_tokens: u("cached_prompt_tokens"),
        completion_tokens: u("completion_tokens"),
        error: None,
        abstention: serde_json::from_value(answer["signals"]["abstention"].clone())
            .unwrap_or_default(),
        adapter: None,
    }
}

/// The adapters the results were answered with, in order of first appearance (`unknown` when none
/// was recorded).
pub fn adapters(results: &[QuestionResult]) -> String {
    let mut seen: Vec<&str> = Vec::new();
    for a in results.iter().filter_map(|r| r.adapter.as_deref()) {
        if !seen.contains(&a) {
            seen.push(a);
        }
    }
    match seen.is_empty() {
        true => "unknown".into(),
        false => seen.join(", "),
    }
}

/// Results already in `path` (a run being resumed).
pub fn read(path: &Path) -> anyhow::Result<Vec<QuestionResult>> {
    Ok(read_lines(path)?.0)
}

/// The parsed results and the number of lines in the file. A line cut by a crash is dropped: that
/// question is simply asked again.
fn read_lines(path: &Path) -> anyhow::Result<(Vec<QuestionResult>, usize)> {
    if !path.exists() {
        return Ok((Vec::new(), 0));
    }
    let text = std::fs::read_to_string(path)?;
    let parsed = text
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    Ok((parsed, text.lines().count()))
}

/// The results a resumed run keeps: those that got an answer. Failed questions (a refused request, or
/// one cut off when the run was stopped) and a last line cut by a crash are taken out of the file, so
/// those questions are asked again, counted once, and appended on a line of their own.
pub fn read_for_resume(path: &Path) -> anyhow::Result<Vec<QuestionResult>> {
    let (all, lines) = read_lines(path)?;
    let answered: Vec<QuestionResult> = all.into_iter().filter(|r| r.error.is_none()).collect();
    if answered.len() < lines {
        let tmp = path.with_extension("jsonl.tmp");
        let mut text = String::new();
        for r in &answered {
            text.push_str(&serde_json::to_string(r)?);
            text.push('\n');
        }
        std::fs::write(&tmp, text)?;
        std::fs::rename(&tmp, path)?;
    }
    Ok(answered)
}

/// Appends one result and flushes it to disk. The line goes out in one write, one append at a time, so
/// results of concurrent questions never share a line.
pub fn append(path: &Path, r: &QuestionResult) -> anyhow::Result<()> {
    // One writer at a time: concurrent questions' appends were seen sharing a line on a filesystem
    // where O_APPEND alone did not keep two writes apart.
    static WRITER: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one_at_a_time = WRITER.lock().unwrap_or_else(|e| e.into_inner());
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)?;
    let mut line = serde_json::to_string(r)?;
    line.push('\n');
    f.write_all(line.as_bytes())?;
    f.sync_data()?;
    Ok(())
}

/// A plain answered result for tests of the reports: extractive, answerable, F1 equal to `score`, one
/// second in all (half of it to the first token), a 100-token document and prompt.
#[cfg(test)]
pub fn example(question_id: &str, route: &str, score: f64) -> QuestionResult {
    QuestionResult {
        dataset: "d".into(),
        source: "s".into(),
        document: "doc".into(),
        document_tokens: 100,
        question_id: question_id.into(),
        kind: "extractive".into(),
        route_requested: route.into(),
        route: route.replace("auto", "rag"),
        self_route_fallback: false,
        answer: format!("answer to {question_id} scoring {score}"),
        answerable: true,
        score,
        exact_match: Some(score),
        f1: Some(score),
        rouge_l: None,
        cites_evidence: None,
        evidence_recall_at_10: None,
        first_token_ms: 500,
        total_ms: 1000,
        prompt_tokens: 100,
        cached_tokens: 0,
        completion_tokens: 5,
        error: None,
        abstention: Vec::new(),
        adapter: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_appended_by_concurrent_questions_keep_a_line_each() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("results.jsonl");
        std::thread::scope(|scope| {
            for t in 0..8 {
                let path = &path;
                scope.spawn(move || {
                    for i in 0..40 {
                        let r = example(&format!("q{t}-{i}"), "rag", 0.5);
                        append(path, &r).expect("appended");
                    }
                });
            }
        });
        let (parsed, lines) = read_lines(&path).expect("read");
        assert_eq!(lines, 320);
        assert_eq!(parsed.len(), 320);
    }

    #[test]
    fn a_resumed_run_asks_failed_questions_again_and_keeps_answered_ones() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("results.jsonl");
        let mut failed = example("q2", "long", 0.0);
        failed.error = Some("error sending request".into());
        for r in [example("q1", "rag", 0.5), failed, example("q3", "rag", 1.0)] {
            append(&path, &r).unwrap();
        }
        std::fs::write(
            &path,
            std::fs::read_to_string(&path).unwrap() + "{\"question_id\": \"cut",
        )
        .unwrap();
        let kept = read_for_resume(&path).unwrap();
        let keys: Vec<String> = kept.iter().map(QuestionResult::key).collect();
        assert_eq!(keys, [key("q1", "rag"), key("q3", "rag")]);
        // The file now holds the kept results alone, so the next answer lands on a line of its own.
        append(&path, &example("q2", "long", 0.25)).unwrap();
        let keys: Vec<String> = read_for_resume(&path)
            .unwrap()
            .iter()
            .map(QuestionResult::key)
            .collect();
        assert_eq!(
            keys,
            [key("q1", "rag"), key("q3", "rag"), key("q2", "long")]
        );
    }

    #[test]
    fn an_answers_abstention_checks_are_kept_in_its_result() {
        let doc = EvalDocument {
            id: "doc".into(),
            source: "s".into(),
            title: String::new(),
            text: "t".into(),
            questions: vec![],
        };
        let q = EvalQuestion {
            id: "q".into(),
            question: "Who?".into(),
            answers: vec![],
            kind: "unanswerable".into(),
            evidence: vec![],
        };
        let check = serde_json::json!({
            "route": "rag", "support": 0.31, "threshold": 0.45, "abstained": true,
            "measures": { "refusal_probability": 0.0, "first_token_probability": 0.31,
                          "head_logprob": -1.2, "mean_logprob": -0.9, "min_logprob": -3.1, "tokens": 12 },
        });
        let answer = serde_json::json!({
            "answer": "Not found in the document.", "answerable": false,
            "signals": { "abstention": [check] },
        });
        let r = score("d", &doc, 100, &q, "rag", &answer, None);
        assert_eq!(r.score, 1.0);
        assert_eq!(r.abstention.len(), 1);
        assert!(r.abstention[0].abstained && r.abstention[0].measures.tokens == 12);
        let line = serde_json::to_string(&r).unwrap();
        let back: QuestionResult = serde_json::from_str(&line).unwrap();
        assert_eq!(back.abstention, r.abstention);
        let older = line.replace(
            &format!(
                ",\"abstention\":{}",
                serde_json::to_string(&r.abstention).unwrap()
            ),
            "",
        );
        assert!(!older.contains("abstention"), "{older}");
        let old: QuestionResult = serde_json::from_str(&older).unwrap();
        assert!(
            old.abstention.is_empty(),
            "results written before the checks still read"
        );
    }

    #[test]
    fn a_chunk_holding_most_of_an_evidence_span_finds_it() {
        let chunk =
            "The Normans were the people who gave their name to Normandy, a region in France.";
        let ev = vec!["gave their name to Normandy, a region in France".to_string()];
        assert_eq!(evidence_recall(&ev, &[chunk.to_string()]), Some(1.0));
        assert_eq!(
            evidence_recall(&ev, &["Steam engines burn coal.".to_string()]),
            Some(0.0)
        );
        assert_eq!(evidence_recall(&[], &[chunk.to_string()]), None);
    }
}
