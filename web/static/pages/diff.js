// The comparison page (/diff?a=ID&b=ID[&steps=...]): two timelines stacked on one shared time axis (time
// since the aligned step's start), linked zoom and pan, matched slices (same normalised name) highlighted
// across both on hover, and the delta table beside them; a row click frames its slices in both. The view
// (shared window, aligned step) lives in the URL fragment. Test hooks on window.acceltraceDiff (docs/ui.md).

import { Api, getJson } from "../lib/api.js";
import { Timeline } from "../timeline/timeline.js";
import { attachInput } from "../timeline/input.js";
import { NAMES_PX } from "../timeline/layout.js";
import { sliceTooltip, hideTooltip } from "../panels/tooltip.js";
import { copyText } from "../lib/url_state.js";
import { el } from "../lib/util.js";
import { Overlay, normaliser } from "./diff_overlay.js";
import { renderHeadline, renderRows, renderFindings } from "./diff_table.js";

const $ = (id) => document.getElementById(id);
const SIDES = ["a", "b"];

/** A timeline that tells its page when a frame was drawn (so the overlay repaints over it). */
class LinkedTimeline extends Timeline {
  frame(t) {
    super.frame(t);
    if (this.afterFrame) this.afterFrame();
  }
}

async function main() {
  const ids = { a: document.body.dataset.a, b: document.body.dataset.b };
  const query = new URLSearchParams(location.search);
  const apiQuery = new URLSearchParams({ a: ids.a, b: ids.b });
  for (const k of ["steps", "noise_pct", "noise_ns", "strip_templates"]) if (query.get(k)) apiQuery.set(k, query.get(k));
  const apis = { a: new Api(ids.a), b: new Api(ids.b) };
  let doc, metas;
  try {
    [doc, ...metas] = await Promise.all([getJson(`/api/diff?${apiQuery}`), apis.a.meta(), apis.b.meta()]);
  } catch (e) {
    return fatal(`Could not compare these traces: ${e.message}`);
  }
  const meta = { a: metas[0], b: metas[1] };
  const state = { offset: { a: 0, b: 0 }, highlight: null, sticky: null, cursor_u: null, norm: normaliser(doc.normalise) };
  const tls = {}, overlays = {};
  for (const s of SIDES) {
    tls[s] = new LinkedTimeline($(`timeline-${s}`), apis[s], meta[s]);
    overlays[s] = new Overlay(tls[s], s, doc[s].name || ids[s], state);
    tls[s].afterFrame = () => overlays[s].draw();
  }
  // both views may range over the longer trace (plus the widest step offset): View clamps a window to its
  // duration, and a shorter B must still show the same shared window as A
  const shift = Math.max(0, ...doc.steps.pairs.map((p) => (p.a && p.b ? Math.abs(p.a.start_ns - p.b.start_ns) : 0)));
  const room = Math.max(meta.a.duration_ns || 1, meta.b.duration_ns || 1) + shift;
  for (const s of SIDES) tls[s].view.duration_ns = room;
  const redraw = () => { for (const s of SIDES) overlays[s].draw(); };
  const other = (s) => (s === "a" ? "b" : "a");

  // linked zoom and pan: the other timeline shows the same shared window (guarded against echo)
  let syncing = false;
  const follow = (src) => {
    if (syncing) return;
    syncing = true;
    const dst = other(src), v = tls[src].view, d = state.offset[dst] - state.offset[src];
    tls[dst].view.set(v.start_ns + d, v.end_ns + d);
    syncing = false;
    saveUrl();
  };
  for (const s of SIDES) tls[s].on("view", () => follow(s));

  /** Show shared window [u0, u1] (ns since the aligned step's start) in both timelines. */
  const showShared = (u0, u1) => tls.a.view.set(u0 + state.offset.a, u1 + state.offset.a);
  const sharedView = () => {
    const out = {};
    for (const s of SIDES) out[s] = [tls[s].view.start_ns - state.offset[s], tls[s].view.end_ns - state.offset[s]];
    return out;
  };

  const pairs = doc.steps.pairs;
  let focus = doc.steps.focus;
  const setFocus = (k, frame = true) => {
    const p = pairs.find((x) => x.index === k) || pairs[0];
    if (!p) return;
    focus = p.index;
    for (const s of SIDES) state.offset[s] = p[s] ? p[s].start_ns : 0;
    if (frame) frameStep();
    else follow("a");
    redraw();
  };
  const frameStep = () => {
    const p = pairs.find((x) => x.index === focus);
    const span = Math.max(1000, ...SIDES.map((s) => (p && p[s] ? p[s].dur_ns : meta[s].duration_ns || 1)));
    showShared(-span * 0.03, span * 1.03);
  };

  // the URL: ?a&b[&steps] say what is compared, the fragment the view (shared window, aligned step)
  let urlTimer = 0;
  const saveUrl = () => {
    clearTimeout(urlTimer);
    urlTimer = setTimeout(() => {
      const [u0, u1] = sharedView().a;
      const f = new URLSearchParams({ focus: String(focus), start_ns: String(Math.round(u0)), end_ns: String(Math.round(u1)) });
      history.replaceState(null, "", `${location.pathname}${location.search}#${f}`);
    }, 150);
  };

  // the step selector, the steps box and the buttons
  const sel = $("focus-step");
  sel.replaceChildren(...pairs.map((p) => el("option", { value: String(p.index), selected: p.index === focus },
    `${p.index}: ${p.a ? p.a.name : "-"} / ${p.b ? p.b.name : "-"}${p.selected ? "" : " (not compared)"}`)));
  sel.addEventListener("change", () => setFocus(Number(sel.value)));
  $("steps").value = query.get("steps") || "";
  $("steps").addEventListener("keydown", (e) => {
    if (e.key !== "Enter") return;
    const q = new URLSearchParams(location.search);
    if (e.target.value.trim()) q.set("steps", e.target.value.trim()); else q.delete("steps");
    location.search = q.toString();
  });
  $("frame-step").addEventListener("click", frameStep);
  $("copy-link").addEventListener("click", async () => {
    const ok = await copyText(location.href);
    $("copy-link").textContent = ok ? "Copied" : "Copy failed";
    setTimeout(() => { $("copy-link").textContent = "Copy link"; }, 1500);
  });

  // the side panel
  renderHeadline($("diff-headline"), doc);
  renderFindings($("diff-findings"), doc);
  const rowHandlers = {
    hover: (r) => { state.highlight = r ? r.name : null; redraw(); },
    click: (r, i) => frameRow(r, i),
  };
  let table = renderRows($("diff-rows"), doc, rowHandlers);
  $("row-filter").addEventListener("input", (e) => { table = renderRows($("diff-rows"), doc, rowHandlers, e.target.value); });

  /** Frame a row's slices (in the aligned step) in both timelines at once, and keep them highlighted. */
  const frameRow = (r, i) => {
    const spans = [];
    for (const s of SIDES) {
      const f = r[`frame_${s}_ns`];
      if (f) spans.push([f[0] - state.offset[s], f[1] - state.offset[s]]);
    }
    if (!spans.length) return;
    const u0 = Math.min(...spans.map((x) => x[0])), u1 = Math.max(...spans.map((x) => x[1]));
    const span = Math.max(u1 - u0, 1000), pad = span * 0.08;
    showShared(u0 - pad, u0 + span + pad);
    for (const s of SIDES) if (r[`track_${s}`] !== null && r[`track_${s}`] !== undefined) tls[s].revealTrack(r[`track_${s}`]);
    state.sticky = r.name;
    table.select(i);
    redraw();
  };

  // gestures on each timeline; the keyboard belongs to A (B follows through the link)
  const lastHover = { a: null, b: null };
  let hoverSide = null; // the timeline the mouse is over
  for (const s of SIDES) {
    const tl = tls[s];
    attachInput(tl, {
      keys: s === "a",
      select: (id) => {
        const h = lastHover[s];
        if (!h || h.id !== id || !h.name) return;
        state.sticky = state.norm(h.name);
        const i = doc.rows.findIndex((r) => r.name === state.sticky);
        if (i >= 0) table.select(i);
        redraw();
      },
      clear: () => { state.sticky = null; tl.area = null; redraw(); },
      areaDone: () => { tl.area = null; tl.requestDraw(); },
      hoverAt: (item, cx, cy) => {
        // every timeline hears every mouse move: only the one under the mouse (or the one that set the
        // highlight, when the mouse leaves it) may change what is highlighted
        lastHover[s] = item;
        if (!tl.hover && hoverSide !== s) return;
        hoverSide = tl.hover ? s : null;
        state.highlight = item && item.name ? state.norm(item.name) : null;
        state.cursor_u = tl.hover && tl.hover.x >= NAMES_PX ? tl.view.ns_at(tl.hover.x - NAMES_PX) - state.offset[s] : null;
        if (item) sliceTooltip(apis[s], item, cx, cy); else hideTooltip();
        redraw();
      },
      help: () => {},
      viewSettled: saveUrl,
    });
  }

  // restore the view from the fragment, else frame the aligned step
  const frag = new URLSearchParams(location.hash.slice(1));
  const fk = frag.has("focus") ? Number(frag.get("focus")) : focus;
  const u0 = Number(frag.get("start_ns")), u1 = Number(frag.get("end_ns"));
  setFocus(pairs.some((p) => p.index === fk) ? fk : focus, !(frag.has("start_ns") && u1 > u0));
  if (frag.has("start_ns") && u1 > u0) showShared(u0, u1);
  sel.value = String(focus);

  window.acceltraceDiff = {
    doc, timelines: tls, overlays, state,
    get shared() { return sharedView(); },
    frameRow: (i) => frameRow(doc.rows[i], i),
    showShared,
  };
}

function fatal(message) {
  for (const s of SIDES) $(`timeline-${s}`).dataset.state = "idle";
  $("diff-headline").replaceChildren(el("div", { class: "fatal", role: "alert" }, message));
}

main();
