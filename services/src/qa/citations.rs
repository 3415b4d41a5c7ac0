//! Which sources an answer rests on. RAG answers name sources as `[n]`; those are cited first. When an
//! answer names none (and on the long path, which has no numbered sources), the chunks whose words best
//! match the answer are cited instead, found with BM25 within the scope.

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

fn citation(number: usize, title: &str, chunk: &ChunkRow, cited_in_text: bool) -> Citation {
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
        cited_in_text,
    }
}

/// The citations of `answer`.
pub async fn cite(state: &AppState, tenant_id: &str, answer: &str, p: &Prepared) -> Vec<Citation> {
    let named: Vec<&Source> = cited_numbers(answer)
        .into_iter()
        .filter_map(|n| p.sources.iter().find(|s| s.number == n))
        .collect();
    if !named.is_empty() {
        return named
            .into_iter()
            .map(|s| citation(s.number, &s.title, &s.chunk, true))
            .collect();
    }
    matched(state, tenant_id, answer, p)
        .await
        .unwrap_or_else(|| {
            // Nothing matched: the best-ranked sources are what the answer was built from.
            p.sources
                .iter()
                .take(MATCHED_CITATIONS)
                .map(|s| citation(s.number, &s.title, &s.chunk, false))
                .collect()
        })
}

/// Chunks of the scope that best match the answer's words.
async fn matched(
    state: &AppState,
    tenant_id: &str,
    answer: &str,
    p: &Prepared,
) -> Option<Vec<Citation>> {
    let document_ids: Vec<String> = match &p.document {
        Some(doc) => vec![doc.id.clone()],
        None => p
            .sources
            .iter()
            .map(|s| s.chunk.document_id.clone())
            .collect(),
    };
    if answer.trim().is_empty() || document_ids.is_empty() {
        return None;
    }
    let index = state.indexes.get(&state.db, tenant_id).await.ok()?;
    let filter = SearchFilter {
        document_ids: Some(document_ids),
        collection: None,
    };
    let query = answer.to_string();
    let hits = tokio::task::spawn_blocking(move || {
        let r = index.read().unwrap_or_else(|e| e.into_inner());
        r.search(&query, MATCHED_CITATIONS * 4, SearchMode::Bm25, &filter)
    })
    .await
    .ok()?
    .ok()?;
    let allowed: Option<Vec<i64>> = p
        .document
        .is_none()
        .then(|| p.sources.iter().map(|s| s.chunk.id).collect());
    let ids: Vec<i64> = hits
        .iter()
        .map(|h| h.chunk_id as i64)
        .filter(|id| allowed.as_ref().is_none_or(|a| a.contains(id)))
        .take(MATCHED_CITATIONS)
        .collect();
    let chunks = state.db.chunks_by_ids(tenant_id, &ids).await.ok()?;
    if chunks.is_empty() {
        return None;
    }
    let title = |chunk: &ChunkRow| match &p.document {
        Some(doc) => doc.title.clone().unwrap_or_default(),
        None => p
            .sources
            .iter()
            .find(|s| s.chunk.id == chunk.id)
            .map(|s| s.title.clone())
            .unwrap_or_default(),
    };
    let number = |chunk: &ChunkRow, rank: usize| {
        p.sources
            .iter()
            .find(|s| s.chunk.id == chunk.id)
            .map_or(rank + 1, |s| s.number)
    };
    Some(
        chunks
            .iter()
            .enumerate()
            .map(|(rank, c)| citation(number(c, rank), &title(c), c, false))
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::cited_numbers;

    #[test]
    fn bracketed_numbers_lists_and_ranges_are_found_once_in_order() {
        assert_eq!(
            cited_numbers("Paris [2]. Also [1, 3] and [2-4]."),
            vec![2, 1, 3, 4]
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
