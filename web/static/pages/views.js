// The aggregate views page (/t/{id}/views, docs/ui.md): one range of a trace (?start_ns=&end_ns=&track=,
// the whole trace by default) seen as a flame graph, call trees, the op-to-kernel rollup, an events
// table and SQL. The open view and its settings live in the query string (views/common.js).

import { getJson, errorFrom } from "../lib/api.js";
import { fmtTime } from "../lib/util.js";
import { el } from "../lib/util.js";
import { readState, writeState, rangeParams, timelineUrl, status } from "../views/common.js";
import { mountFlame } from "../views/flame.js";
import { mountTree } from "../views/tree_table.js";
import { mountRollup } from "../views/rollup_table.js";
import { mountEvents } from "../views/events_table.js";
import { mountQuery } from "../views/query.js";
import { mountInfo } from "../views/info.js";

const VIEWS = { flame: mountFlame, tree: mountTree, rollup: mountRollup, events: mountEvents, query: mountQuery, info: mountInfo };
const TRACK_VIEWS = new Set(["flame", "tree", "events"]); // the rollup, SQL and info are of the range or the trace

class ViewsApi {
  constructor(id, state) {
    this.id = id;
    this.base = `/api/traces/${encodeURIComponent(id)}`;
    this.state = state;
  }
  tree(mode, source = this.state.source) {
    return getJson(`${this.base}/tree?${rangeParams(this.state, { track: this.state.tracks, mode, source: source === "cpu" ? null : source })}`);
  }
  tables() { return getJson(`${this.base}/tables`); }
  analysis() { return getJson(`${this.base}/analysis`); }
  rollup() { return getJson(`${this.base}/rollup?${rangeParams(this.state)}`); }
  events({ tracks, lane, q, sort, desc, offset, limit }) {
    return getJson(`${this.base}/events?${rangeParams(this.state, { track: tracks, lane, q, sort, desc: desc ? "true" : null, offset, limit })}`);
  }
  slice(id) { return getJson(`${this.base}/slices/${encodeURIComponent(id)}`); }
  async query(sql, max_rows) {
    const r = await fetch(`${this.base}/query`, { method: "POST", headers: { "Content-Type": "application/json" },
                                                 body: JSON.stringify({ sql, max_rows }) });
    if (!r.ok) throw await errorFrom(r);
    return r.json();
  }
}

function main() {
  const trace_id = document.body.dataset.traceId;
  const meta = JSON.parse(document.getElementById("trace-meta").textContent || "null") || {};
  const state = readState();
  window.acceltrace = { state };
  const main = document.getElementById("view-main");
  if (meta.status && meta.status !== "ready") {
    main.replaceChildren(status(`This trace is ${meta.status}: its views are available once it is ready.`, true));
    return;
  }
  const duration = meta.duration_ns ?? null;
  const api = new ViewsApi(trace_id, state);
  api.meta = meta;
  const trackSel = trackSelect(meta.tracks || [], state);
  const save = () => { writeState(state); header(); };
  const tabs = [...document.querySelectorAll(".view-tabs button")];

  function header() {
    const s = state.start_ns ?? 0, e = state.end_ns ?? duration;
    const whole = state.start_ns === null && state.end_ns === null;
    document.getElementById("range-label").textContent = (whole ? "whole trace" : `${fmtTime(s)} – ${fmtTime(e)}`)
      + (state.tracks.length ? ` · ${state.tracks.length} track${state.tracks.length > 1 ? "s" : ""}` : "");
    document.getElementById("timeline-link").href = e !== null ? timelineUrl(trace_id, s, e) : `/t/${encodeURIComponent(trace_id)}`;
    document.getElementById("whole-range").disabled = whole && !state.tracks.length;
    for (const b of tabs) b.classList.toggle("active", b.dataset.view === state.view);
    trackSel.value = state.tracks.length === 1 ? String(state.tracks[0]) : state.tracks.length ? "many" : "";
    trackSel.hidden = !TRACK_VIEWS.has(state.view);
  }

  function open(view) {
    if (!VIEWS[view]) view = "flame";
    if (view !== state.view) { state.q = ""; state.focus = ""; }
    state.view = view;
    save();
    VIEWS[view](main, { api, state, save });
  }

  for (const b of tabs) b.addEventListener("click", () => open(b.dataset.view));
  document.getElementById("range-label").after(trackSel);
  trackSel.addEventListener("change", () => {
    if (trackSel.value === "many") return;
    state.tracks = trackSel.value === "" ? [] : [Number(trackSel.value)];
    state.focus = "";
    open(state.view);
  });
  document.getElementById("whole-range").addEventListener("click", () => {
    state.start_ns = null; state.end_ns = null; state.tracks = []; state.focus = "";
    open(state.view);
  });
  open(state.view);
}

/** One track (a thread, a stream) or all of them; an area's several tracks show as one entry. */
function trackSelect(tracks, state) {
  const sel = el("select", { id: "track-select", title: "the tracks the flame graph, call tree and events read" },
    el("option", { value: "", text: "all tracks" }));
  if (state.tracks.length > 1) sel.append(el("option", { value: "many", text: `${state.tracks.length} tracks (the area)` }));
  const groups = new Map();
  for (const t of tracks) {
    if (t.lane === "counter") continue;
    const g = `${t.lane} · ${t.group_name || ""}`;
    if (!groups.has(g)) groups.set(g, el("optgroup", { label: g }));
    groups.get(g).append(el("option", { value: String(t.track_id), text: t.name }));
  }
  sel.append(...groups.values());
  return sel;
}

main();
