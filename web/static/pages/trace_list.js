// The trace list (/): the catalog from /api/traces, each row linking to its trace page (a running capture's
// row says live, with its event count and rate); uploads by drop; a trace dropped or clicked opens in place
// (pages/in_place.js);
// ticking two ready traces opens their comparison (/diff?a=first ticked&b=second).

import { listTraces } from "../lib/api.js";
import { installDropTarget, pickAndUpload } from "../panels/upload.js";
import { followHistory, isListPage, loadTracePageAhead, openTracePage } from "./in_place.js";
import { el, fmtBytes, fmtCount } from "../lib/util.js";

function main() {
  installDropTarget();
  document.getElementById("open-file").addEventListener("click", pickAndUpload);
  document.getElementById("compare").addEventListener("click", () => {
    if (picked.length === 2) location.href = `/diff?a=${encodeURIComponent(picked[0])}&b=${encodeURIComponent(picked[1])}`;
  });
  refresh();
  loadTracePageAhead();
  followHistory();
}

const picked = []; // trace ids ticked for comparison, in the order ticked (A first)

function togglePick(id, on) {
  const i = picked.indexOf(id);
  if (on && i < 0) picked.push(id);
  if (!on && i >= 0) picked.splice(i, 1);
  while (picked.length > 2) picked.shift(); // a third tick replaces the oldest
  for (const box of document.querySelectorAll("#traces input.pick")) box.checked = picked.includes(box.value);
  document.getElementById("compare").disabled = picked.length !== 2;
}

/** The status column: failed with its error; a live capture with its events, rate and losses so far. */
function statusText(t) {
  if (t.status === "failed") return `failed: ${t.error || ""}`;
  if (t.status !== "live") return t.status;
  const c = t.counts || {};
  const rate = (c.rate_per_s || 0) >= 1000 ? `${((c.rate_per_s || 0) / 1000).toFixed(1)} k/s` : `${Math.round(c.rate_per_s || 0)}/s`;
  return `● live · ${fmtCount(c.events || 0)} events · ${rate}` + (c.lost_events ? ` · lost ${fmtCount(c.lost_events)}` : "");
}

/** A row's link, clicked plainly (not for a new tab or window): the trace opens in place. */
function onRowClick(e) {
  if (e.button !== 0 || e.ctrlKey || e.metaKey || e.shiftKey || e.altKey) return;
  e.preventDefault();
  openTracePage(e.currentTarget.getAttribute("href"));
}

async function refresh() {
  if (!isListPage()) return; // the page became a trace's (pages/in_place.js)
  const body = document.querySelector("#traces tbody");
  try {
    const { traces } = await listTraces();
    body.replaceChildren(...traces.map((t) => el("tr", { dataset: { status: t.status } },
      el("td", {}, t.status === "ready" || t.status === "live" ? el("a", { href: `/t/${encodeURIComponent(t.id)}`, onclick: onRowClick }, t.name) : t.name),
      el("td", {}, t.format || "-"),
      el("td", { title: t.error || "", class: t.status === "live" ? "live-status" : "" }, statusText(t)),
      el("td", {}, fmtBytes(t.source_bytes)),
      el("td", {}, t.counts && t.counts.slices !== undefined ? fmtCount(t.counts.slices) : "-"),
      el("td", {}, t.created ? new Date(t.created).toLocaleString() : "-"),
      el("td", {}, t.status === "ready" ? el("input", { type: "checkbox", class: "pick", value: t.id, checked: picked.includes(t.id),
        "aria-label": `compare ${t.name}`, onchange: (e) => togglePick(t.id, e.target.checked) }) : ""))));
    document.getElementById("traces-empty").hidden = traces.length > 0;
    // traces still ingesting (uploaded elsewhere, or by the CLI) change state: look again shortly
    // live captures count up and then become ready: look again shortly
    if (traces.some((t) => t.status === "ingesting" || t.status === "live")) setTimeout(refresh, 1000);
  } catch (e) {
    body.replaceChildren(el("tr", {}, el("td", { colspan: 7, class: "error" }, `Could not list traces: ${e.message}`)));
  }
}

main();
