// The side panels: details of the selection, area aggregate, summary, findings. DOM only, built with el()
// (textContent), so names from traces are never parsed as markup.

import { flowNav, flowTable } from "./flows.js";
import { el, fmtDur, fmtTime, fmtBytes, fmtGbps, gbps, fmtCount, LANES, LANE_TITLES, displayName } from "../lib/util.js";

function kv(rows) {
  return el("table", { class: "kv" }, rows.filter(Boolean).map(([k, v]) => el("tr", {}, el("th", {}, k), el("td", {}, v))));
}

function sliceLink(s, onjump, label) {
  return el("a", { href: "#", class: "slice-link", title: s.name, dataset: { sliceId: String(s.id) },
                   onclick: (e) => { e.preventDefault(); onjump(s.id); } }, label ?? s.name);
}

/** Details of a selected slice: every field, args, bandwidth for transfers, the correlation chain. */
export function renderDetails(box, detail, onjump) {
  box.replaceChildren();
  if (!detail) { box.append(el("p", { class: "muted" }, "Click a slice to see its details.")); return; }
  const s = detail.slice;
  const bw = gbps(s.bytes, s.dur);
  const short = displayName(s.name);
  box.append(
    el("h3", { class: "sel-name", title: s.name }, short),
    // the full name, however long, in a box of its own (a templated C++ name never pushes the panel down)
    short !== s.name || s.name.length > 80 ? el("details", { class: "full-name", open: s.name.length <= 300 },
      el("summary", {}, `full name (${fmtCount(s.name.length)} characters)`), el("pre", {}, s.name)) : "",
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
  if (s.args_chars) { // too long to send or draw whole: its start, how long it is, and all of it as a download
    box.append(el("h4", {}, "Arguments"),
      el("p", { class: "note" }, `${fmtCount(s.args_chars)} characters; the first ${fmtCount(String(s.args).length)}`
        + " shown. ", el("a", { href: `${location.pathname.replace(/^\/t\//, "/api/traces/")}/slices/${s.id}/args`,
                                download: `slice-${s.id}-args.json` }, "Download all")),
      el("pre", { class: "long" }, String(s.args)));
  } else if (args.length) {
    box.append(el("h4", {}, "Arguments"),
      kv(args.map(([k, v]) => { const t = typeof v === "object" ? JSON.stringify(v) : String(v);
                                return [k, t.length > 200 ? el("span", { class: "long" }, t) : t]; })));
  }
  const chain = detail.chain;
  box.append(...flowNav(detail, onjump)); // [ / ] along the chain (panels/flows.js), above its list
  if (chain && chain.slices && chain.slices.length > 1) {
    box.append(el("h4", {}, `Correlation chain (${chain.slices.length} slices${chain.truncated ? ", truncated" : ""})`));
    const sorted = [...chain.slices].sort((a, b) => a.ts - b.ts);
    box.append(el("ol", { class: "chain" }, sorted.map((c) => el("li", { class: c.id === s.id ? "current" : "" },
      el("span", { class: `lane-dot lane-${c.lane}` }), `${LANE_TITLES[c.lane] || c.lane}: `,
      c.id === s.id ? el("b", { title: c.name }, displayName(c.name)) : sliceLink(c, onjump, displayName(c.name)),
      ` @ ${fmtTime(c.ts)}, ${fmtDur(c.dur)}${c.depth !== undefined && c.depth !== null ? `, depth ${c.depth}` : ""}`))));
  }
  // every flow into or out of the slice (panels/flows.js)
  box.append(...flowTable(detail, onjump));
}

/** Aggregate table for an area selection (the aggregate route's answer). */
export function renderArea(box, agg, ontext) {
  box.replaceChildren();
  if (!agg) { box.append(el("p", { class: "muted" }, "Shift-drag across tracks to aggregate an area.")); return; }
  box.append(el("p", { class: "muted" }, `${fmtTime(agg.start_ns)} – ${fmtTime(agg.end_ns)} (${fmtDur(agg.end_ns - agg.start_ns)})`));
  if (agg.busy) box.append(...busyBlock(agg.busy, 0));
  if (agg.names?.length) {
    // total: the part of each slice inside the range; self: that minus its children's (nested) time
    box.append(el("h4", {}, "By name (clipped to the range)"),
      table([["name"], ["lane"], ["count"], ["total", "time of its slices inside the range"],
             ["self", "total minus the time of the slices nested in them"], ["max", "longest slice (whole)"]],
        agg.names.map((r) => [nameCell(r.name, ontext), laneCell(r.lane), fmtCount(r.count), fmtDur(r.total_ns),
                              r.self_ns === undefined || r.self_ns === null ? "-" : fmtDur(r.self_ns), fmtDur(r.max_ns)]), "area-names"));
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
  return el("a", { href: "#", title: name, onclick: (e) => { e.preventDefault(); ontext(name); } }, displayName(name));
}

/** A table; a head cell is a string or [text, tooltip]. */
function table(head, rows, cls = "") {
  const th = (h) => (Array.isArray(h) ? el("th", h[1] ? { title: h[1], class: "busy-def" } : {}, h[0]) : el("th", {}, h));
  return el("table", { class: `grid ${cls}`.trim() }, el("thead", {}, el("tr", {}, head.map(th))),
    el("tbody", {}, rows.map((r) => el("tr", {}, r.map((c) => el("td", {}, c))))));
}

function laneCell(lane) {
  return el("span", { class: "lane-name" }, el("span", { class: `lane-dot lane-${lane}` }), LANE_TITLES[lane] || lane || "-");
}

const BUSY_THREADS_MAX = 8;

/**
 * Device and CPU busy with their definitions in a tooltip (the server's `busy`: union of each device's
 * kernel, memset and copy intervals; per thread, the union of its real ops), each with its series.
 */
function busyBlock(busy, threadsMax = BUSY_THREADS_MAX) {
  const def = busy.definition || {};
  const out = [];
  const pct = (f) => `${(100 * f).toFixed(1)}%`;
  if (busy.devices?.length) {
    out.push(el("h4", { class: "busy-def", title: `device busy = ${def.device || ""}` }, "Device busy"));
    out.push(el("table", { class: "kv busy" }, busy.devices.map((d) => el("tr", { dataset: { device: String(d.device) } },
      el("th", { title: `device busy = ${def.device || ""}`, class: "busy-def" }, String(d.group_name || d.device)),
      el("td", {}, `${pct(d.fraction)} (${fmtDur(d.busy_ns)} of ${fmtDur(busy.span_ns)})`,
         d.series ? sparkline(d.series) : null)))));
  }
  const threads = busy.threads || [];
  if (threads.length && threadsMax !== 0) {
    const shown = threads.slice(0, threadsMax ?? threads.length);
    out.push(el("h4", { class: "busy-def", title: `CPU busy = ${def.cpu || ""}` }, "CPU busy per thread"));
    out.push(el("table", { class: "kv busy" }, shown.map((t) => el("tr", {},
      el("th", { title: `${t.group_name} \u203a ${t.name}\nCPU busy = ${def.cpu || ""}`, class: "busy-def" }, String(t.name)),
      el("td", {}, `${pct(t.fraction)} (${fmtDur(t.busy_ns)})`)))));
    if (shown.length < threads.length) out.push(el("p", { class: "muted" }, `showing ${shown.length} of ${threads.length} threads (the busiest)`));
  }
  return out;
}

/** Summary: top names per lane, copies by direction and memory kind, busy fraction per lane. */
export function renderSummary(box, sum, ontext) {
  box.replaceChildren();
  if (!sum) { box.append(el("p", { class: "muted" }, "Loading summary…")); return; }
  if (sum.copies?.length) {
    box.append(el("h4", {}, "Copies"), table(["direction", "memory", "count", "bytes", "GB/s"], sum.copies.map((r) => [
      nameCell(r.direction ?? "-", () => ontext(copySearch(r.direction))), r.host_mem ?? "-", fmtCount(r.count), fmtBytes(r.bytes), fmtGbps(r.gbps)])));
  }
  if (sum.busy) box.prepend(...busyBlock(sum.busy));
  const lanes = Object.keys(sum.lanes || {}).sort((a, b) => rank(a) - rank(b));
  for (const lane of lanes) {
    const info = sum.lanes[lane];
    const occ = info.busy?.fraction || [];
    box.append(el("h4", {}, LANE_TITLES[lane] || lane));
    // per bucket, the lane's busy time over (bucket x its tracks): how full the lane is, not a busy figure
    if (occ.length) box.append(el("div", { class: "busy-def", title: "lane occupancy per bucket: the time its slices cover, over the bucket width times the lane's tracks (the busy figures are above)" }, sparkline(occ)));
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

/**
 * Findings grouped by pass (biggest total impact first), then by the kernel or op they point at, each group
 * with its count, total impact and its worst instances (click: frame and select it); one overlay
 * checkbox per pass. `doc` is /findings/groups; `status` is /analysis ({state, passes}) or null.
 */
export function renderFindings(box, doc, overlays, status, { ontoggle, onjump }) {
  box.replaceChildren();
  const passes = doc?.passes || [];
  const state = status?.state;
  if (!passes.length) {
    if (!doc || state === "pending" || state === "running" || state === "queued") {
      box.append(el("p", { class: "muted analysis-pending", dataset: { state: state || "loading" } },
        state === "running" || state === "queued" || state === "pending"
          ? "The analysis passes are running; findings appear here when they finish."
          : "Loading findings…"));
    } else if (state === "failed") {
      box.append(el("p", { class: "error" }, `The analysis failed: ${status.error || "see the Info tab"}`));
    } else {
      const ran = (status?.passes || []).filter((p) => p.status === "ran").length;
      box.append(el("p", { class: "muted" }, `No findings: ${ran} pass${ran === 1 ? "" : "es"} ran and found nothing (the Info tab says which did not apply and why).`));
    }
    return;
  }
  const total = passes.reduce((a, p) => a + p.count, 0);
  box.append(el("p", { class: "muted" }, `${fmtCount(total)} finding${total === 1 ? "" : "s"} from ${passes.length} pass${passes.length === 1 ? "" : "es"}; overlays:`));
  box.append(el("div", { class: "passes" }, passes.map((p) => el("label", { class: "pass-toggle", title: `impact ${fmtDur(p.impact_ns)}` },
    el("input", { type: "checkbox", checked: overlays.has(p.pass), dataset: { pass: p.pass }, onchange: (e) => ontoggle(p.pass, e.target.checked) }),
    ` ${p.pass} (${fmtCount(p.count)})`))));
  // impact: the run's saving if that alone is fixed (a replay); exclusive: its share of the critical
  // path, never counted twice; a pass's "all fixed" is its findings fixed together (the Info tab's status)
  const allFixed = new Map((status?.passes || []).map((s) => [s.pass, s.impact_ns]));
  box.append(el("p", { class: "muted legend" }, "impact: what the run saves if that alone is fixed (replay) \u00b7 exclusive: its share of the critical path, never counted twice"));
  for (const p of passes) {
    const shown = p.groups.length;
    const all = allFixed.get(p.pass);
    box.append(el("section", { class: "pass-group", dataset: { pass: p.pass } },
      el("h4", {}, `${p.pass} \u2014 ${fmtCount(p.count)}${all !== undefined && all !== null ? ` \u00b7 all fixed saves ${fmtDur(all)}` : ""} \u00b7 exclusive ${fmtDur(p.exclusive_ns ?? 0)}`),
      shown < p.groups_total ? el("p", { class: "muted cap" }, `showing ${shown} of ${fmtCount(p.groups_total)} groups (the biggest by impact)`) : null,
      el("ol", { class: "findings" }, p.groups.map((g) => findingGroup(p, g, onjump)))));
  }
}

function findingGroup(p, g, onjump) {
  const worst = g.worst || [];
  const instance = (f) => el("li", { class: `sev-${f.severity}` },
    el("a", { href: "#", title: f.message || "", onclick: (e) => { e.preventDefault(); onjump(f); } }, f.message || f.pass),
    el("div", { class: "muted impact", title: f.impact_basis ? `impact: ${f.impact_basis}` : "" },
      `impact ${f.impact_ns === null || f.impact_ns === undefined ? "-" : fmtDur(f.impact_ns)}${(f.impact_basis || "").startsWith("pass share") ? " (pass share)" : ""}`
      + ` \u00b7 exclusive ${fmtDur(f.exclusive_ns ?? 0)}${f.ts !== null && f.ts !== undefined ? ` \u00b7 at ${fmtTime(f.ts)}` : ""}`));
  const more = g.count - worst.length;
  return el("li", { class: `group sev-${g.severity || "info"}`, dataset: { name: g.name } },
    el("div", { class: "group-head" },
      el("span", { class: "fname", title: g.name }, displayName(g.name)),
      el("span", { class: "muted" }, ` \u00d7${fmtCount(g.count)} \u00b7 impact ${fmtDur(g.impact_ns)} \u00b7 exclusive ${fmtDur(g.exclusive_ns ?? 0)}`)),
    worst.length ? el("ol", { class: "instances" }, instance(worst[0])) : null,
    worst.length > 1 ? el("details", {}, el("summary", {}, `${worst.length - 1} more of the worst${more > 0 ? ` (${fmtCount(more)} smaller not listed)` : ""}`),
      el("ol", { class: "instances" }, worst.slice(1).map(instance))) : null);
}

const STATUS_ORDER = { failed: 0, ran: 1, "not applicable": 2, "not selected": 3 };

/**
 * The trace info panel: what the trace is (profiler, versions, devices), what ingest said (warnings,
 * dropped and lost events, what was not in the file) and what each analysis pass did.
 */
export function renderInfo(box, meta, status) {
  box.replaceChildren();
  const m = meta.meta || {};
  const parse = (v) => { if (typeof v !== "string") return v; try { return JSON.parse(v); } catch (_) { return v; } };
  box.append(el("h4", {}, "Trace"), kv([
    ["name", meta.name || ""],
    ["format", meta.format || m.format || ""],
    m.profiler ? ["profiler", String(m.profiler)] : null,
    ["duration", fmtDur(meta.duration_ns)],
    ["slices", fmtCount(meta.counts?.slices ?? 0)],
    ["tracks", fmtCount(meta.counts?.tracks ?? (meta.tracks || []).length)],
    m.ingest_version ? ["ingest version", String(m.ingest_version)] : null,
  ]));
  const versions = parse(m.versions);
  if (versions && typeof versions === "object" && Object.keys(versions).length) {
    box.append(el("h4", {}, "Versions"), kv(Object.entries(versions).map(([k, v]) => [k, typeof v === "object" ? JSON.stringify(v) : String(v)])));
  }
  const devices = parse(m.device_properties);
  if (Array.isArray(devices) && devices.length) {
    box.append(el("h4", {}, `Devices (${devices.length})`));
    for (const [i, d] of devices.entries()) {
      box.append(el("details", { class: "device", open: i === 0 || devices.length <= 2 }, el("summary", {}, `device ${d.id ?? ""} ${d.name || ""}`.trim()),
        kv(Object.entries(d).filter(([k]) => k !== "id").map(([k, v]) => [k, fmtProp(k, v)]))));
    }
  } else {
    box.append(el("h4", {}, "Devices"), el("p", { class: "muted" }, "The trace records no device properties."));
  }
  const links = Object.entries(meta.links || {});
  if (links.length) {
    box.append(el("h4", {}, "PCIe links"), kv(links.map(([dev, l]) => [dev || "link",
      `Gen${l.link_gen ?? "?"} x${l.link_width ?? "?"}${l.link_peak_bytes_per_s ? `, peak ${fmtGbps(l.link_peak_bytes_per_s / 1e9)} per direction` : ""}`])));
  }
  // what ingest said: every accepted file with warnings says so here
  const warnings = meta.warnings || [];
  const wn = meta.warning_count ?? warnings.length;
  box.append(el("h4", {}, "Ingest"), kv([
    ["warnings", fmtCount(wn)],
    ["dropped events", fmtCount(meta.dropped_events ?? 0)],
    ["lost events", fmtCount(meta.lost_events ?? 0)],
  ]));
  const absent = parse(m.not_present);
  if (absent && (Array.isArray(absent) ? absent.length : Object.keys(absent).length)) {
    // [{source, gives, state: absent | empty}] (or plain names / a name -> why map)
    const line = (a) => (a && typeof a === "object"
      ? `${a.gives || a.source}: ${a.state === "empty" ? "the table is empty" : a.state === "absent" ? "not in the export" : a.state || "not present"}${a.source && a.gives ? ` (${a.source})` : ""}`
      : String(a));
    box.append(el("p", { class: "muted" }, "Not in this trace:"), el("ul", { class: "not-present" },
      (Array.isArray(absent) ? absent.map(line) : Object.entries(absent).map(([k, v]) => `${k}: ${typeof v === "object" ? JSON.stringify(v) : v}`))
        .map((t) => el("li", {}, t))));
  }
  if (warnings.length) {
    box.append(el("ul", { class: "warnings" }, warnings.map((w) => el("li", {}, String(w)))));
    if (wn > warnings.length) box.append(el("p", { class: "muted" }, `showing ${warnings.length} of ${fmtCount(wn)} warnings (all are in trace_meta.warnings: acceltrace query)`));
  }
  // the analysis passes
  box.append(el("h4", {}, "Analysis passes"));
  if (!status) { box.append(el("p", { class: "muted" }, "Loading…")); return; }
  if (!status.passes?.length) {
    box.append(el("p", { class: "muted analysis-pending", dataset: { state: status.state || "" } },
      status.state === "failed" ? `The analysis failed: ${status.error || ""}` : "The passes have not run yet; their status appears here when they finish."));
    return;
  }
  const rows = [...status.passes].sort((a, b) => (STATUS_ORDER[a.status] ?? 9) - (STATUS_ORDER[b.status] ?? 9) || (b.impact_ns || 0) - (a.impact_ns || 0));
  box.append(el("table", { class: "grid passes-status" },
    el("thead", {}, el("tr", {}, ["pass", "status", "findings", "all fixed saves", "exclusive"].map((h) => el("th", {}, h)))),
    el("tbody", {}, rows.map((p) => el("tr", { dataset: { pass: p.pass, status: p.status } },
      el("td", {}, p.pass, p.reason ? el("div", { class: "muted reason" }, p.reason) : null),
      el("td", { class: `pass-status st-${String(p.status).replace(/ /g, "-")}` }, p.status),
      el("td", { class: "num" }, p.status === "ran" ? fmtCount(p.n_findings ?? 0) : "-"),
      el("td", { class: "num", title: p.status === "ran" && p.impact_ns == null ? "not replayed (the findings' impact_basis says why)" : "" },
        p.status === "ran" && p.impact_ns != null ? fmtDur(p.impact_ns) : "-"),
      el("td", { class: "num" }, p.status === "ran" ? fmtDur(p.exclusive_ns ?? 0) : "-"))))));
}

function fmtProp(k, v) {
  if (typeof v === "number" && /bandwidth/i.test(k) && v > 1e6) return `${fmtBytes(v)}/s (${fmtCount(v)} B/s)`;
  if (typeof v === "number" && /mem|bytes/i.test(k) && v > 1e6) return `${fmtBytes(v)} (${fmtCount(v)} B)`;
  return typeof v === "object" ? JSON.stringify(v) : String(v);
}
