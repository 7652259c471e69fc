// The diff page's layer over each timeline: the shared time axis (time since the aligned step's start),
// outlines of the slices whose normalised name is highlighted, and a cursor at the same shared time in
// both timelines. Drawn on its own canvas after each frame of its timeline; never touches the tiles.

import { NAMES_PX, AXIS_PX, ROW_PX } from "../timeline/layout.js";
import { ticks } from "../timeline/axis.js";

/** The server's name rules (docs/diff.md) as a function raw name -> normalised name. */
export function normaliser(rules) {
  const res = rules.map((r) => [new RegExp(r.pattern, "g"), r.replace]);
  return (name) => { let s = name; for (const [re, rep] of res) s = s.replace(re, () => rep); return s; };
}

/** Normalised names of a tile's string table, cached on the tile. */
function tileKeys(tile, norm) {
  if (!tile._diffKeys) tile._diffKeys = tile.names.map((n) => norm(n ?? ""));
  return tile._diffKeys;
}

export class Overlay {
  /** state: {offset: {a, b}, highlight, sticky, cursor_u, norm}; side: "a" or "b". */
  constructor(tl, side, label, state) {
    this.tl = tl;
    this.side = side;
    this.label = label;
    this.state = state;
    this.count = 0; // outlines drawn in the last paint (a test hook)
    this.canvas = document.createElement("canvas");
    this.canvas.className = "overlay-layer";
    tl.root.append(this.canvas);
    this.ctx = this.canvas.getContext("2d");
    new ResizeObserver(() => this.draw()).observe(tl.root);
  }

  get offset() { return this.state.offset[this.side]; }

  draw() {
    const tl = this.tl, dpr = tl.dpr || 1, W = tl.width_css_px, H = tl.height_css_px, v = tl.view;
    if (this.canvas.width !== Math.round(W * dpr) || this.canvas.height !== Math.round(H * dpr)) {
      this.canvas.width = Math.round(W * dpr);
      this.canvas.height = Math.round(H * dpr);
      this.canvas.style.width = `${W}px`;
      this.canvas.style.height = `${H}px`;
    }
    const ctx = this.ctx;
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.clearRect(0, 0, W, H);
    ctx.font = "11px system-ui, -apple-system, 'Segoe UI', sans-serif";
    ctx.textBaseline = "middle";
    this.drawAxis(ctx, v, W);
    this.count = this.drawHighlight(ctx, v, W, H);
    const u = this.state.cursor_u;
    if (u !== null && u !== undefined) {
      const x = Math.round(NAMES_PX + v.x_of(u + this.offset)) + 0.5;
      if (x >= NAMES_PX && x <= W) {
        ctx.strokeStyle = "rgba(17,24,39,0.5)";
        ctx.beginPath();
        ctx.moveTo(x, AXIS_PX);
        ctx.lineTo(x, H);
        ctx.stroke();
      }
    }
  }

  /** The axis band repainted in shared time, and the side's name in the names column. */
  drawAxis(ctx, v, W) {
    const off = this.offset;
    ctx.fillStyle = "#e8edf7";
    ctx.fillRect(0, 0, W, AXIS_PX);
    ctx.fillStyle = "#1e293b";
    ctx.save();
    ctx.beginPath();
    ctx.rect(0, 0, NAMES_PX - 4, AXIS_PX);
    ctx.clip();
    ctx.fillText(`${this.side.toUpperCase()}  ${this.label}`, 6, AXIS_PX / 2);
    ctx.restore();
    const { ticks: ts } = ticks(v.start_ns - off, v.end_ns - off, v.width_css_px);
    ctx.strokeStyle = "#94a3b8";
    ctx.beginPath();
    for (const t of ts) {
      const x = Math.round(NAMES_PX + v.x_of(t.rel_ns + off)) + 0.5;
      ctx.moveTo(x, AXIS_PX - 6);
      ctx.lineTo(x, AXIS_PX);
      ctx.fillText(t.label, x + 3, AXIS_PX / 2);
    }
    ctx.stroke();
  }

  /** Outline every drawn slice (or merged block led by one) whose normalised name is highlighted. */
  drawHighlight(ctx, v, W, H) {
    const key = this.state.highlight ?? this.state.sticky;
    if (!key) return 0;
    const tl = this.tl, norm = this.state.norm, scale = v.width_css_px / v.span_ns;
    let n = 0;
    ctx.save();
    ctx.beginPath();
    ctx.rect(NAMES_PX, AXIS_PX, W - NAMES_PX, H - AXIS_PX);
    ctx.clip();
    ctx.strokeStyle = "#f59e0b";
    ctx.lineWidth = 2;
    for (const { row } of tl.visibleRows()) {
      if (row.kind !== "track" || row.track.lane === "counter") continue;
      const id = row.track.track_id;
      for (const { tile, tt, c0, c1 } of tl.piecesFor(id)) {
        const keys = tileKeys(tile, norm);
        for (let i = 0; i < tt.n; i++) {
          if (keys[tt.name[i]] !== key) continue;
          const a = Math.max(tt.ts[i], c0), b = Math.min(tt.ts[i] + tt.dur[i], c1);
          if (b < v.start_ns || a > v.end_ns || b < a) continue;
          n += this.rect(ctx, id, tt.depth[i], NAMES_PX + (a - v.start_ns) * scale, Math.max(2, (b - a) * scale));
        }
        for (let i = 0; i < tt.mn; i++) {
          if (keys[tt.m_name[i]] !== key) continue;
          const a = tile.start_ns + tt.m_bucket[i] * tile.bucket_ns;
          if (a + tile.bucket_ns < v.start_ns || a > v.end_ns) continue;
          n += this.rect(ctx, id, tt.m_depth[i], NAMES_PX + (a - v.start_ns) * scale, Math.max(2, tile.bucket_ns * scale));
        }
      }
    }
    ctx.restore();
    return n;
  }

  rect(ctx, track_id, depth, x, w) {
    const at = this.tl.rowMidY(track_id, depth);
    if (!at || !at.exact) return 0;
    ctx.strokeRect(Math.round(x) - 0.5, Math.round(at.y - ROW_PX / 2) + 0.5, Math.round(w) + 1, ROW_PX - 2);
    return 1;
  }
}
