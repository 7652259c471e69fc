// The measure tool: in measure mode (R, or the toolbar's Measure button) a drag across the tracks measures
// the time between two points, each end snapping to the nearest slice edge (start or end) within SNAP_PX of
// the pointer on the track under it. The measurement stays drawn, with its duration, until Esc or the next one.
// It takes the mouse before the timeline's own gestures (a capture listener), only while the mode is on.

import { NAMES_PX, AXIS_PX } from "./layout.js";
import { rowAt } from "./hit.js";
import { fmtDur, fmtTime } from "../lib/util.js";

export const SNAP_PX = 8;   // an edge this close to the pointer (css px) is where the end lands
const COLOUR = "#0f766e";
const FONT = "600 11px system-ui, -apple-system, 'Segoe UI', sans-serif";

/**
 * The slice edge nearest to canvas css-px (x, y) on the track under it, within SNAP_PX: {ns, snapped, edge,
 * slice_id} (edge "start" | "end"); without one, the pointer's own time with snapped false.
 */
export function snapAt(tl, x, y) {
  const v = tl.view;
  const t = v.ns_at(x - NAMES_PX);
  const at = rowAt(tl, y);
  let best = { ns: t, snapped: false, edge: null, slice_id: null };
  if (!at || at.row.kind !== "track" || at.row.track.lane === "counter") return best;
  let bestDist = SNAP_PX * v.ns_per_px;
  for (const { tt } of tl.piecesFor(at.row.track.track_id)) {
    const n = tt.n, ts = tt.ts, dur = tt.dur;
    for (let i = 0; i < n; i++) {
      const a = ts[i], b = a + dur[i];
      const da = Math.abs(a - t), db = Math.abs(b - t);
      if (da < bestDist) { bestDist = da; best = { ns: a, snapped: true, edge: "start", slice_id: tt.id[i] }; }
      if (db < bestDist) { bestDist = db; best = { ns: b, snapped: true, edge: "end", slice_id: tt.id[i] }; }
    }
  }
  return best;
}

export class Measure {
  /** `onchange(state)` after each change of the mode or the measurement. */
  constructor(tl, onchange = () => {}) {
    this.tl = tl;
    this.onchange = onchange;
    this.mode = false;
    this.m = null;          // {a, b: snapAt results, y: css px of the drag in the scrolled area, scroll0}
    this.dragging = false;
    // what a change repaints: the nav layer alone once it exists (trace_nav.js), so a drag never redraws the tracks
    this.repaint = () => tl.requestDraw();
    const cv = tl.canvas;
    const pos = (e) => { const r = cv.getBoundingClientRect(); return [e.clientX - r.left, e.clientY - r.top]; };
    cv.addEventListener("mousedown", (e) => {
      if (!this.mode || e.button !== 0) return;
      const [x, y] = pos(e);
      if (x < NAMES_PX || y < AXIS_PX) return;
      e.preventDefault();
      e.stopImmediatePropagation(); // not a pan or a click for the timeline's gestures
      const a = snapAt(tl, x, y);
      this.m = { a, b: a, y, scroll0: tl.scrollY };
      this.dragging = true;
      this.repaint();
    }, true);
    window.addEventListener("mousemove", (e) => {
      if (!this.dragging) return;
      const [x, y] = pos(e);
      this.m.b = snapAt(tl, Math.max(NAMES_PX, Math.min(tl.width_css_px, x)), y);
      this.repaint();
    });
    window.addEventListener("mouseup", () => {
      if (!this.dragging) return;
      this.dragging = false;
      if (this.m.a.ns === this.m.b.ns) this.m = null; // a click, not a measurement
      this.repaint();
      this.onchange(this.state);
    });
  }

  setMode(on) {
    this.mode = on;
    this.tl.canvas.style.cursor = on ? "crosshair" : "";
    this.onchange(this.state);
  }

  clear() {
    const had = this.m !== null;
    this.m = null;
    this.dragging = false;
    this.repaint();
    if (had) this.onchange(this.state);
    return had;
  }

  /** The test hook's view: {start_ns, end_ns, dur_ns, snapped: [a, b], edges, slice_ids} or null. */
  get state() {
    if (!this.m) return null;
    const [lo, hi] = this.m.a.ns <= this.m.b.ns ? [this.m.a, this.m.b] : [this.m.b, this.m.a];
    return { start_ns: lo.ns, end_ns: hi.ns, dur_ns: hi.ns - lo.ns, snapped: [lo.snapped, hi.snapped],
             edges: [lo.edge, hi.edge], slice_ids: [lo.slice_id, hi.slice_id], dragging: this.dragging };
  }

  /** Two vertical lines at the ends, a double arrow between them at the drag's height, the duration above it. */
  paint(ctx, tl) {
    const st = this.state;
    if (!st) return;
    const v = tl.view, H = tl.height_css_px, W = tl.width_css_px;
    const xa = NAMES_PX + v.x_of(st.start_ns), xb = NAMES_PX + v.x_of(st.end_ns);
    if (xb < NAMES_PX || xa > W) return;
    const y = Math.max(AXIS_PX + 22, Math.min(H - 6, this.m.y + (this.m.scroll0 - tl.scrollY)));
    ctx.beginPath();
    ctx.rect(NAMES_PX, 0, W - NAMES_PX, H);
    ctx.clip();
    ctx.fillStyle = "rgba(15,118,110,0.07)";
    ctx.fillRect(xa, AXIS_PX, xb - xa, H - AXIS_PX);
    ctx.strokeStyle = COLOUR;
    ctx.lineWidth = 1;
    ctx.setLineDash([]);
    for (const [x, snapped] of [[xa, st.snapped[0]], [xb, st.snapped[1]]]) {
      ctx.setLineDash(snapped ? [] : [4, 3]); // dashed: the end did not land on a slice edge
      ctx.beginPath();
      ctx.moveTo(Math.round(x) + 0.5, AXIS_PX);
      ctx.lineTo(Math.round(x) + 0.5, H);
      ctx.stroke();
    }
    ctx.setLineDash([]);
    ctx.lineWidth = 1.5;
    ctx.beginPath();
    ctx.moveTo(xa, y);
    ctx.lineTo(xb, y);
    ctx.stroke();
    ctx.fillStyle = COLOUR;
    if (xb - xa > 12) for (const [x, d] of [[xa, 1], [xb, -1]]) {
      ctx.beginPath();
      ctx.moveTo(x, y);
      ctx.lineTo(x + 6 * d, y - 4);
      ctx.lineTo(x + 6 * d, y + 4);
      ctx.closePath();
      ctx.fill();
    }
    ctx.font = FONT;
    ctx.textBaseline = "middle";
    const label = `${fmtDur(st.dur_ns)}  (${fmtTime(st.start_ns)} \u2192 ${fmtTime(st.end_ns)})`;
    const w = ctx.measureText(label).width + 12;
    const lx = Math.max(NAMES_PX + 2, Math.min(W - w - 2, (xa + xb) / 2 - w / 2));
    ctx.fillStyle = COLOUR;
    ctx.fillRect(lx, y - 20, w, 16);
    ctx.fillStyle = "#ffffff";
    ctx.fillText(label, lx + 6, y - 12);
  }
}
