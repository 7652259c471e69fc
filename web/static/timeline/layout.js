// Track layout: lanes (CPU, Driver, PCIe, Execution units, Counters) > groups (process, device) > tracks,
// collapsible, with pinned tracks lifted into a band under the axis that does not scroll.

import { LANES, LANE_TITLES } from "../lib/util.js";
import { PCIE_GRAPH_PX } from "../tracks/pcie.js";
import { parseTrackFilter, trackMatches } from "./track_filter.js";

export const NAMES_DEFAULT_PX = 230;
export const NAMES_MIN_PX = 120;
export const NAMES_MAX_PX = 640;
// Left column of track names. A live binding (every module that imports it sees the new width): one
// names column width per page, changed by dragging its edge (setNamesWidth; the URL's nw=).
export let NAMES_PX = NAMES_DEFAULT_PX;

/** Set the names column's width (clamped to NAMES_MIN_PX..NAMES_MAX_PX); returns the width set. */
export function setNamesWidth(px) {
  const w = Number(px);
  NAMES_PX = Number.isFinite(w) ? Math.round(Math.max(NAMES_MIN_PX, Math.min(NAMES_MAX_PX, w))) : NAMES_DEFAULT_PX;
  return NAMES_PX;
}
export const AXIS_PX = 26;        // time axis band
export const ROW_PX = 18;          // one depth level of a slice track
export const HEADER_PX = 22;       // lane and group header rows
export const COUNTER_PX = 46;      // a counter graph
export const TRACK_PAD_PX = 3;     // space above and below a track's slices
export const DEFAULT_ROWS = 24;    // a track without launch calls shows this many depths at first (the rest folded)
export const DEPTH_STEP = 8;
export const STATUS_PX = 16;       // the status line at the foot of the names column (level, span, loading)
export const MENU_RIGHT_PX = 36;   // a track's ⋮ menu button starts this far left of the names column's edge       // what the names column's - / + change the shown depths by

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

// one collator for every comparison: localeCompare with options builds one per call (seconds for 10 k tracks)
const NATURAL = new Intl.Collator(undefined, { numeric: true });

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
    || NATURAL.compare(String(a.group_name), String(b.group_name))
    || a.sort_key - b.sort_key
    || NATURAL.compare(String(a.name), String(b.name))
    || a.track_id - b.track_id);
}

// Track control (the user's, kept in the URL): a filter (track_filter.js), tracks hidden one by one, and
// an order per group (userOrder: each reordered group's tracks in full, in their order). Both are
// applied here when they change, in one pass over the tracks, never per frame. Pinned tracks ignore the
// filter (pinning is an explicit choice); hiding a pinned track unpins it. A track the user goes to (a
// search hit, an arrow, a finding) is shown again: unhidden, or let through the filter (`revealed`) until
// the filter changes. Counts of what is hidden or filtered out are in `counts`, and each lane and group
// header says "n of m", so nothing disappears silently.

export class Layout {
  constructor(tracks) {
    this.defaultOrder = orderTracks(tracks);
    this.tracks = this.defaultOrder;
    this.byId = new Map(this.tracks.map((t) => [t.track_id, t]));
    this.collapsed = new Set(); // keys "lane:<lane>" or "group:<lane>\0<group>"
    this.pinned = [];           // track ids, in pin order
    this.rows = [];             // scrolled rows
    this.pinnedRows = [];
    this.depthChosen = new Map(); // track id -> depths shown, as the user chose (the URL's dep=)
    this.hidden = new Set();    // track ids the user hid (the URL's hide=)
    this.userOrder = [];        // track ids of reordered groups, each group complete (the URL's ord=)
    this.filter = parseTrackFilter("");
    this.filteredOut = new Set(); // track ids the filter excludes
    this.revealed = new Set();  // excluded by the filter, but shown because the user went to them
    this.counts = { total: this.tracks.length, shown: this.tracks.length, hidden: 0, filtered: 0 };
    for (const t of this.tracks) if (t.lane !== "counter") t.shown_rows = defaultDepths(t);
    this.build();
  }

  /**
   * Take the user's choices from the layout this one replaces (a live trace's new tracks): filter,
   * hidden tracks, order, depths, collapsed headers; ids this layout does not have are dropped.
   */
  adoptChoices(prev) {
    this.collapsed = new Set(prev.collapsed);
    this.hidden = new Set([...prev.hidden].filter((id) => this.byId.has(id)));
    this.userOrder = prev.userOrder.filter((id) => this.byId.has(id));
    for (const [id, n] of prev.depthChosen) if (this.byId.has(id)) this.setDepths(id, n);
    this.applyOrder();
    this.setFilter(prev.filter.text);
  }

  /** Whether a track has a row (pinned, or not hidden and through the filter); collapsed headers aside. */
  isShown(track_id) {
    if (this.hidden.has(track_id)) return false;
    return this.pinned.includes(track_id) || !this.filteredOut.has(track_id) || this.revealed.has(track_id);
  }

  /** Filter the tracks by `text` (track_filter.js); returns the parsed filter. */
  setFilter(text) {
    this.filter = parseTrackFilter(text);
    this.filteredOut = new Set();
    for (const t of this.tracks) if (!trackMatches(this.filter, t)) this.filteredOut.add(t.track_id);
    this.revealed.clear();
    this.build();
    return this.filter;
  }

  hideTrack(track_id) {
    if (!this.byId.has(track_id)) return;
    this.hidden.add(track_id);
    this.pinned = this.pinned.filter((id) => id !== track_id);
    this.build();
  }

  showTrack(track_id) { this.hidden.delete(track_id); this.build(); }

  showAll() { this.hidden.clear(); this.build(); }

  setHidden(ids) {
    this.hidden = new Set(ids.filter((id) => this.byId.has(id)));
    this.pinned = this.pinned.filter((id) => !this.hidden.has(id));
    this.build();
  }

  /** Make a track the user goes to visible again; true when that changed anything. */
  reveal(track_id) {
    if (!this.byId.has(track_id) || this.isShown(track_id)) return false;
    this.hidden.delete(track_id);
    if (this.filteredOut.has(track_id)) this.revealed.add(track_id);
    this.build();
    return true;
  }

  /** Tracks of the group of `t` (same lane and group name), in the current order. */
  groupTracks(t) {
    return this.tracks.filter((x) => x.lane === t.lane && x.group_name === t.group_name);
  }

  /**
   * Move a track within its group to just before `before_id` (null or another group's track: to the
   * group's end). A pinned track moves within the pinned band instead.
   */
  moveTrack(track_id, before_id) {
    const t = this.byId.get(track_id);
    if (!t || track_id === before_id) return;
    if (this.pinned.includes(track_id)) {
      const rest = this.pinned.filter((id) => id !== track_id);
      const at = rest.indexOf(before_id);
      rest.splice(at < 0 ? rest.length : at, 0, track_id);
      this.pinned = rest;
      this.build();
      return;
    }
    const ids = this.groupTracks(t).map((x) => x.track_id).filter((id) => id !== track_id);
    const at = ids.indexOf(before_id);
    ids.splice(at < 0 ? ids.length : at, 0, track_id);
    const inGroup = new Set(ids);
    this.userOrder = this.userOrder.filter((id) => !inGroup.has(id));
    const dflt = this.defaultOrder.filter((x) => inGroup.has(x.track_id)).map((x) => x.track_id);
    if (ids.some((id, i) => id !== dflt[i])) this.userOrder.push(...ids); // the default order needs no entry
    this.applyOrder();
  }

  /** Restore a user order (the URL's ord=): ids of unknown tracks are dropped. */
  setOrder(ids) {
    this.userOrder = [...new Set(ids)].filter((id) => this.byId.has(id));
    this.applyOrder();
  }

  /** this.tracks: the default order with each group's tracks named in userOrder sorted by it (stable). */
  applyOrder() {
    const rank = new Map(this.userOrder.map((id, i) => [id, i]));
    const out = [];
    let run = [];
    const flush = () => {
      if (run.some((t) => rank.has(t.track_id))) {
        run = run.map((t, i) => [rank.get(t.track_id) ?? Infinity, i, t]).sort((a, b) => a[0] - b[0] || a[1] - b[1]).map((x) => x[2]);
      }
      out.push(...run);
      run = [];
    };
    for (const t of this.defaultOrder) {
      if (run.length && (run[0].lane !== t.lane || run[0].group_name !== t.group_name)) flush();
      run.push(t);
    }
    flush();
    this.tracks = out;
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
    this.pinned = ids.filter((id) => this.byId.has(id) && !this.hidden.has(id));
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
    const pinned = new Set(this.pinned);
    for (const id of this.pinned) {
      const t = this.byId.get(id);
      const h = trackHeight(t);
      this.pinnedRows.push({ kind: "track", key: `pin:${id}`, label: t.name, sub: t.group_name, lane: t.lane, y, h, track: t, indent: 0, pinned: true });
      y += h;
    }
    this.pinnedHeight = y;

    // one pass over the tracks (lanes and groups are contiguous in this.tracks): which get a row, and per
    // lane and group how many of how many (a header is made at its first drawn track, labelled at its end)
    this.rows = [];
    y = 0;
    let hidden = 0, filtered = 0;
    let lane = null, group = null, laneRow = null, groupRow = null, laneShut = false, groupShut = false;
    let laneN = 0, laneKept = 0, groupN = 0, groupKept = 0;
    const of = (m, n) => (m === n ? `${n}` : `${m} of ${n}`);
    const endGroup = () => { if (groupRow && groupKept !== groupN) groupRow.note = `  (${of(groupKept, groupN)})`; };
    const endLane = () => { if (laneRow) laneRow.label = `${LANE_TITLES[lane] || lane}  (${of(laneKept, laneN)})`; };
    for (const t of this.tracks) {
      if (t.lane !== lane || t.group_name !== group) {
        endGroup();
        if (t.lane !== lane) {
          endLane();
          lane = t.lane; laneRow = null; laneN = laneKept = 0; laneShut = this.collapsed.has(`lane:${lane}`);
        }
        group = t.group_name; groupRow = null; groupN = groupKept = 0; groupShut = this.collapsed.has(`group:${lane}\u0000${group}`);
      }
      laneN++; groupN++;
      const id = t.track_id;
      if (this.hidden.has(id)) { hidden++; continue; }
      laneKept++; groupKept++;
      if (pinned.has(id)) continue; // drawn in the pinned band
      if (this.filteredOut.has(id) && !this.revealed.has(id)) { filtered++; laneKept--; groupKept--; continue; }
      if (!laneRow) {
        laneRow = { kind: "lane", key: `lane:${lane}`, label: "", lane, y, h: HEADER_PX, indent: 0, collapsed: laneShut };
        this.rows.push(laneRow);
        y += HEADER_PX;
      }
      if (laneShut) continue;
      if (!groupRow) {
        groupRow = { kind: "group", key: `group:${lane}\u0000${group}`, label: String(group), note: "", lane, y, h: HEADER_PX, indent: 1, collapsed: groupShut };
        this.rows.push(groupRow);
        y += HEADER_PX;
      }
      if (groupShut) continue;
      const h = trackHeight(t);
      this.rows.push({ kind: "track", key: `track:${id}`, label: t.name, lane, y, h, track: t, indent: 2 });
      y += h;
    }
    endGroup();
    endLane();
    this.counts = { total: this.tracks.length, shown: this.tracks.length - hidden - filtered, hidden, filtered };
    this.height = y;
  }

  /** Where a track is drawn: {pinned, y, h} or the header row standing in for it when collapsed. */
  placeOf(track_id) {
    for (const r of this.pinnedRows) if (r.track.track_id === track_id) return { pinned: true, row: r, exact: true };
    const t = this.byId.get(track_id);
    if (!t || !this.isShown(track_id)) return null; // hidden or filtered out: not drawn anywhere
    let best = null;
    for (const r of this.rows) {
      if (r.kind === "track" && r.track.track_id === track_id) return { pinned: false, row: r, exact: true };
      if (r.kind === "lane" && r.lane === t.lane) best = r;
      if (r.kind === "group" && r.lane === t.lane && r.label === String(t.group_name)) best = r;
    }
    return best ? { pinned: false, row: best, exact: false } : null;
  }
}
