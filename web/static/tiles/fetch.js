// fetchTile(): a decoded tile, fetched and decoded in a worker (worker.js) so arriving tiles do not
// cost frames; on the main thread where module workers are unavailable, and until the worker has loaded
// its modules (~0.1 s after the page asks for its first tiles: they are coarse and small, and a page's
// first draw would otherwise wait for the worker's start).

import { decodeTile } from "./decode.js";
import { errorFrom } from "../lib/api.js";

let worker = null; // null: not tried yet; false: unavailable
let ready = false; // the worker said its modules are loaded
let seq = 0;
const pending = new Map(); // id -> {resolve, reject}

function abortError() {
  const e = new Error("aborted");
  e.name = "AbortError";
  return e;
}

function getWorker() {
  if (worker !== null) return worker;
  try {
    worker = new Worker(new URL("./worker.js", import.meta.url), { type: "module" });
    worker.onmessage = (e) => {
      if (e.data.ready) { ready = true; return; }
      const { id, tile, error, aborted } = e.data;
      const p = pending.get(id);
      if (!p) return;
      pending.delete(id);
      if (tile) p.resolve(tile);
      else p.reject(aborted ? abortError() : new Error(error));
    };
    worker.onerror = () => {
      // the worker could not start (or died): finish what it held on the main thread from now on
      worker = false;
      for (const p of pending.values()) p.reject(new Error("tile worker failed"));
      pending.clear();
    };
  } catch (_) {
    worker = false;
  }
  return worker;
}

async function onMainThread(url, level, index, signal) {
  const r = await fetch(url, { signal });
  if (!r.ok) throw await errorFrom(r);
  const buf = await r.arrayBuffer();
  const tile = decodeTile(buf, level, index);
  tile.bytes = buf.byteLength + tile.extra_bytes;
  tile.widened = null;
  return tile;
}

/** The decoded tile at `url`; rejects with an AbortError when `signal` aborts. */
export function fetchTile(url, level, index, signal) {
  const w = getWorker();
  if (!w || !ready) return onMainThread(url, level, index, signal);
  return new Promise((resolve, reject) => {
    const id = ++seq;
    pending.set(id, { resolve, reject });
    if (signal) signal.addEventListener("abort", () => { if (worker) worker.postMessage({ id, abort: true }); }, { once: true });
    w.postMessage({ id, url, level, index });
  });
}
