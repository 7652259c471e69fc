// Top-down and bottom-up call trees of a range (GET /tree; CPU stacks or device work by launching op)
// as an expandable, sortable, searchable table: total, self, count, mean (total / count), p95 and the
// share of the range; each row links to its longest slice on the timeline. Names are text nodes.

import { el, fmtDur, fmtCount } from "../lib/util.js";
import { status, pct, mean, sourceSelect, openSlice } from "./common.js";

const COLUMNS = [
  { key: "name", title: "Name", width: "42%" },
  { key: "total_ns", title: "Total", num: true, tip: "time in the range, children included" },
  { key: "self_ns", title: "Self", num: true, tip: "total minus the children's time" },
  { key: "count", title: "Count", num: true },
  { key: "mean_ns", title: "Mean", num: true, tip: "total / count" },
  { key: "p95_ns", title: "p95", num: true, tip: "95th percentile (nearest rank) of one slice's time in the range (bottom-up: its self time)" },
  { key: "share", title: "% of range", num: true, tip: "total / the range's total" },
  { key: "link", title: "", width: "34px", tip: "its longest slice on the timeline", unsortable: true },
];

export function mountTree(container, { api, state, save }) {
  const sourceSel = sourceSelect(state);
  sourceSel.id = "tree-source";
  const modeSel = el("select", { id: "tree-mode" },
    el("option", { value: "top-down", text: "Top-down (callers → callees)" }),
    el("option", { value: "bottom-up", text: "Bottom-up (self time → callers)" }));
  modeSel.value = state.mode;
  const search = el("input", { type: "search", id: "tree-search", placeholder: "Find a name (shows it and its callers)", value: state.q });
  const info = el("span", { class: "muted", id: "tree-info" });
  const expandAll = el("button", { text: "Expand all" }), collapseAll = el("button", { text: "Collapse" });
  container.replaceChildren(el("div", { class: "view-bar" }, sourceSel, modeSel, search, expandAll, collapseAll, info));
  const body = el("div", { class: "view-body" });
  container.append(body);

  let root = null, expanded = new Set(), sortKey = "total_ns", desc = true;
  const hook = (window.acceltrace.tree = { ready: false });
  const table = el("table", { class: "vt", id: "tree-table" });
  const colgroup = el("colgroup", {}, COLUMNS.map((c) => el("col", { style: c.width ? `width:${c.width}` : null })));
  const headRow = el("tr");
  for (const c of COLUMNS) {
    const th = el("th", { class: c.num ? "num" : null, text: c.title, title: c.tip || c.title, dataset: { key: c.key } });
    if (!c.unsortable) th.addEventListener("click", () => { desc = sortKey === c.key ? !desc : !!c.num; sortKey = c.key; render(); });
    headRow.append(th);
  }
  const tbody = el("tbody");
  table.append(colgroup, el("thead", {}, headRow), tbody);

  function load() {
    hook.ready = false;
    body.replaceChildren(status("loading the call tree…"));
    api.tree(state.mode).then((tree) => {
      root = tree;
      expanded = new Set();
      body.replaceChildren(table);
      render();
    }).catch((e) => body.replaceChildren(status(`Could not load the call tree: ${e.message}`, true)));
  }

  const value = (n, k) => (k === "mean_ns" ? mean(n.total_ns, n.count) : k === "share" ? n.total_ns : n[k] ?? -1);
  function sortedKids(n) {
    return [...n.children.map((ch, i) => [ch, i])].sort(([a], [b]) => {
      const va = value(a, sortKey), vb = value(b, sortKey);
      const cmp = typeof va === "number" ? va - vb : String(va).localeCompare(String(vb));
      return desc ? -cmp : cmp;
    });
  }

  /** Paths of nodes matching the search, and of every ancestor of one (so matches are reachable). */
  function matches(q) {
    const hit = new Set(), keep = new Set();
    const walk = (n, path, anc) => {
      if (n !== root && n.name.toLowerCase().includes(q)) { hit.add(path); for (const a of anc) keep.add(a); keep.add(path); }
      n.children.forEach((ch, i) => walk(ch, path === "" ? String(i) : `${path}.${i}`, [...anc, path]));
    };
    walk(root, "", []);
    return { hit, keep };
  }

  function render() {
    for (const th of headRow.children) {
      th.classList.toggle("sorted", th.dataset.key === sortKey);
      th.classList.toggle("asc", th.dataset.key === sortKey && !desc);
    }
    const q = state.q.trim().toLowerCase();
    const m = q ? matches(q) : null;
    const rows = [];
    // under a search, the matches and their ancestors show; a row the user opens shows all its children
    const visit = (n, path, depth, filtered) => {
      for (const [ch, i] of sortedKids(n)) {
        const p = path === "" ? String(i) : `${path}.${i}`;
        if (filtered && !m.keep.has(p)) continue;
        const onPath = filtered && ch.children.some((_, j) => m.keep.has(`${p}.${j}`));
        const open = expanded.has(p) || onPath;
        rows.push(rowOf(ch, p, depth, open, m && m.hit.has(p)));
        if (open) visit(ch, p, depth + 1, onPath && !expanded.has(p));
      }
    };
    visit(root, "", 0, !!m);
    tbody.replaceChildren(...rows);
    info.textContent = `${fmtCount(rows.length)} row${rows.length === 1 ? "" : "s"} · range total ${fmtDur(root.total_ns)}`
      + (root.truncated ? " · cut at the node limit" : "") + (m ? ` · ${fmtCount(m.hit.size)} matching nodes` : "");
    hook.ready = true;
    hook.mode = state.mode;
    hook.source = state.source;
    hook.root_total_ns = root.total_ns;
    hook.root = root;
  }

  function rowOf(n, path, depth, open, isHit) {
    const toggle = el("span", { class: "tree-toggle", text: n.children.length ? (open ? "▾" : "▸") : "" });
    const name = el("td", { class: "name", title: n.name, style: `padding-left:${6 + depth * 14}px` }, toggle, n.name);
    const tr = el("tr", { class: isHit ? "match" : null, dataset: { path } }, name,
      el("td", { class: "num", text: fmtDur(n.total_ns), dataset: { ns: n.total_ns } }),
      el("td", { class: "num", text: fmtDur(n.self_ns), dataset: { ns: n.self_ns } }),
      el("td", { class: "num", text: fmtCount(n.count) }),
      el("td", { class: "num", text: fmtDur(mean(n.total_ns, n.count)) }),
      el("td", { class: "num", text: fmtDur(n.p95_ns) }),
      el("td", { class: "num", text: pct(n.total_ns, root.total_ns) }),
      el("td", { class: "link-cell" }, n.slice_id === null || n.slice_id === undefined ? null
        : el("a", { href: "#", class: "slice-link", text: "↗", title: "its longest slice on the timeline", dataset: { sliceId: String(n.slice_id) },
                    onclick: (ev) => { ev.preventDefault(); ev.stopPropagation(); openSlice(api, n.slice_id).catch((e) => { info.textContent = e.message; }); } })));
    if (n.children.length) {
      tr.classList.add("link");
      tr.addEventListener("click", () => {
        if (expanded.has(path)) expanded.delete(path); else expanded.add(path);
        render();
      });
    }
    return tr;
  }

  modeSel.addEventListener("change", () => { state.mode = modeSel.value; save(); load(); });
  sourceSel.addEventListener("change", () => { state.source = sourceSel.value; save(); load(); });
  let timer = 0;
  search.addEventListener("input", () => {
    clearTimeout(timer);
    timer = setTimeout(() => { state.q = search.value; save(); if (root) render(); }, 150);
  });
  expandAll.addEventListener("click", () => {
    if (!root) return;
    const walk = (n, path) => n.children.forEach((ch, i) => { const p = path === "" ? String(i) : `${path}.${i}`; expanded.add(p); walk(ch, p); });
    walk(root, ""); render();
  });
  collapseAll.addEventListener("click", () => { expanded = new Set(); render(); });
  load();
}
