// Asking: the question, its scope (selected documents, a collection, or everything), the route choice, and
// the answer streamed in as it is generated, then shown with its route badge and reason, its timings and
// token counts, numbered citation markers and the list of sources.

import { ApiError, askStreaming } from "./api.js";
import { docTitle, el, seconds, showError } from "./format.js";
import { emit, on, state } from "./state.js";
import { openDocument } from "./viewer.js";

const $ = (id) => document.getElementById(id);
let running = null;

export function initAsk() {
  $("ask-form").addEventListener("submit", (e) => {
    e.preventDefault();
    ask();
  });
  $("question").addEventListener("keydown", (e) => {
    if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) {
      e.preventDefault();
      ask();
    }
  });
  $("stop-button").addEventListener("click", () => running?.abort());
  $("scope").addEventListener("change", describeScope);
  $("scope-collection").addEventListener("change", describeScope);
  on("selection", describeScope);
  on("collections", () => {
    const names = state.collections || [];
    $("scope-collection").replaceChildren(...names.map((n) => el("option", { value: n }, n)));
    describeScope();
  });
  describeScope();
}

/** The request's scope, or a reason why there is none. */
function scope() {
  const kind = $("scope").value;
  if (kind === "selected") {
    const ids = [...state.selected];
    if (!ids.length) return { error: "Select at least one ready document, or change the scope." };
    return { scope: { document_ids: ids } };
  }
  if (kind === "collection") {
    const name = $("scope-collection").value;
    if (!name) return { error: "There is no collection yet: give one when uploading." };
    return { scope: { collection: name } };
  }
  return { scope: {} };
}

function describeScope() {
  const kind = $("scope").value;
  $("scope-collection").hidden = kind !== "collection";
  let text;
  if (kind === "selected") {
    const titles = [...state.selected].map((id) => docTitle(state.documents.get(id) || { id }));
    text = titles.length ? `Asking: ${titles.join(", ")}` : "No document selected.";
  } else if (kind === "collection") {
    text = $("scope-collection").value ? `Asking the collection “${$("scope-collection").value}”.` : "";
  } else {
    text = "Asking every ready document.";
  }
  $("scope-summary").textContent = text;
}

async function ask() {
  if (running) return;
  const question = $("question").value.trim();
  const { scope: sc, error } = scope();
  showError($("ask-error"), question ? error : "Write a question first.");
  if (!question || error) return;
  const view = startAnswer();
  running = new AbortController();
  setBusy(true);
  try {
    const answer = await askStreaming(
      { question, scope: sc, route: $("route").value },
      { progress: (p) => view.reading(p), token: (text) => view.append(text) },
      running.signal,
    );
    view.finish(answer);
    emit("answered", answer);
  } catch (e) {
    view.fail(e);
  } finally {
    running = null;
    setBusy(false);
    emit("question-ended");
  }
}

function setBusy(busy) {
  $("ask-button").disabled = busy;
  $("ask-button").textContent = busy ? "Answering…" : "Ask";
  $("stop-button").hidden = !busy;
}

function startAnswer() {
  const text = $("answer-text");
  $("answer").hidden = false;
  $("route-badge").hidden = true;
  $("route-reason").hidden = true;
  $("answer-stats").textContent = "Waiting for the model…";
  $("citations-title").hidden = true;
  $("citations").replaceChildren();
  text.replaceChildren();
  text.classList.add("streaming");
  let streamed = "";
  return {
    reading(p) {
      if (streamed) return;
      const eta = p.eta_ms == null ? "" : ` · about ${seconds(Math.max(p.eta_ms, 1000))}`;
      $("answer-stats").textContent = `Reading ${count(p.read)} of ${count(p.total)} tokens${eta}`;
    },
    append(piece) {
      streamed += piece;
      text.textContent = streamed;
      $("answer-stats").textContent = "Streaming…";
    },
    finish(answer) {
      text.classList.remove("streaming");
      renderAnswer(answer);
    },
    fail(e) {
      text.classList.remove("streaming");
      $("answer-stats").textContent = "";
      const stopped = e.name === "AbortError";
      if (!streamed) $("answer").hidden = true;
      showError($("ask-error"), stopped ? "Stopped." : `No answer: ${e instanceof ApiError ? e.message : e}`);
    },
  };
}

/** Shows a finished answer (also used by the history). */
export function renderAnswer(answer) {
  $("answer").hidden = false;
  const badge = $("route-badge");
  badge.hidden = false;
  badge.className = `badge ${answer.route}`;
  badge.textContent = answer.route === "long" ? "Long context" : "RAG";
  badge.title = (answer.route_reasons || []).join("; ");
  const reasons = answer.route_reasons || [];
  $("route-reason").hidden = reasons.length === 0;
  $("route-reason").textContent = `Why: ${reasons.join("; ")}`;
  $("answer-stats").textContent = stats(answer);
  const citations = answer.citations || [];
  $("answer-text").replaceChildren(...withMarkers(answer.answer ?? "", citations));
  $("citations-title").hidden = citations.length === 0;
  $("citations").replaceChildren(...citations.map(citationItem));
}

const count = (n) => n.toLocaleString("en-US");

/** Why an answer ended early, in words; empty when the model finished it. */
const ENDINGS = {
  length: "Cut off: the answer reached its length limit.",
  loop: "Ended early: the answer began repeating itself.",
  cancelled: "Stopped before it was complete.",
};

function stats(answer) {
  const t = answer.timings || {};
  const u = answer.usage || {};
  const parts = [];
  const ending = ENDINGS[answer.finish_reason];
  if (ending) parts.push(ending);
  if (t.first_token_ms != null) parts.push(`first token ${seconds(t.first_token_ms)}`);
  if (t.total_ms != null) parts.push(`total ${seconds(t.total_ms)}`);
  if (u.prompt_tokens != null) {
    const cached = u.cached_prompt_tokens ? ` (${u.cached_prompt_tokens} cached)` : "";
    parts.push(`${u.prompt_tokens} prompt tokens${cached}, ${u.completion_tokens} answer tokens`);
  }
  return parts.join(" · ");
}

function marker(citation) {
  return el("button", {
    type: "button",
    class: "cite-marker",
    "aria-label": `Source ${citation.source}: ${citation.title}, page ${citation.page_start}`,
    onclick: () => openCitation(citation),
  }, `${citation.source}`);
}

/** The answer's text with `[n]` turned into buttons; sources it does not name are marked at the end. */
function withMarkers(text, citations) {
  const bySource = new Map(citations.map((c) => [c.source, c]));
  const nodes = [];
  const named = new Set();
  let last = 0;
  for (const m of text.matchAll(/\[(\d+)\]/g)) {
    const c = bySource.get(Number(m[1]));
    if (!c) continue;
    nodes.push(text.slice(last, m.index), marker(c));
    named.add(c.source);
    last = m.index + m[0].length;
  }
  nodes.push(text.slice(last));
  const rest = citations.filter((c) => !named.has(c.source));
  if (rest.length) nodes.push(" ", ...rest.map(marker));
  return nodes;
}

function citationItem(c) {
  const pages = c.page_end > c.page_start ? `pp. ${c.page_start}–${c.page_end}` : `p. ${c.page_start}`;
  return el("li", { value: c.source },
    el("button", { type: "button", class: "link", onclick: () => openCitation(c) },
      el("span", { class: "where" }, `${c.title} · ${pages}`),
      el("span", { class: "quote" }, c.quote || c.snippet)));
}

function openCitation(c) {
  openDocument(c.document_id, c);
}
