//! The report's answers to the routing questions, in the terms docqa's targets use: per dataset, auto's
//! score against the better of rag and long and auto's mean latency as a share of long's, then the mean
//! over datasets; and, for documents asked more than once on the long path, the time to first token of
//! the first (cold) question against the next ones (answered from the cached KV).

use std::collections::BTreeMap;
use std::fmt::Write;

use super::report::RouteSummary;
use super::results::QuestionResult;

/// One dataset's routes side by side: scores (percent) and mean total latency (seconds).
#[derive(Debug, Clone, PartialEq)]
pub struct Compared {
    /// Dataset name.
    pub dataset: String,
    /// Score and mean latency per route: rag, long, auto.
    pub routes: [(f64, f64); 3],
    /// Answers auto gave from the long path, of all auto answered.
    pub auto_took_long: (usize, usize),
}

impl Compared {
    /// Auto's score less the better of rag and long (points).
    pub fn auto_against_better(&self) -> f64 {
        self.routes[2].0 - self.routes[0].0.max(self.routes[1].0)
    }

    /// Auto's mean latency as a share of long's.
    pub fn auto_share_of_long(&self) -> f64 {
        self.routes[2].1 / self.routes[1].1
    }
}

/// The datasets that ran all three routes, then their mean (named `mean of the datasets`).
pub fn compare(summaries: &[RouteSummary]) -> Vec<Compared> {
    let mut by: BTreeMap<&str, [Option<&RouteSummary>; 3]> = BTreeMap::new();
    for s in summaries {
        if let Some(i) = ["rag", "long", "auto"].iter().position(|r| *r == s.route) {
            by.entry(&s.dataset).or_default()[i] = Some(s);
        }
    }
    let mut out: Vec<Compared> = by
        .into_iter()
        .filter_map(|(dataset, routes)| {
            let [Some(rag), Some(long), Some(auto)] = routes else {
                return None;
            };
            let point = |s: &RouteSummary| (s.score * 100.0, s.total_ms[0] / 1000.0);
            Some(Compared {
                dataset: dataset.to_string(),
                routes: [point(rag), point(long), point(auto)],
                auto_took_long: (
                    auto.routes_taken.get("long").copied().unwrap_or(0),
                    auto.questions,
                ),
            })
        })
        .collect();
    if out.len() > 1 {
        let n = out.len() as f64;
        let mean = |i: usize, f: fn((f64, f64)) -> f64| {
            out.iter().map(|c| f(c.routes[i])).sum::<f64>() / n
        };
        let routes = [0, 1, 2].map(|i| (mean(i, |p| p.0), mean(i, |p| p.1)));
        let took = out.iter().fold((0, 0), |(a, b), c| {
            (a + c.auto_took_long.0, b + c.auto_took_long.1)
        });
        out.push(Compared {
            dataset: "mean of the datasets".into(),
            routes,
            auto_took_long: took,
        });
    }
    out
}

/// The Markdown section of [`compare`]'s table.
pub fn markdown(summaries: &[RouteSummary]) -> String {
    let rows = compare(summaries);
    if rows.is_empty() {
        return String::new();
    }
    let mut md = String::from(
        "\n## Routes compared\n\nScores in percent, latency as the mean total time of an answer.\n\n\
         | dataset | rag score | long score | auto score | auto − better of rag and long | rag mean s | long mean s | auto mean s | auto / long latency | auto took long |\n\
         |---|---|---|---|---|---|---|---|---|---|\n",
    );
    for c in &rows {
        let [rag, long, auto] = c.routes;
        let _ = writeln!(
            md,
            "| {} | {:.1} | {:.1} | {:.1} | {:+.1} | {:.2} | {:.2} | {:.2} | {:.0} % | {} of {} |",
            c.dataset,
            rag.0,
            long.0,
            auto.0,
            c.auto_against_better(),
            rag.1,
            long.1,
            auto.1,
            c.auto_share_of_long() * 100.0,
            c.auto_took_long.0,
            c.auto_took_long.1,
        );
    }
    md
}

/// For each document asked more than once on the long path: the first answer's time to first token,
/// read cold, against each later one answered from the cached KV.
pub fn cached_documents_markdown(results: &[QuestionResult]) -> String {
    let mut docs: BTreeMap<&str, Vec<&QuestionResult>> = BTreeMap::new();
    for r in results
        .iter()
        .filter(|r| r.route_requested == "long" && r.error.is_none())
    {
        docs.entry(&r.document).or_default().push(r);
    }
    let mut md = String::new();
    for (doc, answers) in docs {
        let Some(cold) = answers.iter().find(|r| r.cached_tokens < 64) else {
            continue;
        };
        for warm in answers.iter().filter(|r| r.cached_tokens >= 64) {
            let _ = writeln!(
                md,
                "| {doc} | {} | {} | {} | {}/{} | {:.1}× |",
                cold.document_tokens,
                cold.first_token_ms,
                warm.first_token_ms,
                warm.cached_tokens,
                warm.prompt_tokens,
                cold.first_token_ms as f64 / warm.first_token_ms.max(1) as f64,
            );
        }
    }
    if md.is_empty() {
        return md;
    }
    format!(
        "\n## The next question on a cached document (long path)\n\n\
         | document | tokens | first question TTFT ms (cold) | next question TTFT ms | cached / prompt tokens | ratio |\n\
         |---|---|---|---|---|---|\n{md}"
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eval::report::summarize;
    use crate::eval::results::example;

    fn timed(q: &str, route: &str, dataset: &str, score: f64, total_ms: u64) -> QuestionResult {
        QuestionResult {
            dataset: dataset.into(),
            total_ms,
            ..example(q, route, score)
        }
    }

    #[test]
    fn auto_is_compared_with_the_better_route_and_with_longs_latency_then_averaged() {
        let results = [
            timed("a", "rag", "x", 0.2, 1000),
            timed("a", "long", "x", 0.5, 10_000),
            timed("a", "auto", "x", 0.4, 2000),
            timed("b", "rag", "y", 0.6, 1000),
            timed("b", "long", "y", 0.1, 4000),
            timed("b", "auto", "y", 0.6, 3000),
        ];
        let rows = compare(&summarize(&results));
        assert_eq!(rows.len(), 3);
        assert!((rows[0].auto_against_better() - -10.0).abs() < 1e-9);
        assert!((rows[0].auto_share_of_long() - 0.2).abs() < 1e-9);
        assert!((rows[1].auto_against_better() - 0.0).abs() < 1e-9);
        assert!((rows[1].auto_share_of_long() - 0.75).abs() < 1e-9);
        // The mean: rag 40, long 30, auto 50 points; latency 1, 7 and 2.5 s.
        assert_eq!(rows[2].dataset, "mean of the datasets");
        assert!((rows[2].auto_against_better() - 10.0).abs() < 1e-9);
        assert!((rows[2].auto_share_of_long() - 2.5 / 7.0).abs() < 1e-9);
        assert!(markdown(&summarize(&results)).contains("| x | 20.0 | 50.0 | 40.0 | -10.0 |"));
    }

    #[test]
    fn a_cached_document_pairs_its_cold_first_answer_with_each_later_one() {
        let cold = QuestionResult {
            first_token_ms: 9000,
            ..example("a", "long", 0.5)
        };
        let warm = QuestionResult {
            first_token_ms: 150,
            cached_tokens: 90,
            ..example("b", "long", 0.5)
        };
        let md = cached_documents_markdown(&[cold.clone(), warm, example("c", "rag", 0.5)]);
        assert!(
            md.contains("| doc | 100 | 9000 | 150 | 90/100 | 60.0× |"),
            "{md}"
        );
        assert!(cached_documents_markdown(&[cold]).is_empty());
    }
}
