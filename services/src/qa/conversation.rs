//! Follow-up questions: a question asked as a follow-up of an earlier answer (`follow_up_of`, or the
//! earlier messages of an OpenAI chat) carries its conversation into the prompt as chat turns. The last
//! few turns that answered something go in, shortened and without their citation markers (those
//! pointed at the earlier prompt's sources). On the long path the first turn's question follows the
//! documents, so the cached document prefix still matches; on the RAG path the earlier questions come
//! before the message with the sources. Retrieval searches with the previous question too, so "and the
//! rent?" finds the passages of the lease it follows.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::citations::without_markers;
use super::unanswerable::says_unanswerable;
use crate::api::error::ApiError;
use crate::db::answers::status;
use crate::state::AppState;

/// Most earlier turns carried into a prompt (the most recent ones).
pub const MAX_TURNS: usize = 3;
/// Most characters kept of an earlier question or answer.
const MAX_TURN_CHARS: usize = 400;

/// One earlier question and its answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Turn {
    /// The question asked.
    pub question: String,
    /// What was answered.
    pub answer: String,
}

/// The turns of the conversation an answer ends, oldest first: the answer itself and the ones it
/// followed up, at most [`MAX_TURNS`]. Answers without text (failed, stopped early) are left out.
pub async fn turns_ending_with(
    state: &AppState,
    tenant_id: &str,
    answer_id: &str,
) -> Result<Vec<Turn>, ApiError> {
    let mut turns = Vec::new();
    let mut next = Some(answer_id.to_string());
    let mut first = true;
    while let Some(id) = next.take()
        && turns.len() < MAX_TURNS
    {
        let Some(row) = state.db.answer(tenant_id, &id).await? else {
            if first {
                return Err(ApiError::not_found("answer", &id));
            }
            break;
        };
        if first && row.status == status::RUNNING {
            return Err(ApiError::conflict(format!(
                "answer {id} is still being written: follow it up once it is complete"
            )));
        }
        first = false;
        if let Some(text) = row.text.filter(|t| !t.trim().is_empty()) {
            turns.push(Turn {
                question: row.question,
                answer: text,
            });
        }
        next = row.follow_up_of;
    }
    turns.reverse();
    Ok(turns)
}

/// The turns a prompt carries, oldest first: the last [`MAX_TURNS`] that answered something (an earlier
/// "not found" would only invite another), each shortened and without its citation markers.
pub fn prompt_turns(turns: &[Turn]) -> Vec<Turn> {
    let answered: Vec<&Turn> = turns
        .iter()
        .filter(|t| !says_unanswerable(&t.answer))
        .collect();
    answered[answered.len().saturating_sub(MAX_TURNS)..]
        .iter()
        .map(|t| Turn {
            question: shortened(&t.question),
            answer: shortened(&without_markers(&t.answer)),
        })
        .collect()
}

/// What retrieval searches for: the previous question and this one.
pub fn retrieval_query(turns: &[Turn], question: &str) -> String {
    match turns.last() {
        Some(t) => format!("{} {}", shortened(&t.question), question.trim()),
        None => question.trim().to_string(),
    }
}

/// At most [`MAX_TURN_CHARS`] characters, cut at a word, with one line.
fn shortened(text: &str) -> String {
    let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if flat.chars().count() <= MAX_TURN_CHARS {
        return flat;
    }
    let cut: String = flat.chars().take(MAX_TURN_CHARS).collect();
    let at_word = cut.rfind(' ').map_or(cut.as_str(), |i| &cut[..i]);
    format!("{at_word}…")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn turn(q: &str, a: &str) -> Turn {
        Turn {
            question: q.into(),
            answer: a.into(),
        }
    }

    #[test]
    fn a_first_question_searches_for_itself_and_a_follow_up_for_the_previous_question_too() {
        assert_eq!(
            retrieval_query(&[], " When does it end? "),
            "When does it end?"
        );
        let turns = [turn("When does the lease end?", "On 30 June 2031 [2][3].")];
        assert_eq!(
            retrieval_query(&turns, "And the rent?"),
            "When does the lease end? And the rent?"
        );
    }

    #[test]
    fn prompt_turns_drop_markers_and_refusals_and_keep_the_last_turns_shortened() {
        let long_answer = "word ".repeat(200);
        let mut turns: Vec<Turn> = (0..5)
            .map(|i| turn(&format!("q{i}"), &long_answer))
            .collect();
        turns.push(turn("q5", "Not found in the document."));
        turns.push(turn("q6", "On 30 June 2031 [2][3]."));
        let kept = prompt_turns(&turns);
        let questions: Vec<&str> = kept.iter().map(|t| t.question.as_str()).collect();
        assert_eq!(questions, ["q3", "q4", "q6"]);
        assert_eq!(kept[2].answer, "On 30 June 2031.");
        assert!(kept[0].answer.ends_with("word…"));
        assert!(kept[0].answer.chars().count() <= MAX_TURN_CHARS + 1);
    }

    #[test]
    fn brackets_that_are_not_markers_stay() {
        assert_eq!(
            without_markers("a [1, 2] b [x] c [] d [3]"),
            "a b [x] c [] d"
        );
        assert_eq!(without_markers("价格 [12]。"), "价格。");
    }
}
