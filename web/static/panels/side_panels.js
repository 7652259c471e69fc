// The side panels: details of the selection, area aggregate, summary, findings. DOM only, built with el()
// (textContent), so names from traces are never parsed as markup.

import { el, fmtDur, fmtTime, fmtBytes, fmtGbps, gbps, fmtCount, LANES, LANE_TITLES } from "../lib/util.js";

function kv(rows) {
  return el("table", { class: "kv" }, rows.filter(Boolean).map(([k, v]) => el("tr", {}, el("th", {}, k), el("td", {}, v))));
}

function sliceLink(s, onjump, label) {
  return el("a", { href: "#", class: "slice-link", dataset: { sliceId: String(s.id) },
                   onclick: (e) => { e.preventDefault(); onjump(s.id); } }, label ?? s.name);
}

/** Details of a selected slice: every field, args, bandwidth for transfers, the correlation chain. */
export function renderDetails(box, detail, onjump) {
  box.replaceChildren();
  if (!detail) { box.append(el("p", { class: "muted" }, "Click a slice to see its details.")); return; }
  const s = detail.slice;
  const bw = gbps(s.bytes, s.dur);
  box.append(
    el("h3", { class: "sel-name", title: s.name }, s.name),
    kv([
      ["id", String(s.id)],
      ["track", `${LANE_TITLES[s.track?.lane] || s.track?.lane || ""} › ${s.track?.group_name ?? ""} › ${s.track?.name ?? s.track_id}`],
      ["start", fmtTime(s.ts)],
      ["duration", fmtDur(s.dur)],
      ["end", fmtTime(s.end ?? s.ts + s.dur)],
      ["depth", String(s.depth)],
      s.category ? ["category", s.category] : null,
      s.corr_id !== null && s.corr_id !== undefined ? ["correlation", String(s.corr_id)] : null,
      s.bytes !== null && s.bytes !== undefined ? ["bytes", `${fmtBytes(s.bytes)} (${fmtCount(s.bytes)} B)`] : null,
      bw !== null ? ["bandwidth", fmtGbps(bw)] : null,
      s.direction ? ["direction", s.direction] : null,
      s.host_mem ? ["host memory", s.host_mem] : null,
    ]),
  );
  const args = s.args && typeof s.args === "object" ? Object.entries(s.args) : [];
  if (args.length) {
    box.append(el("h4", {}, "Arguments"),
      kv(args.map(([k, v]) => [k, typeof v === "object" ? JSON.stringify(v) : String(v)])));
  }
  const chain = detail.chain;
  if (chain && chain.slices && chain.slices.length > 1) {
    box.append(el("h4", {}, `Correlation chain (${chain.slices.length} slices${chain.truncated ? ", truncated" : ""})`));
    const sorted = [...chain.slices].sort((a, b) => a.ts - b.ts);
    box.append(el("ol", { class: "chain" }, sorted.map((c) => el("li", { class: c.id === s.id ? "current" : "" },
      el("span", { class: `lane-dot lane-${c.lane}` }), `${LANE_TITLES[c.lane] || c.lane}: `,
      c.id === s.id ? el("b", {}, c.name) : sliceLink(c, onjump), ` @ ${fmtTime(c.ts)}, ${fmtDur(c.dur)}`))));
  }
  const direct = [...(detail.flows?.in || []), ...(detail.flows?.out || [])].filter((f) => f.kind === "dependency" || f.kind === "other");
  if (direct.length) {
    box.append(el("h4", {}, "Other flows"), el("ul", { class: "chain" }, direct.map((f) => {
      const other = f.src_slice === s.id ? f.dst_slice : f.src_slice;
      return el("li", {}, `${f.kind} (${f.raw_kind ?? ""}) ${f.src_slice === s.id ? "to" : "from"} `,
        other === null || other === undefined ? "outside the trace" : sliceLink({ id: other, name: `slice ${other}` }, onjump));
    })));
  }
}

/** Aggregate table for an area selection (the aggregate route's answer). */
export function renderArea(box, agg, ontext) {
  box.replaceChildren();
  if (!agg) { box.append(el("p", { class: "muted" }, "Shift-drag across tracks to aggregate an area.")); return; }
  box.append(el("p", { class: "muted" }, `${fmtTime(agg.start_ns)} – ${fmtTime(agg.end_ns)} (${fmtDur(agg.end_ns - agg.start_ns)})`));
  if (agg.names?.length) {
    box.append(table(["name", "count", "total", "mean", "max"], agg.names.map((r) => [
      nameCell(r.name, ontext), fmtCount(r.count), fmtDur(r.total_ns), fmtDur(r.mean_ns), fmtDur(r.max_ns)])));
  }
  if (agg.transfers?.length) {
    box.append(el("h4", {}, "Transfers"), table(["direction", "memory", "count", "bytes", "GB/s"], agg.transfers.map((r) => [
      r.direction ?? "-", r.host_mem ?? "-", fmtCount(r.count), fmtBytes(r.bytes), fmtGbps(r.gbps)])));
  }
  if (agg.counters?.length) {
    box.append(el("h4", {}, "Counters"), table(["counter", "samples", "min", "mean", "max"], agg.counters.map((r) => [
      `${r.name}${r.unit ? ` (${r.unit})` : ""}`, fmtCount(r.count), num(r.min), num(r.mean), num(r.max)])));
  }
  if (!agg.names?.length && !agg.transfers?.length && !agg.counters?.length) box.append(el("p", { class: "muted" }, "Nothing in this area."));
}

function num(v) { return v === null || v === undefined ? "-" : String(Number(Number(v).toPrecision(4))); }

function nameCell(name, ontext) {
  return el("a", { href: "#", title: name, onclick: (e) => { e.preventDefault(); ontext(name); } }, name);
}

function table(head, rows) {
  return el("table", { class: "grid" }, el("thead", {}, el("tr", {}, head.map((h) => el("th", {}, h)))),
    el("tbody", {}, rows.map((r) => el("tr", {}, r.map((c) => el("td", {}, c))))));
}

/** Summary: top names per lane, copies by direction and memory kind, busy fraction per lane. */
export function renderSummary(box, sum, ontext) {
  box.replaceChildren();
  if (!sum) { box.append(el("p", { class: "muted" }, "Loading summary…")); return; }
  if (sum.copies?.length) {
    box.append(el("h4", {}, "Copies"), table(["direction", "memory", "count", "bytes", "GB/s"], sum.copies.map((r) => [
      nameCell(r.direction ?? "-", () => ontext(copySearch(r.direction))), r.host_mem ?? "-", fmtCount(r.count), fmtBytes(r.bytes), fmtGbps(r.gbps)])));
  }
  const lanes = Object.keys(sum.lanes || {}).sort((a, b) => rank(a) - rank(b));
  for (const lane of lanes) {
    const info = sum.lanes[lane];
    const busy = info.busy?.fraction || [];
    const mean = busy.length ? busy.reduce((a, b) => a + b, 0) / busy.length : null;
    box.append(el("h4", {}, `${LANE_TITLES[lane] || lane}${mean !== null ? ` — busy ${(mean * 100).toFixed(1)}%` : ""}`));
    if (busy.length) box.append(sparkline(busy));
    if (info.top?.length) {
      box.append(table(["name", "count", "total", "mean", "p95"], info.top.map((r) => [
        nameCell(r.name, ontext), fmtCount(r.count), fmtDur(r.total_ns), fmtDur(r.mean_ns), fmtDur(r.p95_ns)])));
    }
  }
}

function rank(lane) {
  const i = LANES.indexOf(lane);
  return i < 0 ? LANES.length : i;
}

function copySearch(direction) {
  return { h2d: "HtoD", d2h: "DtoH", d2d: "DtoD", p2p: "PtoP" }[direction] || direction || "";
}

function sparkline(fractions) {
  const c = el("canvas", { class: "spark", width: 300, height: 28 });
  const ctx = c.getContext("2d");
  const w = 300 / fractions.length;
  ctx.fillStyle = "#5b7fd6";
  fractions.forEach((f, i) => { const h = Math.max(0, Math.min(1, f)) * 26; ctx.fillRect(i * w, 27 - h, Math.max(w - 0.5, 0.5), h); });
  return c;
}

/** Findings list sorted by impact, with a toggle per pass; click jumps to the finding. */
export function renderFindings(box, findings, overlays, { ontoggle, onjump }) {
  box.replaceChildren();
  if (!findings || !findings.length) {
    box.append(el("p", { class: "muted" }, "No findings for this trace. Run `acceltrace analyze <id>` to produce them."));
    return;
  }
  const passes = [...new Set(findings.map((f) => f.pass))].sort();
  box.append(el("div", { class: "passes" }, passes.map((p) => {
    const n = findings.filter((f) => f.pass === p).length;
    return el("label", { class: "pass-toggle" },
      el("input", { type: "checkbox", checked: overlays.has(p), dataset: { pass: p }, onchange: (e) => ontoggle(p, e.target.checked) }),
      ` ${p} (${n})`);
  })));
  const sorted = [...findings].sort((a, b) => (b.impact_ns ?? 0) - (a.impact_ns ?? 0));
  box.append(el("ol", { class: "findings" }, sorted.slice(0, 500).map((f) => el("li", { class: `sev-${f.severity}` },
    el("a", { href: "#", onclick: (e) => { e.preventDefault(); onjump(f); } }, f.message || f.pass),
    el("div", { class: "muted" }, `${f.pass} · impact ${fmtDur(f.impact_ns ?? 0)}${f.ts !== null && f.ts !== undefined ? ` · at ${fmtTime(f.ts)}` : ""}`)))));
}
