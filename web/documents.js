// The document list: title and file name, status, size, pages and date; title search and collection
// filter; selection as the question's scope; opening a document; renaming one; deleting one after
// confirmation. It refreshes itself while any document is still being ingested (not while a title is
// being edited).

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
  on("reveal", reveal);
}

/** Shows documents the user pointed at elsewhere (an upload's duplicates): listed, and selected if ready. */
async function reveal(ids) {
  $("doc-search").value = "";
  $("doc-collection").value = "";
  await refreshDocuments();
  const rows = ids.map(rowOf).filter(Boolean);
  for (const tr of rows) {
    if (state.documents.get(tr.dataset.id)?.status !== "ready") continue;
    tr.querySelector("input[type=checkbox]").checked = true;
    toggle(tr.dataset.id, true, tr);
  }
  rows[0]?.scrollIntoView({ block: "nearest" });
  rows[0]?.querySelector(".doc-title").focus();
}

function rowOf(id) {
  return $("documents").querySelector(`tr[data-id="${CSS.escape(id)}"]`);
}

/** Reloads the list with the current search and filter. */
export async function refreshDocuments() {
  clearTimeout(pollTimer);
  if (editing()) {
    pollTimer = setTimeout(refreshDocuments, 2000);
    return;
  }
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
  const titleCell = el("td", { class: "title" }, ...titleParts(doc));
  tr.append(
    el("td", {}, box),
    titleCell,
    el("td", {}, el("span", { class: `status ${doc.status}` }, doc.status)),
    el("td", { class: "num" }, bytes(doc.size_bytes)),
    el("td", { class: "num" }, doc.page_count ?? ""),
    el("td", { class: "when" }, date(doc.created_at)),
    el("td", { class: "actions" },
      el("button", {
        type: "button",
        "aria-label": `Rename ${title}`,
        onclick: (e) => startRename(doc, titleCell, e.currentTarget),
      }, "Rename"),
      el("button", {
        type: "button",
        class: "danger",
        "aria-label": `Delete ${title}`,
        onclick: () => confirmDelete(doc),
      }, "Delete")),
  );
  return tr;
}

/** The title (opens the document; long ones are clamped, the whole title in its tooltip), the file name. */
function titleParts(doc) {
  const title = docTitle(doc);
  return [
    el("button", {
      type: "button",
      class: "link doc-title",
      title,
      disabled: doc.status !== "ready",
      onclick: () => openDocument(doc.id),
    }, title),
    el("div", { class: "file-name muted small", title: doc.file_name }, doc.file_name),
    doc.collection ? el("div", { class: "muted small" }, `Collection: ${doc.collection}`) : null,
    doc.error ? el("div", { class: "error small" }, doc.error) : null,
  ];
}

function editing() {
  return Boolean($("documents").querySelector("form.rename"));
}

/** Turns the title cell into a form; Escape or Cancel puts the title back, Save sends it. */
function startRename(doc, cell, opener) {
  const input = el("input", {
    id: `rename-${doc.id}`,
    value: docTitle(doc),
    required: true,
    autocomplete: "off",
  });
  const error = el("p", { class: "error small", role: "alert", hidden: true });
  const close = () => {
    cell.replaceChildren(...titleParts(doc));
    opener.focus();
  };
  const form = el("form", { class: "rename" },
    el("label", { for: input.id, class: "visually-hidden" }, `New title for ${docTitle(doc)}`),
    input,
    el("div", { class: "row" },
      el("button", { type: "submit", class: "primary" }, "Save"),
      el("button", { type: "button", onclick: close }, "Cancel")),
    error);
  form.addEventListener("submit", (e) => {
    e.preventDefault();
    rename(doc, input.value.trim(), cell, error);
  });
  form.addEventListener("keydown", (e) => {
    if (e.key === "Escape") {
      e.preventDefault();
      close();
    }
  });
  cell.replaceChildren(form);
  input.select();
  input.focus();
}

/** Sends the new title; on success the cell shows it, on refusal the form says why. */
async function rename(doc, title, cell, error) {
  let renamed;
  try {
    renamed = await call("PATCH", `/v1/documents/${encodeURIComponent(doc.id)}`, { title });
  } catch (e) {
    showError(error, `The title was not changed: ${e.message}`);
    return;
  }
  state.documents.set(renamed.id, renamed);
  cell.replaceChildren(...titleParts(renamed));
  await refreshDocuments();
  rowOf(doc.id)?.querySelector(".doc-title").focus();
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
