// The hover tooltip: name, start, duration; merged blocks say how many slices they stand for; transfers get
// bytes and achieved GB/s from the slice details route (fetched lazily, cached, only for the hovered slice).

import { el, fmtDur, fmtTime, fmtBytes, fmtGbps, gbps, fmtCount } from "../lib/util.js";

const detailCache = new Map(); // slice id -> Promise of detail
let hoverId = null;

function tip() {
  let t = document.getElementById("tooltip");
  if (!t) { t = el("div", { id: "tooltip", hidden: true }); document.body.append(t); }
  return t;
}

/** lines: [[text, "b"?], ...] shown near client point (cx, cy). */
export function showTooltip(lines, cx, cy) {
  const t = tip();
  t.replaceChildren(...lines.map(([text, style]) => el(style === "b" ? "b" : "div", {}, text)));
  t.hidden = false;
  const w = t.offsetWidth, h = t.offsetHeight;
  const x = cx + 14 + w > window.innerWidth ? cx - w - 10 : cx + 14;
  const y = cy + 16 + h > window.innerHeight ? cy - h - 8 : cy + 16;
  t.style.left = `${Math.max(0, x)}px`;
  t.style.top = `${Math.max(0, y)}px`;
}

export function hideTooltip() {
  hoverId = null;
  const t = document.getElementById("tooltip");
  if (t) t.hidden = true;
}

function baseLines(item) {
  if (item.kind === "counter") {
    const u = item.track.unit ? ` ${item.track.unit}` : "";
    return [[item.track.name, "b"], [`at ${fmtTime(item.ts)} (bucket ${fmtDur(item.dur)}, ${fmtCount(item.count)} samples)`],
            [`min ${item.min}${u} · max ${item.max}${u}`], [`last ${item.last}${u}`]];
  }
  if (item.kind === "bandwidth") {
    return [[`${item.track.name}: ${fmtGbps(item.gbps)}`, "b"], [`at ${fmtTime(item.ts)}, averaged over ${fmtDur(item.dur)}`]];
  }
  if (item.kind === "fold") {
    const n = item.count !== null && item.count !== undefined ? `${fmtCount(item.count)} slices at ` : "";
    return [[`${n}depths ${item.from}\u2013${item.to} folded`, "b"], ["their coverage is drawn in this row"],
            ["click to show every depth (names column: \u2212 / + / all)"]];
  }
  if (item.kind === "merged") {
    const lines = [[`${fmtCount(item.count)} slices merged`, "b"], [`at ${fmtTime(item.ts)}, within ${fmtDur(item.dur)}`],
                   [`busy ${fmtDur(Math.min(item.busy_ns, item.dur))}`], [`longest: ${item.name} (${fmtDur(item.longest_dur)})`]];
    if (item.bytes > 0) lines.push([`${fmtBytes(item.bytes)} moved, ${fmtGbps(gbps(item.bytes, item.busy_ns))} while busy`]);
    lines.push(["zoom in to see them one by one"]);
    return lines;
  }
  // the full name (the label may be shortened, lib/util.js displayName), wrapped by the stylesheet
  const lines = [[item.name, "b"], [`start ${fmtTime(item.ts)} · depth ${item.depth}`]];
  if (item.kind === "instant") lines.push([item.count > 1 ? `instant (${fmtCount(item.count)} here)` : "instant"]);
  else lines.push([`duration ${fmtDur(item.dur)}`]);
  if (item.track.lane === "annotation") lines.push(["annotation: marks time, not counted as work or busy"]);
  if (item.bytes > 0) lines.push([`${fmtBytes(item.bytes)}`], [`achieved ${fmtGbps(gbps(item.bytes, item.dur))}`]);
  return lines;
}

/** Tooltip for a hit item; for slices, adds bytes and GB/s once the details arrive. */
export function sliceTooltip(api, item, cx, cy) {
  const lines = baseLines(item);
  showTooltip(lines, cx, cy);
  if (item.kind !== "slice" || item.track.lane !== "pcie" && item.track.lane !== "eu") return;
  hoverId = item.id;
  let p = detailCache.get(item.id);
  if (!p) {
    p = api.slice(item.id).catch(() => null);
    detailCache.set(item.id, p);
    if (detailCache.size > 300) detailCache.delete(detailCache.keys().next().value);
  }
  p.then((d) => {
    if (!d || hoverId !== item.id) return;
    const s = d.slice;
    if (s.bytes === null || s.bytes === undefined) return;
    const base = item.bytes > 0 ? lines.slice(0, -2) : lines;
    showTooltip([...base, [`${fmtBytes(s.bytes)}${s.direction ? ` ${s.direction}` : ""}${s.host_mem ? `, ${s.host_mem}` : ""}`],
                 [`achieved ${fmtGbps(gbps(s.bytes, s.dur))}`]], cx, cy);
  });
}
