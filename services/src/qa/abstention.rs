//! The abstention signal: whether the model's own token probabilities support its answer.
//!
//! A small model rarely writes "Not found in the document." even when the passages do not hold the
//! answer, but its probabilities still say something. The engine reports, at every answer step, the
//! most likely tokens and their log-probabilities ([`TOP_LOGPROBS`] of them), so these measures cost no
//! extra forward pass:
//!
//! - `refusal_probability`: at the first answer step, the probability of the refusal's first token
//!   ("Not", in the casings and spacings the tokenizer gives it), summed;
//! - `first_token_probability`: the probability of the answer's first token;
//! - `head_logprob`: the mean log-probability of the answer's first [`HEAD_TOKENS`] tokens;
//! - `mean_logprob` and `min_logprob`: the mean and the lowest log-probability of the answer's tokens.
//!
//! One of them, mapped to a support in [0, 1] ([`support`]), is compared with the configured threshold:
//! below it the answer counts as unsupported. The choice comes from the calibration on SQuAD 2.0
//! recorded in EVAL.md ("Abstention"), where no threshold held on held-out articles for SmolLM2-135M,
//! so the threshold is 0 (off) by default.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::prompt::NOT_FOUND;
use super::types::Route;
use docqa_engine::text::TextTokenizer;

/// Most likely tokens the engine reports, with their log-probabilities, at each answer step.
pub const TOP_LOGPROBS: usize = 20;

/// The token ids a refusal can start with: the first token of [`NOT_FOUND`] as written, lower-cased,
/// and after a space; not a token of spaces alone (a SentencePiece tokenizer's `▁`, which it puts
/// before the text after a space: most answers could start with it).
pub fn refusal_starts(tokenizer: &TextTokenizer) -> Vec<u32> {
    let lower = NOT_FOUND.to_lowercase();
    let mut ids: Vec<u32> = [
        NOT_FOUND.to_string(),
        lower.clone(),
        format!(" {NOT_FOUND}"),
    ]
    .iter()
    .filter_map(|text| tokenizer.encode(text, false).ok()?.first().copied())
    .filter(|&id| tokenizer.decode(&[id]).is_ok_and(|t| !t.trim().is_empty()))
    .collect();
    ids.sort_unstable();
    ids.dedup();
    ids
}

/// One answer step as the engine reported it: the token chosen and the most likely tokens with their
/// log-probabilities, most likely first.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    /// The token generated.
    pub token: u32,
    /// The most likely tokens and their log-probabilities.
    pub top: Vec<(u32, f32)>,
}

impl Step {
    /// The chosen token's log-probability. When sampling picked a token outside the reported ones, the
    /// least likely reported log-probability (an upper bound) stands for it.
    fn chosen_logprob(&self) -> Option<f32> {
        self.top
            .iter()
            .find(|(id, _)| *id == self.token)
            .or(self.top.last())
            .map(|(_, lp)| *lp)
    }
}

/// What an answer's token log-probabilities say.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Measures {
    /// Probability of the refusal's first token at the first answer step (0 when it is not among the
    /// reported most likely tokens).
    pub refusal_probability: f64,
    /// Probability of the answer's first token.
    pub first_token_probability: f64,
    /// Mean log-probability of the answer's first [`HEAD_TOKENS`] tokens.
    pub head_logprob: f64,
    /// Mean log-probability of the answer's tokens.
    pub mean_logprob: f64,
    /// Lowest log-probability among the answer's tokens.
    pub min_logprob: f64,
    /// Answer tokens measured.
    pub tokens: usize,
}

/// Answer tokens the head measure averages over.
pub const HEAD_TOKENS: usize = 5;

fn mean(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len().max(1) as f64
}

/// Measures an answer from its steps; None when the engine reported no log-probabilities.
pub fn measure(steps: &[Step], refusal_starts: &[u32]) -> Option<Measures> {
    let first = steps.first().filter(|s| !s.top.is_empty())?;
    let logprobs: Vec<f64> = steps
        .iter()
        .filter_map(Step::chosen_logprob)
        .map(f64::from)
        .collect();
    let refusal_probability = first
        .top
        .iter()
        .filter(|(id, _)| refusal_starts.contains(id))
        .map(|(_, lp)| f64::from(*lp).exp())
        .sum::<f64>()
        .min(1.0);
    Some(Measures {
        refusal_probability,
        first_token_probability: logprobs.first().map_or(0.0, |lp| lp.exp()),
        head_logprob: mean(&logprobs[..logprobs.len().min(HEAD_TOKENS)]),
        mean_logprob: mean(&logprobs),
        min_logprob: logprobs.iter().copied().fold(0.0, f64::min),
        tokens: logprobs.len(),
    })
}

/// The answer's support in [0, 1]: the probability of its first token, the measure that separated
/// answerable from unanswerable SQuAD 2.0 questions best on the calibration articles, though not on the
/// held-out ones (EVAL.md, "Abstention").
pub fn support(m: &Measures) -> f64 {
    m.first_token_probability
}

/// The abstention check of one generation, returned with the router's signals.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct AbstentionCheck {
    /// The path whose answer was checked.
    pub route: Route,
    /// The measures.
    pub measures: Measures,
    /// The support the decision compares ([`support`]).
    pub support: f64,
    /// The configured threshold (0: the check never abstains).
    pub threshold: f64,
    /// Whether the support is below the threshold: the answer is not supported.
    pub abstained: bool,
}

/// Checks one generation's steps against `threshold`; None when it has no log-probabilities.
pub fn check(
    route: Route,
    steps: &[Step],
    refusal_starts: &[u32],
    threshold: f64,
) -> Option<AbstentionCheck> {
    let measures = measure(steps, refusal_starts)?;
    let support = support(&measures);
    Some(AbstentionCheck {
        route,
        measures,
        support,
        threshold,
        abstained: support < threshold,
    })
}

/// The reason given with an answer its check abstained on.
pub fn reason(c: &AbstentionCheck) -> String {
    format!(
        "the model was unsure of its answer (it gave the first word a probability of {:.3}, \
         below the abstention threshold of {}), so it counts as not found in the {}",
        c.support,
        c.threshold,
        match c.route {
            Route::Rag => "passages",
            Route::Long => "document",
        }
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOT: u32 = 5884;
    const THE: u32 = 504;

    fn step(token: u32, top: &[(u32, f32)]) -> Step {
        Step {
            token,
            top: top.to_vec(),
        }
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-6
    }

    #[test]
    fn the_refusal_starts_with_the_generators_not_in_its_casings() {
        let tokenizer = crate::qa::test_tokenizers::generator();
        let starts = refusal_starts(&tokenizer);
        let id = |t: &str| tokenizer.token_to_id(t).expect(t);
        assert_eq!(starts, {
            let mut v = vec![id("Not"), id("not"), id("ĠNot")];
            v.sort_unstable();
            v
        });
    }

    #[test]
    fn with_a_sentencepiece_tokenizer_a_lone_space_piece_is_no_refusal_start() {
        let tokenizer = crate::qa::test_tokenizers::sentencepiece();
        let space = tokenizer.token_to_id("\u{2581}").expect("the ▁ piece");
        // " Not found" is "▁▁N…" there: its first piece is the lone ▁.
        assert_eq!(tokenizer.encode(" Not", false).unwrap()[0], space);
        let starts = refusal_starts(&tokenizer);
        assert!(!starts.is_empty() && !starts.contains(&space), "{starts:?}");
    }

    #[test]
    fn the_refusal_probability_sums_the_refusal_tokens_at_the_first_step_only() {
        let lp = |p: f32| p.ln();
        let steps = [
            step(THE, &[(THE, lp(0.6)), (NOT, lp(0.25)), (441, lp(0.05))]),
            step(NOT, &[(NOT, lp(0.9))]),
        ];
        let m = measure(&steps, &[NOT, 441]).unwrap();
        assert!(close(m.refusal_probability, 0.30), "{m:?}");
        assert!(close(m.first_token_probability, 0.6), "{m:?}");
        let m = measure(&steps, &[7]).unwrap();
        assert_eq!(m.refusal_probability, 0.0);
    }

    #[test]
    fn mean_head_and_lowest_log_probabilities_follow_the_chosen_tokens() {
        let lps = [-0.5, -2.5, -0.1, -0.3, -0.2, -4.0, -0.1];
        let steps: Vec<Step> = lps
            .iter()
            .enumerate()
            .map(|(i, &lp)| step(i as u32, &[(99, -0.01), (i as u32, lp)]))
            .collect();
        let m = measure(&steps, &[]).unwrap();
        let total: f32 = lps.iter().sum();
        assert!(close(m.mean_logprob, f64::from(total) / 7.0), "{m:?}");
        assert!(close(m.head_logprob, -3.6 / 5.0), "{m:?}");
        assert!(close(m.min_logprob, -4.0), "{m:?}");
        assert!(close(m.first_token_probability, (-0.5f64).exp()), "{m:?}");
        assert_eq!(m.tokens, 7);
        let short = measure(&steps[..2], &[]).unwrap();
        assert!(close(short.head_logprob, -1.5), "{short:?}");
    }

    #[test]
    fn a_sampled_token_outside_the_reported_ones_counts_as_the_least_likely_reported() {
        let steps = [step(9, &[(1, -0.1), (2, -3.0)])];
        let m = measure(&steps, &[]).unwrap();
        assert!(close(m.mean_logprob, -3.0), "{m:?}");
    }

    #[test]
    fn an_answer_without_log_probabilities_is_not_measured() {
        assert_eq!(measure(&[], &[NOT]), None);
        assert_eq!(measure(&[step(1, &[])], &[NOT]), None);
        assert_eq!(check(Route::Rag, &[], &[NOT], 0.5), None);
    }

    #[test]
    fn a_hesitant_first_token_abstains_and_a_confident_one_does_not() {
        let lp = |p: f32| p.ln();
        let sure = [step(THE, &[(THE, lp(0.8))]), step(1, &[(1, lp(0.1))])];
        let unsure = [
            step(THE, &[(THE, lp(0.3)), (NOT, lp(0.2))]),
            step(1, &[(1, -0.01)]),
        ];
        let c = check(Route::Rag, &sure, &[NOT], 0.45).unwrap();
        assert!(!c.abstained && close(c.support, 0.8), "{c:?}");
        let c = check(Route::Rag, &unsure, &[NOT], 0.45).unwrap();
        assert!(c.abstained && close(c.support, 0.3), "{c:?}");
        assert!(
            reason(&c).contains("0.300, below the abstention threshold of 0.45"),
            "{}",
            reason(&c)
        );
        let off = check(Route::Rag, &unsure, &[NOT], 0.0).unwrap();
        assert!(!off.abstained, "a threshold of 0 never abstains");
    }
}
