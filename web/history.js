// The questions asked, newest first: about the selected documents, or about any document when none is
// selected. Each says which document(s) it was about and, for a follow-up, the question it followed up;
// long answers are folded; choosing one shows that answer again in full, below the conversation before it,
// and "Follow up" asks the next question of that conversation.

import { call } from "./api.js";
import { date, docTitle, el, fold } from "./format.js";
import { on, state } from "./state.js";
import { citedText, renderAnswer } from "./ask.js";
import { earlierTurns, quoted, startFollowUp, storedAnswer } from "./thread.js";

const $ = (id) => document.getElementById(id);

/** How often the list is read again while one of its answers is still running. */
const RUNNING_POLL_MS = 1500;
/** Titles named before the rest are counted ("A, B, C and 4 more"). */
const TITLES_SHOWN = 3;
let poll = null;
/** The latest request: an older one answering late is ignored. */
let latest = 0;
/** Answers whose fold the user opened, kept open when the list is read again. */
const expanded = new Set();
/** The answers listed, by id. */
let listed = new Map();

export function initHistory() {
  on("selection", refreshHistory);
  on("question-ended", refreshHistory);
}

async function refreshHistory() {
  const request = ++latest;
  const ids = [...state.selected];
  const params = new URLSearchParams({ limit: "50" });
  for (const id of ids) params.append("document", id);
  $("history-scope").textContent = describeSelection(ids);
  clearTimeout(poll);
  try {
    const history = await call("GET", `/v1/answers?${params}`);
    if (request !== latest) return;
    show(history.answers, ids);
    // An answer stopped or still being written ends on the server a moment later: look again.
    if (history.answers.some((a) => a.status === "running")) poll = setTimeout(refreshHistory, RUNNING_POLL_MS);
  } catch (e) {
    if (request !== latest) return;
    $("history").replaceChildren();
    showHint(`History unavailable: ${e.message}`);
  }
}

function describeSelection(ids) {
  if (!ids.length) return "Questions about any document. Select documents to see only theirs.";
  if (ids.length === 1) return `Questions about “${titleOf(ids[0])}”.`;
  return `Questions about any of the ${ids.length} selected documents.`;
}

function show(answers, ids) {
  listed = new Map(answers.map((a) => [a.answer_id, a]));
  const list = $("history");
  list.replaceChildren(...answers.map(item));
  for (const li of list.children) foldAnswer(li);
  const none = ids.length ? "No questions about the selected documents yet." : "No questions yet.";
  showHint(answers.length ? "" : none);
}

function showHint(text) {
  $("history-hint").textContent = text;
  $("history-hint").hidden = !text;
}

function item(a) {
  const answer = el("div", { class: "a", id: `history-answer-${a.answer_id}` }, ...answerText(a));
  const toggle = el("button", { type: "button", class: "link fold" });
  const li = el("li", { dataset: { answer: a.answer_id } },
    el("button", {
      type: "button",
      class: "link q",
      disabled: a.status !== "succeeded",
      onclick: () => showAgain(a),
    }, a.question),
    a.follow_up_of && followedUp(a.follow_up_of),
    el("div", { class: "about muted small" }, about(a)),
    answer,
    toggle,
    el("div", { class: "meta muted small" },
      `${a.route || a.route_requested} · ${date(Date.parse(a.created_at))}`,
      a.status === "succeeded" && el("button", {
        type: "button",
        class: "link follow-up-action",
        "aria-label": `Follow up “${quoted(a.question)}”`,
        onclick: () => followUp(a),
      }, "Follow up")));
  li.fold = { answer, toggle, id: a.answer_id };
  return li;
}

/** "Follow-up of: “…”", naming the question followed up (read from the server when not listed). */
function followedUp(id) {
  const note = el("div", { class: "follow-up-of muted small" }, "Follow-up of an earlier question");
  const name = (earlier) => {
    note.textContent = earlier ? `Follow-up of: “${quoted(earlier.question)}”` : "Follow-up of a deleted answer";
  };
  if (listed.has(id)) name(listed.get(id));
  else storedAnswer(id).then(name);
  return note;
}

/** Shows a stored answer again, below the conversation before it. */
async function showAgain(a) {
  const earlier = await earlierTurns(a, listed);
  renderAnswer(asFinal(a), earlier);
  return earlier;
}

/** Shows a stored answer and makes the next question its follow-up. */
async function followUp(a) {
  const earlier = await showAgain(a);
  startFollowUp(asFinal(a), earlier);
}

function foldAnswer(li) {
  const { answer, toggle, id } = li.fold;
  fold(answer, toggle, {
    expanded: expanded.has(id),
    onToggle: (open) => (open ? expanded.add(id) : expanded.delete(id)),
  });
}

function answerText(a) {
  if (a.status === "failed") return [`Failed: ${a.error || "unknown error"}`];
  if (a.status === "stopped") return ["Stopped before it was complete."];
  if (!a.answer) return ["…"];
  return citedText(a.answer, a.citations || []).nodes;
}

/** Which documents an answer was about, by title. */
function about(a) {
  const ids = a.document_ids?.length ? a.document_ids : a.scope?.document_ids || [];
  if (!ids.length) {
    return a.scope?.collection ? `About the collection “${a.scope.collection}”` : "About all documents";
  }
  const titles = ids.map((id) => titleOf(id, a.citations));
  const shown = titles.slice(0, TITLES_SHOWN).map((t) => `“${t}”`).join(", ");
  const more = titles.length - TITLES_SHOWN;
  return `About ${shown}${more > 0 ? ` and ${more} more` : ""}`;
}

/** A document's title from the library, else from a citation of it. */
function titleOf(id, citations = []) {
  const doc = state.documents.get(id);
  if (doc) return docTitle(doc);
  return citations.find((c) => c.document_id === id)?.title || "a document not listed";
}

/** A stored answer in the shape of a final answer. */
function asFinal(a) {
  return {
    answer_id: a.answer_id,
    question: a.question,
    follow_up_of: a.follow_up_of,
    answer: a.answer,
    route: a.route,
    route_reasons: a.route_reasons,
    citations: a.citations,
    // The stored timings also carry the router's signals: `{timings, signals, self_route_fallback}`.
    timings: a.timings?.timings ?? a.timings,
    usage: {
      prompt_tokens: a.prompt_tokens,
      cached_prompt_tokens: a.cached_prompt_tokens,
      completion_tokens: a.completion_tokens,
    },
  };
}
