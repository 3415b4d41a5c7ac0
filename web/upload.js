// Uploading: drag-and-drop or the file picker, several files at once, an optional collection. Each file
// gets a row that follows its ingestion job (step and percentage) until it is done or says why it failed.

import { call, upload } from "./api.js";
import { bytes, el, showError } from "./format.js";
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

async function send(files) {
  if (!files.length) return;
  const error = $("upload-error");
  const reason = tooLarge(files);
  if (reason) return showError(error, reason);
  showError(error, "");
  const label = files.length === 1 ? files[0].name : `${files.length} files`;
  const sending = jobRow(label);
  sending.setState("uploading", 0, "");
  try {
    const accepted = await upload(files, $("upload-collection").value.trim(), (p) =>
      sending.setState("uploading", p * 100, ""),
    );
    sending.node.remove();
    for (const doc of accepted.documents) follow(doc.job_id, doc.file_name);
    emit("jobs");
  } catch (e) {
    sending.node.remove();
    showError(error, `Upload refused: ${e.message}`);
  }
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
