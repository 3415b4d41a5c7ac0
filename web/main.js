// The page's entry point: learns the server's limits, signs in (an API key kept in this browser, or none
// in local single-user mode), then starts the upload, document, ask, history and viewer parts.

import { call, saveKey, savedKey } from "./api.js";
import { refold, showError } from "./format.js";
import { state } from "./state.js";
import { initAsk } from "./ask.js";
import { initDocuments, refreshDocuments } from "./documents.js";
import { initHistory } from "./history.js";
import { initUpload } from "./upload.js";
import { initViewer } from "./viewer.js";

const $ = (id) => document.getElementById(id);

async function start() {
  try {
    state.info = await call("GET", "/v1/info");
  } catch (e) {
    $("account-status").textContent = `The server cannot be reached: ${e.message}`;
    return;
  }
  initUpload();
  initDocuments();
  initAsk();
  initHistory();
  initViewer();
  $("sign-in-form").addEventListener("submit", signIn);
  $("sign-out").addEventListener("click", signOut);
  window.addEventListener("resize", refold);
  if (await accepted()) enter();
  else showSignIn("");
}

/** Whether the server takes this browser's key (or no key, in local mode). */
async function accepted() {
  if (!savedKey() && !state.info.local_mode) return false;
  try {
    await call("GET", "/v1/documents?limit=1");
    return true;
  } catch (e) {
    if (e.status === 401) return false;
    throw e;
  }
}

async function signIn(e) {
  e.preventDefault();
  const key = $("api-key").value.trim();
  if (!key) return;
  saveKey(key);
  try {
    await call("GET", "/v1/documents?limit=1");
    $("api-key").value = "";
    enter();
  } catch (err) {
    saveKey("");
    const why = err.status === 401 ? `This API key was not accepted: ${err.message}` : err.message;
    showSignIn(why);
  }
}

function signOut() {
  saveKey("");
  state.selected.clear();
  showSignIn("");
}

function showSignIn(error) {
  $("app").hidden = true;
  $("sign-in").hidden = false;
  $("sign-out").hidden = true;
  $("account-status").textContent = "";
  showError($("sign-in-error"), error);
  $("api-key").focus();
}

function enter() {
  $("sign-in").hidden = true;
  $("app").hidden = false;
  const local = !savedKey();
  $("account-status").textContent = local ? "Local mode" : "Signed in with an API key";
  $("sign-out").hidden = local;
  refreshDocuments();
}

start();
