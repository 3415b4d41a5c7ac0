//! Recognising an answer that says the sources do not hold the answer, in the many ways a model says it.

/// Phrases that mean "the given text does not answer this".
const MARKERS: &[&str] = &[
    "not found in the document",
    "not found in the source",
    "unanswerable",
    "cannot be answered",
    "can't be answered",
    "cannot answer",
    "can't answer",
    "unable to answer",
    "do not know",
    "don't know",
    "does not contain",
    "doesn't contain",
    "do not contain",
    "don't contain",
    "does not mention",
    "doesn't mention",
    "not mentioned",
    "no information",
    "not provided",
    "not specified",
    "not stated",
    "there is no mention",
    "未找到",
    "无法回答",
    "没有提到",
];

/// Whether `answer` says it cannot answer (or is empty).
pub fn says_unanswerable(answer: &str) -> bool {
    let a = answer.trim().to_lowercase().replace('’', "'");
    a.is_empty() || MARKERS.iter().any(|m| a.contains(m))
}

#[cfg(test)]
mod tests {
    use super::says_unanswerable;

    #[test]
    fn refusals_in_several_wordings_are_recognised() {
        for a in [
            "Not found in the document.",
            "The sources do not contain this information.",
            "I don’t know.",
            "This question is unanswerable from the text.",
            "",
        ] {
            assert!(says_unanswerable(a), "{a:?}");
        }
    }

    #[test]
    fn ordinary_answers_are_not_refusals() {
        for a in [
            "France [1].",
            "The Normans came from Normandy.",
            "Knowledge of the law",
        ] {
            assert!(!says_unanswerable(a), "{a:?}");
        }
    }
}
