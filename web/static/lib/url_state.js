// The view in the URL fragment: #s=<start_ns>&e=<end_ns>&sel=<slice_id>&pin=<id>,<id>&ov=<pass>,<pass>&dep=<id>:<n>,...
// (all times ns relative to the trace start). Written with replaceState (no history spam), read on load.

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
  const url = `${location.pathname}${location.search}#${p.toString().replaceAll("%2C", ",").replaceAll("%3A", ":")}`;
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
