// Uploading: drag-and-drop or the file picker, several files at once, an optional collection. Each file
// gets a row that follows its ingestion job (step and percentage) until it is done or says why it failed.
// A file already in the library is not stored again unless the user says so: the existing document is
// kept and selected, or the file is added anyway.

import { call, upload } from "./api.js";
import { bytes, date, docTitle, el, showError } from "./format.js";
import { emit, state } from "./state.js";

const $ = (id) => document.getElementById(id);
const FINAL = new Set(["succeeded", "failed", "cancelled"]);

export function initUpload() {
  const zone = $("drop-zone");
  const input = $("file-input");
  input.addEventListener("change", () => {
    send([...input.files]);
    input.value = "";
  });
  zone.addEventListener("click", () => input.click());
  zone.addEventListener("keydown", (e) => {
    if (e.key === "Enter" || e.key === " ") {
      e.preventDefault();
      input.click();
    }
  });
  zone.addEventListener("dragover", (e) => {
    e.preventDefault();
    zone.classList.add("over");
  });
  zone.addEventListener("dragleave", () => zone.classList.remove("over"));
  zone.addEventListener("drop", (e) => {
    e.preventDefault();
    zone.classList.remove("over");
    send([...e.dataTransfer.files]);
  });
  $("upload-form").addEventListener("submit", (e) => e.preventDefault());
}

/** Refuses what the server would refuse before sending anything; returns the reason or "". */
function tooLarge(files) {
  const limit = state.info?.max_upload_bytes;
  const total = files.reduce((n, f) => n + f.size, 0);
  if (!limit || total <= limit) return "";
  const what = files.length === 1 ? `“${files[0].name}” is` : `These ${files.length} files are`;
  const [size, max] =
    bytes(total) === bytes(limit)
      ? [`${total.toLocaleString()} bytes`, `${limit.toLocaleString()} bytes`]
      : [bytes(total), bytes(limit)];
  return `${what} ${size}, over this server's upload limit of ${max}.`;
}

async function send(files, { allowDuplicate = false } = {}) {
  if (!files.length) return;
  const error = $("upload-error");
  const reason = tooLarge(files);
  if (reason) return showError(error, reason);
  showError(error, "");
  const collection = $("upload-collection").value.trim();
  const label = files.length === 1 ? files[0].name : `${files.length} files`;
  const sending = jobRow(label);
  sending.setState("uploading", 0, "");
  try {
    const progress = (p) => sending.setState("uploading", p * 100, "");
    const accepted = await upload(files, collection, progress, { allowDuplicate });
    sending.node.remove();
    for (const doc of accepted.documents) follow(doc.job_id, doc.file_name);
    emit("jobs");
  } catch (e) {
    sending.node.remove();
    const duplicates = e.status === 409 ? e.details?.duplicates : null;
    if (duplicates?.length) return resolveDuplicates(files, duplicates);
    showError(error, `Upload refused: ${e.message}`);
  }
}

/**
 * Asks what to do with files the library already has: keep the existing documents (they are selected,
 * and only the other files are sent) or add them anyway. Closing the dialog sends nothing.
 */
async function resolveDuplicates(files, duplicates) {
  const choice = await askAboutDuplicates(duplicates);
  if (choice === "add") return send(files, { allowDuplicate: true });
  if (choice !== "keep") return;
  emit("reveal", duplicates.map((d) => d.existing.id));
  const known = new Set(duplicates.map((d) => d.file_name));
  const others = files.filter((f) => !known.has(f.name));
  if (others.length) send(others);
}

function askAboutDuplicates(duplicates) {
  const dialog = $("duplicate");
  const many = duplicates.length > 1;
  $("duplicate-title").textContent = many ? "These files are already in the library" : "Already in the library";
  $("duplicate-keep").textContent = many ? "Keep the existing ones" : "Keep the existing one";
  $("duplicate-list").replaceChildren(...duplicates.map(duplicateItem));
  if (dialog.open) dialog.close();
  dialog.returnValue = "";
  dialog.showModal();
  return new Promise((resolve) =>
    dialog.addEventListener("close", () => resolve(dialog.returnValue), { once: true }),
  );
}

function duplicateItem({ file_name: name, existing }) {
  const added = existing.created_at ? `, added ${date(existing.created_at)}` : "";
  const stored = existing.file_name && existing.file_name !== name ? ` (${existing.file_name})` : "";
  return el("li", {}, `“${name}” is the same file as “${docTitle(existing)}”${stored}${added}.`);
}

function jobRow(name) {
  const status = el("span", { class: "status queued" }, "queued");
  const bar = el("progress", { max: "100", value: "0", "aria-label": `Progress of ${name}` });
  const step = el("span", { class: "muted small" });
  const reason = el("span", { class: "reason error small", hidden: true });
  const node = el("li", { class: "job" }, el("span", { class: "name", title: name }, name), status, bar,
    step, reason);
  $("jobs").prepend(node);
  return {
    node,
    setState(s, percent, stepName, why) {
      status.className = `status ${s}`;
      status.textContent = s;
      bar.value = Math.max(0, Math.min(100, percent || 0));
      step.textContent = stepName ? `${stepName} · ${Math.round(bar.value)}%` : "";
      reason.textContent = why || "";
      reason.hidden = !why;
    },
  };
}

async function follow(jobId, name) {
  const row = jobRow(name);
  row.node.dataset.job = jobId;
  for (;;) {
    let job;
    try {
      job = await call("GET", `/v1/jobs/${encodeURIComponent(jobId)}`);
    } catch (e) {
      row.setState("failed", 0, "", `Its progress cannot be read: ${e.message}`);
      return;
    }
    row.setState(job.status, job.percent, job.step, job.error);
    if (FINAL.has(job.status)) {
      emit("jobs");
      if (job.status === "succeeded") setTimeout(() => row.node.remove(), 8000);
      return;
    }
    await new Promise((r) => setTimeout(r, 700));
  }
}
