// Shared by the aggregate views: the page state in the URL's query string, the timeline link of a
// range or a slice, a tooltip, and a sortable table whose cells are text (never markup).

import { el, fmtDur } from "../lib/util.js";

/** The page state: ?view=&start_ns=&end_ns=&track=ID&track=ID&mode=&source=&q=&focus= (times ns relative). */
export function readState(search = location.search) {
  const p = new URLSearchParams(search);
  const num = (k) => (p.get(k) !== null && p.get(k) !== "" && Number.isFinite(Number(p.get(k))) ? Number(p.get(k)) : null);
  return {
    view: p.get("view") || "flame",
    start_ns: num("start_ns"),
    end_ns: num("end_ns"),
    tracks: p.getAll("track").map(Number).filter(Number.isFinite),
    mode: p.get("mode") === "bottom-up" ? "bottom-up" : "top-down",
    source: p.get("source") === "device" ? "device" : "cpu",
    q: p.get("q") || "",
    focus: p.get("focus") || "",
    orient: p.get("orient") === "flame" ? "flame" : "icicle",
    sql: p.get("sql") || "",
  };
}

export function writeState(state) {
  const p = new URLSearchParams();
  p.set("view", state.view);
  if (state.start_ns !== null) p.set("start_ns", String(Math.round(state.start_ns)));
  if (state.end_ns !== null) p.set("end_ns", String(Math.round(state.end_ns)));
  for (const t of state.tracks) p.append("track", String(t));
  if (state.mode !== "top-down") p.set("mode", state.mode);
  if (state.source !== "cpu") p.set("source", state.source);
  if (state.q) p.set("q", state.q);
  if (state.focus) p.set("focus", state.focus);
  if (state.orient !== "icicle") p.set("orient", state.orient);
  if (state.sql && state.view === "query") p.set("sql", state.sql);
  const url = `${location.pathname}?${p}`;
  if (url !== location.pathname + location.search) history.replaceState(null, "", url);
}

/** Query parameters of the range (and tracks) for the JSON twins. */
export function rangeParams(state, extra = {}) {
  const p = new URLSearchParams();
  if (state.start_ns !== null) p.set("start_ns", String(Math.round(state.start_ns)));
  if (state.end_ns !== null) p.set("end_ns", String(Math.round(state.end_ns)));
  for (const [k, v] of Object.entries(extra)) {
    if (Array.isArray(v)) for (const x of v) p.append(k, String(x));
    else if (v !== null && v !== undefined && v !== "") p.set(k, String(v));
  }
  return p;
}

/** The timeline's URL framing [start, end) (docs/ui.md "The URL"), optionally selecting a slice. */
export function timelineUrl(trace_id, start_ns, end_ns, slice_id = null) {
  const p = new URLSearchParams();
  p.set("s", String(Math.max(0, Math.round(start_ns))));
  p.set("e", String(Math.round(end_ns)));
  if (slice_id !== null && slice_id !== undefined) p.set("sel", String(slice_id));
  return `/t/${encodeURIComponent(trace_id)}#${p}`;
}

/** The views page of a range (relative ns) and tracks, opening `view` (the timeline's area selection). */
export function viewsUrl(trace_id, start_ns, end_ns, tracks = [], view = "flame") {
  const p = new URLSearchParams({ view });
  p.set("start_ns", String(Math.max(0, Math.round(start_ns))));
  p.set("end_ns", String(Math.round(end_ns)));
  for (const t of tracks) p.append("track", String(t));
  return `/t/${encodeURIComponent(trace_id)}/views?${p}`;
}

/** A select of the tree's source: CPU stacks, or device work under the op that launched it. */
export function sourceSelect(state) {
  const sel = el("select", { class: "source-select", title: "CPU stacks, or the kernels, memsets and copies under the call (and ops) that launched them" },
    el("option", { value: "cpu", text: "CPU stacks" }), el("option", { value: "device", text: "Device work by launching op" }));
  sel.value = state.source;
  return sel;
}

/** Opens a slice (by id) on the timeline, framed; the slice's time comes from GET /slices/{id}. */
export async function openSlice(api, slice_id) {
  const { slice } = await api.slice(slice_id);
  location.href = sliceTimelineUrl(api.id, slice.ts, slice.dur, slice.id);
}

/** A slice framed with room either side (its own duration, at least 1 us). */
export function sliceTimelineUrl(trace_id, ts_rel, dur, slice_id) {
  const pad = Math.max(dur, 1000);
  return timelineUrl(trace_id, ts_rel - pad, ts_rel + dur + pad, slice_id);
}

const tip = () => document.getElementById("view-tooltip");
export function showTip(x, y, lines) {
  const t = tip();
  t.textContent = lines.join("\n");
  t.hidden = false;
  const w = t.offsetWidth, h = t.offsetHeight;
  t.style.left = `${Math.min(x + 14, innerWidth - w - 6)}px`;
  t.style.top = `${y + 16 + h > innerHeight ? y - h - 8 : y + 16}px`;
}
export function hideTip() { tip().hidden = true; }

export function status(text, isError = false) {
  return el("div", { class: isError ? "view-status error" : "view-status", text });
}

export const pct = (part, whole) => (whole > 0 ? `${(100 * part / whole).toFixed(1)} %` : "-");
export const mean = (total, count) => (count > 0 ? total / count : null);

/**
 * A sortable table of plain rows. columns: [{key, title, num, fmt(row) -> text, value(row) -> sort key}].
 * onRow(row, tr) decorates a row (a click handler, a class). Returns {table, setRows(rows)}.
 */
export function sortableTable(columns, { sortKey, desc = true, onRow = null, onSort = null } = {}) {
  const table = el("table", { class: "vt" });
  const thead = el("thead"), tbody = el("tbody");
  table.append(el("colgroup", {}, columns.map((c) => el("col", { style: c.width ? `width:${c.width}` : null }))), thead, tbody);
  let rows = [], key = sortKey || columns[0].key, descending = desc;
  const head = el("tr");
  for (const c of columns) {
    const th = el("th", { class: c.num ? "num" : null, text: c.title, title: c.tip || c.title, dataset: { key: c.key } });
    th.addEventListener("click", () => {
      descending = key === c.key ? !descending : !!c.num;
      key = c.key;
      if (onSort) onSort(key, descending); else render();
    });
    head.append(th);
  }
  thead.append(head);
  const valueOf = (c, r) => (c.value ? c.value(r) : r[c.key]);
  function render() {
    for (const th of head.children) {
      th.classList.toggle("sorted", th.dataset.key === key);
      th.classList.toggle("asc", th.dataset.key === key && !descending);
    }
    const c = columns.find((x) => x.key === key);
    const sorted = onSort ? rows : [...rows].sort((a, b) => {
      const va = valueOf(c, a), vb = valueOf(c, b);
      const cmp = typeof va === "number" && typeof vb === "number" ? va - vb : String(va ?? "").localeCompare(String(vb ?? ""));
      return descending ? -cmp : cmp;
    });
    tbody.replaceChildren(...sorted.map((r) => rowOf(r)));
  }
  function rowOf(r) {
    const tr = el("tr");
    for (const c of columns) {
      const text = c.fmt ? c.fmt(r) : String(r[c.key] ?? "");
      tr.append(el("td", { class: [c.num ? "num" : "", c.key].join(" "), text, title: c.num ? null : text }));
    }
    if (onRow) onRow(r, tr);
    return tr;
  }
  return {
    table,
    rowOf,
    get sort() { return { key, desc: descending }; },
    setRows(r) { rows = r; render(); },
    renderHead() { for (const th of head.children) { th.classList.toggle("sorted", th.dataset.key === key); th.classList.toggle("asc", th.dataset.key === key && !descending); } },
  };
}

export const durCell = (k) => (r) => fmtDur(r[k]);
