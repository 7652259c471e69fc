// The fleet page (/fleet/<id>): ranks x metrics from /api/fleets/<id>, a heat colour per cell (distance from
// the job's median, red on the metric's bad side), sortable by any column, outliers first; the step-time
// distribution as a small histogram; each row links to its trace's timeline; ticking two rows opens them
// in the comparison view (/diff?a=first ticked&b=second). Names from traces go in as text, never as HTML.

import { getJson } from "../lib/api.js";
import { el, fmtDur } from "../lib/util.js";

const fleetId = document.body.dataset.fleet;
const picked = [];
let data = null;
let sortKey = null;
let sortDir = 1;

function fmt(v, unit) {
  if (v === null || v === undefined) return "-";
  if (unit === "ns") return fmtDur(v);
  if (unit === "frac") return `${(100 * v).toFixed(1)}%`;
  if (unit === "ratio") return `${v.toFixed(2)}x`;
  if (unit === "gbps") return v.toFixed(1);
  return String(v);
}

function median(xs) {
  const s = xs.filter((x) => x !== null && x !== undefined && Number.isFinite(x)).sort((a, b) => a - b);
  if (!s.length) return null;
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
}

/** Per job and metric: median and the largest deviation from it, the scale of the heat colour. */
function heatScales(traces, metrics) {
  const out = new Map();
  const jobs = new Map();
  for (const t of traces) if (t.status === "ok") (jobs.get(t.job) || jobs.set(t.job, []).get(t.job)).push(t);
  for (const [job, rows] of jobs) {
    for (const m of metrics) {
      const vals = rows.map((t) => t[m.key]);
      const med = median(vals);
      const span = Math.max(0, ...vals.filter((v) => v !== null && v !== undefined).map((v) => Math.abs(v - med)));
      out.set(`${job}\u0000${m.key}`, { med, span });
    }
  }
  return out;
}

function heat(t, m, scales) {
  const s = scales.get(`${t.job}\u0000${m.key}`);
  const v = t[m.key];
  if (!s || v === null || v === undefined || s.med === null || !(s.span > 0)) return "";
  const dev = v - s.med;
  // differences within 2 % of the median (or of the spread when the median is 0) are jitter: no colour
  if (Math.abs(dev) <= 0.02 * Math.max(Math.abs(s.med), s.span)) return "";
  const a = Math.min(1, Math.abs(dev) / s.span) * 0.75;
  const bad = m.bad === "high" ? dev > 0 : m.bad === "low" ? dev < 0 : false;
  if (m.bad === null) return `rgba(120, 120, 140, ${(a * 0.6).toFixed(3)})`;
  return bad ? `rgba(220, 50, 40, ${a.toFixed(3)})` : `rgba(60, 120, 220, ${(a * 0.5).toFixed(3)})`;
}

function togglePick(id, on) {
  const i = picked.indexOf(id);
  if (on && i < 0) picked.push(id);
  if (!on && i >= 0) picked.splice(i, 1);
  while (picked.length > 2) picked.shift();
  for (const box of document.querySelectorAll("#ranks input.pick")) box.checked = picked.includes(box.value);
  document.getElementById("compare").disabled = picked.length !== 2;
}

function sortedTraces() {
  const rows = data.traces.slice();
  if (sortKey === null) return rows; // the server's order: outliers first (worst first), failed, then by rank
  const get = (t) => (sortKey === "outlier_metrics" ? t.outlier_metrics.length : t[sortKey]);
  rows.sort((a, b) => {
    const x = get(a), y = get(b);
    if (x === y) return 0;
    if (x === null || x === undefined) return 1;
    if (y === null || y === undefined) return -1;
    return (x < y ? -1 : 1) * sortDir;
  });
  return rows;
}

function renderTable() {
  const metrics = data.metrics;
  const scales = heatScales(data.traces, metrics);
  const cols = [
    { key: "rank", label: "rank" }, { key: "name", label: "trace" }, { key: "cause", label: "cause" },
    { key: "outlier_metrics", label: "outlier metrics" },
    ...metrics.map((m) => ({ key: m.key, label: m.label, metric: m })),
  ];
  const head = el("tr", {}, el("th", { title: "tick two to compare" }, "cmp"),
    ...cols.map((c) => el("th", {
      dataset: { key: c.key }, title: c.metric ? `${c.key} (bad when ${c.metric.bad || "n/a"})` : c.key,
      onclick: () => { if (sortKey === c.key) sortDir = -sortDir; else { sortKey = c.key; sortDir = c.metric && c.metric.bad === "low" ? 1 : -1; } renderTable(); },
    }, c.label + (sortKey === c.key ? (sortDir > 0 ? " \u25b2" : " \u25bc") : ""))));
  document.querySelector("#ranks thead").replaceChildren(head);
  const body = document.querySelector("#ranks tbody");
  body.replaceChildren(...sortedTraces().map((t) => {
    const ok = t.status === "ok";
    const cells = [
      el("td", {}, ok && t.trace_id ? el("input", { type: "checkbox", class: "pick", value: t.trace_id,
        checked: picked.includes(t.trace_id), "aria-label": `compare ${t.name}`, onchange: (e) => togglePick(t.trace_id, e.target.checked) }) : ""),
      el("td", { class: "num" }, t.rank === null || t.rank === undefined ? "-" : String(t.rank)),
      el("td", { title: t.path || "" }, ok && t.trace_id ? el("a", { href: `/t/${encodeURIComponent(t.trace_id)}` }, t.name) : t.name),
      el("td", { class: "cause", title: ok ? t.cause || "" : t.error || "" }, ok ? (t.outlier ? t.cause || "unknown" : "") : `failed: ${t.error || ""}`),
      el("td", { class: "metrics", title: t.outlier_metrics.join(", ") }, t.outlier_metrics.join(", ")),
    ];
    for (const m of metrics) {
      const td = el("td", { class: "num", title: `${m.key} = ${t[m.key] === null || t[m.key] === undefined ? "n/a" : t[m.key]}` }, fmt(t[m.key], m.unit));
      const bg = ok ? heat(t, m, scales) : "";
      if (bg) td.style.background = bg;
      cells.push(td);
    }
    return el("tr", { class: `${t.outlier ? "outlier" : ""} ${ok ? "" : "failed"}`.trim(), dataset: { trace: t.trace_id || "" } }, ...cells);
  }));
}

function renderHist() {
  const canvas = document.getElementById("step-hist");
  const dpr = window.devicePixelRatio || 1;
  const cssW = canvas.width, cssH = canvas.height;
  canvas.width = cssW * dpr; canvas.height = cssH * dpr;
  canvas.style.width = `${cssW}px`; canvas.style.height = `${cssH}px`;
  const ctx = canvas.getContext("2d");
  ctx.scale(dpr, dpr);
  ctx.clearRect(0, 0, cssW, cssH);
  ctx.font = "11px system-ui, sans-serif";
  ctx.fillStyle = "#6b7280";
  const h = data.step_hist;
  if (!h.counts.length) { ctx.fillText("no steps", 8, 20); return; }
  const max = Math.max(...h.counts);
  const plotH = cssH - 22, barW = (cssW - 16) / h.counts.length;
  ctx.fillStyle = "#4a7bd0";
  h.counts.forEach((c, i) => {
    if (!c) return;
    const bh = Math.max(1, (Math.log1p(c) / Math.log1p(max)) * (plotH - 4));
    ctx.fillRect(8 + i * barW, plotH - bh, Math.max(1, barW - 1), bh);
  });
  ctx.fillStyle = "#2b2f36";
  ctx.fillText(fmtDur(h.lo_ns), 8, cssH - 6);
  const hi = fmtDur(h.hi_ns);
  ctx.fillText(hi, cssW - 8 - ctx.measureText(hi).width, cssH - 6);
  const total = h.counts.reduce((a, b) => a + b, 0);
  const note = `${total} steps, log scale`;
  ctx.fillText(note, (cssW - ctx.measureText(note).width) / 2, cssH - 6);
}

function renderFindings() {
  const body = document.querySelector("#findings tbody");
  body.replaceChildren(...data.findings.map((f) => el("tr", {},
    el("td", {}, f.pass), el("td", {}, String(f.traces)), el("td", {}, String(f.findings)), el("td", {}, fmtDur(f.impact_ns)),
    el("td", {}, ...f.worst.slice(0, 3).flatMap((w, i) => [i ? ", " : "",
      el("a", { href: `/t/${encodeURIComponent(w.trace_id)}`, title: fmtDur(w.impact_ns) }, w.name)])))));
  if (!data.findings.length) body.replaceChildren(el("tr", {}, el("td", { colspan: 5, class: "muted" }, "no findings")));
}

function renderStragglers() {
  const rows = data.stragglers || [];
  document.getElementById("stragglers-box").hidden = rows.length === 0;
  document.querySelector("#stragglers tbody").replaceChildren(...rows.map((s) => el("tr", {},
    el("td", {}, el("a", { href: `/t/${encodeURIComponent(s.trace_id)}` }, s.name)),
    el("td", {}, s.rank === null ? "-" : String(s.rank)), el("td", {}, s.cause || "unknown"),
    el("td", {}, fmtDur(s.step_work_ns)), el("td", {}, fmtDur(s.job_step_work_ns)), el("td", {}, fmtDur(s.excess_ns)),
    el("td", {}, fmt(s.excess_compute_ns, "ns")), el("td", {}, fmt(s.excess_host_gap_ns, "ns")), el("td", {}, fmt(s.excess_h2d_ns, "ns")))));
}

async function main() {
  document.getElementById("compare").addEventListener("click", () => {
    if (picked.length === 2) location.href = `/diff?a=${encodeURIComponent(picked[0])}&b=${encodeURIComponent(picked[1])}`;
  });
  try {
    data = await getJson(`/api/fleets/${encodeURIComponent(fleetId)}`);
  } catch (e) {
    const p = document.getElementById("fleet-error");
    p.textContent = `could not load the fleet: ${e.message}`;
    p.hidden = false;
    return;
  }
  const c = data.counts || {};
  document.getElementById("fleet-counts").textContent =
    `${c.ok || 0} traces, ${c.failed || 0} failed, ${c.outliers || 0} outliers` +
    (data.skipped && data.skipped.length ? `, ${data.skipped.length} files skipped as not traces` : "");
  renderHist();
  renderFindings();
  renderTable();
  renderStragglers();
  document.body.dataset.ready = "1";
}

main();
