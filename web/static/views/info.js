// Trace info (docs/ui.md): what the trace is (devices and their properties, profiler, driver and
// runtime versions, link configuration), what ingest said (warnings, dropped events), each analysis
// pass's status (the timeline's Info tab, panels/side_panels.js renderInfo) and the trace's tables
// with row counts (GET /tables); a table's name opens it in the SQL view.

import { el, fmtCount } from "../lib/util.js";
import { renderInfo } from "../panels/side_panels.js";
import { status } from "./common.js";

export function mountInfo(container, { api, state, save }) {
  const about = el("section", { class: "info-about", id: "info-about" });
  const tablesBox = el("section", { class: "info-tables", id: "info-tables" }, status("loading the tables…"));
  container.replaceChildren(el("div", { class: "view-body info-page" }, el("div", { class: "info-cols" }, about, tablesBox)));
  const hook = (window.acceltrace.info = { ready: false });
  renderInfo(about, api.meta, null);
  const analysis = api.analysis().then((a) => { renderInfo(about, api.meta, a); return a; })
    .catch((e) => { about.append(status(`The analysis status is unavailable: ${e.message}`, true)); return null; });
  const tables = api.tables().then((res) => {
    const open = (name) => {
      state.view = "query";
      state.sql = `SELECT * FROM "${name.replace(/"/g, '""')}" LIMIT 100`;
      save();
      location.reload();
    };
    tablesBox.replaceChildren(el("h4", {}, `Tables (${res.tables.length})`),
      el("p", { class: "muted" }, "What the SQL view can read; a name opens its first rows there."),
      el("table", { class: "vt", id: "info-tables-table" },
        el("thead", {}, el("tr", {}, el("th", { text: "table" }), el("th", { text: "kind" }),
          el("th", { class: "num", text: "rows" }), el("th", { class: "num", text: "columns" }))),
        el("tbody", {}, res.tables.map((t) => el("tr", { dataset: { table: t.name, rows: String(t.rows) } },
          el("td", {}, el("a", { href: "#", text: t.name, onclick: (ev) => { ev.preventDefault(); open(t.name); } })),
          el("td", { text: t.kind }), el("td", { class: "num", text: fmtCount(t.rows) }),
          el("td", { class: "num", text: String(t.columns) }))))));
    return res.tables;
  }).catch((e) => { tablesBox.replaceChildren(status(`Could not list the tables: ${e.message}`, true)); return []; });
  Promise.all([analysis, tables]).then(([a, t]) => Object.assign(hook, { ready: true, tables: t, analysis: a }));
}
