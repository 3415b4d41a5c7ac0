// The page view of a PDF document: its original pages drawn by the vendored pdf.js, one page at a time (a
// canvas under pdf.js's text layer), the PDF downloaded and opened once per document, and a cited passage
// highlighted on its page: found in the page's text as quoted, else the lines closest to it in words.

import { download } from "./api.js";
import { el } from "./format.js";

const WORKER = "/ui/vendor/pdfjs/pdf.worker.min.mjs";
/** The page is drawn to fit the view's width, within these scales. */
const MIN_SCALE = 0.5;
const MAX_SCALE = 2.5;
/** A line counts as part of a passage found by its words when this share of its words are the passage's. */
const LINE_MATCH_SHARE = 0.5;

let library = null;
/** The PDF of the last document opened: `{documentId, pdf}` (a promise of pdf.js's document). */
let opened = { documentId: null, pdf: null };
/** The page being drawn, cancelled when another is asked for. */
let drawing = null;

/** pdf.js, imported the first time a PDF is shown. */
async function pdfjs() {
  if (!library) {
    library = import("./vendor/pdfjs/pdf.min.mjs").then((lib) => {
      lib.GlobalWorkerOptions.workerSrc = WORKER;
      return lib;
    });
  }
  return library;
}

/** The document's PDF (pdf.js's document proxy), downloaded and opened once while it stays the last one. */
export function openPdf(documentId) {
  if (opened.documentId !== documentId) {
    const previous = opened.pdf;
    opened = { documentId, pdf: loadPdf(documentId) };
    previous?.then((pdf) => pdf.destroy()).catch(() => {});
  }
  return opened.pdf;
}

async function loadPdf(documentId) {
  const [bytes, lib] = await Promise.all([
    download(`/v1/documents/${encodeURIComponent(documentId)}/original`),
    pdfjs(),
  ]);
  return lib.getDocument({ data: new Uint8Array(bytes), isEvalSupported: false }).promise;
}

/** Forgets the document's PDF (after it failed to load, say), so the next view downloads it again. */
export function forgetPdf(documentId) {
  if (opened.documentId === documentId) opened = { documentId: null, pdf: null };
}

/**
 * Draws page `pageNumber` of `pdf` into `stage`, `width` pixels wide, and highlights `passage` on it when
 * given. Resolves to `{highlighted, exact}` (how many text spans were highlighted, and whether the passage
 * was found as written), or null when another page was asked for meanwhile.
 */
export async function drawPage(stage, pdf, pageNumber, width, passage) {
  const lib = await pdfjs();
  const page = await pdf.getPage(pageNumber);
  const scale = Math.min(MAX_SCALE, Math.max(MIN_SCALE, width / page.getViewport({ scale: 1 }).width));
  const viewport = page.getViewport({ scale });
  const { sheet, canvas, textLayerNode } = pageSheet(viewport, scale);
  const ratio = window.devicePixelRatio || 1;
  const render = page.render({
    canvas,
    viewport,
    transform: ratio === 1 ? undefined : [ratio, 0, 0, ratio, 0, 0],
  });
  const textLayer = new lib.TextLayer({ textContentSource: page.streamTextContent(), container: textLayerNode, viewport });
  const task = { cancelled: false, cancel: () => cancelDrawing(task, render, textLayer) };
  drawing?.cancel();
  drawing = task;
  try {
    await Promise.all([render.promise, textLayer.render()]);
  } catch (e) {
    if (task.cancelled) return null;
    throw e;
  }
  if (task.cancelled) return null;
  if (drawing === task) drawing = null;
  stage.replaceChildren(sheet);
  return passage ? highlight(textLayer.textContentItemsStr, textLayer.textDivs, passage) : { highlighted: 0 };
}

function cancelDrawing(task, render, textLayer) {
  task.cancelled = true;
  render.cancel();
  textLayer.cancel();
}

/** The page's box: the canvas at the screen's pixel density, and pdf.js's text layer over it. */
function pageSheet(viewport, scale) {
  const ratio = window.devicePixelRatio || 1;
  const canvas = el("canvas", { class: "pdf-canvas", "aria-hidden": "true" });
  canvas.width = Math.floor(viewport.width * ratio);
  canvas.height = Math.floor(viewport.height * ratio);
  const textLayerNode = el("div", { class: "textLayer" });
  const sheet = el("div", { class: "pdf-sheet" }, canvas, textLayerNode);
  sheet.style.width = `${Math.floor(viewport.width)}px`;
  sheet.style.height = `${Math.floor(viewport.height)}px`;
  sheet.style.setProperty("--total-scale-factor", `${scale}`);
  return { sheet, canvas, textLayerNode };
}

/** Letters and digits only, lower case: how text is compared with the page's. */
function words(text) {
  return text.toLowerCase().match(/[\p{L}\p{N}]+/gu) || [];
}

/**
 * Highlights `passage` in the text layer's spans (`texts[i]` is the text of `spans[i]`): the exact run of
 * words if the page has it, else the lines sharing most of its words.
 */
function highlight(texts, spans, passage) {
  const wanted = words(passage);
  if (!wanted.length) return { highlighted: 0, exact: false };
  const exact = exactRun(texts, wanted);
  if (exact) {
    markWords(spans, texts, exact);
    return { highlighted: exact.spanCount, exact: true };
  }
  const closest = closestSpans(texts, wanted);
  for (const i of closest) spans[i].classList.add("cited-span");
  return { highlighted: closest.length, exact: false };
}

/** Every word of the page with the span it is in and where: `{span, start, end}` (UTF-16 offsets). */
function pageWords(texts) {
  const found = [];
  texts.forEach((text, span) => {
    for (const m of text.matchAll(/[\p{L}\p{N}]+/gu)) {
      found.push({ word: m[0].toLowerCase(), span, start: m.index, end: m.index + m[0].length });
    }
  });
  return found;
}

/** Where the page has the passage's words in a row: `{first, last, spanCount}` (the page's words), or null. */
function exactRun(texts, wanted) {
  const page = pageWords(texts);
  for (let i = 0; i + wanted.length <= page.length; i += 1) {
    let j = 0;
    while (j < wanted.length && page[i + j].word === wanted[j]) j += 1;
    if (j === wanted.length) {
      const first = page[i];
      const last = page[i + wanted.length - 1];
      return { first, last, spanCount: last.span - first.span + 1 };
    }
  }
  return null;
}

/** Wraps the words from `run.first` to `run.last` in highlight elements, span by span. */
function markWords(spans, texts, { first, last }) {
  for (let i = first.span; i <= last.span; i += 1) {
    const text = texts[i];
    const from = i === first.span ? first.start : 0;
    const to = i === last.span ? last.end : text.length;
    spans[i].replaceChildren(
      text.slice(0, from),
      el("mark", { class: "cited-span" }, text.slice(from, to)),
      text.slice(to),
    );
  }
}

/**
 * The spans of the lines closest to the passage: the run of lines as many as the passage needs that
 * shares most of its words, keeping the lines of the run mostly made of them.
 */
function closestSpans(texts, wanted) {
  const vocabulary = new Set(wanted);
  const shares = texts.map((text) => {
    const list = words(text);
    const shared = list.filter((w) => vocabulary.has(w)).length;
    return { shared, share: list.length ? shared / list.length : 0 };
  });
  const length = Math.max(1, linesNeeded(texts, wanted.length));
  let best = { score: 0, from: 0 };
  for (let from = 0; from < texts.length; from += 1) {
    let score = 0;
    for (let i = from; i < Math.min(texts.length, from + length); i += 1) score += shares[i].shared;
    if (score > best.score) best = { score, from };
  }
  if (!best.score) return [];
  const run = [];
  for (let i = best.from; i < Math.min(texts.length, best.from + length); i += 1) {
    if (shares[i].share >= LINE_MATCH_SHARE) run.push(i);
  }
  return run;
}

/** How many of the page's lines a passage of `count` words takes, at the page's words per line. */
function linesNeeded(texts, count) {
  const lines = texts.filter((t) => t.trim()).length || 1;
  const perLine = Math.max(1, pageWordCount(texts) / lines);
  return Math.ceil(count / perLine);
}

function pageWordCount(texts) {
  return texts.reduce((sum, t) => sum + words(t).length, 0);
}
