// Flame graph / icicle of a range, drawn on a canvas from GET /tree (top-down), of CPU stacks or of
// device work under the ops that launched it (source=device). The focus node spans the full width;
// each child is as wide as its total time. Click zooms into a node (its path of child indexes goes
// into the URL as focus=0.3.1), the breadcrumb zooms back out; the zoomed node links to its longest
// slice on the timeline and to all its slices in the events table.
// Names reach the page only as canvas text and textContent.

import { el, fmtDur, fmtCount, nameColour, displayName } from "../lib/util.js";
import { showTip, hideTip, status, pct, mean, sourceSelect, openSlice } from "./common.js";

const ROW_H = 18;

/** The node at a focus path ("" is the root, "0.2" the third child of the first child). */
function nodeAt(root, focus) {
  const chain = [root];
  for (const part of focus ? focus.split(".") : []) {
    const next = chain[chain.length - 1].children[Number(part)];
    if (!next) break;
    chain.push(next);
  }
  return chain;
}

/** Rectangles of the focus node's subtree: [{node, path, depth, x, w}] in css px. */
export function layoutFlame(focusNode, focusPath, width) {
  const rects = [];
  const scale = focusNode.total_ns > 0 ? width / focusNode.total_ns : 0;
  const visit = (node, path, depth, x) => {
    rects.push({ node, path, depth, x, w: node.total_ns * scale });
    let cx = x;
    node.children.forEach((ch, i) => {
      visit(ch, path === "" ? String(i) : `${path}.${i}`, depth + 1, cx);
      cx += ch.total_ns * scale;
    });
  };
  visit(focusNode, focusPath, 0, 0);
  return rects;
}

export function mountFlame(container, { api, state, save }) {
  const orientSel = el("select", { title: "icicle: roots at the top; flame graph: roots at the bottom" },
    el("option", { value: "icicle", text: "Icicle (roots on top)" }), el("option", { value: "flame", text: "Flame graph (roots at the bottom)" }));
  orientSel.value = state.orient;
  const crumbs = el("div", { class: "crumbs", id: "flame-crumbs" });
  const info = el("span", { class: "muted", id: "flame-info" });
  const sourceSel = sourceSelect(state);
  sourceSel.id = "flame-source";
  const longest = el("a", { href: "#", id: "flame-longest", class: "button-link", hidden: true,
    text: "Longest on the timeline", title: "the zoomed node's longest slice, on the timeline" });
  const slicesLink = el("a", { id: "flame-slices", class: "button-link", hidden: true, text: "Its slices",
    title: "the slices of this name in the range, in the events table" });
  const bar = el("div", { class: "view-bar" }, sourceSel, orientSel, info, crumbs, longest, slicesLink);
  const canvas = el("canvas", { id: "flame-canvas", "aria-label": "flame graph" });
  const wrap = el("div", { class: "flame-wrap" }, canvas);
  const body = el("div", { class: "view-body" }, status("loading the call tree…"));
  container.replaceChildren(bar, body);

  let root = null, rects = [], focusChain = [];
  const hook = (window.acceltrace.flame = { ready: false });

  function load() {
    hook.ready = false;
    body.replaceChildren(status("loading the call tree…"));
    api.tree("top-down").then((tree) => {
      root = tree;
      body.replaceChildren(wrap);
      if (tree.truncated) body.prepend(status(`The tree was cut at the server's node limit: "(other …)" nodes hold the rest.`));
      if (!tree.children.length) body.prepend(status(state.source === "device" ? "No kernels, memsets or copies in this range." : "No CPU slices in this range."));
      draw();
    }).catch((e) => body.replaceChildren(status(`Could not load the call tree: ${e.message}`, true)));
  }
  load();

  orientSel.addEventListener("change", () => { state.orient = orientSel.value; save(); draw(); });
  sourceSel.addEventListener("change", () => { state.source = sourceSel.value; state.focus = ""; save(); load(); });
  longest.addEventListener("click", (ev) => {
    ev.preventDefault();
    const f = focusChain[focusChain.length - 1];
    if (f && f.slice_id !== null && f.slice_id !== undefined) openSlice(api, f.slice_id).catch((e) => { info.textContent = e.message; });
  });
  window.addEventListener("resize", () => root && draw());

  function draw() {
    focusChain = nodeAt(root, state.focus);
    const focus = focusChain[focusChain.length - 1];
    // a focus path that no longer exists (another range) falls back to the deepest node that does
    state.focus = state.focus.split(".").slice(0, focusChain.length - 1).join(".");
    save();
    const width = Math.max(200, body.clientWidth - 2);
    rects = layoutFlame(focus, state.focus, width);
    const maxDepth = rects.reduce((m, r) => Math.max(m, r.depth), 0);
    const height = (maxDepth + 1) * ROW_H + 4;
    const dpr = window.devicePixelRatio || 1;
    canvas.width = Math.round(width * dpr); canvas.height = Math.round(height * dpr);
    canvas.style.width = `${width}px`; canvas.style.height = `${height}px`;
    const g = canvas.getContext("2d");
    g.setTransform(dpr, 0, 0, dpr, 0, 0);
    g.clearRect(0, 0, width, height);
    g.font = "11px system-ui, sans-serif";
    g.textBaseline = "middle";
    const flame = state.orient === "flame";
    for (const r of rects) {
      r.y = flame ? height - (r.depth + 1) * ROW_H : r.depth * ROW_H;
      if (r.w <= 0) continue;
      g.fillStyle = r.depth === 0 && r.node === root ? "#cbd5e1" : nameColour(r.node.name, r.node.lane || "cpu");
      g.fillRect(r.x, r.y, Math.max(r.w - (r.w > 2 ? 1 : 0), 0.5), ROW_H - 1);
      if (r.w > 24) {
        let label = r.depth === 0 && r.node === root ? `all of the range · ${fmtDur(r.node.total_ns)}` : displayName(r.node.name);
        const room = r.w - 6;
        if (g.measureText(label).width > room) {
          let n = Math.floor(label.length * room / g.measureText(label).width);
          while (n > 1 && g.measureText(label.slice(0, n) + "…").width > room) n--;
          label = n > 1 ? label.slice(0, n) + "…" : "";
        }
        g.fillStyle = "#0f172a";
        if (label) g.fillText(label, r.x + 3, r.y + ROW_H / 2);
      }
    }
    info.textContent = `${fmtCount(rects.length)} nodes · ${fmtDur(focus.total_ns)} in view`
      + (state.source === "device" ? " of device time" : "");
    const linkable = focus !== root && focus.slice_id !== null && focus.slice_id !== undefined;
    longest.hidden = !linkable;
    slicesLink.hidden = focus === root || !!focus.truncated;
    if (!slicesLink.hidden) {
      const p = new URLSearchParams(location.search);
      p.set("view", "events"); p.set("q", focus.name); p.delete("focus"); p.delete("orient"); p.delete("source");
      slicesLink.href = `${location.pathname}?${p}`;
    }
    renderCrumbs();
    Object.assign(hook, {
      ready: true, focus: state.focus, orient: state.orient, source: state.source, root_total_ns: root.total_ns,
      focus_slice_id: focus.slice_id ?? null,
      focus_total_ns: focus.total_ns, truncated: !!root.truncated,
      rects: rects.map((r) => ({ name: r.node.name, path: r.path, depth: r.depth, x: r.x, y: r.y, w: r.w,
                                 total_ns: r.node.total_ns, self_ns: r.node.self_ns, count: r.node.count,
                                 lane: r.node.lane, slice_id: r.node.slice_id })),
    });
  }

  function renderCrumbs() {
    const parts = [];
    focusChain.forEach((n, i) => {
      if (i) parts.push(el("span", { class: "sep", text: "›" }));
      const path = state.focus.split(".").slice(0, i).join(".");
      const a = el("a", { text: i === 0 ? "all" : displayName(n.name), title: n.name, dataset: { path } });
      a.addEventListener("click", () => { state.focus = path; draw(); });
      parts.push(a);
    });
    crumbs.replaceChildren(...parts);
  }

  const hit = (ev) => {
    const b = canvas.getBoundingClientRect();
    const x = ev.clientX - b.left, y = ev.clientY - b.top;
    return rects.find((r) => x >= r.x && x < r.x + Math.max(r.w, 1) && y >= r.y && y < r.y + ROW_H) || null;
  };
  canvas.addEventListener("mousemove", (ev) => {
    const r = hit(ev);
    if (!r) { hideTip(); canvas.style.cursor = ""; return; }
    canvas.style.cursor = "pointer";
    const n = r.node;
    const kind = n.lane === "eu" ? " (kernel)" : n.lane === "pcie" ? " (copy)" : n.lane === "driver" ? " (driver call)" : "";
    showTip(ev.clientX, ev.clientY, [n.name + kind,
      `total ${fmtDur(n.total_ns)} (${pct(n.total_ns, root.total_ns)} of the range${state.source === "device" ? "'s device time" : ""})`,
      `self  ${fmtDur(n.self_ns)}`, `count ${fmtCount(n.count)} · mean ${fmtDur(mean(n.total_ns, n.count))} · p95 ${fmtDur(n.p95_ns)}`,
      "click: zoom in"]);
  });
  canvas.addEventListener("mouseleave", hideTip);
  canvas.addEventListener("click", (ev) => {
    const r = hit(ev);
    if (!r) return;
    // the focus row zooms one level out; any other node zooms in
    state.focus = r.depth === 0 ? state.focus.split(".").slice(0, -1).join(".") : r.path;
    hideTip();
    draw();
  });
}
