// Small display helpers shared by the page's parts: element building, numbers, sizes, dates, durations,
// the citation markers of an answer's text, and folding of long text.

/** `el("li", {class: "x", onclick: f}, child, "text")`: an element with attributes and children. */
export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else if (k === "class") node.className = v;
    else if (k === "dataset") Object.assign(node.dataset, v);
    else node.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat()) {
    if (c === undefined || c === null || c === false) continue;
    node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return node;
}

/** Shows `message` in an alert element, or hides it when empty. */
export function showError(node, message) {
  node.textContent = message || "";
  node.hidden = !message;
}

export function bytes(n) {
  if (n == null) return "";
  const units = ["B", "KB", "MB", "GB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) {
    n /= 1024;
    i += 1;
  }
  return `${n < 10 && i > 0 ? n.toFixed(1) : Math.round(n)} ${units[i]}`;
}

export function date(ms) {
  if (!ms) return "";
  return new Date(ms).toLocaleString(undefined, { dateStyle: "medium", timeStyle: "short" });
}

export function seconds(ms) {
  if (ms == null) return "";
  return ms < 1000 ? `${Math.round(ms)} ms` : `${(ms / 1000).toFixed(ms < 10000 ? 2 : 1)} s`;
}

export function docTitle(doc) {
  return doc.title || doc.file_name || doc.id;
}

/** A number as people read it here: `11,000`. */
export function count(n) {
  return n.toLocaleString("en-US");
}

/** Numbers in a marker's brackets: `3`, `1, 2`, `2-4` (a range of fewer than 20). */
const MARKER = /[ \t]*\[(\d+(?:\s*[-,;]\s*\d+)*)\]/g;

function markerNumbers(inside) {
  const numbers = [];
  for (const part of inside.split(/[,;]/)) {
    const [a, b] = part.split("-").map((x) => Number(x.trim()));
    const range = b === undefined ? [a] : b >= a && b - a < 20 ? spread(a, b) : [];
    for (const n of range) if (!numbers.includes(n)) numbers.push(n);
  }
  return numbers;
}

function spread(from, to) {
  return Array.from({ length: to - from + 1 }, (_, i) => from + i);
}

/**
 * An answer's text cut at its citation markers: strings, and `{raw, numbers}` for each marker (`[3]`,
 * `[1, 2]`, `[2-4]`) with the prompt's source numbers it names. The spaces before a marker go with it.
 */
export function markerSegments(text) {
  const segments = [];
  let last = 0;
  for (const m of text.matchAll(MARKER)) {
    segments.push(text.slice(last, m.index), { raw: m[0], numbers: markerNumbers(m[1]) });
    last = m.index + m[0].length;
  }
  segments.push(text.slice(last));
  return segments.filter((s) => s !== "");
}

/**
 * How the reader numbers the sources: the prompt numbers `known(n)` accepts, 1…n in the order the answer
 * first names them (a Map from prompt number to reading number).
 */
export function readingNumbers(segments, known = () => true) {
  const numbers = new Map();
  for (const s of segments) {
    if (typeof s === "string") continue;
    for (const n of s.numbers) if (known(n) && !numbers.has(n)) numbers.set(n, numbers.size + 1);
  }
  return numbers;
}

/** Text taller than this many lines is folded… */
const FOLD_ABOVE_LINES = 12;
/** …to this many, with a button to show the rest. */
const FOLDED_LINES = 8;

/**
 * Folds `content` when it is taller than FOLD_ABOVE_LINES lines; `toggle` (a button controlling it) then
 * reads "Show more" or "Show less". `expanded` is the state to start in; `onToggle(expanded)` hears changes.
 */
export function fold(content, toggle, { expanded = false, onToggle } = {}) {
  content.dataset.fold = expanded ? "expanded" : "folded";
  toggle.setAttribute("aria-controls", content.id);
  toggle.onclick = () => {
    const open = content.dataset.fold !== "expanded";
    content.dataset.fold = open ? "expanded" : "folded";
    showFold(content, toggle);
    onToggle?.(open);
  };
  content.foldToggle = toggle;
  showFold(content, toggle);
}

/** Shows `content` folded or not, as its state and its height (at the current width) say. */
function showFold(content, toggle) {
  content.classList.remove("folded");
  const line = parseFloat(getComputedStyle(content).lineHeight) || 22;
  const tall = content.scrollHeight > line * FOLD_ABOVE_LINES + 1;
  const expanded = content.dataset.fold === "expanded";
  toggle.hidden = !tall;
  toggle.textContent = expanded ? "Show less" : "Show more";
  toggle.setAttribute("aria-expanded", String(expanded || !tall));
  content.style.setProperty("--folded-height", `${line * FOLDED_LINES}px`);
  content.classList.toggle("folded", tall && !expanded);
}

/** Folds again what `fold` folded, at the window's new width. */
export function refold() {
  for (const content of document.querySelectorAll("[data-fold]")) {
    if (content.foldToggle) showFold(content, content.foldToggle);
  }
}

/** Removes a fold: `content` keeps its whole height and `toggle` is hidden. */
export function unfold(content, toggle) {
  delete content.dataset.fold;
  content.classList.remove("folded");
  toggle.hidden = true;
}
