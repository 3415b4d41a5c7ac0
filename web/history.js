// The questions asked, newest first: about the selected documents, or about any document when none is
// selected. Each says which document(s) it was about; long answers are folded; choosing one shows that
// answer again in full.

import { call } from "./api.js";
import { date, docTitle, el, fold } from "./format.js";
import { on, state } from "./state.js";
import { citedText, renderAnswer } from "./ask.js";

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
      onclick: () => renderAnswer(asFinal(a)),
    }, a.question),
    el("div", { class: "about muted small" }, about(a)),
    answer,
    toggle,
    el("div", { class: "muted small" }, `${a.route || a.route_requested} · ${date(Date.parse(a.created_at))}`));
  li.fold = { answer, toggle, id: a.answer_id };
  return li;
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
