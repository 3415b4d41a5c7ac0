//! The per-question router. Policies: `rag`, `long`, `auto`.
//!
//! `auto`, in order:
//! 1. the scope fits the RAG budget → read it whole (the long path, at RAG cost);
//! 2. the whole scope cannot fit the model's window → RAG (the only path that can answer);
//! 3. cheap signals that the question needs the whole document — a global question (summaries,
//!    counting, comparisons), the document's KV already cached (long then costs only the question),
//!    weak retrieval — → long;
//! 4. otherwise Self-Route: RAG with a self-check; if the model says the sources cannot answer, long.
//!
//! Every decision carries its signals and its cost estimate (prompt tokens to compute on each path).

use serde::Serialize;
use utoipa::ToSchema;

use super::types::{Route, RouteChoice};

/// Share of the long prompt that must already be cached for the long path to count as cheap.
const CACHED_SHARE: f64 = 0.5;
/// Below this best-hit BM25 score the retrieval is weak (BM25 scores of a matching term are ≥ ~2).
const WEAK_RETRIEVAL_SCORE: f32 = 1.0;

/// What the router measured.
#[derive(Debug, Clone, Default, Serialize, ToSchema)]
pub struct Signals {
    /// Tokens of the scope's documents.
    pub scope_tokens: usize,
    /// Prompt tokens available for passages on the RAG path.
    pub rag_budget: usize,
    /// Whether the whole scope fits the RAG budget.
    pub fits_rag_budget: bool,
    /// Whether the whole scope, question and answer fit the model's window.
    pub fits_model_window: bool,
    /// Tokens the model reads at once on this server, prompt and answer together: its context or
    /// the KV cache's capacity, whichever is smaller.
    pub model_window: usize,
    /// The question asks about the whole document (summary, count, comparison, list of all…).
    pub global_question: bool,
    /// Tokens of the long prompt already in the KV prefix cache.
    pub cached_long_tokens: usize,
    /// Best BM25 score of the question in the scope (None when not measured).
    pub top_bm25_score: Option<f32>,
    /// Prompt tokens the RAG path would compute.
    pub rag_cost_tokens: usize,
    /// Prompt tokens the long path would compute (after the prefix cache).
    pub long_cost_tokens: usize,
    /// Prompt tokens this engine reads per second on this device, as measured on the requests it has
    /// served (None until it has read a thousand).
    pub prefill_tokens_per_second: Option<f64>,
    /// Seconds the RAG path's prompt should take to read (its tokens and the keys they attend to, at
    /// the pace this engine measured; None before it has one, or without that path).
    pub rag_seconds: Option<f64>,
    /// The same for the long path's prompt, past what is cached.
    pub long_seconds: Option<f64>,
    /// The abstention check of each generation, in order (under Self-Route: the RAG attempt, then the
    /// long answer if it fell back), measured after generating.
    pub abstention: Vec<super::abstention::AbstentionCheck>,
}

/// The router's choice before generation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Answer on this route.
    Route(Route),
    /// RAG with a self-check, falling back to long when the model cannot answer from the passages.
    SelfRoute,
}

/// Words that mark a question about the whole document.
const GLOBAL_MARKERS: &[&str] = &[
    "summar",
    "overview",
    "main point",
    "main idea",
    "main topic",
    "key point",
    "overall",
    "whole document",
    "entire document",
    "throughout",
    "how many times",
    "how often",
    "list all",
    "list every",
    "all the ",
    "compare",
    "comparison",
    "difference between",
    "differ",
    "in general",
    "what is the plot",
    "what happens in",
    "总结",
    "概括",
    "主要内容",
    "多少次",
    "比较",
];

/// Whether the question asks about the whole document rather than a fact in one place.
pub fn is_global_question(question: &str) -> bool {
    let q = question.to_lowercase();
    GLOBAL_MARKERS.iter().any(|m| q.contains(m))
}

/// Decides the route of a question from its policy and signals; returns the decision and the reasons
/// given to the caller.
pub fn decide(choice: RouteChoice, s: &Signals) -> (Decision, Vec<String>) {
    let mut reasons = Vec::new();
    let decision = match choice {
        RouteChoice::Rag => {
            reasons.push("you asked for an answer from the most relevant passages".into());
            Decision::Route(Route::Rag)
        }
        RouteChoice::Long => {
            reasons.push("you asked for the whole document to be read".into());
            Decision::Route(Route::Long)
        }
        RouteChoice::Auto => auto(s, &mut reasons),
    };
    // A path asked for has only its own prompt built, so its cost is the only one told.
    reasons.push(cost_in_words(s));
    (decision, reasons)
}

fn auto(s: &Signals, reasons: &mut Vec<String>) -> Decision {
    if s.fits_rag_budget && s.fits_model_window {
        reasons.push(format!(
            "the document is short ({} tokens, within the {}-token reading budget), so it is read \
             whole",
            thousands(s.scope_tokens),
            thousands(s.rag_budget)
        ));
        return Decision::Route(Route::Long);
    }
    if !s.fits_model_window {
        reasons.push(format!(
            "the text ({} tokens) and its answer are more than the model reads at once here ({} \
             tokens), so the most relevant passages are picked",
            thousands(s.scope_tokens),
            thousands(s.model_window)
        ));
        return Decision::Route(Route::Rag);
    }
    if s.global_question {
        reasons
            .push("the question is about the whole document (a summary, a count or a comparison), so it is read whole".into());
        return Decision::Route(Route::Long);
    }
    let cached_share =
        s.cached_long_tokens as f64 / (s.long_cost_tokens + s.cached_long_tokens).max(1) as f64;
    if cached_share >= CACHED_SHARE {
        reasons.push(format!(
            "{:.0}% of the document was already read for an earlier question, so reading it whole is quick",
            cached_share * 100.0
        ));
        return Decision::Route(Route::Long);
    }
    if s.top_bm25_score.is_some_and(|b| b < WEAK_RETRIEVAL_SCORE) {
        reasons
            .push("no passage shares the question's words, so the whole document is read".into());
        return Decision::Route(Route::Long);
    }
    reasons.push(
        "the answer is sought first in the most relevant passages, and the whole document is read \
         if they do not hold it"
            .into(),
    );
    Decision::SelfRoute
}

/// `" (about 1.2 s)"` for an estimate of `seconds`, or nothing without one.
fn time_in_words(seconds: Option<f64>) -> String {
    match seconds {
        Some(secs) if secs < 0.1 => " (under 0.1 s)".into(),
        Some(secs) => format!(" (about {secs:.1} s)"),
        None => String::new(),
    }
}

/// The two paths' costs, as the user reads them (a path that cannot be taken costs nothing and is left
/// out), with the reading time at this engine's measured pace once it has one.
fn cost_in_words(s: &Signals) -> String {
    let mut parts = Vec::new();
    if s.rag_cost_tokens > 0 {
        parts.push(format!(
            "about {} tokens to read the passages{}",
            thousands(s.rag_cost_tokens),
            time_in_words(s.rag_seconds)
        ));
    }
    if s.long_cost_tokens > 0 || s.cached_long_tokens > 0 {
        let cached = if s.cached_long_tokens > 0 {
            format!(
                " ({} more were already read for an earlier question)",
                thousands(s.cached_long_tokens)
            )
        } else {
            String::new()
        };
        let unit = if parts.is_empty() { " tokens" } else { "" };
        parts.push(format!(
            "{}{unit} to read the whole document{}{cached}",
            thousands(s.long_cost_tokens),
            time_in_words(s.long_seconds)
        ));
    }
    if parts.is_empty() {
        return "work to do: nothing new to read".into();
    }
    format!("work to do: {}", parts.join(", "))
}

/// `12345` as `12,345`.
pub(crate) fn thousands(n: usize) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn signals() -> Signals {
        Signals {
            scope_tokens: 6000,
            rag_budget: 900,
            fits_rag_budget: false,
            fits_model_window: true,
            model_window: 8192,
            global_question: false,
            cached_long_tokens: 0,
            top_bm25_score: Some(7.5),
            rag_cost_tokens: 1000,
            long_cost_tokens: 6100,
            prefill_tokens_per_second: None,
            rag_seconds: None,
            long_seconds: None,
            abstention: Vec::new(),
        }
    }

    #[test]
    fn a_scope_that_fits_the_rag_budget_is_read_whole() {
        let s = Signals {
            scope_tokens: 500,
            fits_rag_budget: true,
            ..signals()
        };
        assert_eq!(
            decide(RouteChoice::Auto, &s).0,
            Decision::Route(Route::Long)
        );
    }

    #[test]
    fn a_scope_beyond_the_model_window_goes_to_rag_even_for_global_questions() {
        let s = Signals {
            fits_model_window: false,
            global_question: true,
            ..signals()
        };
        let (decision, reasons) = decide(RouteChoice::Auto, &s);
        assert_eq!(decision, Decision::Route(Route::Rag));
        assert!(
            reasons[0].contains("(6,000 tokens) and its answer are more than the model reads at once here (8,192 tokens)"),
            "{reasons:?}"
        );
    }

    #[test]
    fn global_questions_cached_documents_and_weak_retrieval_take_the_long_path() {
        for s in [
            Signals {
                global_question: true,
                ..signals()
            },
            Signals {
                cached_long_tokens: 6000,
                long_cost_tokens: 100,
                ..signals()
            },
            Signals {
                top_bm25_score: Some(0.0),
                ..signals()
            },
        ] {
            assert_eq!(
                decide(RouteChoice::Auto, &s).0,
                Decision::Route(Route::Long),
                "{s:?}"
            );
        }
    }

    #[test]
    fn other_questions_self_route_and_explicit_policies_are_obeyed() {
        assert_eq!(decide(RouteChoice::Auto, &signals()).0, Decision::SelfRoute);
        assert_eq!(
            decide(RouteChoice::Rag, &signals()).0,
            Decision::Route(Route::Rag)
        );
        assert_eq!(
            decide(RouteChoice::Long, &signals()).0,
            Decision::Route(Route::Long)
        );
    }

    #[test]
    fn summaries_counts_and_comparisons_are_global_questions() {
        for q in [
            "Summarize the meeting.",
            "How many times is Paris mentioned?",
            "Compare the two proposals",
            "请总结这篇文章",
        ] {
            assert!(is_global_question(q), "{q}");
        }
        assert!(!is_global_question("In what country is Normandy located?"));
    }

    #[test]
    fn reasons_are_plain_words_with_grouped_numbers_and_no_internal_names() {
        let mut s = signals();
        s.cached_long_tokens = 12_345;
        let (_, reasons) = decide(RouteChoice::Auto, &s);
        let cost = reasons.last().unwrap();
        assert_eq!(
            cost,
            "work to do: about 1,000 tokens to read the passages, 6,100 to read the whole document \
             (12,345 more were already read for an earlier question)"
        );
        for r in &reasons {
            for internal in ["RAG", "KV", "Self-Route", "scope", "long "] {
                assert!(!r.contains(internal), "{internal:?} in {r:?}");
            }
        }
        s.long_cost_tokens = 0;
        s.cached_long_tokens = 0;
        assert_eq!(
            cost_in_words(&s),
            "work to do: about 1,000 tokens to read the passages"
        );
        assert_eq!(thousands(7), "7");
        assert_eq!(thousands(1_234_567), "1,234,567");
    }

    #[test]
    fn the_estimated_reading_times_follow_each_path() {
        let mut s = signals();
        s.rag_seconds = Some(0.5);
        s.long_seconds = Some(3.04);
        assert_eq!(
            cost_in_words(&s),
            "work to do: about 1,000 tokens to read the passages (about 0.5 s), 6,100 to read the \
             whole document (about 3.0 s)"
        );
        s.rag_seconds = Some(0.02);
        assert!(cost_in_words(&s).contains("passages (under 0.1 s)"));
        s.rag_seconds = None;
        s.long_seconds = None;
        assert!(!cost_in_words(&s).contains(" s)"));
    }

    #[test]
    fn a_path_asked_for_tells_its_own_cost() {
        let long_only = Signals {
            rag_cost_tokens: 0,
            long_cost_tokens: 21_093,
            long_seconds: Some(164.6),
            ..signals()
        };
        let (_, reasons) = decide(RouteChoice::Long, &long_only);
        assert_eq!(
            reasons,
            [
                "you asked for the whole document to be read",
                "work to do: 21,093 tokens to read the whole document (about 164.6 s)"
            ]
        );
        let rag_only = Signals {
            long_cost_tokens: 0,
            ..signals()
        };
        let (_, reasons) = decide(RouteChoice::Rag, &rag_only);
        assert_eq!(
            reasons.last().unwrap(),
            "work to do: about 1,000 tokens to read the passages"
        );
    }
}
