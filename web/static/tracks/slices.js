// Synchronous drawing of one slice track from whatever tiles are loaded (no fetching here); counter tracks
// are counters.js.
//
// Exact slices are drawn at their times, merged buckets (many short slices summarised by the server) as
// darker blocks, instants as 2 px ticks. Adjacent same-colour rects are coalesced per depth so a frame
// costs about one fillRect per pixel column at worst.

import { nameColour, lowerBound, displayName } from "../lib/util.js";
import { ROW_PX, TRACK_PAD_PX, shownDepths, isFolded } from "../timeline/layout.js";

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
 * Coalesces rects per row (depth) into runs in whole pixels and paints them grouped by colour, so
 * fillStyle (a string parse) is set once per colour, and a rect that falls inside a pixel column already
 * painted on its row is skipped: at most about one fillRect per pixel column per row.
 */
class RunBatcher {
  constructor(ctx, rows) {
    this.ctx = ctx;
    this.x0 = new Float64Array(rows);
    this.x1 = new Float64Array(rows).fill(-Infinity);
    this.y = new Float64Array(rows);
    this.colour = new Array(rows).fill(null);
    this.h = ROW_PX - 2;
    this.byColour = new Map();
  }
  add(row, xa, xb, y, colour) {
    const end = this.x1[row];
    if (xb <= end) return;                       // inside what this row already covers
    if (this.colour[row] === colour && xa <= end + 0.75) { this.x1[row] = xb; return; }
    if (this.colour[row] !== null) this.finish(row);
    this.x0[row] = Math.max(xa, end);             // never repaint a pixel already covered on this row
    this.x1[row] = xb;
    this.y[row] = y;
    this.colour[row] = colour;
  }
  finish(row) {
    const c = this.colour[row];
    let a = this.byColour.get(c);
    if (!a) this.byColour.set(c, (a = []));
    const xa = Math.round(this.x0[row]);
    a.push(xa, this.y[row], Math.max(Math.round(this.x1[row]) - xa, 1));
    this.colour[row] = null;
  }
  flush() {
    for (let r = 0; r < this.colour.length; r++) if (this.colour[r] !== null) this.finish(r);
    this.x1.fill(-Infinity);
    const ctx = this.ctx, h = this.h;
    for (const [colour, a] of this.byColour) {
      ctx.fillStyle = colour;
      for (let i = 0; i < a.length; i += 3) ctx.fillRect(a[i], a[i + 1], a[i + 2], h);
    }
    this.byColour.clear();
  }
}

/**
 * Draw a slice track. `pieces` are [{tile, tt, c0, c1}] for the visible tile indices (tt = the track's
 * part of the tile), each clipped to the time range [c0, c1) it stands for.
 *
 * Every depth is drawn: depths below shownDepths(track) go into one fold row under the shown ones, in
 * the merged shade (their coverage; timeline/layout.js). Annotation tracks (ranges that mark time, not
 * work) are drawn as outlined pale bands with dark labels, never like kernels.
 */
export function drawSliceTrack(ctx, pieces, view, x0, y, h, track, theme) {
  const w = view.width_css_px;
  const scale = w / view.span_ns;
  const s = view.start_ns;
  const lane = track.lane;
  const annotation = lane === "annotation";
  const shown = shownDepths(track);
  const folded = isFolded(track);
  const maxRows = shown + (folded ? 1 : 0);
  const batch = new RunBatcher(ctx, maxRows);
  const labels = [];
  const labelled = new Set();
  const outlines = []; // annotation tracks: [x, w, y] of each exact slice
  const rowY = (d) => y + TRACK_PAD_PX + d * ROW_PX + 1;
  const foldColour = theme.fold || "#6b7280";
  for (const { tile, tt, c0: t0, c1: t1 } of pieces) {
    const cx0 = x0 + Math.max(0, (t0 - s) * scale), cx1 = x0 + Math.min(w, (t1 - s) * scale);
    if (cx1 <= cx0) continue;
    // merged buckets first (one darker shade per lane: they stand for many names), exact slices over them
    const bn = tile.bucket_ns, runs = tt.runs, dark = theme.merged[lane] || theme.merged.cpu;
    for (let d = 0; d < runs.length; d++) {
      const r = runs[d];
      if (!r) continue;
      const row = d < shown ? d : shown, colour = d < shown ? dark : foldColour;
      for (let i = 0; i < r.length; i += 2) {
        let xa = x0 + (tile.start_ns + r[i] * bn - s) * scale, xb = x0 + (tile.start_ns + r[i + 1] * bn - s) * scale;
        if (xb < cx0 || xa > cx1) continue;
        if (xa < cx0) xa = cx0;
        if (xb > cx1) xb = cx1;
        batch.add(row, xa, xb, rowY(row), colour);
      }
    }
    batch.flush();
    // exact slices are sorted by start: visit only those that can reach the visible part of this piece
    const from = Math.max(t0, s), to = Math.min(t1, view.end_ns);
    const i0 = lowerBound(tt.ts, from - (tt.maxDur ?? Infinity));
    for (let i = i0; i < tt.n; i++) {
      const ts = tt.ts[i];
      if (ts > to) break;
      const d = tt.depth[i];
      const dur = tt.dur[i];
      let xa = x0 + (ts - s) * scale, xb = x0 + (ts + dur - s) * scale;
      if (xb < cx0 || xa > cx1) continue;
      if (d >= shown) { // in the fold row: its coverage only
        batch.add(shown, Math.max(xa, cx0), Math.min(xb, cx1), rowY(shown), foldColour);
        continue;
      }
      const full_xa = xa, full_xb = xb;
      if (xa < cx0) xa = cx0;
      if (xb > cx1) xb = cx1;
      batch.add(d, xa, xb, rowY(d), tileColour(tile, lane, tt.name[i], false));
      if (annotation && !labelled.has(-1 - tt.id[i])) { // once per slice, at its whole visible extent
        labelled.add(-1 - tt.id[i]);
        const oa = Math.max(full_xa, x0 - 1), ob = Math.min(full_xb, x0 + w + 1);
        outlines.push(oa, ob - oa, rowY(d));
      }
      // label once per slice even when it spans several tiles
      const vis_w = Math.min(full_xb, x0 + w) - Math.max(full_xa, x0);
      if (vis_w >= MIN_LABEL_PX && !labelled.has(tt.id[i])) {
        labelled.add(tt.id[i]);
        labels.push([Math.max(full_xa, x0), vis_w, rowY(d), tile.names[tt.name[i]] ?? "?"]);
      }
    }
    batch.flush();
    // a depth page's fold sections: what every depth from tile.fold_from down covers, drawn in the fold
    // row when all of those depths are in it (a deeper page's exact rows are folded above, as before)
    if (folded && tile.fold_from !== null && tile.fold_from !== undefined && tile.fold_from >= shown) {
      for (let i = 0; i < tt.fold_n; i++) {
        const xa = x0 + (tt.f_start[i] - s) * scale, xb = x0 + (tt.f_end[i] - s) * scale;
        if (xb < cx0 || xa > cx1) continue;
        batch.add(shown, Math.max(xa, cx0), Math.min(xb, cx1), rowY(shown), foldColour);
      }
      batch.flush();
      for (let i = 0; i < tt.fi_n; i++) {
        const ts = tt.fi_ts[i];
        if (ts < t0 || ts >= t1) continue;
        const xa = x0 + (ts - s) * scale;
        if (xa < x0 - 1 || xa > x0 + w) continue;
        batch.add(shown, xa - 1, xa + 1, rowY(shown), foldColour);
      }
      batch.flush();
    }
    // instants (dur 0), thinned by the server to one per bucket and depth: a 2 px tick
    for (let i = 0; i < tt.in_n; i++) {
      const d = Math.min(tt.in_depth[i], shown);
      const ts = tt.in_ts[i];
      if (ts < t0 || ts >= t1) continue;
      const xa = x0 + (ts - s) * scale;
      if (xa < x0 - 1 || xa > x0 + w) continue;
      batch.add(d, xa - 1, xa + 1, rowY(d), d < shown ? tileColour(tile, lane, tt.in_name[i], true) : foldColour);
    }
    batch.flush();
  }
  if (annotation) {
    // annotations: a pale band with an outline in the slice's colour, so they never read as kernels
    ctx.strokeStyle = theme.annotationStroke || "#7c6f4f";
    ctx.lineWidth = 1;
    for (let i = 0; i < outlines.length; i += 3) {
      ctx.strokeRect(Math.round(outlines[i]) + 0.5, outlines[i + 2] + 0.5, Math.max(1, Math.round(outlines[i + 1]) - 1), ROW_PX - 3);
    }
  }
  // labels: only where they fit, deduplicated when a slice spans several tiles; API suffixes (_v3020)
  // and argument lists are left out of a label (the details keep the full name)
  ctx.fillStyle = annotation ? (theme.annotationText || "#3f3a2c") : theme.sliceText;
  ctx.font = theme.font;
  ctx.textBaseline = "middle";
  for (const [lx, lw, ly, full] of labels) {
    const fit = Math.floor((lw - 6) / CHAR_PX);
    if (fit < 3) continue;
    const name = displayName(full);
    const text = name.length > fit ? name.slice(0, fit - 1) + "\u2026" : name;
    ctx.fillText(text, lx + 3, ly + (ROW_PX - 2) / 2);
  }
  return labels.length;
}
