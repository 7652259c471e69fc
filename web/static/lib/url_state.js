// The view in the URL fragment: #s=<start_ns>&e=<end_ns>&sel=<slice_id>&pin=<id>,<id>&ov=<pass>,<pass>&dep=<id>:<n>,...
// &bm=<ns>:<note>,... (all times ns relative to the trace start). Written with replaceState (no history spam),
// read on load. A bookmark's note is encodeURIComponent'd (so a comma, colon, '&' or '#' in it is never a
// separator) and bm= goes last, outside URLSearchParams, which would decode it a second time.

const BOOKMARKS_MAX = 200;      // a shared link stays a sane length
const NOTE_MAX = 500;           // characters of one note

/** bm=<ns>:<note>,...: the bookmarks of a fragment, [{ns, note}], sorted by time; malformed entries skipped. */
export function readBookmarks(hash = location.hash) {
  const part = hash.replace(/^#/, "").split("&").find((x) => x.startsWith("bm="));
  if (!part) return [];
  const out = [];
  for (const item of part.slice(3).split(",")) {
    const i = item.indexOf(":");
    const ns = Number(i < 0 ? item : item.slice(0, i));
    if (item === "" || !Number.isFinite(ns)) continue;
    let note = "";
    try { note = i < 0 ? "" : decodeURIComponent(item.slice(i + 1)); } catch (_) { note = item.slice(i + 1); }
    out.push({ ns: Math.round(ns), note: note.slice(0, NOTE_MAX) });
    if (out.length >= BOOKMARKS_MAX) break;
  }
  return out.sort((a, b) => a.ns - b.ns);
}

function bookmarksParam(list) {
  return list.slice(0, BOOKMARKS_MAX).map((b) => `${Math.round(b.ns)}:${encodeURIComponent(String(b.note || "").slice(0, NOTE_MAX))}`).join(",");
}

export function readFragment(hash = location.hash) {
  const p = new URLSearchParams(hash.replace(/^#/, ""));
  const num = (k) => (p.has(k) && p.get(k) !== "" && Number.isFinite(Number(p.get(k))) ? Number(p.get(k)) : null);
  const list = (k) => (p.get(k) ? p.get(k).split(",").filter((x) => x !== "") : []);
  return {
    start_ns: num("s"),
    end_ns: num("e"),
    selected: num("sel"),
    pinned: list("pin").map(Number).filter(Number.isFinite),
    overlays: list("ov"),
    // dep=<track_id>:<depths shown>,...: the user's choice of how deep each deep track is unfolded
    depths: list("dep").map((x) => x.split(":").map(Number)).filter((p) => p.length === 2 && p.every(Number.isFinite)),
    bookmarks: readBookmarks(hash),
    // track control (docs/ui.md): f=<filter text>&hide=<id>,...&ord=<id>,...&nw=<names px>&pw=<side panel px>
    filter: p.get("f") || "",
    hidden: list("hide").map(Number).filter(Number.isFinite),
    order: list("ord").map(Number).filter(Number.isFinite),
    names_px: num("nw"),
    panel_px: num("pw"),
  };
}

export function writeFragment(state) {
  const p = new URLSearchParams();
  p.set("s", String(Math.round(state.start_ns)));
  p.set("e", String(Math.round(state.end_ns)));
  if (state.selected !== null && state.selected !== undefined) p.set("sel", String(state.selected));
  if (state.pinned?.length) p.set("pin", state.pinned.join(","));
  if (state.overlays?.length) p.set("ov", state.overlays.join(","));
  if (state.depths?.length) p.set("dep", state.depths.map(([id, n]) => `${id}:${n}`).join(","));
  if (state.filter) p.set("f", state.filter);
  if (state.hidden?.length) p.set("hide", state.hidden.join(","));
  if (state.order?.length) p.set("ord", state.order.join(","));
  if (state.names_px !== null && state.names_px !== undefined) p.set("nw", String(Math.round(state.names_px)));
  if (state.panel_px !== null && state.panel_px !== undefined) p.set("pw", String(Math.round(state.panel_px)));
  const bm = state.bookmarks?.length ? `&bm=${bookmarksParam(state.bookmarks)}` : "";
  const url = `${location.pathname}${location.search}#${p.toString().replaceAll("%2C", ",").replaceAll("%3A", ":")}${bm}`;
  if (url !== `${location.pathname}${location.search}${location.hash}`) history.replaceState(null, "", url);
}

/** Copy text to the clipboard, falling back to a hidden textarea where the async API is unavailable. */
export async function copyText(text) {
  try {
    await navigator.clipboard.writeText(text);
    return true;
  } catch (_) {
    const ta = document.createElement("textarea");
    ta.value = text;
    ta.style.position = "fixed";
    ta.style.opacity = "0";
    document.body.append(ta);
    ta.select();
    const ok = document.execCommand("copy");
    ta.remove();
    return ok;
  }
}
