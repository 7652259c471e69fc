// The timeline: owns the canvas, view, layout and tile store. update() decides which tiles are wanted
// (async, never awaited); render() draws only what is loaded (frame.js). Frames run in requestAnimationFrame
// and only when something changed. data-state on the element is "loading" while a frame is due or a
// visible tile is pending, "idle" when everything visible is drawn.

import { View } from "./view.js";
import {
  Layout, ROW_PX, TRACK_PAD_PX, NAMES_PX, AXIS_PX, STATUS_PX, rowOfDepth, shownDepths, isFolded, sliceRows,
} from "./layout.js";
import { TileStore, tileRange, pageKey } from "../tiles/cache.js";
import { renderFrame } from "./frame.js";

export { NAMES_PX, AXIS_PX };

export class Timeline {
  constructor(root, api, meta) {
    this.root = root;
    this.api = api;
    this.meta = meta;
    this.canvas = root.querySelector("canvas.tracks");
    this.ctx = this.canvas.getContext("2d", { alpha: false, desynchronized: true });
    this.view = new View(meta.duration_ns || 1);
    this.layout = new Layout(meta.tracks || []);
    this.groupOf = new Map((meta.tracks || []).map((t) => [t.track_id, t.group ?? null]));
    const lv = meta.levels || {};
    this.minLevel = lv.min ?? 0;
    this.maxLevel = lv.max ?? 62;
    this.tiles = new TileStore(api, () => this.requestDraw());
    this.scrollY = 0;
    this.selected = null;      // slice detail object (the API's "slice") or null
    this.chain = null;         // the API's chain {slices, flows} for the selection
    this.drawnFlows = [];      // [[src, dst], ...] drawn in the last frame
    this.hover = null;         // {x, y} of the mouse in css px, or null
    this.area = null;          // {start_ns, end_ns, y0, y1} in canvas css px (area selection)
    this.findings = [];        // the API's findings, ts relative
    this.overlays = new Set(); // analysis passes whose regions are shaded
    this.visibleKeys = [];
    this.framePending = false;
    this.listeners = { select: [], view: [], area: [], frame: [], layout: [] };
    this.bandwidth = new Map(); // pcie track id -> GB/s per css-px column, as last drawn
    this.frameTimes = [];      // ms per frame for the benchmark (bounded ring)
    this.view.onchange = () => { this.requestDraw(); this.emit("view"); };
    new ResizeObserver(() => this.resize()).observe(root);
    this.resize();
  }

  on(ev, fn) { this.listeners[ev].push(fn); }
  emit(ev, arg) { for (const fn of this.listeners[ev]) fn(arg); }

  resize() {
    const r = this.root.getBoundingClientRect();
    const dpr = window.devicePixelRatio || 1;
    this.width_css_px = Math.max(300, Math.floor(r.width));
    this.height_css_px = Math.max(120, Math.floor(r.height));
    this.canvas.style.width = `${this.width_css_px}px`;
    this.canvas.style.height = `${this.height_css_px}px`;
    this.canvas.width = Math.round(this.width_css_px * dpr);
    this.canvas.height = Math.round(this.height_css_px * dpr);
    this.dpr = dpr;
    this.view.width_css_px = this.width_css_px - NAMES_PX;
    this.clampScroll();
    this.requestDraw();
  }

  /** y where the scrolled rows start, and the height they get. */
  get scrollTop_px() { return AXIS_PX + this.layout.pinnedHeight; }
  get scrollArea_px() { return Math.max(0, this.height_css_px - this.scrollTop_px); }

  clampScroll() {
    const max = Math.max(0, this.layout.height + STATUS_PX - this.scrollArea_px); // the last row clears the status line
    this.scrollY = Math.min(Math.max(0, this.scrollY), max);
  }

  scrollBy(dy) {
    const before = this.scrollY;
    this.scrollY += dy;
    this.clampScroll();
    if (this.scrollY !== before) this.requestDraw();
  }

  relayout() {
    this.layout.build();
    this.clampScroll();
    this.requestDraw();
    this.emit("view");
    this.emit("layout");
  }

  requestDraw() {
    this.root.dataset.state = "loading";
    if (this.framePending) return;
    this.framePending = true;
    requestAnimationFrame((t) => this.frame(t));
  }

  frame() {
    this.framePending = false;
    const t0 = performance.now();
    this.update();
    renderFrame(this);
    const ms = performance.now() - t0;
    this.frameTimes.push(ms);
    if (this.frameTimes.length > 2000) this.frameTimes.splice(0, 1000);
    const pending = this.tiles.pendingCount(this.visibleKeys);
    if (!this.framePending && pending === 0 && !this.animating) this.root.dataset.state = "idle";
    this.emit("frame");
  }

  level() {
    return Math.min(this.maxLevel, Math.max(this.minLevel, this.view.level()));
  }

  /** Rows on screen now: [{row, y}] with y in canvas css px, pinned rows first. */
  visibleRows() {
    const out = [];
    for (const r of this.layout.pinnedRows) out.push({ row: r, y: AXIS_PX + r.y, pinned: true });
    const top = this.scrollTop_px, bottom = this.height_css_px;
    for (const r of this.layout.rows) {
      const y = top + r.y - this.scrollY;
      if (y + r.h < top || y > bottom) continue;
      out.push({ row: r, y, pinned: false });
    }
    return out;
  }

  /** The tile groups with a visible track row. */
  visibleGroups() {
    const gs = new Set();
    for (const { row } of this.visibleRows()) if (row.kind === "track") gs.add(this.groupOf.get(row.track.track_id));
    return [...gs];
  }

  /** The trace's tiles come in depth pages of this many depths (docs/api.md); null: unpaged (live). */
  depthPage() {
    const lv = this.meta && this.meta.levels;
    return lv && lv.depth_page ? lv.depth_page : null;
  }

  /** The deepest slice depth of a tile group's tracks. */
  groupDepth(group) {
    if (!this._groupDepths || this._groupDepths.meta !== this.meta) {
      const m = new Map();
      for (const t of this.meta.tracks || []) {
        const g = t.group ?? null;
        m.set(g, Math.max(m.get(g) ?? 0, t.max_depth ?? 0));
      }
      this._groupDepths = { meta: this.meta, m };
    }
    return this._groupDepths.m.get(group) ?? 0;
  }

  /** The store keys of every page of a group's tiles ([group] when unpaged). */
  groupKeys(group) {
    const P = this.depthPage();
    if (!P) return [group];
    const out = [];
    for (let p = 0; p <= Math.floor(this.groupDepth(group) / P); p++) out.push(pageKey(group, p));
    return out;
  }

  /**
   * The tile keys (group pages) the rows on screen need: per visible track, the pages of its depth rows on
   * screen, the page whose fold sections summarise what its fold row holds, and every page of a PCIe track
   * whose bandwidth band is on screen (the band sums the bytes of every depth). A depth not on screen is
   * not fetched: a tile carries DEPTH_PAGE depths, so its size does not grow with a group's depth.
   */
  visibleTileGroups() {
    const P = this.depthPage();
    if (!P) return this.visibleGroups();
    const out = new Set();
    const top = this.scrollTop_px, bottom = this.height_css_px;
    for (const { row, y, pinned } of this.visibleRows()) {
      if (row.kind !== "track") continue;
      const t = row.track, g = this.groupOf.get(t.track_id);
      if (t.lane === "counter") { out.add(pageKey(g, 0)); continue; }
      const y0 = pinned ? y : Math.max(y, top), y1 = pinned ? y + row.h : Math.min(y + row.h, bottom);
      const r0 = Math.max(0, Math.floor((y0 - y - TRACK_PAD_PX) / ROW_PX));
      const r1 = Math.floor((y1 - y - TRACK_PAD_PX) / ROW_PX);
      const shown = shownDepths(t), rows = sliceRows(t);
      if (t.lane === "pcie" && r1 >= rows) { for (const k of this.groupKeys(g)) out.add(k); continue; }
      const last = Math.min(r1, shown - 1);
      for (let r = Math.min(r0, shown - 1); r <= last; r += 1) out.add(pageKey(g, Math.floor(r / P)));
      if (isFolded(t) && r1 >= shown) out.add(pageKey(g, Math.floor((shown - 1) / P)));
    }
    return [...out];
  }

  /**
   * Declare wanted tiles: the visible window first, then one window of padding on each side, and once
   * all of those are here, the next finer level over the visible window (a zoom-in then finds its tiles
   * ready; those never count as pending for data-state).
   */
  update() {
    const level = this.level();
    const v = this.view, d = this.meta.duration_ns;
    const [lo, hi] = tileRange(level, v.start_ns, v.end_ns, d);
    const [plo, phi] = tileRange(level, v.start_ns - v.span_ns, v.end_ns + v.span_ns, d);
    const groups = this.visibleTileGroups();
    const specs = [];
    const keys = [];
    for (const g of groups) for (let i = lo; i <= hi; i++) { specs.push([g, level, i]); keys.push(this.tiles.key(g, level, i)); }
    for (const g of groups) for (let i = plo; i <= phi; i++) if (i < lo || i > hi) specs.push([g, level, i]);
    if (level > this.minLevel && this.tiles.pendingCount(specs.map(([g, l, i]) => this.tiles.key(g, l, i))) === 0) {
      const [flo, fhi] = tileRange(level - 1, v.start_ns, v.end_ns, d);
      for (const g of groups) for (let i = flo; i <= fhi; i++) specs.push([g, level - 1, i]);
    }
    this.visibleKeys = keys;
    this.tiles.want(specs);
    this.cur = { level, lo, hi };
  }

  /** [{tile, tt, c0, c1}] for one track in the current window (whatever is loaded). */
  piecesFor(track_id) {
    const { level, lo, hi } = this.cur || { level: this.level(), ...tileIdx(this) };
    const out = [];
    for (const key of this.groupKeys(this.groupOf.get(track_id))) {
      for (const p of this.tiles.cover(key, level, lo, hi)) {
        const tt = p.tile.tracks.get(track_id);
        if (tt) out.push({ tile: p.tile, tt, c0: p.c0, c1: p.c1 });
      }
    }
    return out;
  }

  /** Canvas css-px y of the middle of a slice row (depth) on a track, or of its stand-in header. */
  rowMidY(track_id, depth) {
    const place = this.layout.placeOf(track_id);
    if (!place) return null;
    const base = place.pinned ? AXIS_PX + place.row.y : this.scrollTop_px + place.row.y - this.scrollY;
    if (!place.exact) return { y: base + place.row.h / 2, pinned: place.pinned, exact: false };
    // a depth below the shown ones is in the fold row: not exact (the caller unfolds to be exact)
    const t = place.row.track, d = rowOfDepth(t, depth);
    const exact = (depth || 0) < shownDepths(t);
    return { y: base + TRACK_PAD_PX + d * ROW_PX + ROW_PX / 2, pinned: place.pinned, exact, row: d };
  }

  /**
   * Scroll vertically so a track's row is on screen (no-op when pinned or visible); with `depth`, so that
   * this depth's row of the track is (a deep track can be taller than the screen).
   */
  revealTrack(track_id, depth) {
    if (this.layout.reveal(track_id)) this.emit("layout"); // a hidden or filtered-out track is shown again
    const place = this.layout.placeOf(track_id);
    if (!place || place.pinned) return;
    for (const key of [`lane:${place.row.lane}`]) if (this.layout.collapsed.has(key)) this.layout.collapsed.delete(key);
    const t = this.layout.byId.get(track_id);
    const gk = `group:${t.lane}\u0000${t.group_name}`;
    if (this.layout.collapsed.has(gk)) this.layout.collapsed.delete(gk);
    this.layout.build();
    const p2 = this.layout.placeOf(track_id);
    let top = p2.row.y, bottom = p2.row.y + p2.row.h;
    if (depth !== undefined && depth !== null && p2.exact && t.lane !== "counter" && bottom - top > this.scrollArea_px) {
      top = p2.row.y + TRACK_PAD_PX + rowOfDepth(t, depth) * ROW_PX - ROW_PX;
      bottom = top + 3 * ROW_PX;
    }
    if (top < this.scrollY || bottom > this.scrollY + this.scrollArea_px) {
      this.scrollY = top - Math.max(0, (this.scrollArea_px - (bottom - top)) / 3);
      this.clampScroll();
    }
    this.requestDraw();
  }

  /** Unfold tracks so each of `slices` ({track_id, depth}) is drawn on its own row; relayouts when needed. */
  revealDepths(slices) {
    let changed = false;
    for (const s of slices || []) if (s && s.depth !== undefined && s.depth !== null) changed = this.layout.revealDepth(s.track_id, s.depth) || changed;
    if (changed) this.relayout();
    return changed;
  }

  /** Show `n` depths of a track (the names column's - / + / all, the fold row's click). */
  setDepths(track_id, n) {
    this.layout.setDepths(track_id, n);
    this.relayout();
  }

  setSelection(detail) {
    this.selected = detail ? detail.slice : null;
    this.chain = detail ? detail.chain : null;
    this.requestDraw();
    this.emit("select", detail);
  }

  setFindings(list) {
    this.findings = list || [];
    this.requestDraw();
  }
}

function tileIdx(tl) {
  const [lo, hi] = tileRange(tl.level(), tl.view.start_ns, tl.view.end_ns, tl.meta.duration_ns);
  return { lo, hi };
}
