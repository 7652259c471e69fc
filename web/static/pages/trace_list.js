// The trace list (/): the catalog from /api/traces, each row linking to its trace page; uploads by drop.

import { listTraces } from "../lib/api.js";
import { installDropTarget, pickAndUpload } from "../panels/upload.js";
import { el, fmtBytes, fmtCount } from "../lib/util.js";

function main() {
  installDropTarget();
  document.getElementById("open-file").addEventListener("click", pickAndUpload);
  refresh();
  showLiveSources();
}

/** Links to the live page for each live source the server follows (a daemon or a growing .atrace). */
async function showLiveSources() {
  try {
    const r = await fetch("/api/live");
    if (!r.ok) return;
    const { sources } = await r.json();
    const actions = document.querySelector(".topbar .actions");
    for (const s of sources || []) {
      actions.prepend(el("a", { class: "live-link", href: `/live?source=${Number(s.source)}` }, `live: ${s.name}`));
    }
  } catch (e) {
    // no live route or no server answer: the list works without it
  }
}

async function refresh() {
  const body = document.querySelector("#traces tbody");
  try {
    const { traces } = await listTraces();
    body.replaceChildren(...traces.map((t) => el("tr", { dataset: { status: t.status } },
      el("td", {}, t.status === "ready" ? el("a", { href: `/t/${encodeURIComponent(t.id)}` }, t.name) : t.name),
      el("td", {}, t.format || "-"),
      el("td", { title: t.error || "" }, t.status === "failed" ? `failed: ${t.error || ""}` : t.status),
      el("td", {}, fmtBytes(t.source_bytes)),
      el("td", {}, t.counts && t.counts.slices !== undefined ? fmtCount(t.counts.slices) : "-"),
      el("td", {}, t.created ? new Date(t.created).toLocaleString() : "-"))));
    document.getElementById("traces-empty").hidden = traces.length > 0;
    // traces still ingesting (uploaded elsewhere, or by the CLI) change state: look again shortly
    if (traces.some((t) => t.status === "ingesting")) setTimeout(refresh, 2000);
  } catch (e) {
    body.replaceChildren(el("tr", {}, el("td", { colspan: 6, class: "error" }, `Could not list traces: ${e.message}`)));
  }
}

main();
