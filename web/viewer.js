// The document view: the document's extracted text, page by page, opened from its title or from a
// citation; a citation's quoted passage is highlighted and scrolled into view, and the header says which
// page is on screen as the reader scrolls. A PDF also has a page view: its original pages one at a time,
// the cited passage highlighted on its page (pdf_page.js), with previous and next page buttons.

import { call } from "./api.js";
import { docTitle, el } from "./format.js";
import { drawPage, forgetPdf, openPdf } from "./pdf_page.js";

const $ = (id) => document.getElementById(id);

/** How far below the top of the view a page's label may be and still count as the page on screen. */
const TOP_SLACK_PX = 24;
/** How long the window's size must hold before the page is drawn again at the new width. */
const RESIZE_SETTLE_MS = 200;
let pageFrame = 0;
let resizeTimer = 0;
/** The document on show: `{id, citation, passage, isPdf, page, pageCount, pageViewSeen}`. */
let shown = null;
/** The view last chosen ("text" or "page"), kept for the next PDF opened. */
let preferredView = "text";
/** The latest request to draw a page: an older one finishing late is dropped. */
let latestDraw = 0;

export function initViewer() {
  $("viewer-close").addEventListener("click", () => $("viewer").close());
  $("viewer-body").addEventListener("scroll", () => {
    cancelAnimationFrame(pageFrame);
    pageFrame = requestAnimationFrame(showPageOnScreen);
  });
  $("view-text").addEventListener("click", () => chooseView("text"));
  $("view-page").addEventListener("click", () => chooseView("page"));
  $("pdf-previous").addEventListener("click", () => turnPage(-1));
  $("pdf-next").addEventListener("click", () => turnPage(1));
  $("pdf-stage").addEventListener("keydown", pageKeys);
  window.addEventListener("resize", () => {
    clearTimeout(resizeTimer);
    resizeTimer = setTimeout(redrawOnResize, RESIZE_SETTLE_MS);
  });
}

/** Opens a document; with a citation, highlights its passage. */
export async function openDocument(documentId, citation) {
  const dialog = $("viewer");
  const body = $("viewer-body");
  shown = null;
  latestDraw += 1;
  $("viewer-title").textContent = citation?.title || "Loading…";
  $("viewer-meta").textContent = "";
  $("viewer-page").hidden = true;
  $("viewer-views").hidden = true;
  showView("text");
  $("pdf-stage").replaceChildren();
  $("pdf-status").textContent = "";
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
    const mark = citation ? markRange(chars, citation) : null;
    render(body, chars, text.page_starts, mark);
    shown = {
      id: documentId,
      citation,
      passage: mark ? chars.slice(mark.start, mark.end).join("") : "",
      isPdf: isPdf(text.document),
      page: citation?.page_start || 1,
      pageCount: text.page_starts.length,
    };
    $("viewer-views").hidden = !shown.isPdf;
    const marked = body.querySelector("mark.cited");
    if (marked) marked.scrollIntoView({ block: "center" });
    else body.scrollTop = 0;
    showPageOnScreen();
    if (shown.isPdf && preferredView === "page") showPdfPage(shown.page);
    else body.focus();
  } catch (e) {
    body.replaceChildren(el("p", { class: "error", role: "alert" }, `The text cannot be shown: ${e.message}`));
  }
}

function isPdf(doc) {
  return doc.format === "pdf" || doc.content_type === "application/pdf" || /\.pdf$/i.test(doc.file_name || "");
}

/** The reader's choice of view: the page view opens at the page on screen in the text, and back. */
function chooseView(view) {
  if (!shown?.isPdf) return;
  preferredView = view;
  const current = $("viewer-body").hidden ? "page" : "text";
  if (view === current) return;
  if (view === "page") {
    // The cited page first; after that, the page the reader has reached in the text.
    showPdfPage(shown.citation && !shown.pageViewSeen ? shown.page : (pageOnScreen() ?? shown.page));
    return;
  }
  showView("text");
  const label = $(`page-${shown.page}`);
  if (label && pageOnScreen() !== shown.page) label.scrollIntoView({ block: "start" });
  showPageOnScreen();
  $("viewer-body").focus();
}

/** Shows the text view or the page view, the switch saying which. */
function showView(view) {
  $("viewer-body").hidden = view !== "text";
  $("viewer-pdf").hidden = view !== "page";
  $("view-text").setAttribute("aria-pressed", String(view === "text"));
  $("view-page").setAttribute("aria-pressed", String(view === "page"));
}

/** Draws page `page` of the PDF in the page view, with the cited passage highlighted when it is there. */
async function showPdfPage(page) {
  const request = ++latestDraw;
  const doc = shown;
  showView("page");
  doc.page = page;
  doc.pageViewSeen = true;
  showPageNumber();
  const status = $("pdf-status");
  status.textContent = "Drawing the page…";
  try {
    const pdf = await openPdf(doc.id);
    if (request !== latestDraw) return;
    doc.pageCount = pdf.numPages;
    showPageNumber();
    const stage = $("pdf-stage");
    const cited = citedOn(doc, page);
    const result = await drawPage(stage, pdf, page, stageWidth(stage), cited ? doc.passage : "");
    if (!result || request !== latestDraw) return;
    status.textContent = describeHighlight(doc, page, result);
    stage.querySelector(".cited-span")?.scrollIntoView({ block: "center" });
    if (!stage.contains(document.activeElement)) stage.focus();
  } catch (e) {
    if (request !== latestDraw) return;
    forgetPdf(doc.id);
    status.textContent = "";
    $("pdf-stage").replaceChildren(
      el("p", { class: "error", role: "alert" }, `The page cannot be shown: ${e.message}`),
    );
  }
}

/** Whether the cited passage is on `page` of the document shown. */
function citedOn(doc, page) {
  const c = doc.citation;
  return Boolean(c && doc.passage && page >= c.page_start && page <= (c.page_end || c.page_start));
}

/** What the page view says about the highlight. */
function describeHighlight(doc, page, result) {
  const c = doc.citation;
  if (!c) return "";
  if (!citedOn(doc, page)) {
    const where = c.page_end > c.page_start ? `pages ${c.page_start}–${c.page_end}` : `page ${c.page_start}`;
    return `The cited passage is on ${where}.`;
  }
  if (!result.highlighted) return "The cited passage could not be found on this page's text.";
  return result.exact ? "The cited passage is highlighted." : "Highlighted: the lines closest to the cited passage.";
}

function stageWidth(stage) {
  const style = getComputedStyle(stage);
  return stage.clientWidth - parseFloat(style.paddingLeft) - parseFloat(style.paddingRight);
}

/** "Page 3 of 13" and the previous and next buttons, for the page view. */
function showPageNumber() {
  const { page, pageCount } = shown;
  const indicator = $("viewer-page");
  indicator.hidden = false;
  indicator.textContent = `Page ${page} of ${pageCount}`;
  $("pdf-previous").disabled = page <= 1;
  $("pdf-next").disabled = page >= pageCount;
}

function turnPage(step) {
  if (!shown) return;
  const page = Math.min(shown.pageCount, Math.max(1, shown.page + step));
  if (page !== shown.page) showPdfPage(page);
}

/** Left and right arrows, Page Up and Page Down turn the pages of the page view. */
function pageKeys(e) {
  const steps = { ArrowLeft: -1, PageUp: -1, ArrowRight: 1, PageDown: 1 };
  if (!(e.key in steps) || e.altKey || e.ctrlKey || e.metaKey) return;
  e.preventDefault();
  turnPage(steps[e.key]);
}

function redrawOnResize() {
  if ($("viewer").open && shown?.isPdf && !$("viewer-pdf").hidden) showPdfPage(shown.page);
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
  if ($("viewer-body").hidden) return;
  const page = pageOnScreen();
  const indicator = $("viewer-page");
  const total = Number($("viewer-body").dataset.pages || 0);
  indicator.hidden = page === null;
  if (indicator.hidden) return;
  indicator.textContent = `Page ${page} of ${total}`;
}

/** The page whose text is at the top of the text view, or null for a document of one page. */
function pageOnScreen() {
  const body = $("viewer-body");
  const labels = [...body.querySelectorAll(".page-label")];
  const total = Number(body.dataset.pages || 0);
  if (total < 2 || labels.length === 0) return null;
  const view = body.getBoundingClientRect();
  const atEnd = body.scrollTop + body.clientHeight >= body.scrollHeight - 2;
  const line = atEnd ? view.bottom : view.top + TOP_SLACK_PX;
  let page = 1;
  for (const label of labels) {
    if (label.getBoundingClientRect().top <= line) page = Number(label.dataset.page);
  }
  return page;
}
