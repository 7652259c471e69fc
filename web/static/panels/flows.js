// Flow navigation: a selected slice's correlation chain in time order (ts, then id: an API call, its driver
// submission, the copy or kernel it started), stepped with [ and ]; and the Details tab's list of every flow
// touching the slice, with the chain position and buttons for the same steps.

import { el, fmtTime, fmtDur, LANE_TITLES, displayName } from "../lib/util.js";

/** The chain's slices in the order [ and ] walk them: by start, then id. */
export function chainOrder(detail) {
  const slices = detail?.chain?.slices || [];
  return [...slices].sort((a, b) => a.ts - b.ts || a.id - b.id);
}

/** The chain slice before (dir -1) or after (dir 1) the selected one, or null at either end. */
export function stepTarget(detail, dir) {
  if (!detail) return null;
  const order = chainOrder(detail);
  const i = order.findIndex((c) => c.id === detail.slice.id);
  if (i < 0) return null;
  return order[i + dir] || null;
}

/** The chain position with previous / next buttons ([ / ]), or nothing when the chain is the slice alone. */
export function flowNav(detail, onjump) {
  const order = chainOrder(detail);
  if (order.length < 2) return [];
  const i = order.findIndex((c) => c.id === detail.slice.id);
  const prev = order[i - 1], next = order[i + 1];
  const step = (c, text, key) => el("button", { class: "flow-step", disabled: !c, title: c ? `${key}: ${c.name}` : `${key}: none`,
                                                onclick: () => c && onjump(c.id) }, text);
  return [el("p", { class: "flow-nav" }, step(prev, "\u25c0 previous", "["), ` link ${i + 1} of ${order.length} `,
             step(next, "next \u25b6", "]"))];
}

/** Every flow into or out of the slice: direction, kind (and the source's own kind), the other end (a link to it). */
export function flowTable(detail, onjump) {
  const s = detail.slice;
  const flows = [...(detail.flows?.in || []), ...(detail.flows?.out || [])];
  // the other end's name, lane and time: from the chain, else from the ends the server names (flow_ends)
  const known = new Map([...chainOrder(detail), ...(detail.flow_ends || [])].map((c) => [c.id, c]));
  const out = [el("h4", {}, `Flows (${flows.length})`)];
  if (!flows.length) { out.push(el("p", { class: "muted" }, "No flow starts or ends at this slice.")); return out; }
  out.push(el("table", { class: "grid flows" },
    el("thead", {}, el("tr", {}, el("th", {}, ""), el("th", {}, "kind"), el("th", {}, "other end"))),
    el("tbody", {}, flows.map((f) => {
      const outgoing = f.src_slice === s.id;
      const other = outgoing ? f.dst_slice : f.src_slice;
      const o = other === null || other === undefined ? null : known.get(other);
      const end = other === null || other === undefined ? el("span", { class: "muted" }, "outside the trace")
        : el("a", { href: "#", class: "slice-link", title: o ? o.name : `slice ${other}`, dataset: { sliceId: String(other) },
                    onclick: (e) => { e.preventDefault(); onjump(other); } },
             o ? `${LANE_TITLES[o.lane] || o.lane}: ${displayName(o.name)} @ ${fmtTime(o.ts)}, ${fmtDur(o.dur)}` : `slice ${other}`);
      return el("tr", { dataset: { flowId: String(f.flow_id) } },
        el("td", { title: outgoing ? "out of this slice" : "into this slice" }, outgoing ? "\u2192" : "\u2190"),
        el("td", { title: f.raw_kind ?? "" }, f.raw_kind && f.raw_kind !== f.kind ? `${f.kind} (${f.raw_kind})` : f.kind),
        el("td", {}, end));
    }))));
  return out;
}
