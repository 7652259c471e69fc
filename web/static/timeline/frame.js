// renderFrame(): draws the whole timeline from the current state. Synchronous, no fetching.
// Order: background, axis, rows (names column + track area), findings shading, area selection, flow
// arrows, the selection outline, notices.

import { drawAxis, drawGrid } from "./axis.js";
import { drawSliceTrack } from "../tracks/slices.js";
import { drawCounterTrack, drawCounterLabels } from "../tracks/counters.js";
import { LANE_ACCENT } from "../lib/util.js";
import { NAMES_PX, AXIS_PX, ROW_PX, TRACK_PAD_PX, STATUS_PX, MENU_RIGHT_PX, sliceAreaHeight, shownDepths, depthCount, isFolded, defaultDepths,
  DEPTH_STEP } from "./layout.js";
import { drawBandwidth, linkPeak, PCIE_GRAPH_PX } from "../tracks/pcie.js";

export const THEME = {
  bg: "#ffffff", axisBg: "#f4f5f7", namesBg: "#f7f8fa", headerBg: "#eceef2", groupBg: "#f2f3f6",
  grid: "rgba(0,0,0,0.07)", border: "#d5d8de", text: "#2b2f36", mutedText: "#6b7280", sliceText: "#ffffff",
  selection: "#111111", hoverRow: "rgba(60,110,220,0.06)", counterFill: "rgba(42,154,160,0.45)",
  counterArea: "rgba(42,154,160,0.14)",
  areaFill: "rgba(59,130,246,0.12)", areaStroke: "rgba(37,99,235,0.8)", flow: "#d9480f",
  fold: "#8a919e", annotationStroke: "#8c7b45", annotationText: "#3f3a2c",
  finding: { high: "rgba(220,38,38,0.18)", medium: "rgba(234,88,12,0.15)", low: "rgba(202,138,4,0.13)",
             error: "rgba(220,38,38,0.18)", warning: "rgba(234,88,12,0.15)", info: "rgba(202,138,4,0.11)" },
  merged: { cpu: "#34558c", driver: "#8a6128", pcie: "#2a6e46", eu: "#7a3a6d", counter: "#1d5d60" },
  font: "11px system-ui, -apple-system, 'Segoe UI', sans-serif",
  boldFont: "600 11px system-ui, -apple-system, 'Segoe UI', sans-serif",
  smallFont: "10px system-ui, -apple-system, 'Segoe UI', sans-serif",
};

export function renderFrame(tl) {
  const ctx = tl.ctx, W = tl.width_css_px, H = tl.height_css_px, th = THEME;
  ctx.setTransform(tl.dpr, 0, 0, tl.dpr, 0, 0);
  ctx.fillStyle = th.bg;
  ctx.fillRect(0, 0, W, H);
  const ticks = drawAxis(ctx, tl.view, NAMES_PX, AXIS_PX, th);
  ctx.fillStyle = th.namesBg;
  ctx.fillRect(0, 0, NAMES_PX, AXIS_PX); // the track filter box sits over this cell (trace page)

  const rows = tl.visibleRows();
  const scrollTop = tl.scrollTop_px;
  tl.nameControls = []; // click zones in the names column drawn this frame: {x0, x1, y0, y1, track_id, depths}
  // scrolled rows first (clipped below the pinned band), then the pinned band over them
  ctx.save();
  ctx.beginPath();
  ctx.rect(0, scrollTop, W, H - scrollTop);
  ctx.clip();
  drawGrid(ctx, tl.view, NAMES_PX, scrollTop, H, ticks, th);
  for (const r of rows) if (!r.pinned) drawRow(tl, r.row, r.y);
  ctx.restore();
  if (tl.layout.pinnedRows.length) {
    ctx.save();
    ctx.beginPath();
    ctx.rect(0, AXIS_PX, W, tl.layout.pinnedHeight);
    ctx.clip();
    ctx.fillStyle = th.bg;
    ctx.fillRect(0, AXIS_PX, W, tl.layout.pinnedHeight);
    drawGrid(ctx, tl.view, NAMES_PX, AXIS_PX, scrollTop, ticks, th);
    for (const r of rows) if (r.pinned) drawRow(tl, r.row, r.y);
    ctx.restore();
    ctx.strokeStyle = "#9aa3b2";
    ctx.beginPath();
    ctx.moveTo(0, scrollTop - 0.5);
    ctx.lineTo(W, scrollTop - 0.5);
    ctx.stroke();
  }
  ctx.strokeStyle = th.border;
  ctx.beginPath();
  ctx.moveTo(NAMES_PX - 0.5, 0);
  ctx.lineTo(NAMES_PX - 0.5, H);
  ctx.stroke();

  ctx.save();
  ctx.beginPath();
  ctx.rect(NAMES_PX, AXIS_PX, W - NAMES_PX, H - AXIS_PX);
  ctx.clip();
  drawFindings(tl, rows);
  drawArea(tl);
  tl.drawnFlows = drawFlows(tl);
  drawSelection(tl);
  ctx.restore();
  drawScrollbar(tl);
  drawTrackDrag(tl);
  // the status line at the foot of the names column (the layout leaves STATUS_PX below the last row)
  ctx.fillStyle = th.namesBg;
  ctx.fillRect(0, H - STATUS_PX, NAMES_PX - 1, STATUS_PX);
  ctx.fillStyle = th.mutedText;
  ctx.font = th.smallFont;
  ctx.textBaseline = "middle";
  const pending = tl.tiles.pendingCount(tl.visibleKeys);
  ctx.fillText(clipText(`level ${tl.level()} · ${fmtSpan(tl.view.span_ns)} visible${pending ? ` · loading ${pending}` : ""}`, NAMES_PX - 12),
               8, H - STATUS_PX / 2);
  // tiles that failed are not retried; say so instead of showing a silently empty stretch
  const failed = tl.visibleKeys.filter((k) => tl.tiles.errors.has(k));
  if (failed.length) {
    const msg = `${failed.length} tile(s) could not be loaded: ${tl.tiles.errors.get(failed[0])}`;
    ctx.font = th.font;
    ctx.fillStyle = "#fef2f2";
    ctx.fillRect(NAMES_PX + 4, AXIS_PX + 4, Math.min(W - NAMES_PX - 8, msg.length * 6.6 + 12), 20);
    ctx.fillStyle = "#b91c1c";
    ctx.textBaseline = "middle";
    ctx.fillText(msg, NAMES_PX + 10, AXIS_PX + 14);
  }
}

function fmtSpan(ns) {
  if (ns >= 1e9) return `${(ns / 1e9).toPrecision(3)} s`;
  if (ns >= 1e6) return `${(ns / 1e6).toPrecision(3)} ms`;
  if (ns >= 1e3) return `${(ns / 1e3).toPrecision(3)} us`;
  return `${ns.toPrecision(3)} ns`;
}

function drawRow(tl, row, y) {
  const ctx = tl.ctx, th = THEME, W = tl.width_css_px;
  if (row.kind !== "track") {
    ctx.fillStyle = row.kind === "lane" ? th.headerBg : th.groupBg;
    ctx.fillRect(0, y, W, row.h);
    ctx.fillStyle = LANE_ACCENT[row.lane] || "#888";
    ctx.fillRect(0, y, 4, row.h);
    ctx.fillStyle = th.text;
    ctx.font = row.kind === "lane" ? th.boldFont : th.font;
    ctx.textBaseline = "middle";
    const x = 10 + row.indent * 12;
    drawTriangle(ctx, x, y + row.h / 2, row.collapsed);
    ctx.fillStyle = th.text;
    const label = clipText(row.label, NAMES_PX - x - 18 - (row.note ? row.note.length * 6.4 : 0));
    ctx.fillText(label, x + 12, y + row.h / 2);
    if (row.note) { // a group some of whose tracks are hidden or filtered out: "(n of m)"
      ctx.fillStyle = th.mutedText;
      ctx.fillText(row.note, x + 12 + ctx.measureText(label).width, y + row.h / 2);
    }
    ctx.strokeStyle = th.border;
    ctx.beginPath();
    ctx.moveTo(0, y + row.h - 0.5);
    ctx.lineTo(W, y + row.h - 0.5);
    ctx.stroke();
    return;
  }
  const t = row.track;
  // names column
  ctx.fillStyle = th.namesBg;
  ctx.fillRect(0, y, NAMES_PX, row.h);
  ctx.fillStyle = LANE_ACCENT[t.lane] || "#888";
  ctx.fillRect(0, y, 4, row.h);
  ctx.fillStyle = th.text;
  ctx.font = th.font;
  ctx.textBaseline = "top";
  const x = 10 + row.indent * 12;
  ctx.fillText(clipText(String(t.name), NAMES_PX - x - MENU_RIGHT_PX - 4), x, y + 5);
  // second line: the unit of a counter, the group of a pinned track (it left its group's place)
  const sub = [row.pinned ? String(t.group_name) : null, t.unit].filter(Boolean).join(" · ");
  if (sub && row.h >= 30) {
    ctx.fillStyle = th.mutedText;
    ctx.font = th.smallFont;
    ctx.fillText(clipText(sub, NAMES_PX - x - 22), x, y + 19);
  }
  if (t.lane !== "counter") drawDepthControls(tl, row, t, x, y, sub && row.h >= 30 ? 33 : 19);
  // the track's menu (hide, depths, move: panels/track_controls.js) and the pin toggle at the right
  if (tl.trackMenus) { // a page with track control (panels/track_controls.js)
    ctx.fillStyle = "#8a919e";
    ctx.font = th.boldFont;
    ctx.fillText("\u22EE", NAMES_PX - MENU_RIGHT_PX + 3, y + 5);
  }
  ctx.fillStyle = row.pinned ? "#2563eb" : "#b8bec9";
  ctx.font = th.font;
  ctx.fillText(row.pinned ? "\u25C6" : "\u25C7", NAMES_PX - 16, y + 5);
  if (tl.trackDrag && tl.trackDrag.track_id === t.track_id && tl.trackDrag.moved) { // the row being dragged
    ctx.fillStyle = "rgba(37,99,235,0.10)";
    ctx.fillRect(0, y, NAMES_PX, row.h);
  }
  // track area
  const pieces = tl.piecesFor(t.track_id);
  ctx.save();
  ctx.beginPath();
  ctx.rect(NAMES_PX, y, W - NAMES_PX, row.h);
  ctx.clip();
  if (t.lane === "counter") {
    const range = drawCounterTrack(ctx, pieces, tl.view, NAMES_PX, y, row.h, t, th);
    drawCounterLabels(ctx, NAMES_PX, y, row.h, range, t.unit, th);
  } else {
    const sh = sliceAreaHeight(t);
    drawSliceTrack(ctx, pieces, tl.view, NAMES_PX, y, sh, t, th);
    if (t.lane === "pcie") {
      const cols = drawBandwidth(ctx, pieces, tl.view, NAMES_PX, y + sh, PCIE_GRAPH_PX, linkPeak(tl.meta.links, t.device), th);
      tl.bandwidth.set(t.track_id, cols);
    }
  }
  ctx.restore();
  ctx.strokeStyle = th.border;
  ctx.beginPath();
  ctx.moveTo(0, y + row.h - 0.5);
  ctx.lineTo(W, y + row.h - 0.5);
  ctx.stroke();
}

/**
 * A deep track's depth controls in the names column: "depths N of M" with − / + / all (or "fold" back to
 * the default), and on the fold row "▸ depths N–M folded"; each a click zone in tl.nameControls
 * (timeline/input.js). Nothing deeper is ever hidden without the track saying so.
 */
function drawDepthControls(tl, row, t, x, y, dy) {
  const all = depthCount(t), shown = shownDepths(t);
  if (all < 4 && !isFolded(t)) return;
  const ctx = tl.ctx, th = THEME;
  const add = (x0, x1, y0, y1, depths, what) => tl.nameControls.push({ x0, x1, y0, y1, track_id: t.track_id, depths, what });
  if (row.h >= dy + 14) {
    ctx.font = th.smallFont;
    ctx.textBaseline = "top";
    ctx.fillStyle = th.mutedText;
    const label = shown < all ? `depths ${shown} of ${all}` : `${all} depths`;
    ctx.fillText(label, x, y + dy);
    let bx = x + label.length * 5.4 + 6;
    const button = (text, depths, what) => {
      const w = text.length * 6 + 8;
      ctx.strokeStyle = "#c3c8d1";
      ctx.strokeRect(Math.round(bx) + 0.5, y + dy - 1.5, w, 13);
      ctx.fillStyle = th.text;
      ctx.fillText(text, bx + 4, y + dy);
      add(bx, bx + w, y + dy - 2, y + dy + 12, depths, what);
      bx += w + 4;
    };
    if (shown > 1) button("\u2212", Math.max(1, shown - DEPTH_STEP), "less");
    if (shown < all) button("+", Math.min(all, shown + DEPTH_STEP), "more");
    if (shown < all) button("all", all, "all");
    else if (defaultDepths(t) < all) button("fold", defaultDepths(t), "fold");
  }
  if (isFolded(t)) {
    const fy = y + TRACK_PAD_PX + shown * ROW_PX;
    const counts = t.depth_slices;
    const n = counts ? counts.slice(shown).reduce((a, b) => a + b, 0) : null;
    const msg = `\u25B8 depths ${shown}\u2013${all - 1}${n !== null ? ` (${fmtCountShort(n)})` : ""}`;
    ctx.font = th.smallFont;
    ctx.textBaseline = "middle";
    ctx.fillStyle = "#b45309";
    ctx.fillText(clipText(msg, NAMES_PX - x - 22), x, fy + ROW_PX / 2);
    add(x, NAMES_PX - 22, fy, fy + ROW_PX, all, "unfold");
  }
}

function fmtCountShort(n) {
  return n >= 1e6 ? `${(n / 1e6).toFixed(1)} M` : n >= 1e4 ? `${Math.round(n / 1e3)} k` : String(n);
}

function drawTriangle(ctx, x, cy, collapsed) {
  ctx.fillStyle = "#5b6270";
  ctx.beginPath();
  if (collapsed) { ctx.moveTo(x, cy - 4); ctx.lineTo(x + 6, cy); ctx.lineTo(x, cy + 4); }
  else { ctx.moveTo(x - 1, cy - 3); ctx.lineTo(x + 7, cy - 3); ctx.lineTo(x + 3, cy + 3); }
  ctx.fill();
}

function clipText(s, px) {
  const fit = Math.floor(px / 6.4);
  s = String(s);
  return s.length > fit ? s.slice(0, Math.max(1, fit - 1)) + "\u2026" : s;
}

const FINDING_BUCKET_PX = 4; // findings narrower than this are aggregated per bucket of this width and row
const SEV_RANK = { error: 3, high: 3, warning: 2, medium: 2, info: 1, low: 1 }; // the passes say error | warning | info

/**
 * Shade the regions of the findings of the shown passes on their tracks (the whole height when a finding
 * has none). A finding at least FINDING_BUCKET_PX wide is drawn as itself; narrower ones are aggregated
 * per FINDING_BUCKET_PX bucket and row, one block each in the worst severity's colour, darker with more
 * findings, so thousands of findings never bury the timeline at coarse zoom. tl.findingsDrawn counts
 * what the last frame drew: {exact, buckets, findings}.
 */
function drawFindings(tl, rows) {
  tl.findingsDrawn = { exact: 0, buckets: 0, findings: 0 };
  if (!tl.findings.length || !tl.overlays.size) return;
  const ctx = tl.ctx, v = tl.view, H = tl.height_css_px;
  const rowOf = new Map();
  for (const r of rows) if (r.row.kind === "track") rowOf.set(r.row.track.track_id, r);
  const buckets = new Map(); // "y|h|bucket" -> [count, worst rank, y, h, x]
  for (const f of tl.findings) {
    if (!tl.overlays.has(f.pass) || f.ts === null || f.ts === undefined) continue;
    const xa = NAMES_PX + v.x_of(f.ts), xb = NAMES_PX + v.x_of(f.ts + (f.dur || 0));
    if (xb < NAMES_PX || xa > tl.width_css_px) continue;
    let y = AXIS_PX, h = H - AXIS_PX;
    if (f.track_id !== null && f.track_id !== undefined) {
      const r = rowOf.get(f.track_id);
      if (r) { y = r.y; h = r.row.h; }
      else {
        const m = tl.rowMidY(f.track_id, 0);
        if (!m) continue; // its track is scrolled away
        y = m.y - 11; h = 22;
      }
    }
    tl.findingsDrawn.findings++;
    if (xb - xa >= FINDING_BUCKET_PX) {
      ctx.fillStyle = THEME.finding[f.severity] || THEME.finding.medium;
      ctx.fillRect(xa, y, xb - xa, h);
      tl.findingsDrawn.exact++;
      continue;
    }
    const b = Math.floor((xa - NAMES_PX) / FINDING_BUCKET_PX);
    const key = `${y}|${h}|${b}`;
    const cur = buckets.get(key);
    const rank = SEV_RANK[f.severity] || 2;
    if (cur) { cur[0]++; if (rank > cur[1]) cur[1] = rank; }
    else buckets.set(key, [1, rank, y, h, NAMES_PX + b * FINDING_BUCKET_PX]);
  }
  const sev = ["info", "info", "warning", "error"];
  for (const [n, rank, y, h, x] of buckets.values()) {
    ctx.fillStyle = THEME.finding[sev[rank]];
    // more findings in a bucket: a denser block (1, 2-9, 10+ layers of the translucent shade)
    for (let k = n >= 10 ? 3 : n >= 2 ? 2 : 1; k > 0; k--) ctx.fillRect(x, y, FINDING_BUCKET_PX, h);
  }
  tl.findingsDrawn.buckets = buckets.size;
}

function drawArea(tl) {
  const a = tl.area;
  if (!a) return;
  const ctx = tl.ctx, v = tl.view;
  const xa = NAMES_PX + v.x_of(Math.min(a.start_ns, a.end_ns)), xb = NAMES_PX + v.x_of(Math.max(a.start_ns, a.end_ns));
  const dy = (a.scroll0 ?? tl.scrollY) - tl.scrollY;
  const ya = Math.min(a.y0, a.y1) + dy, yb = Math.max(a.y0, a.y1) + dy;
  ctx.fillStyle = THEME.areaFill;
  ctx.fillRect(xa, ya, xb - xa, yb - ya);
  ctx.strokeStyle = THEME.areaStroke;
  ctx.strokeRect(xa + 0.5, ya + 0.5, xb - xa - 1, yb - ya - 1);
}

/** Outline the selection from its details (so it shows even inside a merged block), at least 3 px wide. */
function drawSelection(tl) {
  const s = tl.selected;
  if (!s) return;
  const m = tl.rowMidY(s.track_id, s.depth);
  if (!m) return;
  const ctx = tl.ctx, v = tl.view;
  let xa = NAMES_PX + v.x_of(s.ts), xb = NAMES_PX + v.x_of(s.ts + s.dur);
  if (xb - xa < 3) { const c = (xa + xb) / 2; xa = c - 1.5; xb = c + 1.5; }
  xa = Math.max(xa, NAMES_PX - 2);
  xb = Math.min(xb, tl.width_css_px + 2);
  if (xb < NAMES_PX) return;
  const h = m.exact ? ROW_PX - 2 : 12;
  ctx.strokeStyle = THEME.selection;
  ctx.lineWidth = 2;
  ctx.strokeRect(Math.round(xa) + 1, Math.round(m.y - h / 2), Math.max(Math.round(xb - xa) - 2, 2), h);
  ctx.lineWidth = 1;
}

/** Arrows along the selection's correlation chain; returns the [src, dst] pairs drawn. */
function drawFlows(tl) {
  const drawn = [];
  if (!tl.chain || !tl.chain.flows) return drawn;
  const ctx = tl.ctx, v = tl.view, W = tl.width_css_px;
  const byId = new Map(tl.chain.slices.map((s) => [s.id, s]));
  ctx.strokeStyle = THEME.flow;
  ctx.fillStyle = THEME.flow;
  ctx.lineWidth = 1.5;
  for (const f of tl.chain.flows) {
    const a = byId.get(f.src_slice), b = byId.get(f.dst_slice);
    if (!a || !b) continue;
    const pa = tl.rowMidY(a.track_id, depthOf(tl, a)), pb = tl.rowMidY(b.track_id, depthOf(tl, b));
    if (!pa || !pb) continue;
    const x1 = NAMES_PX + v.x_of(a.ts + Math.min(a.dur, Math.max(0, b.ts - a.ts))), y1 = pa.y;
    const x2 = NAMES_PX + v.x_of(b.ts), y2 = pb.y;
    if ((x1 < NAMES_PX && x2 < NAMES_PX) || (x1 > W && x2 > W)) continue;
    const dx = Math.max(20, Math.min(80, Math.abs(x2 - x1) / 2));
    ctx.beginPath();
    ctx.moveTo(x1, y1);
    ctx.bezierCurveTo(x1 + dx, y1, x2 - dx, y2, x2, y2);
    ctx.stroke();
    ctx.beginPath();
    ctx.moveTo(x2, y2);
    ctx.lineTo(x2 - 7, y2 - 4);
    ctx.lineTo(x2 - 7, y2 + 4);
    ctx.closePath();
    ctx.fill();
    drawn.push([f.src_slice, f.dst_slice]);
  }
  ctx.lineWidth = 1;
  return drawn;
}

/** Depth of a chain slice: from the API when given, else from a loaded tile, else 0. */
function depthOf(tl, s) {
  if (s.depth !== undefined && s.depth !== null) return s.depth;
  if (tl.selected && tl.selected.id === s.id) return tl.selected.depth;
  for (const { tt } of tl.piecesFor(s.track_id)) {
    for (let i = 0; i < tt.n; i++) if (tt.id[i] === s.id) return (s.depth = tt.depth[i]);
  }
  return 0;
}

/** While a track's name is dragged (timeline/track_drag.js): where it would land, a line across the names. */
function drawTrackDrag(tl) {
  const d = tl.trackDrag;
  if (!d || !d.moved || d.line_y === null || d.line_y === undefined) return;
  const ctx = tl.ctx;
  ctx.fillStyle = "#2563eb";
  ctx.fillRect(0, Math.round(d.line_y) - 1, NAMES_PX, 3);
}

function drawScrollbar(tl) {
  const total = tl.layout.height, area = tl.scrollArea_px;
  if (total <= area) return;
  const ctx = tl.ctx, x = tl.width_css_px - 6;
  const h = Math.max(24, area * area / total);
  const y = tl.scrollTop_px + (area - h) * (tl.scrollY / (total - area));
  ctx.fillStyle = "rgba(0,0,0,0.25)";
  ctx.fillRect(x, y, 4, h);
}
