//! Aggregating results into `report.json` and `report.md`: per dataset and route, answer quality
//! (the kind's metric, EM, F1, ROUGE-L), abstention precision and recall, evidence recall and cited
//! evidence, latency (mean, p50, p95 of first token and total), tokens, the routes `auto` took, and how
//! often `auto` matched the better of rag and long in hindsight.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write;

use serde::{Deserialize, Serialize};

use super::results::QuestionResult;

/// The figures of one dataset on one route.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RouteSummary {
    /// Dataset.
    pub dataset: String,
    /// Route asked for.
    pub route: String,
    /// Questions answered (errors excluded).
    pub questions: usize,
    /// Questions that failed.
    pub errors: usize,
    /// Mean of the kind's metric.
    pub score: f64,
    /// Mean exact match over extractive questions.
    pub exact_match: Option<f64>,
    /// Mean F1 over extractive questions.
    pub f1: Option<f64>,
    /// Mean ROUGE-L over free-form questions.
    pub rouge_l: Option<f64>,
    /// Accuracy over multiple-choice questions.
    pub multiple_choice: Option<f64>,
    /// Of the answers that abstained, the share whose question is unanswerable.
    pub abstention_precision: Option<f64>,
    /// Of the unanswerable questions, the share abstained on.
    pub abstention_recall: Option<f64>,
    /// Mean evidence recall of the top 10 retrieved chunks.
    pub evidence_recall_at_10: Option<f64>,
    /// Share of answers whose citations quote gold evidence.
    pub cites_evidence: Option<f64>,
    /// Time to first token: mean, p50, p95 (ms).
    pub first_token_ms: [f64; 3],
    /// Total time: mean, p50, p95 (ms).
    pub total_ms: [f64; 3],
    /// Mean time to first token of answers whose prompt was mostly computed (cold KV cache).
    pub cold_first_token_ms: Option<f64>,
    /// Mean time to first token of answers whose prompt was mostly cached (warm KV cache).
    pub warm_first_token_ms: Option<f64>,
    /// Mean prompt tokens.
    pub prompt_tokens: f64,
    /// Mean prompt tokens from the KV cache.
    pub cached_tokens: f64,
    /// Mean answer tokens.
    pub completion_tokens: f64,
    /// How often each route was taken.
    pub routes_taken: BTreeMap<String, usize>,
    /// Share of questions where this route scored at least the better of rag and long (auto only).
    pub hindsight_agreement: Option<f64>,
}

fn mean(v: &[f64]) -> f64 {
    if v.is_empty() {
        0.0
    } else {
        v.iter().sum::<f64>() / v.len() as f64
    }
}

fn mean_of(v: impl Iterator<Item = f64>) -> Option<f64> {
    let v: Vec<f64> = v.collect();
    (!v.is_empty()).then(|| mean(&v))
}

/// Nearest-rank percentile.
fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn spread(mut v: Vec<f64>) -> [f64; 3] {
    v.sort_by(f64::total_cmp);
    [mean(&v), percentile(&v, 50.0), percentile(&v, 95.0)]
}

/// One summary per (dataset, route), in dataset then route order.
pub fn summarize(results: &[QuestionResult]) -> Vec<RouteSummary> {
    let mut groups: BTreeMap<(String, String), Vec<&QuestionResult>> = BTreeMap::new();
    for r in results {
        groups
            .entry((r.dataset.clone(), r.route_requested.clone()))
            .or_default()
            .push(r);
    }
    let best: HashMap<&str, f64> = best_of_rag_and_long(results);
    groups
        .into_iter()
        .map(|((dataset, route), all)| {
            let ok: Vec<&QuestionResult> =
                all.iter().copied().filter(|r| r.error.is_none()).collect();
            let abstained: Vec<_> = ok.iter().filter(|r| !r.answerable).collect();
            let unanswerable: Vec<_> = ok.iter().filter(|r| r.kind == "unanswerable").collect();
            let mut routes_taken = BTreeMap::new();
            for r in &ok {
                *routes_taken.entry(r.route.clone()).or_insert(0) += 1;
            }
            let hindsight_agreement = (route == "auto")
                .then(|| {
                    mean_of(ok.iter().filter_map(|r| {
                        best.get(r.question_id.as_str())
                            .map(|b| f64::from(u8::from(r.score + 1e-9 >= *b)))
                    }))
                })
                .flatten();
            RouteSummary {
                dataset,
                route,
                questions: ok.len(),
                errors: all.len() - ok.len(),
                score: mean(&ok.iter().map(|r| r.score).collect::<Vec<_>>()),
                exact_match: mean_of(ok.iter().filter_map(|r| r.exact_match)),
                f1: mean_of(ok.iter().filter_map(|r| r.f1)),
                rouge_l: mean_of(ok.iter().filter_map(|r| r.rouge_l)),
                multiple_choice: mean_of(
                    ok.iter()
                        .filter(|r| r.kind == "multiple-choice")
                        .map(|r| r.score),
                ),
                abstention_precision: (!abstained.is_empty()).then(|| {
                    abstained
                        .iter()
                        .filter(|r| r.kind == "unanswerable")
                        .count() as f64
                        / abstained.len() as f64
                }),
                abstention_recall: (!unanswerable.is_empty()).then(|| {
                    unanswerable.iter().filter(|r| !r.answerable).count() as f64
                        / unanswerable.len() as f64
                }),
                evidence_recall_at_10: mean_of(ok.iter().filter_map(|r| r.evidence_recall_at_10)),
                cites_evidence: mean_of(
                    ok.iter()
                        .filter_map(|r| r.cites_evidence.map(|c| f64::from(u8::from(c)))),
                ),
                first_token_ms: spread(ok.iter().map(|r| r.first_token_ms as f64).collect()),
                total_ms: spread(ok.iter().map(|r| r.total_ms as f64).collect()),
                cold_first_token_ms: mean_of(
                    ok.iter()
                        .filter(|r| r.cached_tokens * 2 < r.prompt_tokens)
                        .map(|r| r.first_token_ms as f64),
                ),
                warm_first_token_ms: mean_of(
                    ok.iter()
                        .filter(|r| r.cached_tokens * 2 >= r.prompt_tokens)
                        .map(|r| r.first_token_ms as f64),
                ),
                prompt_tokens: mean(
                    &ok.iter()
                        .map(|r| r.prompt_tokens as f64)
                        .collect::<Vec<_>>(),
                ),
                cached_tokens: mean(
                    &ok.iter()
                        .map(|r| r.cached_tokens as f64)
                        .collect::<Vec<_>>(),
                ),
                completion_tokens: mean(
                    &ok.iter()
                        .map(|r| r.completion_tokens as f64)
                        .collect::<Vec<_>>(),
                ),
                routes_taken,
                hindsight_agreement,
            }
        })
        .collect()
}

/// For each question answered on both rag and long, the better of their scores.
fn best_of_rag_and_long(results: &[QuestionResult]) -> HashMap<&str, f64> {
    let mut by: HashMap<&str, (Option<f64>, Option<f64>)> = HashMap::new();
    for r in results.iter().filter(|r| r.error.is_none()) {
        let e = by.entry(r.question_id.as_str()).or_default();
        match r.route_requested.as_str() {
            "rag" => e.0 = Some(r.score),
            "long" => e.1 = Some(r.score),
            _ => {}
        }
    }
    by.into_iter()
        .filter_map(|(q, (rag, long))| Some((q, rag?.max(long?))))
        .collect()
}

fn cell(v: Option<f64>) -> String {
    v.map_or("–".into(), |x| format!("{:.1}", x * 100.0))
}

/// The Markdown report: one table per dataset.
pub fn markdown(summaries: &[RouteSummary], header: &str) -> String {
    let mut md = format!("# docqa evaluation\n\n{header}\n");
    let mut current = String::new();
    for s in summaries {
        if s.dataset != current {
            current = s.dataset.clone();
            let _ = write!(
                md,
                "\n## {current}\n\n| route | n | score | EM | F1 | ROUGE-L | MC acc | abstain P | abstain R | evidence@10 | cites evidence | TTFT mean ms (cold / warm KV) | total mean / p50 / p95 ms | prompt tok | cached tok | answer tok | routes taken | auto = best |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n"
            );
        }
        let routes: Vec<String> = s
            .routes_taken
            .iter()
            .map(|(r, n)| format!("{r} {n}"))
            .collect();
        let _ = writeln!(
            md,
            "| {} | {}{} | {:.1} | {} | {} | {} | {} | {} | {} | {} | {} | {:.0} ({} / {}) | {:.0} / {:.0} / {:.0} | {:.0} | {:.0} | {:.1} | {} | {} |",
            s.route,
            s.questions,
            if s.errors > 0 {
                format!(" ({} errors)", s.errors)
            } else {
                String::new()
            },
            s.score * 100.0,
            cell(s.exact_match),
            cell(s.f1),
            cell(s.rouge_l),
            cell(s.multiple_choice),
            cell(s.abstention_precision),
            cell(s.abstention_recall),
            cell(s.evidence_recall_at_10),
            cell(s.cites_evidence),
            s.first_token_ms[0],
            s.cold_first_token_ms
                .map_or("–".into(), |v| format!("{v:.0}")),
            s.warm_first_token_ms
                .map_or("–".into(), |v| format!("{v:.0}")),
            s.total_ms[0],
            s.total_ms[1],
            s.total_ms[2],
            s.prompt_tokens,
            s.cached_tokens,
            s.completion_tokens,
            routes.join(", "),
            cell(s.hindsight_agreement),
        );
    }
    md.push_str("\nScores are percentages. `score` is the kind's metric: F1 (extractive), ROUGE-L (free-form), accuracy (multiple choice), abstention (unanswerable).\n");
    md
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(q: &str, route: &str, score: f64, kind: &str, answerable: bool) -> QuestionResult {
        QuestionResult {
            kind: kind.into(),
            answerable,
            ..crate::eval::results::example(q, route, score)
        }
    }

    #[test]
    fn percentiles_use_the_nearest_rank() {
        let v: Vec<f64> = (1..=20).map(f64::from).collect();
        assert_eq!(percentile(&v, 50.0), 10.0);
        assert_eq!(percentile(&v, 95.0), 19.0);
        assert_eq!(percentile(&[7.0], 95.0), 7.0);
    }

    #[test]
    fn auto_agrees_with_hindsight_when_it_scores_the_better_of_rag_and_long() {
        let rs = vec![
            result("q1", "rag", 0.2, "extractive", true),
            result("q1", "long", 0.8, "extractive", true),
            result("q1", "auto", 0.8, "extractive", true),
            result("q2", "rag", 0.5, "extractive", true),
            result("q2", "long", 0.1, "extractive", true),
            result("q2", "auto", 0.1, "extractive", true),
        ];
        let s = summarize(&rs);
        let auto = s.iter().find(|s| s.route == "auto").unwrap();
        assert_eq!(auto.hindsight_agreement, Some(0.5));
        assert!((auto.score - 0.45).abs() < 1e-12);
    }

    #[test]
    fn abstention_precision_and_recall_count_unanswerable_questions() {
        let rs = vec![
            result("u1", "rag", 1.0, "unanswerable", false),
            result("u2", "rag", 0.0, "unanswerable", true),
            result("a1", "rag", 0.0, "extractive", false),
            result("a2", "rag", 1.0, "extractive", true),
        ];
        let s = &summarize(&rs)[0];
        assert_eq!(s.abstention_precision, Some(0.5));
        assert_eq!(s.abstention_recall, Some(0.5));
    }
}
