// Drag-and-drop upload on any page: a drop overlay, a progress bar through the upload (XHR progress), a clear
// error for an unreadable file, then the trace's page opens (it follows an ingest still running: pages/trace.js);
// from the list page, in place (pages/in_place.js).

import { el } from "../lib/util.js";
import { openTracePage } from "../pages/in_place.js";

let box = null;

function statusBox() {
  if (box && box.root.isConnected) return box; // (a page opened in place has a new body)
  const bar = el("div", { class: "bar-fill" });
  const label = el("div", { class: "upload-label" });
  const err = el("div", { class: "upload-error", role: "alert", hidden: true });
  const close = el("button", { class: "upload-close", title: "dismiss", onclick: () => { root.hidden = true; } }, "×");
  const root = el("div", { id: "upload-status", hidden: true }, close, label, el("div", { class: "bar" }, bar), err);
  document.body.append(root);
  box = { root, bar, label, err };
  return box;
}

function show(label, fraction) {
  const b = statusBox();
  b.root.hidden = false;
  b.root.dataset.state = "busy";
  b.err.hidden = true;
  b.label.textContent = label;
  b.bar.style.width = `${Math.round(Math.max(0, Math.min(1, fraction)) * 100)}%`;
}

function fail(name, message) {
  const b = statusBox();
  b.root.hidden = false;
  b.root.dataset.state = "error";
  b.label.textContent = `Could not open ${name}`;
  b.err.hidden = false;
  b.err.textContent = message;
  b.bar.style.width = "0%";
}

function errorMessage(xhr) {
  try {
    const j = JSON.parse(xhr.responseText);
    if (j && j.error && j.error.message) return j.error.message;
  } catch (_) { /* fall through */ }
  return xhr.status ? `the server answered ${xhr.status} ${xhr.statusText}` : "the upload did not reach the server";
}

// The page that opens after a drop shows the whole trace at the level its tracks area's width gives; the
// upload says that width (?view_px=) so the server builds those tiles while the page loads
// (server/first_view.py). The width is the window's less what a trace page here last kept beside its
// tracks (side panel, names column), or the default layout's 615 px.
const INSET_KEY = "acceltrace.tracks_inset_px";
const DEFAULT_INSET_PX = 615;

/** Keep how much of the window a trace page's tracks area leaves to its other columns (trace.js). */
export function rememberTracksInset(px) {
  try { localStorage.setItem(INSET_KEY, String(Math.round(px))); } catch (_) { /* storage off: the default */ }
}

/** The width a trace page's tracks area gets in this window (what the server builds first tiles for). */
function tracksWidth() {
  let inset = DEFAULT_INSET_PX;
  try {
    const kept = Number(localStorage.getItem(INSET_KEY));
    if (Number.isFinite(kept) && kept > 0) inset = kept;
  } catch (_) { /* storage off */ }
  return Math.max(300, Math.floor(window.innerWidth)) - inset;
}

/** `?view_px=N` for an upload or a progress stream whose page opens the whole trace next, or "". */
export function viewQuery() {
  const px = tracksWidth();
  return px >= 100 && px <= 16384 ? `?view_px=${px}` : "";
}

/** Upload one file (the bar is the upload's); opens the trace's page once the server has it (ready or still ingesting). */
export function uploadFile(file) {
  const name = file.name || "file";
  show(`Uploading ${name}…`, 0);
  const form = new FormData();
  form.append("file", file, name);
  const xhr = new XMLHttpRequest();
  xhr.open("POST", `/api/traces${viewQuery()}`);
  xhr.upload.onprogress = (e) => {
    if (!e.lengthComputable) return;
    // once every byte is sent the server is already ingesting; it answers when done or after ~2 s
    show(e.loaded < e.total ? `Uploading ${name}…` : `Uploaded ${name}; ingesting…`, e.loaded / e.total);
  };
  xhr.onerror = () => fail(name, "the upload did not reach the server");
  xhr.onload = () => {
    if (xhr.status >= 400) { fail(name, errorMessage(xhr)); return; }
    let j;
    try { j = JSON.parse(xhr.responseText); } catch (_) { fail(name, "the server's answer was not JSON"); return; }
    if (j.status === "failed") { fail(name, j.error || "ingest failed"); return; }
    // ready, or still ingesting (202): the trace's page loads meanwhile and follows the ingest itself
    open(j.id, name);
  };
  xhr.send(form);
}

function open(id, name) {
  show(`Opening ${name}…`, 1);
  openTracePage(`/t/${encodeURIComponent(id)}`);
}

let dropOverlay = null; // one per document: a page opened in place keeps the list page's listeners

/** Accept files dropped anywhere on the page. */
export function installDropTarget() {
  if (dropOverlay) {
    if (!dropOverlay.isConnected) document.body.append(dropOverlay);
    return;
  }
  dropOverlay = el("div", { id: "drop-overlay", hidden: true }, el("div", {}, "Drop a trace file to open it"));
  document.body.append(dropOverlay);
  let depth = 0;
  const hasFiles = (e) => e.dataTransfer && [...(e.dataTransfer.types || [])].includes("Files");
  document.addEventListener("dragenter", (e) => { if (!hasFiles(e)) return; depth++; dropOverlay.hidden = false; e.preventDefault(); });
  document.addEventListener("dragleave", () => { depth = Math.max(0, depth - 1); if (!depth) dropOverlay.hidden = true; });
  document.addEventListener("dragover", (e) => { if (hasFiles(e)) e.preventDefault(); });
  document.addEventListener("drop", (e) => {
    if (!hasFiles(e)) return;
    e.preventDefault();
    depth = 0;
    dropOverlay.hidden = true;
    const f = e.dataTransfer.files && e.dataTransfer.files[0];
    if (f) uploadFile(f);
  });
}

/** A file chooser for people without drag and drop. */
export function pickAndUpload() {
  const input = el("input", { type: "file", style: "display:none" });
  input.addEventListener("change", () => { if (input.files[0]) uploadFile(input.files[0]); input.remove(); });
  document.body.append(input);
  input.click();
}
