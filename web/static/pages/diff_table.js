// The diff page's side panel: the headline with its contributors (adding up, the rest shown), the
// delta table (rows by |delta|; hover highlights, click frames) and the findings diff per pass.
// Every name from a trace goes in as text (el() children), never as HTML.

import { el, fmtDur, fmtCount } from "../lib/util.js";

const MAX_ROWS = 400;

const signed = (ns) => (ns > 0 ? "+" : ns < 0 ? "-" : "") + fmtDur(Math.abs(ns));

export function renderHeadline(box, doc) {
  const h = doc.headline, st = doc.steps;
  const what = h.basis === "step" ? `step time (${st.selected.length} of ${st.aligned} ${st.name} steps)` : "makespan (whole trace)";
  const ratio = h.ratio ? ` ×${h.ratio.toFixed(3)}` : "";
  const rows = h.contributors.map((c) => el("tr", {},
    el("td", { title: c.name }, c.name), el("td", {}, c.lane || ""), el("td", { class: "num" }, signed(c.delta_ns))));
  rows.push(el("tr", { class: "rest" }, el("td", {}, "rest (other names, outside any slice)"), el("td", {}),
    el("td", { class: "num" }, signed(h.unexplained_ns))));
  box.replaceChildren(...[
    el("h3", {}, `${what}: ${fmtDur(h.a_ns)} → ${fmtDur(h.b_ns)} (${signed(h.delta_ns)})${ratio}`),
    h.basis === "step" && h.steps > 1
      ? el("p", {}, `per step (mean): ${fmtDur(h.a_mean_ns)} → ${fmtDur(h.b_mean_ns)} (${signed(h.b_mean_ns - h.a_mean_ns)})`) : null,
    el("p", { class: "muted" }, h.basis === "step"
      ? "Contributors: self time on the steps' host thread (each instant of a step counted once); with the rest they add up to the delta."
      : "Contributors: self time on the busiest host thread, idle time included; with the rest they add up to the delta."),
    el("table", { class: "grid contributors" }, el("tbody", {}, rows)),
    ...(doc.notes || []).map((n) => el("p", { class: "muted note" }, n))].filter(Boolean));
}

/** The delta table; on.hover(row|null), on.click(row). Returns {select(i)} for the page. */
export function renderRows(box, doc, on, filter = "") {
  const needle = filter.trim().toLowerCase();
  const all = doc.rows.map((r, i) => [r, i]).filter(([r]) => !needle || r.name.toLowerCase().includes(needle));
  const shown = all.slice(0, MAX_ROWS);
  const n = doc.noise;
  const trs = shown.map(([r, i]) => el("tr", {
    dataset: { index: String(i), status: r.status }, title: r.name,
    onmouseenter: () => on.hover(r), onmouseleave: () => on.hover(null), onclick: () => on.click(r, i),
  },
  el("td", {}, r.name), el("td", {}, r.lane + (r.device ? ` ${r.device}` : "")), el("td", { class: `status ${r.status}` }, r.status),
  el("td", { class: "num" }, signed(r.delta_ns)), el("td", { class: "num" }, fmtDur(r.total_a_ns)),
  el("td", { class: "num" }, fmtDur(r.total_b_ns)), el("td", { class: "num" }, `${fmtCount(r.count_a)} / ${fmtCount(r.count_b)}`)));
  box.replaceChildren(
    el("p", { class: "muted" }, `${shown.length} of ${all.length} rows by |delta|` +
      `${all.length < doc.rows.length ? ` (filtered from ${doc.rows.length})` : ""}; unchanged: < ${n.pct}% or < ${fmtDur(n.ns)}.` +
      " Click a row to frame its slices in both."),
    el("table", { class: "grid delta-table" },
      el("thead", {}, el("tr", {}, ...["name", "lane", "status", "Δ", "A", "B", "count A / B"].map((t) => el("th", {}, t)))),
      el("tbody", {}, trs)));
  return {
    select(i) {
      for (const tr of box.querySelectorAll("tr.selected")) tr.classList.remove("selected");
      const tr = box.querySelector(`tr[data-index="${Number(i)}"]`);
      if (tr) { tr.classList.add("selected"); tr.scrollIntoView({ block: "nearest" }); }
    },
  };
}

export function renderFindings(box, doc) {
  const a = doc.a.analysed, b = doc.b.analysed;
  if (!doc.findings.length) {
    box.replaceChildren(el("h4", {}, "Findings"), el("p", { class: "muted" },
      a && b ? "No findings on either side." : "A side has not been analysed (acceltrace analyze ID)."));
    return;
  }
  box.replaceChildren(el("h4", {}, "Findings by pass"), el("table", { class: "grid findings-diff" },
    el("thead", {}, el("tr", {}, ...["pass", "status", "A", "B"].map((t) => el("th", {}, t)))),
    el("tbody", {}, doc.findings.map((f) => el("tr", { dataset: { pass: f.pass, status: f.status } },
      el("td", {}, f.pass), el("td", { class: `status ${f.status}` }, f.status),
      el("td", { class: "num" }, `${fmtCount(f.count_a)} (${fmtDur(f.impact_a_ns)})`),
      el("td", { class: "num" }, `${fmtCount(f.count_b)} (${fmtDur(f.impact_b_ns)})`))))));
}
