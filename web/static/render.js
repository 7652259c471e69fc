// Synchronous drawing of one track from whatever tiles are loaded (no fetching here).
//
// Exact slices are drawn at their times, merged buckets (many short slices summarised by the server) as
// darker blocks, counters as a min/max band with the last value as a line. Adjacent same-colour rects are
// coalesced per depth so a frame costs about one fillRect per pixel column at worst.

import { nameColour, LANE_ACCENT } from "./util.js";
import { ROW_PX, TRACK_PAD_PX } from "./layout.js";

const CHAR_PX = 6.6;    // average glyph width of the 11px UI font, for fitting labels without measureText
const MIN_LABEL_PX = 24;

/** Colour of name index i in a tile for a lane, cached on the tile. */
function tileColour(tile, lane, i, dark) {
  const key = dark ? "_dark_" + lane : "_col_" + lane;
  let arr = tile[key];
  if (!arr) arr = tile[key] = new Array(tile.names.length);
  let c = arr[i];
  if (c === undefined) c = arr[i] = nameColour(tile.names[i] ?? "?", lane, dark);
  return c;
}

/**
 * Coalesces adjacent rects of one colour on one row into runs, and paints the runs grouped by colour so
 * fillStyle (a string parse) is set once per colour per phase, not once per rect.
 */
class RunBatcher {
  constructor(ctx) { this.ctx = ctx; this.runs = new Map(); this.byColour = new Map(); }
  add(row, x0, x1, y, h, colour) {
    const r = this.runs.get(row);
    if (r && r.colour === colour && x0 <= r.x1 + 0.75 && r.y === y) {
      if (x1 > r.x1) r.x1 = x1;
      return;
    }
    if (r) this.finish(r);
    this.runs.set(row, { x0, x1, y, h, colour });
  }
  finish(r) {
    let a = this.byColour.get(r.colour);
    if (!a) this.byColour.set(r.colour, (a = []));
    // whole pixels: no anti-aliased edges to rasterise, and sub-pixel slices still cover one pixel
    const xa = Math.round(r.x0);
    a.push(xa, r.y, Math.max(Math.round(r.x1) - xa, 1), r.h);
  }
  flush() {
    for (const r of this.runs.values()) this.finish(r);
    this.runs.clear();
    const ctx = this.ctx;
    for (const [colour, a] of this.byColour) {
      ctx.fillStyle = colour;
      for (let i = 0; i < a.length; i += 4) ctx.fillRect(a[i], a[i + 1], a[i + 2], a[i + 3]);
    }
    this.byColour.clear();
  }
}

/**
 * Draw a slice track. `pieces` are [{tile, tt}] for the visible tile indices (tt = the track's part of the
 * tile), each clipped to its tile's time range. Returns the labels drawn (for tests/inspection: count).
 */
export function drawSliceTrack(ctx, pieces, view, x0, y, h, track, theme) {
  const w = view.width_css_px;
  const scale = w / view.span_ns;
  const s = view.start_ns;
  const lane = track.lane;
  const maxRows = Math.floor((h - 2 * TRACK_PAD_PX) / ROW_PX);
  const batch = new RunBatcher(ctx);
  const labels = [];
  const labelled = new Set();
  for (const { tile, tt, c0: t0, c1: t1 } of pieces) {
    const tile_t0 = tile.start_ns;
    const cx0 = x0 + Math.max(0, (t0 - s) * scale), cx1 = x0 + Math.min(w, (t1 - s) * scale);
    if (cx1 <= cx0) continue;
    // merged buckets first, exact slices over them
    const bn = tile.bucket_ns;
    for (let i = 0; i < tt.mn; i++) {
      const d = tt.m_depth[i];
      if (d >= maxRows) continue;
      const b0 = tile_t0 + tt.m_bucket[i] * bn;
      let xa = x0 + (b0 - s) * scale, xb = x0 + (b0 + bn - s) * scale;
      if (xb < cx0 || xa > cx1) continue;
      if (xa < cx0) xa = cx0;
      if (xb > cx1) xb = cx1;
      // the longest merged slice's colour, darkened: truthful (something is there) and still telling names apart
      batch.add(d, xa, xb, y + TRACK_PAD_PX + d * ROW_PX + 1, ROW_PX - 2, tileColour(tile, lane, tt.m_name[i], true));
    }
    batch.flush();
    for (let i = 0; i < tt.n; i++) {
      const d = tt.depth[i];
      if (d >= maxRows) continue;
      const ts = tt.ts[i], dur = tt.dur[i];
      let xa = x0 + (ts - s) * scale, xb = x0 + (ts + dur - s) * scale;
      if (xb < cx0 || xa > cx1) continue;
      const full_xa = xa, full_xb = xb;
      if (xa < cx0) xa = cx0;
      if (xb > cx1) xb = cx1;
      const ry = y + TRACK_PAD_PX + d * ROW_PX + 1;
      batch.add(d, xa, xb, ry, ROW_PX - 2, tileColour(tile, lane, tt.name[i], false));
      // label once per slice even when it spans several tiles
      const vis_w = Math.min(full_xb, x0 + w) - Math.max(full_xa, x0);
      if (vis_w >= MIN_LABEL_PX && !labelled.has(tt.id[i])) {
        labelled.add(tt.id[i]);
        labels.push([Math.max(full_xa, x0), vis_w, ry, tile.names[tt.name[i]] ?? "?"]);
      }
    }
    batch.flush();
    // instants (dur 0), thinned by the server to one per bucket and depth: a 2 px tick
    for (let i = 0; i < tt.in_n; i++) {
      const d = tt.in_depth[i];
      const ts = tt.in_ts[i];
      if (d >= maxRows || ts < t0 || ts >= t1) continue;
      const xa = x0 + (ts - s) * scale;
      if (xa < x0 - 1 || xa > x0 + w) continue;
      batch.add(d, xa - 1, xa + 1, y + TRACK_PAD_PX + d * ROW_PX + 1, ROW_PX - 2, tileColour(tile, lane, tt.in_name[i], true));
    }
    batch.flush();
  }
  // labels: only where they fit, deduplicated when a slice spans several tiles
  ctx.fillStyle = theme.sliceText;
  ctx.font = theme.font;
  ctx.textBaseline = "middle";
  for (const [lx, lw, ly, name] of labels) {
    const fit = Math.floor((lw - 6) / CHAR_PX);
    if (fit < 3) continue;
    const text = name.length > fit ? name.slice(0, fit - 1) + "\u2026" : name;
    ctx.fillText(text, lx + 3, ly + (ROW_PX - 2) / 2);
  }
  return labels.length;
}

/** Draw a counter graph: the min..max band per bucket and the last value as a line, with min/max labels. */
export function drawCounterTrack(ctx, pieces, view, x0, y, h, track, theme) {
  const w = view.width_css_px;
  const scale = w / view.span_ns;
  const s = view.start_ns;
  let lo = Infinity, hi = -Infinity;
  for (const { tile, tt, c0, c1 } of pieces) {
    for (let i = 0; i < tt.cn; i++) {
      const b0 = tile.start_ns + tt.c_bucket[i] * tile.bucket_ns;
      if (b0 >= c1 || b0 + tile.bucket_ns <= c0) continue;
      if (tt.c_min[i] < lo) lo = tt.c_min[i];
      if (tt.c_max[i] > hi) hi = tt.c_max[i];
    }
  }
  const top = y + 12, bottom = y + h - 3;
  if (lo === Infinity) return null;
  const base = Math.min(lo, 0);
  const range = hi - base || 1;
  const yOf = (v) => bottom - (v - base) / range * (bottom - top);
  const accent = LANE_ACCENT.counter;
  ctx.fillStyle = theme.counterFill;
  ctx.strokeStyle = accent;
  ctx.beginPath();
  for (const { tile, tt, c0, c1 } of pieces) {
    const bn = tile.bucket_ns;
    for (let i = 0; i < tt.cn; i++) {
      const b0 = tile.start_ns + tt.c_bucket[i] * bn;
      if (b0 >= c1 || b0 + bn <= c0) continue;
      const xa = x0 + (b0 - s) * scale;
      if (xa > x0 + w || xa + bn * scale < x0) continue;
      const ya = yOf(tt.c_max[i]), yb = yOf(tt.c_min[i]);
      ctx.rect(Math.max(xa, x0), ya, Math.max(bn * scale, 1), Math.max(yb - ya, 1));
    }
  }
  ctx.fill();
  // the level line: each bucket's last value held until the next bucket (counters are step functions)
  ctx.beginPath();
  let started = false;
  for (const { tile, tt, c0, c1 } of pieces) {
    const bn = tile.bucket_ns;
    for (let i = 0; i < tt.cn; i++) {
      const b0 = tile.start_ns + tt.c_bucket[i] * bn;
      if (b0 >= c1 || b0 + bn <= c0) continue;
      const xa = Math.max(x0, Math.min(x0 + w, x0 + (b0 - s) * scale));
      const xb = Math.max(x0, Math.min(x0 + w, x0 + (b0 + bn - s) * scale));
      const ya = yOf(tt.c_first[i]), yb = yOf(tt.c_last[i]);
      if (!started) { ctx.moveTo(xa, ya); started = true; } else ctx.lineTo(xa, ya);
      ctx.lineTo(xb, yb);
    }
  }
  ctx.stroke();
  return { lo, hi };
}

/** The min/max labels with unit, drawn over the graph's top-left corner. */
export function drawCounterLabels(ctx, x0, y, h, range, unit, theme) {
  if (!range) return;
  ctx.font = theme.smallFont;
  ctx.fillStyle = theme.mutedText;
  ctx.textBaseline = "top";
  const u = unit ? ` ${unit}` : "";
  ctx.fillText(`max ${fmtNum(range.hi)}${u}`, x0 + 4, y + 1);
  ctx.textBaseline = "bottom";
  ctx.fillText(`min ${fmtNum(range.lo)}${u}`, x0 + 4, y + h - 1);
}

function fmtNum(v) {
  const a = Math.abs(v);
  if (a >= 1e9) return (v / 1e9).toFixed(2) + "G";
  if (a >= 1e6) return (v / 1e6).toFixed(2) + "M";
  if (a >= 1e4) return (v / 1e3).toFixed(1) + "k";
  if (a >= 100) return v.toFixed(0);
  return String(Number(v.toPrecision(3)));
}
