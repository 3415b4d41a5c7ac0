// The document view: the document's extracted text, page by page, opened from its title or from a
// citation; a citation's quoted passage is highlighted and scrolled into view.

import { call } from "./api.js";
import { docTitle, el } from "./format.js";

const $ = (id) => document.getElementById(id);

export function initViewer() {
  $("viewer-close").addEventListener("click", () => $("viewer").close());
}

/** Opens a document; with a citation, highlights its passage. */
export async function openDocument(documentId, citation) {
  const dialog = $("viewer");
  const body = $("viewer-body");
  $("viewer-title").textContent = citation?.title || "Loading…";
  $("viewer-meta").textContent = "";
  body.replaceChildren(el("p", { class: "muted" }, "Loading the text…"));
  if (!dialog.open) dialog.showModal();
  try {
    const text = await call("GET", `/v1/documents/${encodeURIComponent(documentId)}/text`);
    $("viewer-title").textContent = docTitle(text.document);
    const pages = text.document.page_count;
    $("viewer-meta").textContent = pages ? `${pages} page${pages === 1 ? "" : "s"}` : "";
    const chars = [...text.text];
    render(body, chars, text.page_starts, citation ? markRange(chars, citation) : null);
    const mark = body.querySelector("mark.cited");
    if (mark) mark.scrollIntoView({ block: "center" });
    else body.scrollTop = 0;
    body.focus();
  } catch (e) {
    body.replaceChildren(el("p", { class: "error", role: "alert" }, `The text cannot be shown: ${e.message}`));
  }
}

/**
 * Where to highlight, in code points of the text: the citation's quote if it can be found inside its span,
 * else the whole span.
 */
function markRange(chars, citation) {
  const start = Math.max(0, Math.min(chars.length, citation.char_start));
  const end = Math.max(start, Math.min(chars.length, citation.char_end));
  const span = chars.slice(start, end).join("");
  const quote = (citation.quote || "").trim();
  const at = quote ? span.indexOf(quote) : -1;
  if (at < 0) return { start, end };
  const qStart = start + [...span.slice(0, at)].length;
  return { start: qStart, end: qStart + [...quote].length };
}

/** The text with a label at each page start (when there are several pages) and the highlight. */
function render(body, chars, pageStarts, mark) {
  const cuts = new Set([0, chars.length]);
  const labels = new Map();
  if (pageStarts.length > 1) {
    pageStarts.forEach((at, i) => {
      cuts.add(at);
      labels.set(at, i + 1);
    });
  }
  if (mark) {
    cuts.add(mark.start);
    cuts.add(mark.end);
  }
  const points = [...cuts].filter((x) => x >= 0 && x <= chars.length).sort((a, b) => a - b);
  const nodes = [];
  for (let i = 0; i < points.length; i += 1) {
    const at = points[i];
    if (labels.has(at)) {
      const page = labels.get(at);
      nodes.push(el("span", { class: "page-label", id: `page-${page}` }, `Page ${page}`));
    }
    if (i + 1 === points.length) break;
    const piece = chars.slice(at, points[i + 1]).join("");
    const marked = mark && at >= mark.start && points[i + 1] <= mark.end && mark.end > mark.start;
    nodes.push(marked ? el("mark", { class: "cited" }, piece) : piece);
  }
  body.replaceChildren(...nodes);
}
