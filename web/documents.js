// The document list: status, size, pages and date; title search and collection filter; selection as the
// question's scope; opening a document; deleting one after confirmation. It refreshes itself while any
// document is still being ingested.

import { call } from "./api.js";
import { bytes, date, docTitle, el, showError } from "./format.js";
import { emit, on, state } from "./state.js";
import { openDocument } from "./viewer.js";

const $ = (id) => document.getElementById(id);
let searchTimer = null;
let pollTimer = null;

export function initDocuments() {
  $("doc-search").addEventListener("input", () => {
    clearTimeout(searchTimer);
    searchTimer = setTimeout(refreshDocuments, 250);
  });
  $("doc-collection").addEventListener("change", refreshDocuments);
  on("jobs", refreshDocuments);
}

/** Reloads the list with the current search and filter. */
export async function refreshDocuments() {
  const params = new URLSearchParams({ limit: "500" });
  const q = $("doc-search").value.trim();
  const collection = $("doc-collection").value;
  if (q) params.set("q", q);
  if (collection) params.set("collection", collection);
  try {
    const list = await call("GET", `/v1/documents?${params}`);
    showError($("doc-error"), "");
    render(list.documents);
    if (!q && !collection) rememberCollections(list.documents);
    schedulePoll(list.documents);
  } catch (e) {
    showError($("doc-error"), `Documents could not be loaded: ${e.message}`);
  }
}

function render(documents) {
  state.documents = new Map(documents.map((d) => [d.id, d]));
  for (const id of [...state.selected]) if (!state.documents.has(id)) state.selected.delete(id);
  const body = $("documents").tBodies[0];
  body.replaceChildren(...documents.map(row));
  $("doc-empty").hidden = documents.length > 0;
  $("documents").hidden = documents.length === 0;
  emit("documents");
  emit("selection");
}

function row(doc) {
  const title = docTitle(doc);
  const selected = state.selected.has(doc.id);
  const tr = el("tr", { class: selected ? "selected" : "", dataset: { id: doc.id } });
  const box = el("input", {
    type: "checkbox",
    checked: selected,
    disabled: doc.status !== "ready",
    "aria-label": `Ask about ${title}`,
    onchange: (e) => toggle(doc.id, e.target.checked, tr),
  });
  tr.append(
    el("td", {}, box),
    el(
      "td",
      { class: "title" },
      el("button", {
        type: "button",
        class: "link",
        title: doc.file_name,
        disabled: doc.status !== "ready",
        onclick: () => openDocument(doc.id),
      }, title),
      doc.collection ? el("div", { class: "muted small" }, doc.collection) : null,
      doc.error ? el("div", { class: "error small" }, doc.error) : null,
    ),
    el("td", {}, el("span", { class: `status ${doc.status}` }, doc.status)),
    el("td", { class: "num" }, bytes(doc.size_bytes)),
    el("td", { class: "num" }, doc.page_count ?? ""),
    el("td", { class: "when" }, date(doc.created_at)),
    el("td", {}, el("button", {
      type: "button",
      class: "danger",
      "aria-label": `Delete ${title}`,
      onclick: () => confirmDelete(doc),
    }, "Delete")),
  );
  return tr;
}

function toggle(id, on, tr) {
  if (on) state.selected.add(id);
  else state.selected.delete(id);
  tr.classList.toggle("selected", on);
  emit("selection");
}

function rememberCollections(documents) {
  const names = [...new Set(documents.map((d) => d.collection).filter(Boolean))].sort();
  const filter = $("doc-collection");
  const current = filter.value;
  filter.replaceChildren(
    el("option", { value: "" }, "All collections"),
    ...names.map((n) => el("option", { value: n }, n)),
  );
  filter.value = names.includes(current) ? current : "";
  $("collections").replaceChildren(...names.map((n) => el("option", { value: n })));
  state.collections = names;
  emit("collections");
}

function schedulePoll(documents) {
  clearTimeout(pollTimer);
  if (documents.some((d) => d.status === "processing")) pollTimer = setTimeout(refreshDocuments, 2000);
}

async function confirmDelete(doc) {
  const dialog = $("confirm");
  $("confirm-text").textContent =
    `“${docTitle(doc)}” and its index entries, cached context and history will be removed.`;
  dialog.returnValue = "";
  dialog.showModal();
  $("confirm-ok").focus();
  const choice = await new Promise((resolve) =>
    dialog.addEventListener("close", () => resolve(dialog.returnValue), { once: true }),
  );
  if (choice !== "ok") return;
  try {
    await call("DELETE", `/v1/documents/${encodeURIComponent(doc.id)}`);
    state.selected.delete(doc.id);
    showError($("doc-error"), "");
  } catch (e) {
    showError($("doc-error"), `“${docTitle(doc)}” could not be deleted: ${e.message}`);
  }
  refreshDocuments();
}
