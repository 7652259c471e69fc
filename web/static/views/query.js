// The SQL page: read-only SQL over POST /query (the same sandbox, limits and refusals as the
// endpoint, whose messages are shown as text), a history in localStorage, a few saved examples,
// results as a table; a row with a slice_id opens that slice on the timeline.

import { el, fmtCount } from "../lib/util.js";
import { status, openSlice as openSliceOf } from "./common.js";

const HISTORY_KEY = "acceltrace.query.history";
const HISTORY_MAX = 30;
const MAX_ROWS = 1000;

export const EXAMPLES = [
  ["Kernels by total time", `SELECT s.name, count(*) AS n, sum(s.dur) AS total_ns, max(s.dur) AS max_ns
FROM slices s JOIN tracks t USING (track_id)
WHERE t.lane = 'eu'
GROUP BY s.name ORDER BY total_ns DESC LIMIT 20`],
  ["Longest slices", `SELECT slice_id, name, dur, depth, track_id FROM slices ORDER BY dur DESC LIMIT 50`],
  ["Copies by direction", `SELECT direction, host_mem, count(*) AS n, sum(bytes) AS bytes, sum(dur) AS busy_ns,
       round(sum(bytes) / nullif(sum(dur), 0), 2) AS gb_per_s
FROM slices WHERE bytes IS NOT NULL GROUP BY ALL ORDER BY bytes DESC`],
  ["Launch to kernel start latency", `SELECT k.slice_id, k.name, c.name AS launched_by, k.ts - c.ts AS latency_ns
FROM flows f JOIN slices c ON c.slice_id = f.src_slice JOIN slices k ON k.slice_id = f.dst_slice
WHERE f.kind = 'launch' ORDER BY latency_ns DESC LIMIT 50`],
  ["Tracks", `SELECT t.track_id, t.lane, t.group_name, t.name, count(s.slice_id) AS slices
FROM tracks t LEFT JOIN slices s USING (track_id) GROUP BY ALL ORDER BY t.sort_key`],
];

export function readHistory() {
  try {
    const h = JSON.parse(localStorage.getItem(HISTORY_KEY) || "[]");
    return Array.isArray(h) ? h.filter((x) => typeof x === "string") : [];
  } catch (_) { return []; }
}
function remember(sql) {
  const h = [sql, ...readHistory().filter((x) => x !== sql)].slice(0, HISTORY_MAX);
  try { localStorage.setItem(HISTORY_KEY, JSON.stringify(h)); } catch (_) { /* storage full or off: history is a convenience */ }
}

export function mountQuery(container, { api, state, save }) {
  const editor = el("textarea", { id: "query-sql", spellcheck: "false", "aria-label": "SQL",
    placeholder: "SELECT … FROM slices  (Ctrl+Enter runs; tables: docs/schema.md)" });
  editor.value = state.sql || EXAMPLES[0][1];
  const run = el("button", { id: "query-run", text: "Run (Ctrl+Enter)" });
  const examples = el("select", { id: "query-examples" }, el("option", { value: "", text: "Examples…" }),
    EXAMPLES.map(([title], i) => el("option", { value: String(i), text: title })));
  const history = el("select", { id: "query-history" });
  const info = el("span", { class: "muted", id: "query-info" });
  const body = el("div", { class: "view-body", id: "query-results" });
  container.replaceChildren(el("div", { class: "query-editor" }, editor,
    el("div", { class: "query-row" }, run, examples, history, info)), body);
  const hook = (window.acceltrace.query = { ready: false });

  function fillHistory() {
    const h = readHistory();
    history.replaceChildren(el("option", { value: "", text: h.length ? `History (${h.length})…` : "History (empty)" }),
      ...h.map((sql, i) => el("option", { value: String(i), text: sql.replace(/\s+/g, " ").slice(0, 90), title: sql })));
  }
  fillHistory();

  async function execute() {
    const sql = editor.value.trim();
    if (!sql) return;
    state.sql = sql; save();
    remember(sql); fillHistory();
    hook.ready = false;
    run.disabled = true;
    info.textContent = "running…";
    try {
      const res = await api.query(sql, MAX_ROWS);
      info.textContent = `${fmtCount(res.row_count ?? res.rows.length)} rows${res.truncated ? ` (first ${fmtCount(res.rows.length)} shown: the row limit)` : ""} · ${res.elapsed_ms} ms`;
      body.replaceChildren(resultTable(res));
      Object.assign(hook, { ready: true, error: null, columns: res.columns, rows: res.rows });
    } catch (e) {
      info.textContent = "";
      body.replaceChildren(status(`${e.code ? e.code + ": " : ""}${e.message}`, true));
      Object.assign(hook, { ready: true, error: { code: e.code, message: e.message } });
    } finally { run.disabled = false; }
  }

  function resultTable(res) {
    const idCol = res.columns.indexOf("slice_id");
    const table = el("table", { class: "vt", id: "query-table" },
      el("thead", {}, el("tr", {}, ...res.columns.map((c, i) => el("th", { text: c, title: c,
        class: res.rows.length && typeof res.rows[0][i] === "number" ? "num" : null })))));
    const tbody = el("tbody");
    for (const row of res.rows) {
      const tr = el("tr", {}, row.map((v) => {
        const text = v === null ? "NULL" : typeof v === "object" ? JSON.stringify(v) : String(v);
        return el("td", { class: typeof v === "number" ? "num" : null, text, title: text });
      }));
      if (idCol >= 0 && row[idCol] !== null) {
        tr.classList.add("link");
        tr.dataset.sliceId = String(row[idCol]);
        tr.title = "open this slice on the timeline";
        tr.addEventListener("click", () => openSlice(row[idCol]));
      }
      tbody.append(tr);
    }
    table.append(tbody);
    return table;
  }

  async function openSlice(slice_id) {
    try { await openSliceOf(api, slice_id); } catch (e) { info.textContent = `slice ${slice_id}: ${e.message}`; }
  }

  run.addEventListener("click", execute);
  editor.addEventListener("keydown", (ev) => { if (ev.key === "Enter" && (ev.ctrlKey || ev.metaKey)) { ev.preventDefault(); execute(); } });
  examples.addEventListener("change", () => { if (examples.value !== "") editor.value = EXAMPLES[Number(examples.value)][1]; examples.value = ""; });
  history.addEventListener("change", () => { if (history.value !== "") editor.value = readHistory()[Number(history.value)]; history.value = ""; });
  if (state.sql) execute();
}
