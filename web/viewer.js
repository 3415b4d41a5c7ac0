// The document view: the document's extracted text, page by page, opened from its title or from a
// citation; a citation's quoted passage is highlighted and scrolled into view, and the header says which
// page is on screen as the reader scrolls.

import { call } from "./api.js";
import { docTitle, el } from "./format.js";

const $ = (id) => document.getElementById(id);

/** How far below the top of the view a page's label may be and still count as the page on screen. */
const TOP_SLACK_PX = 24;
let pageFrame = 0;

export function initViewer() {
  $("viewer-close").addEventListener("click", () => $("viewer").close());
  $("viewer-body").addEventListener("scroll", () => {
    cancelAnimationFrame(pageFrame);
    pageFrame = requestAnimationFrame(showPageOnScreen);
  });
}

/** Opens a document; with a citation, highlights its passage. */
export async function openDocument(documentId, citation) {
  const dialog = $("viewer");
  const body = $("viewer-body");
  $("viewer-title").textContent = citation?.title || "Loading…";
  $("viewer-meta").textContent = "";
  $("viewer-page").hidden = true;
  body.dataset.pages = 0;
  body.replaceChildren(el("p", { class: "muted" }, "Loading the text…"));
  if (!dialog.open) dialog.showModal();
  try {
    const text = await call("GET", `/v1/documents/${encodeURIComponent(documentId)}/text`);
    $("viewer-title").textContent = docTitle(text.document);
    const pages = text.document.page_count;
    // Several pages: the page indicator says how many.
    $("viewer-meta").textContent = pages === 1 ? "1 page" : "";
    const chars = [...text.text];
    render(body, chars, text.page_starts, citation ? markRange(chars, citation) : null);
    const mark = body.querySelector("mark.cited");
    if (mark) mark.scrollIntoView({ block: "center" });
    else body.scrollTop = 0;
    showPageOnScreen();
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
      nodes.push(el("span", { class: "page-label", id: `page-${page}`, dataset: { page } }, `Page ${page}`));
    }
    if (i + 1 === points.length) break;
    const piece = chars.slice(at, points[i + 1]).join("");
    const marked = mark && at >= mark.start && points[i + 1] <= mark.end && mark.end > mark.start;
    nodes.push(marked ? el("mark", { class: "cited" }, piece) : piece);
  }
  body.replaceChildren(...nodes);
  body.dataset.pages = pageStarts.length;
}

/**
 * "Page 3 of 17" for the page whose text is at the top of the view (the last page once the view reaches
 * the end); nothing for a document of one page.
 */
function showPageOnScreen() {
  const body = $("viewer-body");
  const labels = [...body.querySelectorAll(".page-label")];
  const indicator = $("viewer-page");
  const total = Number(body.dataset.pages || 0);
  indicator.hidden = total < 2 || labels.length === 0;
  if (indicator.hidden) return;
  const view = body.getBoundingClientRect();
  const atEnd = body.scrollTop + body.clientHeight >= body.scrollHeight - 2;
  const line = atEnd ? view.bottom : view.top + TOP_SLACK_PX;
  let page = 1;
  for (const label of labels) {
    if (label.getBoundingClientRect().top <= line) page = Number(label.dataset.page);
  }
  indicator.textContent = `Page ${page} of ${total}`;
}
