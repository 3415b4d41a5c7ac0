// Asking: the question (counted against the server's limit), its scope (selected documents, a collection,
// or everything), the route choice, and the answer streamed in as it is generated, then shown with its
// route badge and reason, its timings and token counts. Sources are numbered 1…n in the order the answer
// first cites them, each marker a superscript link to its passage; sources it did not cite are listed apart.
// A question can follow up an answer: the conversation's earlier turns are shown above its answer.

import { ApiError, askStreaming } from "./api.js";
import {
  count, docTitle, el, fold, markerSegments, readingNumbers, seconds, showError, unfold,
} from "./format.js";
import { emit, on, state } from "./state.js";
import { endFollowUp, followUpTarget, initThread, startFollowUp } from "./thread.js";
import { openDocument } from "./viewer.js";

const $ = (id) => document.getElementById(id);
/** The limit when the server does not say. */
const DEFAULT_MAX_QUESTION_CHARS = 4000;
let running = null;
let tooLong = false;
/** The answer on show with the turns before it, for its "Follow up" button: `{answer, earlier}`. */
let shownAnswer = null;

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
  $("question").addEventListener("input", checkLength);
  $("stop-button").addEventListener("click", () => running?.abort());
  $("follow-up-button").addEventListener("click", () => {
    if (shownAnswer) startFollowUp(shownAnswer.answer, shownAnswer.earlier);
  });
  initThread();
  $("scope").addEventListener("change", describeScope);
  $("scope-collection").addEventListener("change", describeScope);
  on("selection", describeScope);
  on("collections", () => {
    const names = state.collections || [];
    $("scope-collection").replaceChildren(...names.map((n) => el("option", { value: n }, n)));
    describeScope();
  });
  describeScope();
  checkLength();
}

function maxQuestionChars() {
  return state.info?.max_question_chars || DEFAULT_MAX_QUESTION_CHARS;
}

/** Counts the question as the server does (characters, spaces around it left out) against the limit. */
function checkLength() {
  const limit = maxQuestionChars();
  const length = [...$("question").value.trim()].length;
  const over = length - limit;
  tooLong = over > 0;
  const counter = $("question-count");
  counter.textContent = `${count(length)} / ${count(limit)} characters${tooLong ? ` · ${count(over)} over` : ""}`;
  counter.classList.toggle("over", tooLong);
  showError(
    $("question-limit"),
    tooLong ? `A question can have at most ${count(limit)} characters: shorten it by ${count(over)}.` : "",
  );
  setBusy(Boolean(running));
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
  if (running || tooLong) return;
  const question = $("question").value.trim();
  const { scope: sc, error } = scope();
  showError($("ask-error"), question ? error : "Write a question first.");
  if (!question || error) return;
  const followUp = followUpTarget();
  const earlier = followUp?.turns || [];
  const view = startAnswer(question, earlier);
  running = new AbortController();
  setBusy(true);
  try {
    const input = { question, scope: sc, route: $("route").value };
    if (followUp) input.follow_up_of = followUp.answer.answer_id;
    const answer = await askStreaming(
      input,
      { progress: (p) => view.reading(p), token: (text) => view.append(text) },
      running.signal,
    );
    if (followUp === followUpTarget()) endFollowUp();
    view.finish(answer, earlier);
    emit("answered", answer);
  } catch (e) {
    view.fail(e, followUp);
  } finally {
    running = null;
    setBusy(false);
    emit("question-ended");
  }
}

function setBusy(busy) {
  $("ask-button").disabled = busy || tooLong;
  $("ask-button").textContent = busy ? "Answering…" : "Ask";
  $("stop-button").hidden = !busy;
}

function startAnswer(question, earlier) {
  const text = $("answer-text");
  $("answer").hidden = false;
  showThread(earlier, question);
  shownAnswer = null;
  $("follow-up-button").hidden = true;
  $("route-badge").hidden = true;
  $("route-reason").hidden = true;
  $("answer-stats").textContent = "Waiting for the model…";
  showSources([], []);
  unfold(text, $("answer-fold"));
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
      text.replaceChildren(...streamingText(streamed));
      $("answer-stats").textContent = "Streaming…";
    },
    finish(answer, turns) {
      text.classList.remove("streaming");
      renderAnswer(answer, turns);
    },
    fail(e, followUp) {
      text.classList.remove("streaming");
      $("answer-stats").textContent = "";
      const stopped = e.name === "AbortError";
      if (!streamed) $("answer").hidden = true;
      showError($("ask-error"), stopped ? "Stopped." : `No answer: ${whyNoAnswer(e, followUp)}`);
    },
  };
}

/** Why a question got no answer, in words; a follow-up's own refusals say what to do. */
function whyNoAnswer(e, followUp) {
  if (!(e instanceof ApiError)) return String(e);
  if (followUp && e.status === 404) {
    return `the answer followed up no longer exists (${e.message}). Ask a new question instead.`;
  }
  if (followUp && e.status === 409) {
    return `the answer followed up is still being written (${e.message}). Ask again once it is finished.`;
  }
  return e.message;
}

/**
 * Shows a finished answer (also used by the history), below `earlier`: the turns of the conversation
 * before it, oldest first.
 */
export function renderAnswer(answer, earlier = []) {
  $("answer").hidden = false;
  showThread(earlier, answer.question);
  shownAnswer = answer.answer_id ? { answer, earlier } : null;
  $("follow-up-button").hidden = !shownAnswer;
  const badge = $("route-badge");
  badge.hidden = false;
  badge.className = `badge ${answer.route}`;
  badge.textContent = answer.route === "long" ? "Long context" : "RAG";
  badge.title = (answer.route_reasons || []).join("; ");
  const reasons = answer.route_reasons || [];
  $("route-reason").hidden = reasons.length === 0;
  $("route-reason").textContent = `Why: ${reasons.join("; ")}`;
  $("answer-stats").textContent = stats(answer);
  const cited = citedText(answer.answer ?? "", answer.citations || []);
  $("answer-text").replaceChildren(...cited.nodes);
  showSources(cited.sources, cited.uncited);
  fold($("answer-text"), $("answer-fold"));
}

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

/**
 * A finished answer's text with its markers as superscript links, numbered as the reader meets them:
 * `{nodes, sources, uncited}`, `sources` being the cited ones in that order. A marker can only name a
 * source the server found named in the text (`cited_in_text`); the others were matched to the answer.
 */
export function citedText(text, citations) {
  const nameable = new Map(citations.filter((c) => c.cited_in_text !== false).map((c) => [c.source, c]));
  const segments = markerSegments(text);
  const numbers = readingNumbers(segments, (n) => nameable.has(n));
  const sources = [...numbers.keys()].map((n) => nameable.get(n));
  const uncited = citations.filter((c) => !sources.includes(c));
  const marker = (n) => markerLink(numbers.get(n), nameable.get(n));
  return { nodes: withMarkers(segments, numbers, marker), sources, uncited };
}

/** Text still being written: markers numbered as they come, to be linked when the sources arrive. */
function streamingText(text) {
  const segments = markerSegments(text);
  const numbers = readingNumbers(segments);
  const marker = (n) => el("span", { class: "cite-marker pending" }, `${numbers.get(n)}`);
  return withMarkers(segments, numbers, marker);
}

/**
 * Nodes of the text with each run of adjacent markers as one superscript group (`¹,²`), a marker per
 * numbered source; a marker naming no known source stays as written.
 */
function withMarkers(segments, numbers, marker) {
  const nodes = [];
  let group = null;
  for (const s of segments) {
    if (typeof s === "string") {
      group = null;
      nodes.push(s);
      continue;
    }
    const named = s.numbers.filter((n) => numbers.has(n));
    if (!named.length) {
      group = null;
      nodes.push(s.raw);
      continue;
    }
    if (!group) {
      group = { node: el("sup", { class: "cites" }), shown: new Set() };
      nodes.push(group.node);
    }
    for (const n of named) addToGroup(group, numbers.get(n), marker(n));
  }
  return nodes;
}

function addToGroup(group, reading, node) {
  if (group.shown.has(reading)) return;
  if (group.shown.size) group.node.append(el("span", { class: "cite-sep", "aria-hidden": "true" }, ","));
  group.node.append(node);
  group.shown.add(reading);
}

/** A marker: a link to its source in the list, opening the document at the cited passage. */
function markerLink(reading, citation) {
  return el("a", {
    href: `#source-${reading}`,
    class: "cite-marker",
    "aria-label": `Source ${reading}: ${citation.title}, ${pages(citation)}`,
    onclick: (e) => {
      e.preventDefault();
      openCitation(citation);
    },
  }, `${reading}`);
}

/**
 * The conversation's earlier questions and answers above the answer, and the question answered (shown
 * only in a conversation); nothing for a fresh question.
 */
function showThread(turns, question) {
  const list = $("thread");
  list.hidden = turns.length === 0;
  list.replaceChildren(...turns.map(turnItem));
  for (const li of list.children) fold(li.turnText, li.turnToggle);
  $("answer-question").hidden = turns.length === 0;
  $("answer-question").textContent = question || "";
}

function turnItem(turn, i) {
  const text = el("div", { class: "turn-a", id: `thread-answer-${i + 1}` }, ...turnText(turn));
  const toggle = el("button", { type: "button", class: "link fold" });
  const li = el("li", { class: "turn" }, el("p", { class: "turn-q" }, turn.question), text, toggle);
  li.turnText = text;
  li.turnToggle = toggle;
  return li;
}

function turnText(turn) {
  if (turn.status && turn.status !== "succeeded") return [turn.status === "stopped" ? "Stopped." : "No answer."];
  return citedText(turn.answer ?? "", turn.citations || []).nodes;
}

/** The cited sources (numbered as read) and, under their own heading, those the answer did not cite. */
function showSources(cited, uncited) {
  $("citations-title").hidden = cited.length === 0;
  $("citations").replaceChildren(...cited.map((c, i) => citationItem(c, i + 1)));
  $("uncited-title").hidden = uncited.length === 0;
  $("uncited-title").textContent = cited.length
    ? "Also retrieved, not cited"
    : "Not cited in the answer: the passages closest to it";
  $("uncited").replaceChildren(...uncited.map((c) => citationItem(c)));
}

function pages(c) {
  return c.page_end > c.page_start ? `pp. ${c.page_start}–${c.page_end}` : `p. ${c.page_start}`;
}

function citationItem(c, reading) {
  return el("li", { value: reading, id: reading && `source-${reading}` },
    el("button", { type: "button", class: "link", onclick: () => openCitation(c) },
      el("span", { class: "where" }, `${c.title} · ${pages(c)}`),
      el("span", { class: "quote" }, c.quote || c.snippet)));
}

function openCitation(c) {
  openDocument(c.document_id, c);
}
