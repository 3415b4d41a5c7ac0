//! Which sources an answer rests on. RAG answers name sources as `[n]`; those are cited first. When an
//! answer names none (and on the long path, which has no numbered sources), each answer sentence is
//! aligned with the chunk BM25 ranks first for it within the scope. Every citation quotes the chunk's
//! sentence that best supports the answer.

use docqa_indexer::chunk::sentences;
use docqa_indexer::{SearchFilter, SearchMode};

use super::prompt::{Prepared, Source};
use super::types::Citation;
use crate::db::chunks::ChunkRow;
use crate::state::AppState;

/// Characters of a chunk shown as a citation's snippet.
const SNIPPET_CHARS: usize = 240;
/// Citations found by matching when the answer names none.
const MATCHED_CITATIONS: usize = 3;

/// The numbers `[n]` (also `[n, m]` and `[n-m]`) found in `text`, in order of first mention.
pub fn cited_numbers(text: &str) -> Vec<usize> {
    let mut found = Vec::new();
    let mut rest = text;
    while let Some(open) = rest.find('[') {
        let after = &rest[open + 1..];
        let Some(close) = after.find(']') else { break };
        let inside = &after[..close];
        for part in inside.split([',', ';']) {
            let part = part.trim();
            let numbers: Vec<usize> = match part.split_once('-') {
                Some((a, b)) => match (a.trim().parse::<usize>(), b.trim().parse::<usize>()) {
                    (Ok(a), Ok(b)) if a <= b && b - a < 20 => (a..=b).collect(),
                    _ => Vec::new(),
                },
                None => part.parse().into_iter().collect(),
            };
            for n in numbers {
                if !found.contains(&n) {
                    found.push(n);
                }
            }
        }
        rest = &after[close..];
    }
    found
}

/// `text` without its citation markers (`[3]`, `[1, 2]`, `[2-4]`), and without the spaces left before
/// them: what the answer says, as scored against reference answers.
pub fn without_markers(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(open) = rest.find('[') {
        let after = &rest[open + 1..];
        let close = after.find(']');
        let is_marker = close.is_some_and(|c| {
            let inside = &after[..c];
            inside.chars().any(|ch| ch.is_ascii_digit())
                && inside
                    .chars()
                    .all(|ch| ch.is_ascii_digit() || matches!(ch, ',' | ';' | '-' | ' '))
        });
        match (is_marker, close) {
            (true, Some(c)) => {
                out.push_str(rest[..open].trim_end_matches(' '));
                rest = &after[c + 1..];
            }
            _ => {
                out.push_str(&rest[..=open]);
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out.trim().to_string()
}

fn words(text: &str) -> std::collections::HashSet<String> {
    let mut out = std::collections::HashSet::new();
    let mut word = String::new();
    for c in text.chars().flat_map(char::to_lowercase) {
        if c.is_alphanumeric() && c.is_ascii() {
            word.push(c);
        } else {
            if word.len() > 2 {
                out.insert(std::mem::take(&mut word));
            }
            word.clear();
            if c.is_alphanumeric() {
                out.insert(c.to_string()); // CJK and other scripts without spaces: characters
            }
        }
    }
    if word.len() > 2 {
        out.insert(word);
    }
    out
}

/// The sentence of `chunk_text` sharing the most words with `claim`.
pub fn best_quote(chunk_text: &str, claim: &str) -> String {
    let claim = words(claim);
    sentences(chunk_text)
        .into_iter()
        .max_by_key(|s| words(s).intersection(&claim).count())
        .unwrap_or(chunk_text)
        .trim()
        .to_string()
}

fn citation(
    number: usize,
    title: &str,
    chunk: &ChunkRow,
    claim: &str,
    cited_in_text: bool,
) -> Citation {
    Citation {
        source: number,
        document_id: chunk.document_id.clone(),
        title: title.to_string(),
        chunk_id: chunk.id,
        page_start: chunk.page_start,
        page_end: chunk.page_end,
        char_start: chunk.char_start,
        char_end: chunk.char_end,
        snippet: chunk.text.chars().take(SNIPPET_CHARS).collect(),
        quote: best_quote(&chunk.text, claim),
        cited_in_text,
    }
}

/// The citations of `answer`: the sources it names, else the chunks each of its sentences aligns with.
pub async fn cite(state: &AppState, tenant_id: &str, answer: &str, p: &Prepared) -> Vec<Citation> {
    let named: Vec<&Source> = cited_numbers(answer)
        .into_iter()
        .filter_map(|n| p.sources.iter().find(|s| s.number == n))
        .collect();
    if !named.is_empty() {
        return named
            .into_iter()
            .map(|s| citation(s.number, &s.title, &s.chunk, answer, true))
            .collect();
    }
    let aligned = aligned(state, tenant_id, answer, p).await;
    if !aligned.is_empty() {
        return aligned;
    }
    // Nothing aligned: the best-ranked sources are what the answer was built from.
    p.sources
        .iter()
        .take(MATCHED_CITATIONS)
        .map(|s| citation(s.number, &s.title, &s.chunk, answer, false))
        .collect()
}

/// For each sentence of the answer, the chunk of the scope (of the prompt's sources, on the RAG path)
/// that BM25 ranks first for it.
async fn aligned(state: &AppState, tenant_id: &str, answer: &str, p: &Prepared) -> Vec<Citation> {
    let Ok(index) = state.indexes.get(&state.db, tenant_id).await else {
        return Vec::new();
    };
    let allowed: Option<Vec<u64>> =
        (!p.sources.is_empty()).then(|| p.sources.iter().map(|s| s.chunk.id as u64).collect());
    let filter = SearchFilter {
        document_ids: Some(p.documents.iter().map(|d| d.id.clone()).collect()),
        collection: None,
    };
    let claims: Vec<String> = sentences(answer).into_iter().map(str::to_string).collect();
    let found = tokio::task::spawn_blocking(move || {
        let r = index.read().unwrap_or_else(|e| e.into_inner());
        let mut picks: Vec<(String, u64)> = Vec::new();
        for claim in claims {
            let hits = r
                .search(&claim, 50, SearchMode::Bm25, &filter)
                .unwrap_or_default();
            let best = hits
                .iter()
                .map(|h| h.chunk_id)
                .find(|id| allowed.as_ref().is_none_or(|a| a.contains(id)));
            if let Some(id) = best
                && !picks.iter().any(|(_, c)| *c == id)
            {
                picks.push((claim, id));
            }
        }
        picks
    })
    .await
    .unwrap_or_default();
    let ids: Vec<i64> = found
        .iter()
        .take(MATCHED_CITATIONS)
        .map(|(_, id)| *id as i64)
        .collect();
    let Ok(chunks) = state.db.chunks_by_ids(tenant_id, &ids).await else {
        return Vec::new();
    };
    chunks
        .iter()
        .enumerate()
        .map(|(rank, c)| {
            let claim = found
                .iter()
                .find(|(_, id)| *id as i64 == c.id)
                .map_or(answer, |(claim, _)| claim.as_str());
            let source = p.sources.iter().find(|s| s.chunk.id == c.id);
            let title = match source {
                Some(s) => s.title.clone(),
                None => p
                    .documents
                    .iter()
                    .find(|d| d.id == c.document_id)
                    .map(super::prompt::title_of)
                    .unwrap_or_default(),
            };
            citation(
                source.map_or(rank + 1, |s| s.number),
                &title,
                c,
                claim,
                false,
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::{cited_numbers, without_markers};

    #[test]
    fn markers_are_dropped_and_other_brackets_kept() {
        assert_eq!(without_markers("1066 [3]"), "1066");
        assert_eq!(
            without_markers("In 1066 [1, 2], then [4-5]."),
            "In 1066, then."
        );
        assert_eq!(without_markers("诺曼底[2]。"), "诺曼底。");
        assert_eq!(
            without_markers("an array a[i] and [x]"),
            "an array a[i] and [x]"
        );
        assert_eq!(without_markers("[unclosed 3"), "[unclosed 3");
    }

    #[test]
    fn bracketed_numbers_lists_and_ranges_are_found_once_in_order() {
        assert_eq!(
            cited_numbers("Paris [2]. Also [1, 3] and [2-4]."),
            vec![2, 1, 3, 4]
        );
    }

    #[test]
    fn the_quote_is_the_chunk_sentence_closest_to_the_claim() {
        let chunk =
            "The Normans settled in Normandy. Rollo was their first ruler. They spoke French.";
        assert_eq!(
            super::best_quote(chunk, "Their first ruler was Rollo."),
            "Rollo was their first ruler."
        );
    }

    #[test]
    fn brackets_without_numbers_are_not_citations() {
        assert_eq!(
            cited_numbers("see [note] and [] and [a-b]"),
            Vec::<usize>::new()
        );
    }
}
