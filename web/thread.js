// Follow-up questions: the answer the next question follows up (chosen with a "Follow up" button, named
// above the question box with a way back to a fresh question), and the conversation before an answer,
// read from the stored answers through their `follow_up_of` links.

import { call } from "./api.js";

const $ = (id) => document.getElementById(id);

/** The most earlier turns of a conversation shown above its answer. */
const TURNS_SHOWN = 20;
/** A question quoted in the follow-up note is cut after this many characters. */
const QUOTED_CHARS = 140;
const FRESH_PLACEHOLDER = "What does the document say about…?";
const FOLLOW_UP_PLACEHOLDER = "Ask a follow-up question…";

/** What the next question follows up: `{answer, turns}`, `turns` the conversation up to that answer. */
let target = null;

export function initThread() {
  $("follow-up-cancel").addEventListener("click", () => {
    endFollowUp();
    $("question").focus();
  });
  $("question").addEventListener("keydown", (e) => {
    if (e.key === "Escape" && target) {
      e.preventDefault();
      endFollowUp();
    }
  });
}

/** The follow-up the next question will be, or null for a fresh question. */
export function followUpTarget() {
  return target;
}

/** Makes the next question a follow-up of `answer` (`earlier`: the turns before it, oldest first). */
export function startFollowUp(answer, earlier) {
  target = { answer, turns: [...earlier, answer] };
  // An earlier question's failure is not this one's.
  $("ask-error").hidden = true;
  $("follow-up-text").textContent = `Follow-up of “${quoted(answer.question)}”`;
  $("follow-up").hidden = false;
  $("question").placeholder = FOLLOW_UP_PLACEHOLDER;
  $("question").focus();
}

/** Back to a fresh question. */
export function endFollowUp() {
  target = null;
  $("follow-up").hidden = true;
  $("follow-up-text").textContent = "";
  $("question").placeholder = FRESH_PLACEHOLDER;
}

/** A question as quoted in a note: its first QUOTED_CHARS characters. */
export function quoted(question) {
  const chars = [...(question || "").trim()];
  return chars.length > QUOTED_CHARS ? `${chars.slice(0, QUOTED_CHARS).join("")}…` : chars.join("");
}

/** A stored answer by id, from `known` (answers already listed) or the server; null when it is gone. */
export async function storedAnswer(id, known = new Map()) {
  if (known.has(id)) return known.get(id);
  try {
    return await call("GET", `/v1/answers/${encodeURIComponent(id)}`);
  } catch {
    return null;
  }
}

/** The stored answers `answer` followed up, one after the other, oldest first. */
export async function earlierTurns(answer, known = new Map()) {
  const turns = [];
  const seen = new Set([answer.answer_id]);
  let id = answer.follow_up_of;
  while (id && !seen.has(id) && turns.length < TURNS_SHOWN) {
    seen.add(id);
    const earlier = await storedAnswer(id, known);
    if (!earlier) break;
    turns.unshift(earlier);
    id = earlier.follow_up_of;
  }
  return turns;
}
