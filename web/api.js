// The docqa REST API as the page uses it: the key kept in this browser, JSON calls whose failures become
// `ApiError`s carrying the server's message, file downloads, uploads with progress, and the server-sent
// events of /v1/ask (sent with the scope's routing key for a load balancer).

const KEY_STORAGE = "docqa.apiKey";

/** A failed call: the HTTP status, the server's `{error_type, message}` and its whole body (`details`). */
export class ApiError extends Error {
  constructor(status, type, message, details = null) {
    super(message);
    this.status = status;
    this.type = type;
    this.details = details;
  }
}

export function savedKey() {
  return localStorage.getItem(KEY_STORAGE) || "";
}

export function saveKey(key) {
  if (key) localStorage.setItem(KEY_STORAGE, key);
  else localStorage.removeItem(KEY_STORAGE);
}

function headers(extra = {}) {
  const key = savedKey();
  return key ? { Authorization: `Bearer ${key}`, ...extra } : extra;
}

async function failure(res) {
  let type = "http_error";
  let message = `${res.status} ${res.statusText}`;
  let details = null;
  try {
    details = await res.json();
    type = details.error_type || type;
    message = details.message || message;
  } catch {
    // not the API's JSON body: keep the status line
  }
  return new ApiError(res.status, type, message, details);
}

/** A JSON request; resolves to the parsed body (or null for 204). */
export async function call(method, path, body) {
  const init = { method, headers: headers() };
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  let res;
  try {
    res = await fetch(path, init);
  } catch (e) {
    throw new ApiError(0, "network", `the server cannot be reached (${e.message})`);
  }
  if (!res.ok) throw await failure(res);
  return res.status === 204 ? null : res.json();
}

/** A file's bytes (an ArrayBuffer), with this browser's key: a document's original, for instance. */
export async function download(path) {
  let res;
  try {
    res = await fetch(path, { headers: headers() });
  } catch (e) {
    throw new ApiError(0, "network", `the server cannot be reached (${e.message})`);
  }
  if (!res.ok) throw await failure(res);
  return res.arrayBuffer();
}

/**
 * Uploads files as multipart form data, reporting progress (0..1). A file the tenant already has is
 * refused (409, `details.duplicates`) unless `allowDuplicate`. XMLHttpRequest, because fetch has no
 * upload progress.
 */
export function upload(files, collection, onProgress, { allowDuplicate = false } = {}) {
  const form = new FormData();
  if (collection) form.append("collection", collection);
  for (const f of files) form.append("file", f, f.name);
  return new Promise((resolve, reject) => {
    const xhr = new XMLHttpRequest();
    xhr.open("POST", allowDuplicate ? "/v1/documents?allow_duplicate=true" : "/v1/documents");
    for (const [k, v] of Object.entries(headers())) xhr.setRequestHeader(k, v);
    xhr.upload.onprogress = (e) => e.lengthComputable && onProgress(e.loaded / e.total);
    xhr.onerror = () => reject(new ApiError(0, "network", "the upload was interrupted"));
    xhr.onload = () => {
      let body = null;
      try {
        body = JSON.parse(xhr.responseText);
      } catch {
        // handled below
      }
      if (xhr.status >= 200 && xhr.status < 300 && body) resolve(body);
      else
        reject(
          new ApiError(
            xhr.status,
            body?.error_type || "http_error",
            body?.message || `upload failed: HTTP ${xhr.status}`,
            body,
          ),
        );
    };
    xhr.send(form);
  });
}

/**
 * The routing key of a question's scope (the `X-Docqa-Affinity` header), so that a load balancer in front
 * of several replicas sends the questions about the same documents to the replica whose KV cache holds
 * them: the document ids sorted and joined with commas, or `collection:` and the collection's name; none
 * for every document.
 */
export function affinityKey(scope) {
  if (scope?.document_ids?.length) return [...new Set(scope.document_ids)].sort().join(",");
  if (scope?.collection) return `collection:${encodeURIComponent(scope.collection)}`;
  return null;
}

/**
 * Asks with `stream: true`; calls `on.progress({read, total, eta_ms})` per `progress` event (the model
 * reading the prompt), `on.token(text)` per `token` event, and resolves to the final answer. `signal`
 * aborts the request (the server then stops reading or generating).
 */
export async function askStreaming(input, on, signal) {
  const extra = { "Content-Type": "application/json", Accept: "text/event-stream" };
  const affinity = affinityKey(input.scope);
  if (affinity) extra["X-Docqa-Affinity"] = affinity;
  let res;
  try {
    res = await fetch("/v1/ask", {
      method: "POST",
      headers: headers(extra),
      body: JSON.stringify({ ...input, stream: true }),
      signal,
    });
  } catch (e) {
    if (e.name === "AbortError") throw e;
    throw new ApiError(0, "network", `the server cannot be reached (${e.message})`);
  }
  if (!res.ok) throw await failure(res);
  for await (const ev of sseEvents(res.body)) {
    const data = JSON.parse(ev.data);
    if (ev.event === "progress") on.progress(data);
    else if (ev.event === "token") on.token(data.text);
    else if (ev.event === "answer") return data;
    else if (ev.event === "error") throw new ApiError(500, data.error_type, data.message);
  }
  throw new ApiError(0, "network", "the answer stream ended early");
}

/** Server-sent events from a byte stream: `{event, data}` per blank-line-terminated frame. */
async function* sseEvents(body) {
  const reader = body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += value.replace(/\r\n/g, "\n");
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const frame = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      let event = "message";
      const data = [];
      for (const line of frame.split("\n")) {
        if (line.startsWith("event:")) event = line.slice(6).trim();
        else if (line.startsWith("data:")) data.push(line.slice(5).replace(/^ /, ""));
      }
      if (data.length) yield { event, data: data.join("\n") };
    }
  }
}
