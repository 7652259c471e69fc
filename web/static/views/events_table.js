// Every slice of a range (GET /events), sorted and filtered on the server, drawn as a virtualised
// table: only the rows in view exist in the DOM, fetched a page at a time. "Export CSV" downloads
// GET /events.csv with the same filters and order. A row click opens the slice on the timeline.

import { el, fmtDur, fmtTime, fmtCount, fmtBytes, LANES, LANE_TITLES } from "../lib/util.js";
import { status, sortableTable, sliceTimelineUrl, rangeParams } from "./common.js";

const ROW_PX = 22;
const PAGE = 200;
const MAX_SCROLL_PX = 8_000_000; // browsers cap element heights; past it scrolling maps proportionally

export function mountEvents(container, { api, state, save }) {
  const search = el("input", { type: "search", id: "events-search", placeholder: "Filter by name", value: state.q });
  const laneSel = el("select", { id: "events-lane" }, el("option", { value: "", text: "all lanes" }),
    LANES.map((l) => el("option", { value: l, text: LANE_TITLES[l] || l })));
  const info = el("span", { class: "muted", id: "events-info" });
  const csv = el("a", { class: "button-link", id: "events-csv", text: "Export CSV", download: "" });
  const scroll = el("div", { class: "events-scroll", id: "events-scroll" });
  const spacer = el("div", { class: "events-spacer" });
  container.replaceChildren(el("div", { class: "view-bar" }, search, laneSel, csv, info), scroll);
  const hook = (window.acceltrace.events = { ready: false });

  let sort = { key: "ts", desc: false };
  const t = sortableTable([
    { key: "name", title: "Name", width: "28%" },
    { key: "lane", title: "Lane", width: "7%", fmt: (r) => LANE_TITLES[r.lane] || r.lane },
    { key: "track", title: "Track", width: "14%" },
    { key: "ts", title: "Start", num: true, fmt: (r) => fmtTime(r.ts) },
    { key: "dur", title: "Duration", num: true, fmt: (r) => fmtDur(r.dur) },
    { key: "depth", title: "Depth", num: true, width: "5%" },
    { key: "bytes", title: "Bytes", num: true, fmt: (r) => (r.bytes === null ? "" : fmtBytes(r.bytes)) },
    { key: "args", title: "Args", width: "22%", fmt: (r) => (r.args || "").replace(/\s+/g, " ")
      + (r.args_chars ? ` ... (${fmtCount(r.args_chars)} characters: the slice's details have them)` : "") },
  ], {
    sortKey: "ts", desc: false,
    onSort: (key, desc) => { sort = { key, desc }; reset(); },
    onRow: (r, tr) => {
      tr.classList.add("link");
      tr.dataset.sliceId = r.slice_id;
      tr.addEventListener("click", () => { location.href = sliceTimelineUrl(api.id, r.ts, r.dur, r.slice_id); });
    },
  });
  t.table.id = "events-table";
  t.renderHead();
  scroll.append(spacer, t.table);

  let total = 0, pages = new Map(), generation = 0, pending = new Set();
  const filters = () => ({ tracks: state.tracks, lane: laneSel.value || null, q: state.q || null, sort: sort.key, desc: sort.desc });

  function reset() {
    generation++;
    pages = new Map(); pending = new Set(); total = 0;
    hook.ready = false;
    const f = filters();
    csv.href = `${api.base}/events.csv?${rangeParams(state, { track: f.tracks, lane: f.lane, q: f.q, sort: f.sort, desc: f.desc ? "true" : null })}`;
    fetchPage(0).then(() => { scroll.scrollTop = 0; draw(); });
  }

  function fetchPage(i) {
    if (pages.has(i) || pending.has(i)) return Promise.resolve();
    pending.add(i);
    const gen = generation;
    return api.events({ ...filters(), offset: i * PAGE, limit: PAGE }).then((res) => {
      if (gen !== generation) return;
      pending.delete(i);
      pages.set(i, res.rows);
      total = res.total;
      info.textContent = `${fmtCount(total)} slices`;
    }).catch((e) => { pending.delete(i); info.textContent = ""; scroll.replaceChildren(status(`Could not load the events: ${e.message}`, true)); });
  }

  function draw() {
    const viewRows = Math.max(1, Math.ceil(scroll.clientHeight / ROW_PX) - 1); // one row's height is the header
    const fullPx = total * ROW_PX + ROW_PX * 2;
    const px = Math.min(fullPx, MAX_SCROLL_PX);
    spacer.style.height = `${px}px`;
    const maxTop = Math.max(1, px - scroll.clientHeight);
    const first = px === fullPx ? Math.floor(scroll.scrollTop / ROW_PX)
      : Math.floor((scroll.scrollTop / maxTop) * Math.max(0, total - viewRows));
    const last = Math.min(total, first + viewRows);
    const rows = [];
    let missing = false;
    for (let i = first; i < last; i++) {
      const page = pages.get(Math.floor(i / PAGE));
      if (!page) {
        missing = true;
        const p = Math.floor(i / PAGE);
        // a page already on its way redraws when it lands; only a new request schedules that
        if (!pending.has(p)) fetchPage(p).then(() => requestAnimationFrame(draw));
        continue;
      }
      const r = page[i % PAGE];
      if (r) rows.push(r);
    }
    t.setRows(rows);
    Object.assign(hook, { ready: !missing, total, first, shown: rows.map((r) => r.slice_id), sort: { ...sort } });
  }

  scroll.addEventListener("scroll", () => requestAnimationFrame(draw));
  window.addEventListener("resize", draw);
  let timer = 0;
  search.addEventListener("input", () => { clearTimeout(timer); timer = setTimeout(() => { state.q = search.value; save(); reset(); }, 200); });
  laneSel.addEventListener("change", reset);
  reset();
}
