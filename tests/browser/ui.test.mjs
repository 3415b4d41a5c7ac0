// docqa's page in headless Chromium against a running `docqa serve` with the real models: sign-in, upload
// and ingestion, duplicate uploads, the failure messages, the question's length limit, a streamed answer
// with its route badge and its sources numbered as read, the highlighted passage and the page indicator in
// the document view, a PDF's original page with the cited passage highlighted, folded long answers,
// history over any selection, follow-up questions, renaming, a phone-sized window in light and dark, and
// deletion.
//
// Run by the service's end-to-end tests (services/tests/e2e/web_ui.rs), which start the server and pass:
// DOCQA_BASE_URL, DOCQA_API_KEY, DOCQA_DOCUMENT (a text file to upload), DOCQA_QUESTION (about it),
// DOCQA_PAGED_DOCUMENT (a text file of several pages, split by form feeds), DOCQA_PAGED_QUESTION (about
// that one), DOCQA_PDF_DOCUMENT (a PDF of many pages), DOCQA_SCREENSHOTS (a folder for the screenshots)
// and optionally DOCQA_CHROMIUM (the browser).

import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { mkdirSync } from "node:fs";
import { basename, join } from "node:path";
import { chromium } from "playwright-core";

const env = (name) => {
  const v = process.env[name];
  if (!v) throw new Error(`${name} is not set`);
  return v;
};
const base = env("DOCQA_BASE_URL");
const apiKey = env("DOCQA_API_KEY");
const documentPath = env("DOCQA_DOCUMENT");
const question = env("DOCQA_QUESTION");
const pagedPath = env("DOCQA_PAGED_DOCUMENT");
const pagedQuestion = env("DOCQA_PAGED_QUESTION");
const pdfPath = env("DOCQA_PDF_DOCUMENT");
const shots = env("DOCQA_SCREENSHOTS");
const title = basename(documentPath).replace(/\.txt$/, "");
const pagedName = basename(pagedPath);
const pagedTitle = pagedName.replace(/\.txt$/, "");
const LONG = 240_000;
const auth = { Authorization: `Bearer ${apiKey}` };
const number = (n) => n.toLocaleString("en-US");

let browser;
let page;
const pageErrors = [];

before(async () => {
  mkdirSync(shots, { recursive: true });
  browser = await chromium.launch({ executablePath: process.env.DOCQA_CHROMIUM || "/usr/bin/chromium" });
  const context = await browser.newContext({ viewport: { width: 1366, height: 900 }, colorScheme: "light" });
  page = await context.newPage();
  page.setDefaultTimeout(30_000);
  page.on("pageerror", (e) => pageErrors.push(e.message));
  page.on("console", (m) => m.type() === "error" && pageErrors.push(m.text()));
});

after(async () => {
  await browser?.close();
});

/** Saves a screenshot: the whole page, or only the window (for a dialog over it). */
async function shot(name, { fullPage = true } = {}) {
  await page.screenshot({ path: join(shots, `${name}.png`), fullPage });
}

/** The part of `selector` inside the viewport, as a fraction of its area. */
async function visibleFraction(selector) {
  return page.locator(selector).first().evaluate((node) => {
    const r = node.getBoundingClientRect();
    const w = Math.max(0, Math.min(r.right, innerWidth) - Math.max(r.left, 0));
    const h = Math.max(0, Math.min(r.bottom, innerHeight) - Math.max(r.top, 0));
    return r.width * r.height > 0 ? (w * h) / (r.width * r.height) : 0;
  });
}

/** A call to the API as this test's tenant; resolves to the parsed body (null for 204). */
async function api(method, path) {
  const res = await fetch(`${base}${path}`, { method, headers: auth });
  assert.ok(res.ok, `${method} ${path}: HTTP ${res.status}`);
  return res.status === 204 ? null : res.json();
}

async function documentsNamed(fileName) {
  const list = await api("GET", "/v1/documents?limit=500");
  return list.documents.filter((d) => d.file_name === fileName);
}

/** The library's rows of the documents uploaded as `fileName` (their titles may have changed). */
function rowsOfFile(fileName) {
  const exactly = new RegExp(`^${fileName.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")}$`);
  return page.locator("#documents tbody tr", { has: page.locator(".file-name", { hasText: exactly }) });
}

/** The answer's markers as shown, its cited sources and the uncited ones. */
async function citationsShown() {
  return page.evaluate(() => ({
    markers: [...document.querySelectorAll("#answer-text .cite-marker")].map((m) => m.textContent),
    cited: [...document.querySelectorAll("#citations li")].map((li) => ({
      value: li.value,
      quote: li.querySelector(".quote").textContent,
    })),
    uncited: [...document.querySelectorAll("#uncited li .quote")].map((q) => q.textContent),
    rawMarkers: /\[\d+(?:\s*[-,;]\s*\d+)*\]/.test(document.getElementById("answer-text").textContent),
  }));
}

/** The distinct numbers of `markers` in order of first appearance. */
function firstMentions(markers) {
  return [...new Set(markers.map(Number))];
}

const oneToN = (n) => Array.from({ length: n }, (_, i) => i + 1);

async function noHorizontalOverflow() {
  const { scroll, width } = await page.evaluate(() => ({
    scroll: document.documentElement.scrollWidth,
    width: innerWidth,
  }));
  assert.ok(scroll <= width + 1, `the page is ${scroll}px wide in a ${width}px window`);
}

test("a wrong API key is refused with a clear message", async () => {
  await page.goto(base);
  await page.locator("#sign-in").waitFor();
  await shot("01-sign-in");
  await page.getByLabel("API key").fill("dq_this-key-does-not-exist");
  await page.getByRole("button", { name: "Sign in", exact: true }).click();
  const error = page.locator("#sign-in-error");
  await error.waitFor();
  assert.match(await error.textContent(), /not accepted/);
  await shot("02-wrong-key");
});

test("a valid API key opens the library and is remembered across reloads", async () => {
  await page.getByLabel("API key").fill(apiKey);
  await page.getByRole("button", { name: "Sign in", exact: true }).click();
  await page.locator("#app").waitFor();
  assert.match(await page.locator("#account-status").textContent(), /Signed in/);
  await page.reload();
  await page.locator("#app").waitFor();
  assert.equal(await page.locator("#sign-in").isVisible(), false);
});

test("every form control has a label", async () => {
  const unlabelled = await page.evaluate(() =>
    [...document.querySelectorAll("input, select, textarea, button")]
      .filter((c) => !(c.labels?.length || c.getAttribute("aria-label") || c.textContent.trim()))
      .map((c) => c.id || c.outerHTML.slice(0, 60)),
  );
  assert.deepEqual(unlabelled, []);
});

test("uploaded documents are followed until ready; each row shows its title and its file name", async () => {
  await page.locator("#file-input").setInputFiles([documentPath, pagedPath]);
  const names = [basename(documentPath), pagedName];
  await Promise.all(
    names.map((name) => page.locator(".job", { hasText: name }).locator(".status.succeeded").waitFor({ timeout: LONG })),
  );
  for (const [name, shown] of [[basename(documentPath), title], [pagedName, pagedTitle]]) {
    const row = rowsOfFile(name);
    await row.locator(".status.ready").waitFor({ timeout: LONG });
    assert.equal((await row.locator(".doc-title").textContent()).trim(), shown);
    assert.ok(await row.locator(".file-name").isVisible(), `${name} is shown, not only a tooltip`);
  }
  await shot("03-library");
});

test("the same file uploaded again asks first: keep the existing document, or add it anyway", async () => {
  const file = {
    name: "Duplicate check.txt",
    mimeType: "text/plain",
    buffer: Buffer.from("The duplicate check is a short note. It is uploaded three times by the browser test.\n"),
  };
  await page.locator("#file-input").setInputFiles(file);
  const rows = rowsOfFile(file.name);
  await rows.locator(".status.ready").waitFor({ timeout: LONG });
  const [original] = await documentsNamed(file.name);
  const dialog = page.locator("#duplicate");

  await page.locator("#file-input").setInputFiles(file);
  await dialog.waitFor();
  assert.match(
    await page.locator("#duplicate-list").textContent(),
    /“Duplicate check\.txt” is the same file as “Duplicate check”/,
  );
  await shot("03b-duplicate", { fullPage: false });
  await page.getByRole("button", { name: "Keep the existing one" }).click();
  await dialog.waitFor({ state: "hidden" });
  await page.waitForFunction(
    (id) => document.querySelector(`#documents tr[data-id="${id}"] input[type=checkbox]`)?.checked,
    original.id,
  );
  assert.match(await page.locator("#scope-summary").textContent(), /Duplicate check/);
  assert.equal((await documentsNamed(file.name)).length, 1, "nothing was stored");
  assert.equal(await rows.count(), 1);

  await page.locator("#file-input").setInputFiles(file);
  await dialog.waitFor();
  await page.getByRole("button", { name: "Add anyway" }).click();
  await rows.nth(1).waitFor({ timeout: LONG });
  const copies = await documentsNamed(file.name);
  assert.equal(copies.length, 2, "the copy was stored");
  for (const copy of copies) await api("DELETE", `/v1/documents/${copy.id}`);
  await page.reload();
  await page.locator("#app").waitFor();
  await rowsOfFile(pagedName).waitFor();
  assert.equal(await rows.count(), 0);
});

test("an unsupported file type shows the server's reason", async () => {
  const png = Buffer.from("89504e470d0a1a0a0000000d49484452", "hex");
  await page.locator("#file-input").setInputFiles({ name: "photo.png", mimeType: "image/png", buffer: png });
  const error = page.locator("#upload-error");
  await error.waitFor();
  const text = await error.textContent();
  assert.match(text, /Upload refused/);
  assert.match(text, /type|format|supported/i);
  await shot("04-unsupported-type");
});

test("a file that cannot be parsed gets a failed job row with the reason", async () => {
  const broken = Buffer.from("%PDF-1.7\nthis is not really a PDF\n%%EOF\n");
  await page.locator("#file-input").setInputFiles({ name: "broken.pdf", mimeType: "application/pdf", buffer: broken });
  const row = page.locator(".job", { hasText: "broken.pdf" });
  await row.locator(".status.failed").waitFor({ timeout: LONG });
  const reason = (await row.locator(".reason").textContent()).trim();
  assert.ok(reason.length > 10, `a reason is shown: "${reason}"`);
  await shot("05-failed-job");
});

test("an upload over the size limit is refused with the limit named", async () => {
  const info = await (await fetch(`${base}/v1/info`)).json();
  const big = Buffer.alloc(info.max_upload_bytes + 1, "a");
  await page.locator("#file-input").setInputFiles({ name: "huge.txt", mimeType: "text/plain", buffer: big });
  const error = page.locator("#upload-error");
  await page.waitForFunction(() => /upload limit/.test(document.getElementById("upload-error").textContent));
  assert.match(await error.textContent(), /over this server's upload limit/);
  await shot("05-too-large");
});

test("a question over the server's limit is counted, not cut, and cannot be sent", async () => {
  const info = await (await fetch(`${base}/v1/info`)).json();
  const limit = info.max_question_chars ?? 4000;
  const box = page.getByLabel("Question");
  const counter = page.locator("#question-count");
  const askButton = page.getByRole("button", { name: "Ask", exact: true });
  await box.fill("x".repeat(1234));
  assert.equal(await counter.textContent(), `1,234 / ${number(limit)} characters`);
  assert.equal(await askButton.isDisabled(), false);

  await box.fill("x".repeat(limit + 1));
  assert.equal(await counter.textContent(), `${number(limit + 1)} / ${number(limit)} characters · 1 over`);
  assert.equal(await askButton.isDisabled(), true);
  const message = page.locator("#question-limit");
  assert.ok(await message.isVisible());
  assert.match(await message.textContent(), new RegExp(`at most ${number(limit)} characters`));

  const pasted = "The contract renews each year unless either party gives notice three months ahead. ";
  await box.fill(`${pasted.repeat(200).slice(0, 10_999)}…`);
  assert.equal((await box.inputValue()).length, 11_000, "the question is not cut");
  assert.match(await counter.textContent(), new RegExp(`· ${number(11_000 - limit)} over$`));
  let asked = 0;
  const countAsks = (r) => r.url().endsWith("/v1/ask") && (asked += 1);
  page.on("request", countAsks);
  await box.press("Control+Enter");
  await page.waitForTimeout(300);
  page.off("request", countAsks);
  assert.equal(asked, 0, "Ctrl+Enter does not send a question over the limit");
  await shot("05b-question-too-long");

  await box.fill("");
  assert.equal(await askButton.isDisabled(), false);
  assert.equal(await message.isVisible(), false);
});

test("a question streams its answer, then shows the route badge, timings and its sources numbered as read", async () => {
  await rowsOfFile(basename(documentPath)).getByRole("checkbox").check();
  await page.getByLabel("Question").fill(question);
  const selected = await page.$$eval("#documents tr[data-id]", (rows) =>
    rows.filter((r) => r.querySelector("input[type=checkbox]")?.checked).map((r) => r.dataset.id),
  );
  const [doc] = await documentsNamed(basename(documentPath));
  assert.ok(selected.includes(doc.id));
  const sent = page.waitForRequest((r) => r.url().endsWith("/v1/ask"));
  await page.getByRole("button", { name: "Ask", exact: true }).click();
  const routingKey = (await sent).headers()["x-docqa-affinity"];
  assert.equal(routingKey, selected.sort().join(","), "the scope's routing key for a load balancer");
  // Text appears while the answer is still being generated.
  await page.waitForFunction(
    () => {
      const t = document.getElementById("answer-text");
      return t.classList.contains("streaming") && t.textContent.trim().length > 0;
    },
    null,
    { timeout: LONG },
  );
  const badge = page.locator("#route-badge");
  await badge.waitFor({ timeout: LONG });
  assert.match(await badge.textContent(), /^(RAG|Long context)$/);
  assert.match(await page.locator("#route-reason").textContent(), /^Why: .+/);
  assert.match(await page.locator("#answer-stats").textContent(), /first token .* total .* prompt tokens/);
  assert.ok((await page.locator("#answer-text").textContent()).trim().length > 0);
  const shown = await citationsShown();
  console.log(`the answer's markers: [${shown.markers}]; ${shown.cited.length} cited, ${shown.uncited.length} not`);
  assert.ok(shown.cited.length + shown.uncited.length >= 1, "at least one source");
  assert.deepEqual(firstMentions(shown.markers), oneToN(shown.cited.length), "markers are 1..n as first cited");
  assert.deepEqual(shown.cited.map((c) => c.value), oneToN(shown.cited.length));
  await shot("06-answer");
});

test("clicking a citation opens the document with the passage highlighted in view", async () => {
  const first = page.locator("#answer .citations li").first();
  const quote = (await first.locator(".quote").textContent()).trim();
  await first.getByRole("button").click();
  const mark = page.locator("#viewer mark.cited");
  await mark.waitFor();
  const marked = (await mark.textContent()).trim();
  assert.ok(marked.length > 0);
  assert.ok(quote.includes(marked) || marked.includes(quote.slice(0, 40)), `"${marked}" vs "${quote}"`);
  assert.ok((await visibleFraction("#viewer mark.cited")) > 0.5, "the passage is scrolled into view");
  await shot("07-document-view", { fullPage: false });
  await page.keyboard.press("Escape");
  await page.locator("#viewer").waitFor({ state: "hidden" });
});

/**
 * An answer as /v1/ask streams it, naming the prompt's sources 24, 18 and 8 in that order (11 is marked
 * cited but named nowhere in the text; 3 and 5 were matched to it), with twenty more lines; `final`
 * false leaves out the closing answer event.
 */
async function scriptedAnswer(documentId, final) {
  const text = (await api("GET", `/v1/documents/${documentId}/text`)).text;
  const codePoints = (upTo) => [...text.slice(0, upTo)].length;
  // The sentence after offset `near`, quoted from a span around it (offsets in code points).
  const cite = (source, near, inText) => {
    const start = text.indexOf(". ", near) + 2;
    const end = text.indexOf(". ", start) + 1;
    return {
      source,
      document_id: documentId,
      title,
      chunk_id: source,
      page_start: 1,
      page_end: 1,
      char_start: codePoints(start - 80),
      char_end: codePoints(end + 80),
      snippet: text.slice(start - 80, start + 160),
      quote: text.slice(start, end),
      cited_in_text: inText,
    };
  };
  const lines = Array.from({ length: 20 }, (_, i) => `Line ${i + 1} of a long answer about the Normans [8].`);
  const tokens = ["The Normans came", " from Normandy [2", "4][18], in", " France [8, 24].", `\n${lines.join("\n")}`];
  const answer = {
    answer_id: "scripted",
    question: "Where did the Normans come from?",
    answer: tokens.join(""),
    answerable: true,
    route: "rag",
    route_reasons: ["a scripted answer"],
    citations: [cite(3, 9000, false), cite(24, 1000, true), cite(8, 5000, true), cite(18, 3000, true),
      cite(11, 7000, true), cite(5, 11000, false)],
    passages: [],
    finish_reason: "stop",
    timings: { first_token_ms: 900, total_ms: 2100 },
    usage: { prompt_tokens: 980, cached_prompt_tokens: 0, completion_tokens: 240 },
  };
  const frames = tokens.map((t) => `event: token\ndata: ${JSON.stringify({ text: t })}\n\n`);
  if (final) frames.push(`event: answer\ndata: ${JSON.stringify(answer)}\n\n`);
  return { body: frames.join(""), answer };
}

test("sources are renumbered 1…n as the answer cites them; uncited ones are listed apart", async () => {
  const [doc] = await documentsNamed(basename(documentPath));
  const isAsk = (url) => url.pathname === "/v1/ask";
  const ask = async (final) => {
    const scripted = await scriptedAnswer(doc.id, final);
    await page.unroute(isAsk);
    await page.route(isAsk, (route) =>
      route.fulfill({ status: 200, headers: { "content-type": "text/event-stream" }, body: scripted.body }),
    );
    await page.getByLabel("Question").fill(scripted.answer.question);
    await page.getByRole("button", { name: "Ask", exact: true }).click();
    return scripted.answer;
  };

  // While streaming (a stream cut before its answer event keeps what was streamed), markers are already
  // numbered as read, before their sources are known.
  await ask(false);
  await page.locator("#ask-error", { hasText: "ended early" }).waitFor();
  const streamed = await page.locator("#answer-text .cite-marker.pending").allTextContents();
  assert.deepEqual(streamed.slice(0, 4), ["1", "2", "3", "1"]);
  assert.equal((await citationsShown()).rawMarkers, false);

  const answer = await ask(true);
  await page.locator("#route-badge").waitFor();
  const shown = await citationsShown();
  assert.deepEqual(shown.markers.slice(0, 4), ["1", "2", "3", "1"]);
  assert.deepEqual(firstMentions(shown.markers), [1, 2, 3]);
  const quoteOf = (n) => answer.citations.find((c) => c.source === n).quote;
  assert.deepEqual(shown.cited, [24, 18, 8].map((n, i) => ({ value: i + 1, quote: quoteOf(n) })));
  assert.deepEqual(shown.uncited, [3, 11, 5].map(quoteOf));
  const heading = page.locator("#uncited-title");
  assert.equal(await heading.textContent(), "Also retrieved, not cited");
  const citedBox = await page.locator("#citations").boundingBox();
  const headingBox = await heading.boundingBox();
  assert.ok(headingBox.y >= citedBox.y + citedBox.height, "the uncited sources come after the cited ones");
  assert.equal(await page.locator("#citations #uncited-title, #citations #uncited").count(), 0);

  // Adjacent markers stay apart: "¹,²", never "12".
  const group = page.locator("#answer-text sup.cites").first();
  assert.equal(await group.textContent(), "1,2");
  const [one, two] = await group.locator(".cite-marker").evaluateAll((ms) =>
    ms.map((m) => m.getBoundingClientRect().toJSON()),
  );
  assert.ok(two.left - one.right >= 2, `markers ${two.left - one.right}px apart`);
  const word = await page.locator("#answer-text").evaluate((t) => {
    const range = document.createRange();
    range.setStart(t.firstChild, 0);
    range.setEnd(t.firstChild, 3);
    return range.getBoundingClientRect().toJSON();
  });
  assert.ok(one.top < word.top && one.bottom < word.bottom, "markers are superscripts");

  // The long answer is folded; its button opens and closes it from the keyboard.
  const toggle = page.locator("#answer-fold");
  const text = page.locator("#answer-text");
  assert.equal(await toggle.textContent(), "Show more");
  assert.equal(await toggle.getAttribute("aria-expanded"), "false");
  const folded = (await text.boundingBox()).height;
  assert.ok(folded < 12 * 22.5, `folded to ${folded}px`);
  await shot("06d-citations");
  await toggle.focus();
  await page.keyboard.press("Enter");
  assert.equal(await toggle.textContent(), "Show less");
  assert.equal(await toggle.getAttribute("aria-expanded"), "true");
  assert.ok((await text.boundingBox()).height > 20 * 22.5, "the whole answer is shown");
  await page.keyboard.press("Space");
  assert.equal(await toggle.textContent(), "Show more");

  // A marker opens the document at the passage it cites.
  await page.locator("#answer-text .cite-marker", { hasText: /^2$/ }).first().click();
  const mark = page.locator("#viewer mark.cited");
  await mark.waitFor();
  assert.equal((await mark.textContent()).trim(), quoteOf(18));
  await page.keyboard.press("Escape");
  await page.locator("#viewer").waitFor({ state: "hidden" });
  await page.unroute(isAsk);
});

test("the document view says which page is on screen as the reader scrolls", async () => {
  const [paged] = await documentsNamed(pagedName);
  const pages = paged.page_count;
  assert.ok(pages >= 5, `${pagedName} has ${pages} pages`);
  await rowsOfFile(pagedName).locator(".doc-title").click();
  const indicator = page.locator("#viewer-page");
  await indicator.waitFor();
  assert.equal(await indicator.textContent(), `Page 1 of ${pages}`);
  const says = (want) =>
    page.waitForFunction((w) => document.getElementById("viewer-page").textContent === w, want);
  await page.locator("#viewer #page-3").evaluate((label) => label.scrollIntoView({ block: "start" }));
  await says(`Page 3 of ${pages}`);
  await shot("07b-page-indicator", { fullPage: false });
  await page.locator("#viewer-body").evaluate((body) => body.scrollTo(0, body.scrollHeight));
  await says(`Page ${pages} of ${pages}`);
  await page.keyboard.press("Escape");
  await page.locator("#viewer").waitFor({ state: "hidden" });
  // A document of one page has no indicator.
  await rowsOfFile(basename(documentPath)).locator(".doc-title").click();
  await page.locator("#viewer-meta", { hasText: "1 page" }).waitFor();
  assert.equal(await indicator.isVisible(), false);
  await page.keyboard.press("Escape");
  await page.locator("#viewer").waitFor({ state: "hidden" });
});

/** The words of `text` as the page view compares them: letters and digits, lower case. */
const wordsOf = (text) => text.toLowerCase().match(/[\p{L}\p{N}]+/gu) || [];

/** A scripted answer citing `quote` on page `pageNumber` of a document (offsets in code points). */
function answerCiting(doc, text, pageStarts, pageNumber, quote) {
  const at = text.indexOf(quote, pageStarts[pageNumber - 1]);
  const citation = {
    source: 1,
    document_id: doc.id,
    title: doc.title,
    chunk_id: 1,
    page_start: pageNumber,
    page_end: pageNumber,
    char_start: Math.max(pageStarts[pageNumber - 1], at - 60),
    char_end: Math.min(pageStarts[pageNumber] ?? text.length, at + quote.length + 60),
    snippet: quote,
    quote,
    cited_in_text: true,
  };
  const answer = {
    answer_id: "scripted-pdf",
    question: `What does page ${pageNumber} say?`,
    answer: "The page says so [1].",
    answerable: true,
    route: "rag",
    route_reasons: ["a scripted answer"],
    citations: [citation],
    passages: [],
    finish_reason: "stop",
    timings: { first_token_ms: 500, total_ms: 900 },
    usage: { prompt_tokens: 400, cached_prompt_tokens: 0, completion_tokens: 12 },
  };
  return { answer, body: `event: answer\ndata: ${JSON.stringify(answer)}\n\n` };
}

/** What the page view shows: the page canvases, the ink on the page, each highlight and the ink under it. */
async function pageViewShown() {
  return page.evaluate(() => {
    const canvases = document.querySelectorAll("#pdf-stage canvas");
    const canvas = canvases[0];
    const context = canvas.getContext("2d");
    const box = canvas.getBoundingClientRect();
    const ink = (x, y, w, h) => {
      const { data } = context.getImageData(x, y, Math.max(1, w), Math.max(1, h));
      let dark = 0;
      for (let i = 0; i < data.length; i += 4) if (data[i + 3] > 0 && data[i] < 128) dark += 1;
      return dark;
    };
    const sx = canvas.width / box.width;
    const sy = canvas.height / box.height;
    const marks = [...document.querySelectorAll("#pdf-stage .cited-span")].map((m) => {
      const r = m.getBoundingClientRect();
      return {
        text: m.textContent,
        inside: r.left >= box.left - 1 && r.right <= box.right + 1 && r.top >= box.top - 1 && r.bottom <= box.bottom + 1,
        ink: ink(Math.floor((r.left - box.left) * sx), Math.floor((r.top - box.top) * sy),
          Math.ceil(r.width * sx), Math.ceil(r.height * sy)),
      };
    });
    return {
      canvases: canvases.length,
      ink: ink(0, 0, canvas.width, canvas.height),
      marks,
      sheetRight: document.querySelector("#pdf-stage .pdf-sheet").getBoundingClientRect().right,
      width: innerWidth,
    };
  });
}

test("a PDF's page view draws the cited page of the original with the passage highlighted on it", async () => {
  const pdfName = basename(pdfPath);
  await page.locator("#file-input").setInputFiles(pdfPath);
  await rowsOfFile(pdfName).locator(".status.ready").waitFor({ timeout: LONG });
  const [doc] = await documentsNamed(pdfName);
  const { text, page_starts: pageStarts } = await api("GET", `/v1/documents/${doc.id}/text`);
  assert.equal(doc.page_count, 160);
  // A sentence of page 3, spread over two lines of the page.
  const citedPage = 3;
  const pageText = text.slice(pageStarts[citedPage - 1], pageStarts[citedPage]);
  const from = pageText.indexOf(". ", 200) + 2;
  const quote = pageText.slice(from, pageText.indexOf(". ", from + 100) + 1);
  assert.ok(quote.length > 100, `a long sentence: "${quote}"`);
  const scripted = answerCiting(doc, text, pageStarts, citedPage, quote);
  const isAsk = (url) => url.pathname === "/v1/ask";
  await page.route(isAsk, (route) =>
    route.fulfill({ status: 200, headers: { "content-type": "text/event-stream" }, body: scripted.body }),
  );
  let originals = 0;
  const countOriginals = (r) => r.url().endsWith(`/v1/documents/${doc.id}/original`) && (originals += 1);
  page.on("request", countOriginals);

  await page.getByLabel("Question").fill(scripted.answer.question);
  await page.getByRole("button", { name: "Ask", exact: true }).click();
  await page.locator("#citations li").first().getByRole("button").click();
  await page.locator("#viewer mark.cited").waitFor();
  const pageButton = page.getByRole("button", { name: "Page", exact: true });
  assert.equal(await pageButton.getAttribute("aria-pressed"), "false", "the text view comes first");
  const opened = Date.now();
  await pageButton.click();
  await page.locator("#pdf-stage .cited-span").first().waitFor({ timeout: LONG });
  console.log(`the cited page of the 160-page PDF was drawn ${Date.now() - opened} ms after Page was chosen`);
  assert.equal(await pageButton.getAttribute("aria-pressed"), "true");
  assert.equal(await page.locator("#viewer-page").textContent(), `Page ${citedPage} of 160`);
  assert.equal(await page.locator("#viewer-body").isVisible(), false);

  const shown = await pageViewShown();
  assert.equal(shown.canvases, 1, "only the page shown is drawn");
  assert.ok(shown.ink > 2000, `the page is drawn (${shown.ink} dark pixels)`);
  assert.deepEqual(wordsOf(shown.marks.map((m) => m.text).join(" ")), wordsOf(quote), "the quote is highlighted");
  assert.ok(shown.marks.length >= 2, "the quote's two lines are highlighted");
  for (const mark of shown.marks) {
    assert.ok(mark.inside, "the highlight is on the page");
    assert.ok(mark.ink > 20, `the highlight lies over the quote's printed text ("${mark.text}": ${mark.ink} dark pixels)`);
  }
  assert.equal(await page.locator("#pdf-status").textContent(), "The cited passage is highlighted.");
  await shot("11-pdf-page", { fullPage: false });

  // The next and previous pages, by button and by arrow key; each page drawn alone, the PDF loaded once.
  const turned = Date.now();
  await page.getByRole("button", { name: "Next page" }).click();
  await page.locator("#viewer-page", { hasText: `Page ${citedPage + 1} of 160` }).waitFor();
  await page.locator("#pdf-status", { hasText: `The cited passage is on page ${citedPage}.` }).waitFor();
  console.log(`the next page was drawn in ${Date.now() - turned} ms`);
  const next = await pageViewShown();
  assert.equal(next.canvases, 1);
  assert.ok(next.ink > 2000, "the next page is drawn");
  assert.equal(next.marks.length, 0, "no highlight on a page the passage is not on");
  await page.locator("#pdf-stage").press("ArrowLeft");
  await page.locator("#viewer-page", { hasText: `Page ${citedPage} of 160` }).waitFor();
  await page.locator("#pdf-stage .cited-span").first().waitFor();
  for (let i = 0; i < 2; i += 1) await page.getByRole("button", { name: "Previous page" }).click();
  await page.locator("#viewer-page", { hasText: "Page 1 of 160" }).waitFor();
  assert.equal(await page.getByRole("button", { name: "Previous page" }).isDisabled(), true);

  // Back to the text, and the page view again: the PDF is not downloaded again.
  await page.getByRole("button", { name: "Text", exact: true }).click();
  assert.ok(await page.locator("#viewer-body").isVisible());
  assert.equal(await page.locator("#viewer-pdf").isVisible(), false);
  await pageButton.click();
  await page.locator("#pdf-stage canvas").waitFor();
  assert.equal(originals, 1, "the PDF was downloaded once");
  await page.keyboard.press("Escape");
  await page.locator("#viewer").waitFor({ state: "hidden" });

  // On a phone the page fits the screen; the page view, chosen last, opens at once.
  await page.setViewportSize({ width: 390, height: 844 });
  await page.locator("#citations li").first().getByRole("button").click();
  await page.locator("#pdf-stage .cited-span").first().waitFor();
  const phone = await pageViewShown();
  assert.ok(phone.sheetRight <= phone.width, `the page is ${phone.sheetRight}px wide in a ${phone.width}px window`);
  assert.ok(phone.marks.every((m) => m.ink > 10), "the highlight lies over the quote on a phone too");
  await shot("11b-pdf-page-phone", { fullPage: false });
  await page.keyboard.press("Escape");
  await page.locator("#viewer").waitFor({ state: "hidden" });
  await page.setViewportSize({ width: 1366, height: 900 });
  assert.equal(originals, 1, "the PDF was downloaded once");
  page.off("request", countOriginals);
  await page.unroute(isAsk);
});

test("the history lists the question with the document it was about and shows its answer again", async () => {
  const item = page.locator("#history li", { hasText: question });
  await item.waitFor();
  assert.equal(await item.locator(".about").textContent(), `About “${title}”`);
  assert.equal(await page.locator("#history-scope").textContent(), `Questions about “${title}”.`);
  await item.getByRole("button", { name: question, exact: true }).click();
  await page.locator("#route-badge").waitFor();
  assert.equal(await page.locator("#answer-text").textContent(), await item.locator(".a").textContent());
});

test("with two documents selected the history shows the answers about either, each naming its document", async () => {
  const first = rowsOfFile(basename(documentPath)).getByRole("checkbox");
  const second = rowsOfFile(pagedName).getByRole("checkbox");
  await first.uncheck();
  await second.check();
  await page.getByLabel("Question").fill(pagedQuestion);
  await page.getByRole("button", { name: "Ask", exact: true }).click();
  await page.locator("#history li", { hasText: pagedQuestion }).waitFor({ timeout: LONG });
  await page.getByRole("button", { name: "Ask", exact: true }).waitFor({ timeout: LONG });
  assert.equal(await page.locator("#history li", { hasText: question }).count(), 0, "only the selected one's");

  await first.check();
  const aboutFirst = page.locator("#history li", { hasText: question });
  const aboutSecond = page.locator("#history li", { hasText: pagedQuestion });
  await aboutFirst.waitFor();
  await aboutSecond.waitFor();
  assert.equal(await aboutFirst.locator(".about").textContent(), `About “${title}”`);
  assert.equal(await aboutSecond.locator(".about").textContent(), `About “${pagedTitle}”`);
  assert.equal(await page.locator("#history-scope").textContent(), "Questions about any of the 2 selected documents.");
  await shot("10-history-two-documents");

  // With nothing selected, every answer of the tenant.
  await first.uncheck();
  await second.uncheck();
  await page.locator("#history-scope", { hasText: "any document" }).waitFor();
  await aboutFirst.waitFor();
  await aboutSecond.waitFor();
  await first.check();
});

test("a long answer is folded in the history too, and opens from the keyboard", async () => {
  await page.locator("#history-scope", { hasText: `“${title}”` }).waitFor();
  await page.locator("#history li", { hasText: question }).first().waitFor();
  const isHistory = (url) => url.pathname === "/v1/answers";
  const long = Array.from({ length: 30 }, (_, i) => `Sentence ${i + 1} of a long stored answer.`).join("\n");
  await page.route(isHistory, async (route) => {
    const response = await route.fetch();
    const body = await response.json();
    const stored = { ...body.answers[0], answer_id: "long-answer", question: "A question with a long answer" };
    body.answers.unshift({ ...stored, answer: long, status: "succeeded", citations: [] });
    await route.fulfill({ response, json: body });
  });
  const second = rowsOfFile(pagedName).getByRole("checkbox");
  await second.check();
  const item = page.locator('#history li[data-answer="long-answer"]');
  await item.waitFor();
  const height = () => item.locator(".a").evaluate((a) => a.getBoundingClientRect().height);
  const toggle = item.locator("button.fold");
  assert.equal(await toggle.textContent(), "Show more");
  assert.equal(await toggle.getAttribute("aria-expanded"), "false");
  assert.ok((await height()) < 12 * 22.5, "folded");
  await toggle.focus();
  await page.keyboard.press("Enter");
  await page.waitForFunction(
    () => document.querySelector('#history li[data-answer="long-answer"] button.fold')?.textContent === "Show less",
  );
  assert.equal(await toggle.getAttribute("aria-expanded"), "true");
  assert.ok((await height()) > 25 * 22.5, "unfolded");
  // The short answers of the list have nothing to fold.
  assert.equal(await page.locator("#history li", { hasText: question }).locator("button.fold").isVisible(), false);
  await page.unroute(isHistory);
  await second.uncheck();
  await item.waitFor({ state: "detached" });
});

test("a document is renamed in place, the title is kept across a reload, and a refused title says why", async () => {
  const [doc] = await documentsNamed(pagedName);
  const row = page.locator(`#documents tr[data-id="${doc.id}"]`);
  await row.getByRole("button", { name: `Rename ${pagedTitle}` }).click();
  const input = row.getByLabel(`New title for ${pagedTitle}`);
  assert.equal(await input.inputValue(), pagedTitle);
  await input.fill("   ");
  await row.getByRole("button", { name: "Save" }).click();
  const refusal = row.locator("form.rename .error");
  await refusal.waitFor();
  assert.match(await refusal.textContent(), /The title was not changed: .*title/);
  await input.press("Escape");
  assert.equal((await row.locator(".doc-title").textContent()).trim(), pagedTitle);

  const renamed = `${pagedTitle}: the region, its counties and cities, its economy and its people, as the ` +
    "encyclopaedia describes them, paragraph by paragraph, with a title long enough to wrap";
  await row.getByRole("button", { name: `Rename ${pagedTitle}` }).click();
  await input.fill(renamed);
  await input.press("Enter");
  await row.locator(".doc-title", { hasText: renamed }).waitFor();
  await page.reload();
  await page.locator("#app").waitFor();
  const titleButton = row.locator(".doc-title");
  await titleButton.waitFor();
  assert.equal((await titleButton.textContent()).trim(), renamed, "the new title is kept");
  assert.equal(await titleButton.getAttribute("title"), renamed, "the whole title is at hand");
  assert.equal((await row.locator(".file-name").textContent()).trim(), pagedName);
  assert.equal((await documentsNamed(pagedName))[0].title, renamed);
  await noHorizontalOverflow();
  await rowsOfFile(basename(documentPath)).getByRole("checkbox").check();
});

test("a stop while the model reads the prompt frees the engine at its next chunks and history says so", async () => {
  const docs = await (await fetch(`${base}/v1/documents`, { headers: auth })).json();
  const doc = docs.documents.find((d) => d.title === title);
  // Nothing of the document cached, so the whole prompt is read, chunk by chunk.
  await fetch(`${base}/v1/documents/${doc.id}/kv-cache`, { method: "DELETE", headers: auth });
  const stopped = `${question} Answer in one word.`;
  await page.getByLabel("Route").selectOption("long");
  await page.getByLabel("Question").fill(stopped);
  await page.getByRole("button", { name: "Ask", exact: true }).click();
  await page.waitForFunction(
    () => /^Reading [\d,]+ of [\d,]+ tokens/.test(document.getElementById("answer-stats").textContent),
    null,
    { timeout: LONG },
  );
  await shot("06b-reading-progress");
  // The engine must drop the answer at its next prompt chunks, not after the whole prompt: counted in
  // tokens the engine computed after Stop (at most three 256-token CPU chunks), so that a loaded machine
  // does not make the check flaky; the time is printed (BENCHMARKS.md records it on a quiet machine).
  const engine = async () => {
    const metrics = await (await fetch(`${base}/metrics`)).text();
    const value = (name) => Number(new RegExp(`^${name} (\\d+)`, "m").exec(metrics)[1]);
    return { running: value("docqa_engine_running_requests"), computed: value("docqa_engine_computed_tokens") };
  };
  const before = await engine();
  const clicked = Date.now();
  await page.getByRole("button", { name: "Stop", exact: true }).click();
  let now = before;
  while (now.running !== 0 && Date.now() - clicked < 60_000) now = await engine();
  const freed = Date.now() - clicked;
  const after = now.computed - before.computed;
  console.log(`the engine let the stopped answer go ${freed} ms and ${after} tokens after Stop`);
  assert.equal(now.running, 0, "the engine still runs the stopped answer");
  assert.ok(after <= 3 * 256, `the engine computed ${after} more tokens after Stop`);
  assert.match(await page.locator("#ask-error").textContent(), /Stopped/);
  const item = page.locator("#history li", { hasText: stopped });
  await item.locator(".a", { hasText: "Stopped before it was complete." }).waitFor();
  await shot("06c-stopped");
  await page.getByLabel("Route").selectOption("auto");
});

test("a phone-sized window, dark or light, keeps everything inside the screen", async () => {
  await page.locator("#history li", { hasText: question }).getByRole("button", { name: question, exact: true }).click();
  await page.locator("#route-badge").waitFor();
  await page.emulateMedia({ colorScheme: "dark" });
  await page.setViewportSize({ width: 390, height: 844 });
  await noHorizontalOverflow();
  const background = await page.evaluate(() => getComputedStyle(document.body).backgroundColor);
  assert.notEqual(background, "rgb(246, 247, 249)", "the dark palette is used");
  await shot("08-phone-dark");
  await page.emulateMedia({ colorScheme: "light" });
  await noHorizontalOverflow();
  await shot("08b-phone-light");
  await page.setViewportSize({ width: 1366, height: 900 });
  await page.emulateMedia({ colorScheme: "dark" });
  await noHorizontalOverflow();
  await shot("08c-desktop-dark");
  await page.emulateMedia({ colorScheme: "light" });
});

/** The history's entry for `asked` (and not for a question quoting it). */
const historyItem = (asked) =>
  page.locator("#history li").filter({ has: page.getByRole("button", { name: asked, exact: true }) });

/** Asks the follow-up in the question box; resolves to the `follow_up_of` it was sent with. */
async function askFollowUp(followUpQuestion) {
  await page.getByLabel("Question").fill(followUpQuestion);
  const sent = page.waitForRequest((r) => r.url().endsWith("/v1/ask"));
  await page.getByRole("button", { name: "Ask", exact: true }).click();
  const body = (await sent).postDataJSON();
  await historyItem(followUpQuestion).waitFor({ timeout: LONG });
  await page.getByRole("button", { name: "Ask", exact: true }).waitFor({ timeout: LONG });
  await page.locator("#follow-up-button").waitFor({ timeout: LONG });
  return body.follow_up_of;
}

const turnsShown = () => page.locator("#thread .turn-q").allTextContents();

test("a follow-up question continues the conversation: its thread is shown above the answer and in the history", async () => {
  const first = historyItem(question);
  const firstId = await first.getAttribute("data-answer");
  const note = page.locator("#follow-up");
  assert.equal(await note.isVisible(), false);

  // Started from the history, cancelled, started again from the answer with the keyboard.
  await first.getByRole("button", { name: `Follow up “${question}”` }).click();
  assert.equal(await page.locator("#follow-up-text").textContent(), `Follow-up of “${question}”`);
  assert.equal(await page.evaluate(() => document.activeElement.id), "question");
  await page.getByRole("button", { name: "Ask a new question instead" }).click();
  assert.equal(await note.isVisible(), false);
  await page.locator("#follow-up-button").focus();
  await page.keyboard.press("Enter");
  assert.ok(await note.isVisible());
  assert.equal(await page.locator("#follow-up-text").textContent(), `Follow-up of “${question}”`);

  const second = "And in which century did that happen?";
  await page.getByLabel("Question").fill(second);
  await shot("12-follow-up");
  assert.equal(await askFollowUp(second), firstId, "sent as a follow-up of the first answer");
  assert.equal(await note.isVisible(), false, "the next question is a fresh one unless asked otherwise");
  assert.deepEqual(await turnsShown(), [question], "the earlier turn stays above the answer");
  assert.equal(await page.locator("#answer-question").textContent(), second);
  assert.equal(
    await historyItem(second).locator(".follow-up-of").textContent(),
    `Follow-up of: “${question}”`,
  );
  const secondId = await historyItem(second).getAttribute("data-answer");

  // A follow-up of the follow-up continues the thread.
  await page.locator("#follow-up-button").click();
  assert.equal(await page.locator("#follow-up-text").textContent(), `Follow-up of “${second}”`);
  const third = "Who led them then?";
  assert.equal(await askFollowUp(third), secondId, "sent as a follow-up of the follow-up");
  assert.deepEqual(await turnsShown(), [question, second]);
  assert.equal(
    await historyItem(third).locator(".follow-up-of").textContent(),
    `Follow-up of: “${second}”`,
  );
  await shot("12b-follow-up-thread");

  // The history shows a follow-up below its conversation.
  await first.getByRole("button", { name: question, exact: true }).click();
  await page.waitForFunction(() => document.getElementById("thread").hidden);
  await historyItem(third).getByRole("button", { name: third, exact: true }).click();
  await page.waitForFunction(() => document.querySelectorAll("#thread .turn").length === 2);
  assert.deepEqual(await turnsShown(), [question, second]);

  // On a phone, the note and the thread fit the screen; Escape in the question box cancels.
  await page.locator("#follow-up-button").click();
  await page.setViewportSize({ width: 390, height: 844 });
  await noHorizontalOverflow();
  await shot("12c-follow-up-phone");
  await page.getByLabel("Question").press("Escape");
  assert.equal(await note.isVisible(), false);
  await page.setViewportSize({ width: 1366, height: 900 });

  // A follow-up of an answer still being written is refused; the follow-up is kept to ask again.
  const isAsk = (url) => url.pathname === "/v1/ask";
  await page.route(isAsk, (route) =>
    route.fulfill({
      status: 409,
      json: { error_type: "conflict", message: "the answer followed up is still running" },
    }),
  );
  await historyItem(third).getByRole("button", { name: `Follow up “${third}”` }).click();
  await page.getByLabel("Question").fill("And after that?");
  await page.getByRole("button", { name: "Ask", exact: true }).click();
  await page.locator("#ask-error", { hasText: "still being written" }).waitFor();
  assert.ok(await note.isVisible(), "still a follow-up");
  await page.unroute(isAsk);
  await page.getByRole("button", { name: "Ask a new question instead" }).click();
  await page.getByLabel("Question").fill("");
});

test("deleting a document asks for confirmation, then removes it", async () => {
  const rows = page.locator("#documents tbody tr");
  const before = await rows.count();
  const row = rows.filter({ hasText: title });
  await row.getByRole("button", { name: /^Delete/ }).click();
  const dialog = page.locator("#confirm");
  await dialog.waitFor();
  await shot("09-confirm-delete", { fullPage: false });
  await page.locator("#confirm-ok").click();
  await row.waitFor({ state: "detached" });
  assert.equal(await rows.count(), before - 1);
});

test("the page raised no script errors", () => {
  // The refused uploads log their HTTP status to the console; nothing else may.
  const unexpected = pageErrors.filter((e) => !/status of 4\d\d/.test(e));
  assert.deepEqual(unexpected, []);
});
