// The trace page (/t/{id}): wires the timeline, side panels, search, URL state, sharing and upload, and
// exposes the documented test hooks on window.acceltrace (docs/ui.md).

import { Api } from "../lib/api.js";
import { Timeline } from "../timeline/timeline.js";
import { attachInput } from "../timeline/input.js";
import { Search } from "../panels/search.js";
import { renderDetails, renderArea, renderSummary, renderFindings, renderInfo } from "../panels/side_panels.js";
import { readFragment, writeFragment, copyText } from "../lib/url_state.js";
import { installDropTarget, rememberTracksInset, viewQuery } from "../panels/upload.js";
import { tracksInSpan } from "../timeline/hit.js";
import { showTooltip, hideTooltip, sliceTooltip } from "../panels/tooltip.js";
import { el, fmtCount } from "../lib/util.js";
import { Cursor } from "../timeline/cursor.js";
import { LiveFollower } from "../timeline/follow.js";
import { installSideResize, sideWidth } from "../panels/resize.js";
import { installTrackControls, applyTrackUrlState, trackUrlState, trackList, namesWidth } from "../panels/track_controls.js";
import { Bookmarks } from "../panels/bookmarks.js";
import { installNav } from "./trace_nav.js";
import { CriticalPath, renderCriticalPath } from "../tracks/critical_path.js";
import { areaViewsLink, installViewsButton } from "./views_link.js";
import { followHistory } from "./in_place.js";

const $ = (id) => document.getElementById(id);
const TOP_OVERLAYS = 3;           // passes whose overlay a fresh page shows: the biggest by total impact
const ANALYSIS_POLL_MS = 2000;    // where event streams fail: how often the analysis status is polled
const ANALYSIS_POLL_MAX = 900;    // ... and for how many polls at most

/**
 * Follow the trace's analysis status: the /analysis/events stream (one event per change), or polling
 * /analysis where event streams fail. `on` gets {state, version}.
 */
function followAnalysis(api, on) {
  let polls = 0, done = false;
  const poll = () => {
    if (done || ++polls > ANALYSIS_POLL_MAX) return;
    api.analysis().then((a) => { on(a); if (a.state !== "done") setTimeout(poll, ANALYSIS_POLL_MS); })
      .catch(() => setTimeout(poll, ANALYSIS_POLL_MS * 2));
  };
  if (typeof EventSource === "undefined") { poll(); return; }
  const es = new EventSource(api.analysisEventsUrl());
  let got = false;
  es.onmessage = (m) => {
    got = true;
    let st;
    try { st = JSON.parse(m.data); } catch (_) { return; }
    if (st.end) { es.close(); done = true; }
    on(st);
  };
  // a stream that never opened, or that the browser gave up on: poll instead
  es.onerror = () => { if (!got || es.readyState === EventSource.CLOSED) { es.close(); if (!done) poll(); } };
}

export async function main() {
  installDropTarget();
  installViewsButton();
  followHistory();
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
  if (meta.status === "ingesting") { // opened while it is ingested (a drop opens its page then): wait here, no reload
    try {
      meta = await untilIngested(api, $("timeline"));
    } catch (e) {
      return fatal(`Could not load this trace: ${e.message}`);
    }
  }
  if (meta.status && meta.status !== "ready" && meta.status !== "live") {
    return fatal(meta.status === "failed" ? `This trace failed to ingest: ${meta.error || "unknown error"}`
      : `This trace is ${meta.status}.`);
  }
  const root = $("timeline");
  // the timeline follows the side panel through its ResizeObserver; pw= in the URL wins over localStorage
  installSideResize($("side-resize"), $("side"), { initial_px: readFragment().panel_px, ondone: () => saveUrl() });
  const tl = new Timeline(root, api, meta);
  // what the tracks area leaves of the window: the next drop's upload says its page's width from it
  const keepInset = () => rememberTracksInset(window.innerWidth - tl.view.width_css_px);
  new ResizeObserver(keepInset).observe(root);
  addEventListener("pagehide", keepInset);
  installTrackControls(tl, () => saveUrl()); // filter, hide, reorder, depths, names width (f= hide= ord= nw=)
  const cursor = new Cursor(tl);
  const panes = { details: $("pane-details"), area: $("pane-area"), summary: $("pane-summary"), findings: $("pane-findings"),
                  info: $("pane-info"), bookmarks: $("pane-bookmarks"), path: $("pane-path") };
  const bookmarks = new Bookmarks(tl, panes.bookmarks, () => saveUrl()); // kept in the fragment (bm=)
  let analysis = null; // the /analysis answer once known: {state, version, passes}
  let selSeq = 0;
  let summaryLoaded = false;

  const showTab = (name) => {
    for (const b of document.querySelectorAll(".tabs button")) b.classList.toggle("active", b.dataset.tab === name);
    for (const [k, p] of Object.entries(panes)) p.hidden = k !== name;
    if (name === "info") renderInfo(panes.info, meta, analysis);
    if (name === "path") showPath(true);
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
    // a slice (or its chain's other end) in a track's fold is unfolded down to it, so the selection and
    // the arrows land on their own rows
    tl.revealDepths([s, ...(detail.chain?.slices || [])]);
    if (frame) tl.view.frame(s.ts, s.dur);
    else if (centre) { if (s.dur > tl.view.span_ns * 0.8) tl.view.frame(s.ts, s.dur); else tl.view.centre(s.ts + s.dur / 2); }
    if (frame || centre || reveal) tl.revealTrack(s.track_id, s.depth);
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
      pinned: tl.layout.pinned, overlays: [...tl.overlays], depths: tl.layout.chosenDepths(), bookmarks: bookmarks.list,
      ...trackUrlState(tl), panel_px: sideWidth($("side")),
    }), 150);
  };
  tl.on("view", saveUrl);
  const frag = readFragment();
  const fresh = !location.hash;
  if (namesView(frag)) tl.view.set(frag.start_ns, frag.end_ns);
  if (frag.pinned.length) tl.layout.setPinned(frag.pinned);
  if (frag.depths.length) tl.layout.setChosenDepths(frag.depths);
  applyTrackUrlState(tl, frag);
  // how deep each track is and where its launch calls are: the default fold of deep tracks
  api.depths().then((d) => { tl.layout.applyDepthInfo(d.tracks); tl.relayout(); })
    .catch((e) => console.warn(`depth info unavailable: ${e.message}`));
  for (const p of frag.overlays) tl.overlays.add(p);
  bookmarks.restore(frag.bookmarks);
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
      try {
        renderArea(panes.area, await api.aggregate(a, b, ids), (q) => search.run(q));
        if (!api.live) panes.area.prepend(areaViewsLink(a, b, ids)); // flame graph, trees, events of the area
      } catch (e) { panes.area.textContent = `Aggregation failed: ${e.message}`; }
    },
    hoverAt: (item, cx, cy, nameRow) => {
      cursor.draw(tl.hover && !nameRow && cx !== undefined ? tl.hover.x : null);
      if (!$("track-pop").hidden) hideTooltip(); // a track's menu or the hidden list is open over the tracks
      else if (item) sliceTooltip(api, item, cx, cy);
      else if (nameRow && nameRow.row.kind === "track" && !tl.trackDrag) { // not while a track is dragged (timeline/track_drag.js)
        showTooltip([[nameRow.row.track.name, "b"], [`${nameRow.row.track.group_name}`], ["drag to reorder · ⋮ or right-click: hide, depths, move · ◇ pins"]], cx, cy);
      }
      else hideTooltip();
    },
    help: () => { $("help").hidden = !$("help").hidden; },
    viewSettled: saveUrl,
  });

  // findings: a grouped side list plus shaded regions, one toggle per pass; they appear when the passes
  // finish (the analysis event stream), without a reload
  const ontoggle = (p, on) => { if (on) tl.overlays.add(p); else tl.overlays.delete(p); tl.requestDraw(); saveUrl(); };
  const onjump = (f) => {
    if (f.ts !== null && f.ts !== undefined) tl.view.frame(f.ts, f.dur || 0);
    if (f.track_id !== null && f.track_id !== undefined) tl.revealTrack(f.track_id);
    if (f.slice_id !== null && f.slice_id !== undefined) select(f.slice_id);
  };
  let groups = null, overlaysChosen = !fresh, loadedVersion;
  const showFindings = () => renderFindings(panes.findings, groups, tl.overlays, analysis, { ontoggle, onjump });
  const loadFindings = async (version) => {
    if (version === loadedVersion) return;
    loadedVersion = version;
    try {
      const [list, g, a] = await Promise.all([api.findingsAt(version), api.findingsGroups(version), api.analysis()]);
      if (version !== loadedVersion) return;
      analysis = a;
      groups = g;
      const findings = list.findings || [];
      // a fresh page shades the top passes by impact (not all of them); a shared link keeps its own
      if (!overlaysChosen) { for (const p of (g.passes || []).slice(0, TOP_OVERLAYS)) tl.overlays.add(p.pass); overlaysChosen = true; }
      tl.setFindings(findings);
      saveUrl();
      $("findings-count").textContent = findings.length ? String(findings.length) : "";
      root.dataset.findings = String(findings.length);
      root.dataset.analysis = a.state || "";
      showFindings();
      if (!panes.info.hidden) renderInfo(panes.info, meta, analysis);
    } catch (e) {
      panes.findings.textContent = `Findings unavailable: ${e.message}`;
    }
  };
  // the critical path: a toggle in the Path tab draws it over the timeline (tracks/critical_path.js)
  let pathDoc = null, pathErr = null;
  const path = tl.criticalPath = new CriticalPath(tl, api.base, { onchange: () => { if (!panes.path.hidden) showPath(false); } });
  const ontogglePath = (on) => { path.setOn(on); showPath(false); };
  const showPath = (load) => {
    const doc = path.doc || pathDoc;
    renderCriticalPath(panes.path, doc, path.on, { ontoggle: ontogglePath, error: path.error || pathErr });
    if (load && !doc && !api.live) {
      path.summary().then((d) => { pathDoc = d; pathErr = null; }).catch((e) => { pathErr = e.message; })
        .finally(() => { if (!panes.path.hidden) showPath(false); });
    }
  };
  const onAnalysis = (st) => {
    root.dataset.analysis = st.state || "";
    if (st.version && st.version !== loadedVersion) { pathDoc = null; path.doc = null; if (path.on) path.fetch(true); }
    if (st.version) loadFindings(st.version);
    else { analysis = { ...(analysis || {}), ...st, passes: analysis?.passes || [] }; showFindings(); }
  };
  if (!api.live) followAnalysis(api, onAnalysis);
  else panes.findings.append(el("p", { class: "muted" }, "The analysis passes run when the capture stops; their findings appear then."));

  // every accepted file with warnings says so here, not only in the server log (a live trace's loss is
  // in its live bar, counted as it happens: a count from when the page opened would be stale)
  const showIngestWarnings = () => {
    const wn = meta.warning_count ?? (meta.warnings || []).length, dropped = meta.dropped_events ?? 0;
    const lost = api.live ? 0 : meta.lost_events ?? 0;
    const b = $("ingest-warnings");
    b.hidden = !(wn || dropped || lost);
    if (b.hidden) return;
    b.textContent = [wn ? `${fmtCount(wn)} ingest warning${wn === 1 ? "" : "s"}` : "", dropped ? `${fmtCount(dropped)} dropped events` : "",
                     lost ? `${fmtCount(lost)} lost events` : ""].filter(Boolean).join(" \u00b7 ");
    b.title = (meta.warnings || []).slice(0, 5).join("\n") || "see the Info tab";
  };
  $("ingest-warnings").addEventListener("click", () => showTab("info"));
  showIngestWarnings();

  $("copy-link").addEventListener("click", async () => {
    writeFragment({ start_ns: tl.view.start_ns, end_ns: tl.view.end_ns, selected: tl.selected ? tl.selected.id : null,
                    pinned: tl.layout.pinned, overlays: [...tl.overlays], depths: tl.layout.chosenDepths(), bookmarks: bookmarks.list,
                    ...trackUrlState(tl), panel_px: sideWidth($("side")) });
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
    // the capture stopped and was published under this id: this page becomes the analysed trace, in place
    const published = async () => {
      api.goFinal();
      meta = await api.meta();
      clear(); // live slice ids are not the published trace's
      follower.publish(meta);
      showIngestWarnings(); // the finished file's counts: lost events from its trailer
      summaryLoaded = false;
      if (!panes.summary.hidden) showTab("summary");
      panes.findings.replaceChildren();
      followAnalysis(api, onAnalysis);
      api.depths().then((d) => { tl.layout.applyDepthInfo(d.tracks); tl.relayout(); }).catch(() => {});
    };
    follower = new LiveFollower(tl, api, meta, {
      status: $("live-status"), button: $("follow"),
      onfinal: (m) => { if (m.status === "ready") published().catch(() => location.reload()); },
    });
    if (!fresh && frag.start_ns !== null) follower.follow(false); // a shared view of a live trace stays put
  }

  // bookmarks, measure, flow stepping ([ ]), the command palette and the keyboard help: one action table
  const nav = installNav({
    tl, bookmarks, select, clear, showTab, saveUrl, live: !!api.live,
    passes: () => (groups?.passes || []).map((p) => p.pass),
    toggleOverlay: (p) => { ontoggle(p, !tl.overlays.has(p)); showFindings(); },
  });

  renderDetails(panes.details, null);
  showTab("details");
  exposeHooks(tl, select, follower, trace_id);
  window.acceltrace.nav = nav.hooks;
}

function exposeHooks(tl, select, follower, trace_id) {
  const hooks = {
    select: (id) => select(id, { frame: true }),
    timeline: tl,
  };
  // the critical path overlay: {on, drawn (segments the last frame drew)}; toggle(on) as the Path tab's checkbox
  hooks.criticalPath = { get on() { return tl.criticalPath?.on ?? false; }, get drawn() { return tl.criticalPath?.drawn ?? 0; } };
  // live traces: {trace_id, head_ns, drawn_head_ns} (docs/ui.md); null values once the trace is final
  hooks.live = follower ? follower.state : { trace_id, head_ns: null, drawn_head_ns: null };
  Object.defineProperty(hooks, "view", { enumerable: true, get: () => ({ start_ns: tl.view.start_ns, end_ns: tl.view.end_ns }) });
  Object.defineProperty(hooks, "selected", { enumerable: true, get: () => (tl.selected ? tl.selected.id : null) });
  Object.defineProperty(hooks, "flows", { enumerable: true, get: () => tl.drawnFlows.map((p) => [...p]) });
  // every track in drawn order, [{id, name, lane, group, pinned, hidden, filtered, shown, depths, y, h}] (docs/ui.md)
  Object.defineProperty(hooks, "tracks", { enumerable: true, get: () => trackList(tl) });
  Object.defineProperty(hooks, "names_px", { enumerable: true, get: namesWidth }); // the names column's width now
  window.acceltrace = hooks;
}

/** Whether the URL's fragment names a view (else the page opens the whole trace). */
function namesView(frag) {
  return frag.start_ns !== null && frag.end_ns !== null && frag.end_ns > frag.start_ns;
}

function fatal(message) {
  const root = $("timeline");
  root.dataset.state = "idle";
  root.replaceChildren(el("div", { class: "fatal", role: "alert" }, message));
}

const INGEST_POLL_MS = 250; // where the progress stream fails or ends early: how often the row is read

/**
 * Wait for an ingesting trace: its progress in a box over the timeline (the server's progress event
 * stream, polling where that fails or ends before the trace does), then its metadata once it is ready
 * (or failed). The page's modules are loaded meanwhile, so the timeline starts as soon as the trace is
 * published (timeline data-state "ingesting" until then).
 */
function untilIngested(api, root) {
  root.dataset.state = "ingesting";
  const label = el("div", { class: "ingest-label" }, "Ingesting this trace…");
  const fill = el("div", { class: "bar-fill" });
  const box = el("div", { class: "ingest-wait", role: "status" }, label, el("div", { class: "bar" }, fill));
  root.append(box);
  const show = (st) => {
    const p = Math.max(0, Math.min(1, st.progress || 0));
    // the share of the input read: the server holds it at 0.99 from the last block read until the trace is
    // published (links, depths, the write and the level-of-detail build: ~40 % of a large trace's time); no
    // share is known of an upload of undeclared length until it is all there (0 until then)
    label.textContent = p >= 0.99 ? "Input read; building the trace…"
      : p > 0 ? `Ingesting this trace… ${Math.round(p * 100)} %` : "Ingesting this trace…";
    fill.style.width = `${Math.round(p * 95)}%`;
  };
  return new Promise((resolve, reject) => {
    let done = false;
    const finish = async () => {
      if (done) return;
      done = true;
      try { resolve(await api.meta()); } catch (e) { reject(e); } finally { box.remove(); }
    };
    const poll = async () => {
      while (!done) {
        let st;
        try { st = await api.meta(); } catch (e) { done = true; box.remove(); reject(e); return; }
        if (st.status !== "ingesting") { done = true; box.remove(); resolve(st); return; }
        show(st);
        await new Promise((r) => setTimeout(r, INGEST_POLL_MS));
      }
    };
    if (!window.EventSource) { poll(); return; }
    // a page that opens the whole trace (no view in its URL) says the width its tracks will have: the server
    // builds its first tiles as the trace is ready
    const es = new EventSource(`${api.base}/progress${namesView(readFragment()) ? "" : viewQuery()}`);
    es.onmessage = (m) => {
      let st;
      try { st = JSON.parse(m.data); } catch (_) { return; }
      if (st.status === "ingesting") { show(st); return; }
      es.close();
      finish();
    };
    // the stream failed, or the server ended it while the trace still ingests (it caps a stream's length)
    es.onerror = () => { es.close(); if (!done) poll(); };
  });
}
