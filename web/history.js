// The questions asked about one document, newest first; choosing one shows that answer again.

import { call } from "./api.js";
import { date, el } from "./format.js";
import { on, state } from "./state.js";
import { renderAnswer } from "./ask.js";

const $ = (id) => document.getElementById(id);

/** How often the list is read again while one of its answers is still running. */
const RUNNING_POLL_MS = 1500;
let poll = null;

export function initHistory() {
  on("selection", refreshHistory);
  on("question-ended", refreshHistory);
}

async function refreshHistory() {
  const list = $("history");
  const hint = $("history-hint");
  if (state.selected.size !== 1) {
    list.replaceChildren();
    hint.hidden = false;
    hint.textContent = "Select one document to see its questions.";
    return;
  }
  const [id] = state.selected;
  try {
    const history = await call("GET", `/v1/documents/${encodeURIComponent(id)}/answers?limit=50`);
    hint.hidden = history.answers.length > 0;
    hint.textContent = "No questions about this document yet.";
    list.replaceChildren(...history.answers.map(item));
    // An answer stopped or still being written ends on the server a moment later: look again.
    clearTimeout(poll);
    if (history.answers.some((a) => a.status === "running")) poll = setTimeout(refreshHistory, RUNNING_POLL_MS);
  } catch (e) {
    list.replaceChildren();
    hint.hidden = false;
    hint.textContent = `History unavailable: ${e.message}`;
  }
}

function item(a) {
  const text =
    a.status === "failed" ? `Failed: ${a.error || "unknown error"}`
    : a.status === "stopped" ? "Stopped before it was complete."
    : a.answer || "…";
  return el("li", {},
    el("button", {
      type: "button",
      class: "link q",
      disabled: a.status !== "succeeded",
      onclick: () => renderAnswer(asFinal(a)),
    }, a.question),
    el("div", { class: "a" }, text),
    el("div", { class: "muted small" }, `${a.route || a.route_requested} · ${date(Date.parse(a.created_at))}`));
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
