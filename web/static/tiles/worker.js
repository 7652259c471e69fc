// Module worker: fetches and decodes tiles off the main thread (a dense tile of a few MB takes ~15 ms to
// decode, a whole frame's budget), then hands the decoded tile back, its buffer transferred, not copied.

import { decodeTile } from "./decode.js";
import { errorFrom } from "../lib/api.js";

const controllers = new Map();

self.onmessage = async (e) => {
  const { id, url, level, index, abort } = e.data;
  if (abort) { controllers.get(id)?.abort(); return; }
  const ctl = new AbortController();
  controllers.set(id, ctl);
  try {
    const r = await fetch(url, { signal: ctl.signal });
    if (!r.ok) throw await errorFrom(r);
    const buf = await r.arrayBuffer();
    const tile = decodeTile(buf, level, index);
    tile.bytes = buf.byteLength + tile.extra_bytes;
    // the typed arrays are views of buf (or of widened columns): transferring the buffers moves them along
    const moved = [buf, ...tile.widened];
    tile.widened = null;
    self.postMessage({ id, tile }, moved);
  } catch (err) {
    self.postMessage({ id, error: String(err.message || err), aborted: err.name === "AbortError" });
  } finally {
    controllers.delete(id);
  }
};

// its modules are loaded: the page sends it tiles from now on (until then it fetches them itself: tiles/fetch.js)
self.postMessage({ ready: true });
