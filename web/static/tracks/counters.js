// Synchronous drawing of one counter track from whatever tiles are loaded (no fetching here): the level as
// a step line over a shaded area, the min..max band where a bucket holds several samples, and min/max labels
// in the track's unit.

import { LANE_ACCENT } from "../lib/util.js";

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
  // the level as a step function: each bucket starts at its first sample, ends at its last, and the last
  // value holds until the next bucket (a counter keeps its value between samples)
  const pts = [];
  let prevY = null;
  for (const { tile, tt, c0, c1 } of pieces) {
    const bn = tile.bucket_ns;
    for (let i = 0; i < tt.cn; i++) {
      const b0 = tile.start_ns + tt.c_bucket[i] * bn;
      if (b0 >= c1 || b0 + bn <= c0) continue;
      const xa = Math.max(x0, Math.min(x0 + w, x0 + (b0 - s) * scale));
      const xb = Math.max(x0, Math.min(x0 + w, x0 + (b0 + bn - s) * scale));
      if (prevY !== null) pts.push(xa, prevY);
      pts.push(xa, yOf(tt.c_first[i]), xb, yOf(tt.c_last[i]));
      prevY = yOf(tt.c_last[i]);
    }
  }
  if (pts.length) {
    const lastX = Math.min(x0 + w, Math.max(x0, x0 + (view.duration_ns - s) * scale));
    if (lastX > pts[pts.length - 2]) pts.push(lastX, prevY);
    ctx.fillStyle = theme.counterArea;
    ctx.beginPath();
    ctx.moveTo(pts[0], bottom);
    for (let i = 0; i < pts.length; i += 2) ctx.lineTo(pts[i], pts[i + 1]);
    ctx.lineTo(pts[pts.length - 2], bottom);
    ctx.closePath();
    ctx.fill();
  }
  // where a bucket holds several samples, the band between their min and max
  ctx.fillStyle = theme.counterFill;
  ctx.beginPath();
  for (const { tile, tt, c0, c1 } of pieces) {
    const bn = tile.bucket_ns;
    for (let i = 0; i < tt.cn; i++) {
      if (tt.c_max[i] <= tt.c_min[i]) continue;
      const b0 = tile.start_ns + tt.c_bucket[i] * bn;
      if (b0 >= c1 || b0 + bn <= c0) continue;
      const xa = x0 + (b0 - s) * scale;
      if (xa > x0 + w || xa + bn * scale < x0) continue;
      const ya = yOf(tt.c_max[i]), yb = yOf(tt.c_min[i]);
      ctx.rect(Math.max(xa, x0), ya, Math.max(bn * scale, 1), Math.max(yb - ya, 1));
    }
  }
  ctx.fill();
  ctx.strokeStyle = accent;
  ctx.beginPath();
  for (let i = 0; i < pts.length; i += 2) { if (i === 0) ctx.moveTo(pts[0], pts[1]); else ctx.lineTo(pts[i], pts[i + 1]); }
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
