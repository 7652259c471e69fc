// Track layout: lanes (CPU, Driver, PCIe, Execution units, Counters) > groups (process, device) > tracks,
// collapsible, with pinned tracks lifted into a band under the axis that does not scroll.

import { LANES, LANE_TITLES } from "../lib/util.js";
import { PCIE_GRAPH_PX } from "../tracks/pcie.js";

export const NAMES_PX = 230;      // left column of track names
export const AXIS_PX = 26;        // time axis band
export const ROW_PX = 18;          // one depth level of a slice track
export const HEADER_PX = 22;       // lane and group header rows
export const COUNTER_PX = 46;      // a counter graph
export const TRACK_PAD_PX = 3;     // space above and below a track's slices
export const DEFAULT_ROWS = 24;    // a track without launch calls shows this many depths at first (the rest folded)
export const DEPTH_STEP = 8;       // what the names column's - / + change the shown depths by

// Every depth of a track is drawn: `shown_rows` depths exactly, and every slice deeper than that in one
// "fold" row under them (their coverage, in the merged shade), which says how many levels it holds; the
// user unfolds it (click the fold, or the names column's + / all), and selecting, searching or following
// an arrow to a slice in it unfolds down to that slice. No `shown_rows` (the live page): all depths.

/** Depths a track has: max_depth + 1. */
export function depthCount(t) { return (t.max_depth ?? 0) + 1; }

/** Depths drawn one per row (the rest are in the fold row). */
export function shownDepths(t) {
  const all = depthCount(t);
  return t.shown_rows === undefined || t.shown_rows === null ? all : Math.max(1, Math.min(all, t.shown_rows));
}

/** Whether the track has a fold row (depths below shownDepths). */
export function isFolded(t) { return shownDepths(t) < depthCount(t); }

/** Rows of slices drawn: the shown depths and the fold row when there is one. */
export function sliceRows(t) { return shownDepths(t) + (isFolded(t) ? 1 : 0); }

/** The drawn row of a depth (deeper than the shown depths: the fold row). */
export function rowOfDepth(t, depth) { return Math.min(Math.max(0, depth || 0), shownDepths(t)); }

export function trackHeight(t) {
  if (t.lane === "counter") return COUNTER_PX;
  return sliceAreaHeight(t) + (t.lane === "pcie" ? PCIE_GRAPH_PX : 0);
}

/** Height of the slice rows of a track (a PCIe track has its bandwidth graph below them). */
export function sliceAreaHeight(t) {
  return sliceRows(t) * ROW_PX + 2 * TRACK_PAD_PX;
}

/**
 * The depths a track shows before the user says otherwise: down to its deepest runtime launch call
 * (`launch_depth`, so a launch and every op above it are drawn; one more row for what it calls), or all
 * of a track no deeper than DEFAULT_ROWS, else DEFAULT_ROWS.
 */
export function defaultDepths(t) {
  const all = depthCount(t);
  if (t.launch_depth !== undefined && t.launch_depth !== null) return Math.min(all, Math.max(t.launch_depth + 2, DEFAULT_ROWS));
  return Math.min(all, DEFAULT_ROWS);
}

/** Order tracks: lane order, then group (by its smallest sort_key, then name), then sort_key, then id. */
export function orderTracks(tracks) {
  const groupKey = new Map();
  for (const t of tracks) {
    const k = t.lane + "\u0000" + t.group_name;
    const cur = groupKey.get(k);
    if (cur === undefined || t.sort_key < cur) groupKey.set(k, t.sort_key);
  }
  const laneIdx = (l) => { const i = LANES.indexOf(l); return i < 0 ? LANES.length : i; };
  return [...tracks].sort((a, b) =>
    laneIdx(a.lane) - laneIdx(b.lane)
    || groupKey.get(a.lane + "\u0000" + a.group_name) - groupKey.get(b.lane + "\u0000" + b.group_name)
    || String(a.group_name).localeCompare(String(b.group_name), undefined, { numeric: true })
    || a.sort_key - b.sort_key
    || String(a.name).localeCompare(String(b.name), undefined, { numeric: true })
    || a.track_id - b.track_id);
}

export class Layout {
  constructor(tracks) {
    this.tracks = orderTracks(tracks);
    this.byId = new Map(this.tracks.map((t) => [t.track_id, t]));
    this.collapsed = new Set(); // keys "lane:<lane>" or "group:<lane>\0<group>"
    this.pinned = [];           // track ids, in pin order
    this.rows = [];             // scrolled rows
    this.pinnedRows = [];
    this.depthChosen = new Map(); // track id -> depths shown, as the user chose (the URL's dep=)
    for (const t of this.tracks) if (t.lane !== "counter") t.shown_rows = defaultDepths(t);
    this.build();
  }

  /** Show `n` depths of a track (clamped to 1..all); `chosen` records it for the URL. */
  setDepths(track_id, n, chosen = true) {
    const t = this.byId.get(track_id);
    if (!t || t.lane === "counter") return;
    t.shown_rows = Math.max(1, Math.min(depthCount(t), Math.round(n)));
    if (chosen) this.depthChosen.set(track_id, t.shown_rows);
    this.build();
  }

  /** Make sure `depth` of a track is drawn as its own row (unfolds down to it); true when it changed. */
  revealDepth(track_id, depth) {
    const t = this.byId.get(track_id);
    if (!t || t.lane === "counter" || depth === null || depth === undefined || depth < shownDepths(t)) return false;
    this.setDepths(track_id, depth + 1);
    return true;
  }

  /** Server facts that change the defaults (per track launch_depth); choices already made stay. */
  applyDepthInfo(rows) {
    for (const r of rows || []) {
      const t = this.byId.get(r.track_id);
      if (!t) continue;
      t.launch_depth = r.launch_depth;
      t.depth_slices = r.counts; // slices per depth, for the fold row's label
      if (!this.depthChosen.has(t.track_id) && t.lane !== "counter") t.shown_rows = defaultDepths(t);
    }
    this.build();
  }

  /** The user's depth choices, [[track_id, depths], ...] (the URL's dep=). */
  chosenDepths() { return [...this.depthChosen.entries()]; }

  setChosenDepths(pairs) {
    for (const [id, n] of pairs) if (this.byId.has(id)) this.setDepths(id, n);
  }

  togglePin(track_id) {
    const i = this.pinned.indexOf(track_id);
    if (i >= 0) this.pinned.splice(i, 1); else if (this.byId.has(track_id)) this.pinned.push(track_id);
    this.build();
  }

  setPinned(ids) {
    this.pinned = ids.filter((id) => this.byId.has(id));
    this.build();
  }

  toggleCollapse(key) {
    if (this.collapsed.has(key)) this.collapsed.delete(key); else this.collapsed.add(key);
    this.build();
  }

  /** Rebuild the row lists: each row {kind, key, label, lane, y, h, track?, indent, collapsed?}. */
  build() {
    this.pinnedRows = [];
    let y = 0;
    for (const id of this.pinned) {
      const t = this.byId.get(id);
      const h = trackHeight(t);
      this.pinnedRows.push({ kind: "track", key: `pin:${id}`, label: t.name, sub: t.group_name, lane: t.lane, y, h, track: t, indent: 0, pinned: true });
      y += h;
    }
    this.pinnedHeight = y;

    this.rows = [];
    y = 0;
    let lane = null, group = null;
    for (const t of this.tracks) {
      if (this.pinned.includes(t.track_id)) continue;
      if (t.lane !== lane) {
        lane = t.lane; group = null;
        const key = `lane:${lane}`;
        const n = this.tracks.filter((x) => x.lane === lane).length;
        this.rows.push({ kind: "lane", key, label: `${LANE_TITLES[lane] || lane}  (${n})`, lane, y, h: HEADER_PX, indent: 0, collapsed: this.collapsed.has(key) });
        y += HEADER_PX;
      }
      if (this.collapsed.has(`lane:${lane}`)) continue;
      if (t.group_name !== group) {
        group = t.group_name;
        const key = `group:${lane}\u0000${group}`;
        this.rows.push({ kind: "group", key, label: String(group), lane, y, h: HEADER_PX, indent: 1, collapsed: this.collapsed.has(key) });
        y += HEADER_PX;
      }
      if (this.collapsed.has(`group:${lane}\u0000${group}`)) continue;
      const h = trackHeight(t);
      this.rows.push({ kind: "track", key: `track:${t.track_id}`, label: t.name, lane, y, h, track: t, indent: 2 });
      y += h;
    }
    this.height = y;
  }

  /** Where a track is drawn: {pinned, y, h} or the header row standing in for it when collapsed. */
  placeOf(track_id) {
    for (const r of this.pinnedRows) if (r.track.track_id === track_id) return { pinned: true, row: r, exact: true };
    const t = this.byId.get(track_id);
    if (!t) return null;
    let best = null;
    for (const r of this.rows) {
      if (r.kind === "track" && r.track.track_id === track_id) return { pinned: false, row: r, exact: true };
      if (r.kind === "lane" && r.lane === t.lane) best = r;
      if (r.kind === "group" && r.lane === t.lane && r.label === String(t.group_name)) best = r;
    }
    return best ? { pinned: false, row: best, exact: false } : null;
  }
}
