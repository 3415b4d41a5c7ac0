//! The prompt texts of both paths, kept in `prompts.json` beside this file and read by the reader's
//! training pipeline too (`training/reader/prompts.py`), so what the reader was trained on and what the
//! service asks cannot drift. Placeholders are `{name}`, substituted in one left-to-right pass: text
//! put in (a passage, a question) is never scanned for placeholders again.

use std::sync::LazyLock;

use serde::Deserialize;

/// The texts of `prompts.json` (its `not_found` is [`crate::qa::prompt::NOT_FOUND`], checked by a test).
#[derive(Debug, Deserialize)]
pub struct PromptTexts {
    /// System message of the RAG path.
    pub rag_system: String,
    /// System message of the long path.
    pub long_system: String,
    /// One numbered source: `{number}`, `{title}`, `{pages}`, `{text}`.
    pub source_block: String,
    /// A source on one page: `{page}`.
    pub one_page: String,
    /// A source over several pages: `{first}`, `{last}`.
    pub page_range: String,
    /// The RAG user message: `{sources}` (the blocks), `{question}`.
    pub rag_user: String,
    /// The one document of a long prompt: `{title}`, `{text}`.
    pub long_document: String,
    /// One of several documents of a long prompt: `{number}`, `{title}`, `{text}`.
    pub long_document_numbered: String,
    /// What ends the long prompt's document part; a space and the question follow.
    pub long_question_marker: String,
}

/// The file's text, compiled in.
pub const PROMPTS_JSON: &str = include_str!("prompts.json");

/// The prompt texts, parsed once.
pub static TEXTS: LazyLock<PromptTexts> = LazyLock::new(|| {
    serde_json::from_str(PROMPTS_JSON).expect("prompts.json is valid (checked by a test)")
});

/// `template` with each `{name}` of `values` replaced by its value, in one pass; braces around any
/// other text are kept as they are.
pub fn fill(template: &str, values: &[(&str, &str)]) -> String {
    let mut out =
        String::with_capacity(template.len() + values.iter().map(|v| v.1.len()).sum::<usize>());
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        let value = after.find('}').and_then(|close| {
            let name = &after[..close];
            values
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| (*v, close))
        });
        match value {
            Some((v, close)) => {
                out.push_str(v);
                rest = &after[close + 1..];
            }
            None => {
                out.push('{');
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_prompt_file_parses_and_names_every_placeholder_it_is_filled_with() {
        let t = &*TEXTS;
        assert!(t.source_block.contains("{number}") && t.source_block.contains("{text}"));
        assert!(t.rag_user.contains("{sources}") && t.rag_user.contains("{question}"));
        assert!(t.long_document.contains("{text}"));
        let file: serde_json::Value = serde_json::from_str(PROMPTS_JSON).expect("JSON");
        let not_found = crate::qa::prompt::NOT_FOUND;
        assert_eq!(file["not_found"], not_found);
        assert!(t.rag_system.contains(not_found) && t.long_system.contains(not_found));
    }

    #[test]
    fn filling_is_one_pass_so_inserted_text_keeps_its_braces() {
        let filled = fill(
            "[{number}] {title}\n{text}",
            &[
                ("number", "3"),
                ("title", "{text}"),
                ("text", "a {number} b"),
            ],
        );
        assert_eq!(filled, "[3] {text}\na {number} b");
    }

    #[test]
    fn unknown_placeholders_and_lone_braces_are_left_alone() {
        assert_eq!(fill("{x} { {y", &[("y", "1")]), "{x} { {y");
        assert_eq!(fill("{y}}", &[("y", "1")]), "1}");
    }
}
