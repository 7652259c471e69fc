// The trace page (/t/{id}): wires the timeline, side panels, search, URL state, sharing and upload, and
// exposes the documented test hooks on window.acceltrace (docs/ui.md).

import { Api } from "../lib/api.js";
import { Timeline } from "../timeline/timeline.js";
import { attachInput } from "../timeline/input.js";
import { Search } from "../panels/search.js";
import { renderDetails, renderArea, renderSummary, renderFindings } from "../panels/side_panels.js";
import { readFragment, writeFragment, copyText } from "../lib/url_state.js";
import { installDropTarget } from "../panels/upload.js";
import { tracksInSpan } from "../timeline/hit.js";
import { showTooltip, hideTooltip, sliceTooltip } from "../panels/tooltip.js";
import { el } from "../lib/util.js";
import { Cursor } from "../timeline/cursor.js";
import { LiveFollower } from "../timeline/follow.js";

const $ = (id) => document.getElementById(id);

async function main() {
  installDropTarget();
  const embedded = JSON.parse($("trace-meta").textContent || "null");
  const trace_id = document.body.dataset.traceId;
  const api = new Api(trace_id);
  let meta = embedded && embedded.tracks ? embedded : null;
  try {
    if (!meta) meta = await api.meta();
    if (meta.status === "live") { // a running capture: the same timeline, fed from /api/live/{id}
      api.goLive();
      meta = await api.meta();
    }
  } catch (e) {
    if (e.code === "not_live") { location.reload(); return; } // it finished meanwhile
    return fatal(`Could not load this trace: ${e.message}`);
  }
  if (meta.status && meta.status !== "ready" && meta.status !== "live") {
    return fatal(meta.status === "failed" ? `This trace failed to ingest: ${meta.error || "unknown error"}`
      : "This trace is still being ingested; the page reloads when it is ready.", meta.status === "ingesting");
  }
  const root = $("timeline");
  const tl = new Timeline(root, api, meta);
  const cursor = new Cursor(tl);
  const panes = { details: $("pane-details"), area: $("pane-area"), summary: $("pane-summary"), findings: $("pane-findings") };
  let selSeq = 0;
  let summaryLoaded = false;

  const showTab = (name) => {
    for (const b of document.querySelectorAll(".tabs button")) b.classList.toggle("active", b.dataset.tab === name);
    for (const [k, p] of Object.entries(panes)) p.hidden = k !== name;
    if (name === "summary" && !summaryLoaded) {
      summaryLoaded = true;
      renderSummary(panes.summary, null);
      api.summary().then((s) => renderSummary(panes.summary, s, (q) => search.run(q)))
        .catch((e) => { panes.summary.textContent = `Summary unavailable: ${e.message}`; });
    }
  };
  for (const b of document.querySelectorAll(".tabs button")) b.addEventListener("click", () => showTab(b.dataset.tab));

  /** Select a slice by id: fetch its details and chain, optionally frame it and reveal its track. */
  const select = async (id, { frame = false, centre = false, reveal = false } = {}) => {
    const seq = ++selSeq;
    let detail;
    try {
      detail = await api.slice(id);
    } catch (e) {
      if (seq === selSeq) { panes.details.textContent = `Could not load slice ${id}: ${e.message}`; showTab("details"); }
      return;
    }
    if (seq !== selSeq) return;
    const s = detail.slice;
    if (frame) tl.view.frame(s.ts, s.dur);
    else if (centre) { if (s.dur > tl.view.span_ns * 0.8) tl.view.frame(s.ts, s.dur); else tl.view.centre(s.ts + s.dur / 2); }
    if (frame || centre || reveal) tl.revealTrack(s.track_id);
    tl.setSelection(detail);
    renderDetails(panes.details, detail, (sid) => select(sid, { centre: true }));
    showTab("details");
    saveUrl();
  };

  const clear = () => {
    selSeq++;
    $("help").hidden = true;
    tl.area = null;
    tl.setSelection(null);
    renderDetails(panes.details, null);
    hideTooltip();
    saveUrl();
  };

  const search = new Search(api, { input: $("search"), next: $("search-next"), prev: $("search-prev"), count: $("search-count") },
    (hit) => select(hit.id, { centre: true }));

  // URL state: restore once, then keep it current (debounced).
  let urlTimer = 0;
  const saveUrl = () => {
    clearTimeout(urlTimer);
    urlTimer = setTimeout(() => writeFragment({
      start_ns: tl.view.start_ns, end_ns: tl.view.end_ns, selected: tl.selected ? tl.selected.id : null,
      pinned: tl.layout.pinned, overlays: [...tl.overlays],
    }), 150);
  };
  tl.on("view", saveUrl);
  const frag = readFragment();
  const fresh = !location.hash;
  if (frag.start_ns !== null && frag.end_ns !== null && frag.end_ns > frag.start_ns) tl.view.set(frag.start_ns, frag.end_ns);
  if (frag.pinned.length) tl.layout.setPinned(frag.pinned);
  for (const p of frag.overlays) tl.overlays.add(p);
  tl.relayout();
  // the shared view keeps its time range; the selection's track is scrolled into sight
  if (frag.selected !== null) select(frag.selected, { reveal: true });

  attachInput(tl, {
    select: (id, o) => select(id, o),
    clear,
    areaDone: async (area) => {
      const a = Math.min(area.start_ns, area.end_ns), b = Math.max(area.start_ns, area.end_ns);
      const ids = tracksInSpan(tl, area.y0, area.y1);
      showTab("area");
      renderArea(panes.area, null);
      panes.area.append(el("p", { class: "muted" }, "Aggregating…"));
      try { renderArea(panes.area, await api.aggregate(a, b, ids), (q) => search.run(q)); }
      catch (e) { panes.area.textContent = `Aggregation failed: ${e.message}`; }
    },
    hoverAt: (item, cx, cy, nameRow) => {
      cursor.draw(tl.hover && !nameRow && cx !== undefined ? tl.hover.x : null);
      if (item) sliceTooltip(api, item, cx, cy);
      else if (nameRow && nameRow.row.kind === "track") showTooltip([[nameRow.row.track.name, "b"], [`${nameRow.row.track.group_name}`], ["click ◇ to pin"]], cx, cy);
      else hideTooltip();
    },
    help: () => { $("help").hidden = !$("help").hidden; },
    viewSettled: saveUrl,
  });

  // findings: a side list plus shaded regions, one toggle per pass
  const drawFindings = (list) => renderFindings(panes.findings, list, tl.overlays, {
    ontoggle: (p, on) => { if (on) tl.overlays.add(p); else tl.overlays.delete(p); tl.requestDraw(); saveUrl(); },
    onjump: (f) => {
      if (f.ts !== null && f.ts !== undefined) tl.view.frame(f.ts, f.dur || 0);
      if (f.track_id !== null && f.track_id !== undefined) tl.revealTrack(f.track_id);
      if (f.slice_id !== null && f.slice_id !== undefined) select(f.slice_id);
    },
  });
  api.findings().then((r) => {
    const list = r.findings || [];
    if (fresh) for (const f of list) tl.overlays.add(f.pass);
    tl.setFindings(list);
    saveUrl();
    $("findings-count").textContent = list.length ? String(list.length) : "";
    drawFindings(list);
  }).catch((e) => { panes.findings.textContent = `Findings unavailable: ${e.message}`; });

  $("copy-link").addEventListener("click", async () => {
    writeFragment({ start_ns: tl.view.start_ns, end_ns: tl.view.end_ns, selected: tl.selected ? tl.selected.id : null,
                    pinned: tl.layout.pinned, overlays: [...tl.overlays] });
    const ok = await copyText(location.href);
    const b = $("copy-link");
    b.textContent = ok ? "Copied" : "Copy failed";
    setTimeout(() => { b.textContent = "Copy link"; }, 1500);
  });
  $("help-button").addEventListener("click", () => { $("help").hidden = !$("help").hidden; });
  $("help").addEventListener("click", () => { $("help").hidden = true; });
  $("reset-view").addEventListener("click", () => tl.view.reset());

  let follower = null;
  if (api.live) {
    follower = new LiveFollower(tl, api, meta, {
      status: $("live-status"), button: $("follow"),
      onfinal: (m) => { if (m.status === "ready") setTimeout(() => location.reload(), 300); },
    });
    if (!fresh && frag.start_ns !== null) follower.follow(false); // a shared view of a live trace stays put
  }

  renderDetails(panes.details, null);
  showTab("details");
  exposeHooks(tl, select, follower, trace_id);
}

function exposeHooks(tl, select, follower, trace_id) {
  const hooks = {
    select: (id) => select(id, { frame: true }),
    timeline: tl,
  };
  // live traces: {trace_id, head_ns, drawn_head_ns} (docs/ui.md); null values once the trace is final
  hooks.live = follower ? follower.state : { trace_id, head_ns: null, drawn_head_ns: null };
  Object.defineProperty(hooks, "view", { enumerable: true, get: () => ({ start_ns: tl.view.start_ns, end_ns: tl.view.end_ns }) });
  Object.defineProperty(hooks, "selected", { enumerable: true, get: () => (tl.selected ? tl.selected.id : null) });
  Object.defineProperty(hooks, "flows", { enumerable: true, get: () => tl.drawnFlows.map((p) => [...p]) });
  window.acceltrace = hooks;
}

function fatal(message, reload = false) {
  const root = $("timeline");
  root.dataset.state = "idle";
  root.replaceChildren(el("div", { class: "fatal", role: "alert" }, message));
  if (reload) setTimeout(() => location.reload(), 2000);
}

main();
