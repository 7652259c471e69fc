// Op-to-kernel rollup of a range (GET /rollup): per CPU op, annotation or runtime call, its host
// time and the device time, copy time and bytes of everything its correlation chains launched.

import { el, fmtDur, fmtCount, fmtBytes } from "../lib/util.js";
import { status, sortableTable } from "./common.js";

export function mountRollup(container, { api, state, save }) {
  const search = el("input", { type: "search", id: "rollup-search", placeholder: "Filter names", value: state.q });
  const info = el("span", { class: "muted", id: "rollup-info" });
  const body = el("div", { class: "view-body" }, status("loading the rollup…"));
  container.replaceChildren(el("div", { class: "view-bar" }, search, info,
    el("span", { class: "muted", text: "device, copy and bytes: launched from inside the op (nested ops each count their launches)" })), body);
  const hook = (window.acceltrace.rollup = { ready: false });
  const t = sortableTable([
    { key: "name", title: "Op / call", width: "38%" },
    { key: "count", title: "Count", num: true, fmt: (r) => fmtCount(r.count) },
    { key: "host_ns", title: "Host", num: true, fmt: (r) => fmtDur(r.host_ns), tip: "its own time in the range" },
    { key: "device_ns", title: "Device", num: true, fmt: (r) => fmtDur(r.device_ns), tip: "kernels and memsets it launched" },
    { key: "copy_ns", title: "Copies", num: true, fmt: (r) => fmtDur(r.copy_ns), tip: "copies it launched" },
    { key: "bytes", title: "Bytes", num: true, fmt: (r) => fmtBytes(r.bytes) },
    { key: "kernels", title: "Kernels", num: true, fmt: (r) => fmtCount(r.kernels) },
    { key: "copies", title: "Copy count", num: true, fmt: (r) => fmtCount(r.copies) },
  ], { sortKey: "device_ns", desc: true, onRow: (r, tr) => { tr.dataset.name = r.name; } });
  t.table.id = "rollup-table";
  let rows = [];
  const apply = () => {
    const q = state.q.trim().toLowerCase();
    const shown = q ? rows.filter((r) => r.name.toLowerCase().includes(q)) : rows;
    t.setRows(shown);
    info.textContent = `${fmtCount(shown.length)} of ${fmtCount(rows.length)} names`;
  };
  api.rollup().then((res) => {
    rows = res.rows;
    body.replaceChildren(t.table);
    apply();
    Object.assign(hook, { ready: true, rows });
  }).catch((e) => body.replaceChildren(status(`Could not load the rollup: ${e.message}`, true)));
  search.addEventListener("input", () => { state.q = search.value; save(); apply(); });
}
