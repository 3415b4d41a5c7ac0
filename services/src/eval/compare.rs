//! `docqa eval --compare BASE NEW`: two reports side by side, to check what a change did. Per dataset and
//! route: the score, the quality metrics, latency and tokens of both runs and their difference; per
//! question: how many answers scored better, worse or the same, and the largest changes.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::path::{Path, PathBuf};

use anyhow::Context;
use serde::Deserialize;

use super::report::RouteSummary;
use super::results::{QuestionResult, adapters};

/// A `report.json`.
#[derive(Debug, Deserialize)]
pub struct Report {
    /// Per (dataset, route).
    pub summaries: Vec<RouteSummary>,
    /// Per question and route.
    pub results: Vec<QuestionResult>,
}

/// Reads a report from its `report.json` or from the run directory holding it.
pub fn load(path: &Path) -> anyhow::Result<Report> {
    let file: PathBuf = if path.is_dir() {
        path.join("report.json")
    } else {
        path.to_path_buf()
    };
    let text = std::fs::read_to_string(&file)
        .with_context(|| format!("cannot read {}", file.display()))?;
    serde_json::from_str(&text).with_context(|| format!("{} is not a docqa report", file.display()))
}

/// How the answers of the questions both runs asked changed.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct QuestionChanges {
    /// Scored higher in the new run.
    pub better: usize,
    /// Scored lower.
    pub worse: usize,
    /// Same score.
    pub same: usize,
    /// Asked in only one of the runs (or failed in one).
    pub unmatched: usize,
}

type Key<'a> = (&'a str, &'a str, &'a str);

fn by_question(results: &[QuestionResult]) -> BTreeMap<Key<'_>, &QuestionResult> {
    results
        .iter()
        .filter(|r| r.error.is_none())
        .map(|r| {
            let key = (
                r.dataset.as_str(),
                r.question_id.as_str(),
                r.route_requested.as_str(),
            );
            (key, r)
        })
        .collect()
}

/// Pairs of (base, new) results of the same question and route, and the count of changes.
pub fn question_changes<'a>(
    base: &'a [QuestionResult],
    new: &'a [QuestionResult],
) -> (
    QuestionChanges,
    Vec<(&'a QuestionResult, &'a QuestionResult)>,
) {
    let (a, b) = (by_question(base), by_question(new));
    let mut changes = QuestionChanges::default();
    let mut pairs = Vec::new();
    for (key, old) in &a {
        let Some(now) = b.get(key) else {
            changes.unmatched += 1;
            continue;
        };
        match now.score.partial_cmp(&old.score) {
            Some(std::cmp::Ordering::Greater) if now.score - old.score > 1e-9 => {
                changes.better += 1
            }
            Some(std::cmp::Ordering::Less) if old.score - now.score > 1e-9 => changes.worse += 1,
            _ => changes.same += 1,
        }
        pairs.push((*old, *now));
    }
    changes.unmatched += b.keys().filter(|k| !a.contains_key(*k)).count();
    pairs.sort_by(|x, y| {
        (y.1.score - y.0.score)
            .abs()
            .total_cmp(&(x.1.score - x.0.score).abs())
    });
    (changes, pairs)
}

fn pct(v: Option<f64>) -> String {
    v.map_or("–".into(), |x| format!("{:.1}", x * 100.0))
}

fn delta_pct(a: Option<f64>, b: Option<f64>) -> String {
    match (a, b) {
        (Some(a), Some(b)) => format!("{:+.1}", (b - a) * 100.0),
        _ => "–".into(),
    }
}

fn ratio(a: f64, b: f64) -> String {
    if a > 0.0 {
        format!("×{:.2}", b / a)
    } else {
        "–".into()
    }
}

fn clip(text: &str, n: usize) -> String {
    let one_line = text.replace(['\n', '|'], " ");
    match one_line.char_indices().nth(n) {
        Some((at, _)) => format!("{}…", &one_line[..at]),
        None => one_line,
    }
}

/// The comparison as Markdown: `base_name` and `new_name` label the two runs.
pub fn markdown(base: &Report, new: &Report, base_name: &str, new_name: &str) -> String {
    let mut md = format!(
        "# docqa evaluation: comparison\n\nbase: `{base_name}` (adapter {}); new: `{new_name}` (adapter {}). Scores are percentages; Δ is new − base; latency ratios are new / base.\n\n\
         | dataset | route | n (base / new) | score | Δ score | EM Δ | F1 Δ | ROUGE-L Δ | TTFT mean ms | TTFT ratio | total p50 ms | total ratio | prompt tok | cached tok | auto = best |\n\
         |---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n",
        adapters(&base.results),
        adapters(&new.results),
    );
    let old: BTreeMap<(&str, &str), &RouteSummary> = base
        .summaries
        .iter()
        .map(|s| ((s.dataset.as_str(), s.route.as_str()), s))
        .collect();
    for s in &new.summaries {
        let Some(o) = old.get(&(s.dataset.as_str(), s.route.as_str())) else {
            let _ = writeln!(
                md,
                "| {} | {} | – / {} | {:.1} | new | | | | {:.0} | | {:.0} | | {:.0} | {:.0} | {} |",
                s.dataset,
                s.route,
                s.questions,
                s.score * 100.0,
                s.first_token_ms[0],
                s.total_ms[1],
                s.prompt_tokens,
                s.cached_tokens,
                pct(s.hindsight_agreement)
            );
            continue;
        };
        let _ = writeln!(
            md,
            "| {} | {} | {} / {} | {:.1} → {:.1} | {:+.1} | {} | {} | {} | {:.0} → {:.0} | {} | {:.0} → {:.0} | {} | {:.0} → {:.0} | {:.0} → {:.0} | {} → {} |",
            s.dataset,
            s.route,
            o.questions,
            s.questions,
            o.score * 100.0,
            s.score * 100.0,
            (s.score - o.score) * 100.0,
            delta_pct(o.exact_match, s.exact_match),
            delta_pct(o.f1, s.f1),
            delta_pct(o.rouge_l, s.rouge_l),
            o.first_token_ms[0],
            s.first_token_ms[0],
            ratio(o.first_token_ms[0], s.first_token_ms[0]),
            o.total_ms[1],
            s.total_ms[1],
            ratio(o.total_ms[1], s.total_ms[1]),
            o.prompt_tokens,
            s.prompt_tokens,
            o.cached_tokens,
            s.cached_tokens,
            pct(o.hindsight_agreement),
            pct(s.hindsight_agreement),
        );
    }
    let gone: Vec<String> = base
        .summaries
        .iter()
        .filter(|o| {
            !new.summaries
                .iter()
                .any(|s| s.dataset == o.dataset && s.route == o.route)
        })
        .map(|o| format!("{} / {}", o.dataset, o.route))
        .collect();
    if !gone.is_empty() {
        let _ = writeln!(md, "\nOnly in base: {}.", gone.join(", "));
    }
    let (c, pairs) = question_changes(&base.results, &new.results);
    let _ = writeln!(
        md,
        "\n## Per question\n\n{} better, {} worse, {} the same; {} asked (or answered) in only one run.\n",
        c.better, c.worse, c.same, c.unmatched
    );
    let moved: Vec<_> = pairs
        .iter()
        .filter(|(o, n)| (n.score - o.score).abs() > 1e-9)
        .take(15)
        .collect();
    if !moved.is_empty() {
        md.push_str("| dataset | question | route | score | base answer | new answer |\n|---|---|---|---|---|---|\n");
        for (o, n) in moved {
            let _ = writeln!(
                md,
                "| {} | {} | {} | {:.1} → {:.1} | {} | {} |",
                n.dataset,
                n.question_id,
                n.route_requested,
                o.score * 100.0,
                n.score * 100.0,
                clip(&o.answer, 80),
                clip(&n.answer, 80)
            );
        }
    }
    md
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eval::report::summarize;

    fn result(q: &str, route: &str, score: f64, total_ms: u64) -> QuestionResult {
        QuestionResult {
            dataset: "squad".into(),
            route: route.into(),
            first_token_ms: total_ms / 2,
            total_ms,
            ..crate::eval::results::example(q, route, score)
        }
    }

    fn report(results: Vec<QuestionResult>) -> Report {
        Report {
            summaries: summarize(&results),
            results,
        }
    }

    #[test]
    fn questions_are_counted_as_better_worse_same_or_unmatched() {
        let base = vec![
            result("q1", "rag", 0.5, 100),
            result("q2", "rag", 1.0, 100),
            result("q3", "rag", 0.0, 100),
            result("q4", "rag", 1.0, 100),
        ];
        let new = vec![
            result("q1", "rag", 1.0, 100),
            result("q2", "rag", 0.0, 100),
            result("q3", "rag", 0.0, 100),
            result("q5", "rag", 1.0, 100),
        ];
        let (c, pairs) = question_changes(&base, &new);
        assert_eq!(
            c,
            QuestionChanges {
                better: 1,
                worse: 1,
                same: 1,
                unmatched: 2
            }
        );
        // The largest change first: q2 lost a whole point, q1 gained half.
        assert_eq!(pairs[0].0.question_id, "q2");
        assert_eq!(pairs[1].0.question_id, "q1");
    }

    #[test]
    fn the_table_shows_each_route_with_its_score_change_and_latency_ratio() {
        let base = report(vec![
            result("q1", "rag", 0.5, 100),
            result("q1", "long", 1.0, 400),
        ]);
        let new = report(vec![
            result("q1", "rag", 1.0, 50),
            result("q1", "long", 1.0, 400),
        ]);
        let md = markdown(&base, &new, "before", "after");
        let rag = md
            .lines()
            .find(|l| l.starts_with("| squad | rag |"))
            .expect("rag row");
        assert!(rag.contains("| 50.0 → 100.0 | +50.0 |"), "{rag}");
        assert!(rag.contains("| 100 → 50 | ×0.50 |"), "{rag}");
        let long = md
            .lines()
            .find(|l| l.starts_with("| squad | long |"))
            .expect("long row");
        assert!(long.contains("| +0.0 |"), "{long}");
        assert!(
            md.contains("1 better, 0 worse, 1 the same; 0 asked"),
            "{md}"
        );
        assert!(md.contains("| squad | q1 | rag | 50.0 → 100.0 |"), "{md}");
    }

    #[test]
    fn a_route_present_in_one_run_only_is_named() {
        let base = report(vec![
            result("q1", "rag", 0.5, 100),
            result("q1", "auto", 0.5, 100),
        ]);
        let new = report(vec![result("q1", "rag", 0.5, 100)]);
        let md = markdown(&base, &new, "a", "b");
        assert!(md.contains("Only in base: squad / auto."), "{md}");
        assert!(md.contains("1 asked (or answered) in only one run"), "{md}");
    }

    #[test]
    fn each_run_is_labelled_with_the_adapter_it_was_answered_with() {
        let with = |adapter: &str| QuestionResult {
            adapter: Some(adapter.into()),
            ..result("q1", "rag", 0.5, 100)
        };
        let md = markdown(
            &report(vec![with("none")]),
            &report(vec![with("docqa-reader@0123456789ab")]),
            "base-run",
            "reader-run",
        );
        assert!(
            md.contains("base: `base-run` (adapter none); new: `reader-run` (adapter docqa-reader@0123456789ab)"),
            "{md}"
        );
        let old = markdown(
            &report(vec![result("q1", "rag", 0.5, 100)]),
            &report(vec![]),
            "a",
            "b",
        );
        assert!(old.contains("`a` (adapter unknown)"), "{old}");
    }
}
