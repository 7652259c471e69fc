// The critical path overlay: the chain of work and waits that sets the run's length (the analysis's replay
// of the trace's dependency graph, /api/traces/{id}/critical_path), drawn over the timeline as a highlighted
// chain, one bar per segment on its track joined by connectors; waits that belong to no track (idle, a
// submission's delay) are dashed lines. A toggle turns it on; the Path tab shows the time per segment type.
// The overlay fetches the segments of a padded window around the view and refetches when the view leaves it
// or zooms in far enough that the server's merged buckets would be too coarse; drawing only reads them.

import { NAMES_PX, AXIS_PX } from "../timeline/layout.js";
import { getJson } from "../lib/api.js";
import { el, fmtDur, fmtTime } from "../lib/util.js";

export const PATH_TYPES = ["host-bound", "launch overhead", "link/transfer", "device compute", "sync wait", "idle"];
export const PATH_COLOURS = {
  "host-bound": "#2563eb", "launch overhead": "#d97706", "link/transfer": "#059669", "device compute": "#c026d3",
  "sync wait": "#dc2626", idle: "#6b7280",
};
const BAR_PX = 5;          // the chain's thickness on a track row
const MIN_BAR_PX = 2;      // a segment narrower than this still shows
const REFETCH_ZOOM = 8;    // refetch when the view is this many times narrower than the fetched window

export class CriticalPath {
  /** `base` is the trace's API base (/api/traces/{id}); `onchange` runs when a fetch lands. */
  constructor(tl, base, { onchange } = {}) {
    this.tl = tl;
    this.base = base;
    this.onchange = onchange;
    this.on = false;
    this.doc = null;       // the last answer (by_type_ns over the whole path, segments of the window)
    this.error = null;
    this.win = null;       // [start_ns, end_ns] the segments were fetched for
    this.seq = 0;
    this.drawn = 0;        // segments the last frame drew (the test hook and data-critical-path read it)
    tl.on("frame", () => this.draw());
    tl.on("view", () => { if (this.on) this.fetch(false); });
  }

  setOn(on) {
    this.on = !!on;
    if (this.on) this.fetch(true);
    else { this.drawn = 0; this.tl.root.dataset.criticalPath = "0"; }
    this.tl.requestDraw();
  }

  /** The whole path's breakdown (no segments): for the panel before the overlay is on. */
  async summary() {
    return getJson(`${this.base}/critical_path?max_segments=1`);
  }

  async fetch(force) {
    const v = this.tl.view, span = Math.max(1, v.end_ns - v.start_ns);
    const w = this.win;
    if (!force && w && v.start_ns >= w[0] && v.end_ns <= w[1] && span * REFETCH_ZOOM >= w[1] - w[0]) return;
    const a = Math.max(0, Math.floor(v.start_ns - span)), b = Math.ceil(v.end_ns + span);
    this.win = [a, b];
    const seq = ++this.seq;
    try {
      const doc = await getJson(`${this.base}/critical_path?start_ns=${a}&end_ns=${b}`);
      if (seq !== this.seq) return;
      this.doc = doc;
      this.error = null;
    } catch (e) {
      if (seq !== this.seq) return;
      this.error = e.message;
    }
    this.onchange?.();
    this.tl.requestDraw();
  }

  draw() {
    const tl = this.tl;
    if (!this.on || !this.doc?.segments?.length) { this.drawn = 0; return; }
    const ctx = tl.ctx, v = tl.view, W = tl.width_css_px, H = tl.height_css_px;
    ctx.save();
    ctx.setTransform(tl.dpr, 0, 0, tl.dpr, 0, 0);
    ctx.beginPath();
    ctx.rect(NAMES_PX, AXIS_PX, W - NAMES_PX, H - AXIS_PX);
    ctx.clip();
    let drawn = 0, prev = null; // prev: {x, y} where the chain left the last segment
    const yOf = new Map();
    for (const s of this.doc.segments) {
      let y = null;
      if (s.track_id !== null && s.track_id !== undefined) {
        if (!yOf.has(s.track_id)) { const m = tl.rowMidY(s.track_id, 0); yOf.set(s.track_id, m ? m.y : null); }
        y = yOf.get(s.track_id);
      }
      let xa = NAMES_PX + v.x_of(s.start_ns), xb = NAMES_PX + v.x_of(s.end_ns);
      if (xb - xa < MIN_BAR_PX) { const c = (xa + xb) / 2; xa = c - MIN_BAR_PX / 2; xb = c + MIN_BAR_PX / 2; }
      const colour = PATH_COLOURS[s.type] || "#111827";
      if (y === null) { // a wait on no track: dashed, at the height the chain is at
        if (prev && xb >= NAMES_PX && xa <= W) {
          ctx.strokeStyle = colour;
          ctx.lineWidth = 2;
          ctx.setLineDash([4, 3]);
          ctx.beginPath();
          ctx.moveTo(Math.max(prev.x, xa), prev.y);
          ctx.lineTo(xb, prev.y);
          ctx.stroke();
          ctx.setLineDash([]);
          drawn++;
        }
        if (prev) prev = { x: xb, y: prev.y };
        continue;
      }
      if (prev && Math.abs(prev.y - y) > 0.5 && xa >= NAMES_PX - 50 && xa <= W + 50) { // connector between tracks
        ctx.strokeStyle = "rgba(17,24,39,0.55)";
        ctx.lineWidth = 1;
        ctx.beginPath();
        ctx.moveTo(prev.x, prev.y);
        ctx.lineTo(xa, y);
        ctx.stroke();
      }
      if (xb >= NAMES_PX && xa <= W) {
        ctx.fillStyle = "rgba(17,24,39,0.85)";
        ctx.fillRect(xa - 1, y - BAR_PX / 2 - 1, xb - xa + 2, BAR_PX + 2);
        ctx.fillStyle = colour;
        ctx.fillRect(xa, y - BAR_PX / 2, xb - xa, BAR_PX);
        drawn++;
      }
      prev = { x: xb, y };
    }
    ctx.restore();
    this.drawn = drawn;
    tl.root.dataset.criticalPath = String(drawn);
  }
}

/** The Path tab: the toggle, what the path is made of per segment type, and where it starts and ends. */
export function renderCriticalPath(box, doc, on, { ontoggle, error }) {
  box.replaceChildren();
  box.append(el("label", { class: "path-toggle" },
    el("input", { type: "checkbox", checked: on, id: "critical-path-toggle", onchange: (e) => ontoggle(e.target.checked) }),
    " draw the critical path on the timeline"));
  if (error) { box.append(el("p", { class: "error" }, `Critical path unavailable: ${error}`)); return; }
  if (!doc) { box.append(el("p", { class: "muted" }, "Loading…")); return; }
  if (!doc.analysed || !doc.segments_total) {
    box.append(el("p", { class: "muted" }, doc.analysed
      ? "This trace has no critical path: no device work, or its dependency graph could not be replayed."
      : "The critical path appears when the analysis passes have run."));
    return;
  }
  const total = doc.path_ns || 1;
  box.append(el("p", { class: "muted" },
    `${doc.segments_total.toLocaleString()} segments, ${fmtDur(doc.path_ns)} from ${fmtTime(doc.first_ns)} to ${fmtTime(doc.last_ns)}: `
    + "the chain of work and waits that sets the run's length (docs/analysis.md)."));
  box.append(el("table", { class: "grid critical-path" },
    el("thead", {}, el("tr", {}, ["type", "time", "share"].map((h) => el("th", {}, h)))),
    el("tbody", {}, PATH_TYPES.map((t) => {
      const ns = doc.by_type_ns?.[t] || 0;
      return el("tr", { dataset: { type: t } },
        el("td", {}, el("span", { class: "swatch", style: `display:inline-block;width:10px;height:10px;background:${PATH_COLOURS[t]}` }), ` ${t}`),
        el("td", { class: "num" }, fmtDur(ns)),
        el("td", { class: "num" }, `${((100 * ns) / total).toFixed(1)}%`));
    }))));
}
