// The trace page's ways into the aggregate views page (/t/{id}/views, docs/ui.md): the "Views" button
// (the visible range, read from the timeline's URL fragment #s=&e=, lib/url_state.js) and the area
// panel's "Open in views" link (the area's range and tracks).

import { el } from "../lib/util.js";
import { viewsUrl } from "../views/common.js";

/** The top bar's Views button: the views of the range on screen (trace.js main). */
export function installViewsButton() {
  document.getElementById("open-views").addEventListener("click", () => {
    const f = new URLSearchParams(location.hash.slice(1)), q = new URLSearchParams({ view: "flame" });
    if (f.get("s")) q.set("start_ns", f.get("s"));
    if (f.get("e")) q.set("end_ns", f.get("e"));
    location.href = `/t/${encodeURIComponent(document.body.dataset.traceId)}/views?${q}`;
  });
}

/** A link to the views of an area: [start_ns, end_ns) relative, on these tracks. */
export function areaViewsLink(start_ns, end_ns, track_ids) {
  return el("p", { class: "area-views" }, el("a", {
    id: "area-open-views", class: "button-link", text: "Open in views",
    title: "flame graph, call trees, op → kernel rollup and events of this area",
    href: viewsUrl(document.body.dataset.traceId, start_ns, end_ns, track_ids),
  }));
}
