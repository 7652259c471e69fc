// Hit testing against what is drawn: which row is under a point, and which slice, merged block,
// instant or counter bucket of that row's loaded tiles.

import { NAMES_PX, AXIS_PX, ROW_PX, TRACK_PAD_PX, sliceAreaHeight, shownDepths, isFolded, depthCount } from "./layout.js";

const TOL_PX = 2; // a slice thinner than a pixel can still be hovered

/** The row under canvas css-px (x, y): {row, y0, pinned} or null. */
export function rowAt(tl, y) {
  if (y < AXIS_PX) return null;
  for (const r of tl.visibleRows()) {
    if (r.pinned !== (y < tl.scrollTop_px)) continue;
    if (y >= r.y && y < r.y + r.row.h) return { row: r.row, y0: r.y, pinned: r.pinned };
  }
  return null;
}

/** What is under (x, y) in the tracks area: a described item or null. */
export function hitTest(tl, x, y) {
  if (x < NAMES_PX) return null;
  const at = rowAt(tl, y);
  if (!at || at.row.kind !== "track") return null;
  const track = at.row.track;
  const v = tl.view;
  const t = v.ns_at(x - NAMES_PX);
  const tol = TOL_PX * v.ns_per_px;
  const pieces = tl.piecesFor(track.track_id);
  if (track.lane === "counter") return hitCounter(pieces, t, track);
  if (track.lane === "pcie" && y >= at.y0 + sliceAreaHeight(track)) {
    const cols = tl.bandwidth.get(track.track_id);
    const c = Math.floor(x - NAMES_PX);
    return cols && c >= 0 && c < cols.length ? { kind: "bandwidth", ts: t, dur: v.ns_per_px, gbps: cols[c], track } : null;
  }
  const depth = Math.floor((y - at.y0 - TRACK_PAD_PX) / ROW_PX);
  if (depth < 0) return null;
  if (isFolded(track) && depth >= shownDepths(track)) {
    // the fold row: what it holds (the click unfolds it, timeline/input.js)
    const from = shownDepths(track), to = depthCount(track) - 1;
    const counts = track.depth_slices;
    const n = counts ? counts.slice(from).reduce((a, b) => a + b, 0) : null;
    return { kind: "fold", ts: t, dur: 0, track, from, to, count: n };
  }
  let best = null, bestDist = Infinity;
  for (const { tile, tt, c0, c1 } of pieces) {
    if (t < c0 - tol || t > c1 + tol) continue;
    for (let i = 0; i < tt.n; i++) {
      if (tt.depth[i] !== depth) continue;
      const a = tt.ts[i], b = a + tt.dur[i];
      const dist = t < a ? a - t : t > b ? t - b : 0;
      if (dist <= tol && dist < bestDist) {
        bestDist = dist;
        best = { kind: "slice", id: tt.id[i], ts: a, dur: tt.dur[i], depth, name: tile.names[tt.name[i]], track,
                 bytes: tt.bytes ? tt.bytes[i] : 0 };
      }
    }
    if (best && bestDist === 0) break;
    const bn = tile.bucket_ns;
    for (let i = 0; i < tt.in_n; i++) {
      if (tt.in_depth[i] !== depth) continue;
      const dist = Math.abs(tt.in_ts[i] - t);
      if (dist <= tol && dist < bestDist) {
        bestDist = dist;
        best = { kind: "instant", id: tt.in_id[i], ts: tt.in_ts[i], dur: 0, depth, count: tt.in_count[i],
                 name: tile.names[tt.in_name[i]], track };
      }
    }
    if (best) continue;
    for (let i = 0; i < tt.mn; i++) {
      if (tt.m_depth[i] !== depth) continue;
      const a = tile.start_ns + tt.m_bucket[i] * bn;
      const dist = t < a ? a - t : t > a + bn ? t - a - bn : 0;
      if (dist <= tol && dist < bestDist) {
        bestDist = dist;
        best = { kind: "merged", id: tt.m_id[i], ts: a, dur: bn, depth, count: tt.m_count[i], busy_ns: tt.m_busy[i],
                 longest_dur: tt.m_dur[i], name: tile.names[tt.m_name[i]], track, bytes: tt.m_bytes ? tt.m_bytes[i] : 0 };
      }
    }
  }
  return best;
}

function hitCounter(pieces, t, track) {
  for (const { tile, tt, c0, c1 } of pieces) {
    if (t < c0 || t >= c1) continue;
    const bn = tile.bucket_ns;
    let best = -1;
    for (let i = 0; i < tt.cn; i++) {
      const a = tile.start_ns + tt.c_bucket[i] * bn;
      if (a <= t) best = i; else break;
    }
    if (best < 0) return null;
    return { kind: "counter", ts: tile.start_ns + tt.c_bucket[best] * bn, dur: bn, count: tt.c_count[best],
             min: tt.c_min[best], max: tt.c_max[best], first: tt.c_first[best], last: tt.c_last[best], track };
  }
  return null;
}

/** Track ids whose rows intersect the vertical span [y0, y1] (canvas css px). */
export function tracksInSpan(tl, y0, y1) {
  const lo = Math.min(y0, y1), hi = Math.max(y0, y1);
  const ids = [];
  for (const r of tl.visibleRows()) {
    if (r.row.kind === "track" && r.y < hi && r.y + r.row.h > lo) ids.push(r.row.track.track_id);
    // a collapsed header row stands for all of its tracks
    if (r.row.kind !== "track" && r.row.collapsed && r.y < hi && r.y + r.row.h > lo) {
      for (const t of tl.layout.tracks) {
        if (t.lane !== r.row.lane || !tl.layout.isShown(t.track_id)) continue; // hidden or filtered out: not in the area
        if (r.row.kind === "group" && String(t.group_name) !== r.row.label) continue;
        ids.push(t.track_id);
      }
    }
  }
  return [...new Set(ids)];
}
