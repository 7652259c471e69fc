// Track control on the trace page (docs/ui.md "Track control"): the filter box and the count of hidden
// and filtered-out tracks over the names column, a track's menu (its ⋮ button or a right-click on its
// name: hide, pin, depths shown, move), the list of hidden tracks with "show" for each and "Show all",
// reordering by drag (timeline/track_drag.js), the names column's resize handle, and the state these
// keep in the URL (f=, hide=, ord=, nw=; lib/url_state.js). Track names only ever go in as text.

import { el, LANE_TITLES } from "../lib/util.js";
import { NAMES_PX, NAMES_DEFAULT_PX, setNamesWidth, depthCount, shownDepths, MENU_RIGHT_PX, AXIS_PX } from "../timeline/layout.js";
import { rowAt } from "../timeline/hit.js";
import { attachTrackDrag } from "../timeline/track_drag.js";
import { installDragResize } from "./resize.js";
import { hideTooltip } from "./tooltip.js";

const FILTER_DEBOUNCE_MS = 120;

/** The names column's width now (css px). */
export function namesWidth() { return NAMES_PX; }

/** The URL's share of track control: {filter, hidden, order, names_px}. */
export function trackUrlState(tl) {
  const l = tl.layout;
  return { filter: l.filter.text, hidden: [...l.hidden], order: [...l.userOrder], names_px: NAMES_PX === NAMES_DEFAULT_PX ? null : NAMES_PX };
}

/**
 * Restore track control from a read fragment, before the first frame: names width, order, hidden
 * tracks, filter. The timeline relayouts and resizes itself.
 */
export function applyTrackUrlState(tl, frag) {
  if (frag.names_px !== null && frag.names_px !== undefined) { setNamesWidth(frag.names_px); tl.resize(); }
  if (frag.order?.length) tl.layout.setOrder(frag.order);
  if (frag.hidden?.length) tl.layout.setHidden(frag.hidden);
  if (frag.filter) {
    tl.layout.setFilter(frag.filter);
    const input = document.getElementById("track-filter");
    if (input) input.value = frag.filter;
  }
  tl.relayout();
}

/**
 * The test hook window.acceltrace.tracks: every track, pinned band first then the scrolled list in
 * order, as {id, name, lane, group, pinned, hidden (by the user), filtered (out by the filter), shown
 * (has a row now: not hidden, not filtered out, its lane and group not collapsed), depths (depth rows
 * drawn; null for counters), y and h (canvas css px of its row, possibly off screen; null without one)}.
 */
export function trackList(tl) {
  const l = tl.layout;
  const rowOf = new Map();
  for (const r of l.pinnedRows) rowOf.set(r.track.track_id, { y: AXIS_PX + r.y, h: r.h });
  for (const r of l.rows) if (r.kind === "track") rowOf.set(r.track.track_id, { y: tl.scrollTop_px + r.y - tl.scrollY, h: r.h });
  const pinned = new Set(l.pinned);
  const order = [...l.pinned.map((id) => l.byId.get(id)), ...l.tracks.filter((t) => !pinned.has(t.track_id))];
  return order.map((t) => {
    const r = rowOf.get(t.track_id);
    return {
      id: t.track_id, name: t.name, lane: t.lane, group: t.group_name, pinned: pinned.has(t.track_id),
      hidden: l.hidden.has(t.track_id), filtered: l.filteredOut.has(t.track_id) && !l.revealed.has(t.track_id) && !pinned.has(t.track_id),
      shown: !!r, depths: t.lane === "counter" ? null : shownDepths(t), y: r ? r.y : null, h: r ? r.h : null,
    };
  });
}

/** A track's facts in one line: lane, group, device, process, thread. */
function describe(t) {
  return [LANE_TITLES[t.lane] || t.lane, t.group_name, t.device !== null && t.device !== undefined ? `dev ${t.device}` : null,
          t.process ? `proc ${t.process}` : null, t.thread ? `thread ${t.thread}` : null, `id ${t.track_id}`]
    .filter(Boolean).join(" \u00b7 ");
}

/**
 * Wire the page's track control to a timeline; `onchange()` runs after anything the URL keeps changed.
 * Elements: #track-filter, #track-count, #track-pop, #names-resize (web/templates/trace.html).
 */
export function installTrackControls(tl, onchange) {
  const $ = (id) => document.getElementById(id);
  const input = $("track-filter"), count = $("track-count"), pop = $("track-pop"), bar = $("track-bar"), handle = $("names-resize");
  const changed = () => { tl.relayout(); onchange?.(); };

  // the bar and handle follow the names column's width
  const place = () => {
    if (bar) bar.style.width = `${NAMES_PX}px`;
    if (handle) handle.style.left = `${NAMES_PX - 3}px`;
  };

  const showCounts = () => {
    const c = tl.layout.counts;
    place();
    if (!count) return;
    const parts = [];
    if (c.filtered || c.hidden) parts.push(`${c.shown} of ${c.total}`);
    if (c.hidden) parts.push(`${c.hidden} hidden`);
    count.hidden = !parts.length;
    count.textContent = parts.join(" \u00b7 ");
    count.title = `${c.shown} of ${c.total} tracks shown: ${c.hidden} hidden by you, ${c.filtered} filtered out (click to list)`;
    count.classList.toggle("warn", c.hidden > 0);
    if (input) {
      const none = tl.layout.filter.terms.length > 0 && c.shown === 0;
      input.classList.toggle("no-match", none);
      input.title = none ? "no track matches this filter" : "filter tracks: words match names; lane:cpu, dev:0, proc:1234, thread:…, group:…, -word excludes (docs/ui.md)";
    }
    if (!pop.hidden && pop.dataset.kind === "hidden") openHiddenList(); // keep an open list current
  };
  // a live trace's new tracks replace the layout (timeline/follow.js): the user's choices carry over
  let known = tl.layout;
  tl.on("layout", () => {
    if (tl.layout !== known) {
      const prev = known;
      known = tl.layout;
      tl.layout.adoptChoices(prev);
      tl.relayout();
      return;
    }
    showCounts();
  });
  tl.trackMenus = true; // frame.js draws each track's ⋮ button

  let timer = 0;
  input?.addEventListener("input", () => {
    clearTimeout(timer);
    timer = setTimeout(() => { tl.layout.setFilter(input.value); tl.scrollY = 0; changed(); }, FILTER_DEBOUNCE_MS);
  });
  input?.addEventListener("keydown", (e) => {
    if (e.key === "Escape") { input.value = ""; tl.layout.setFilter(""); changed(); input.blur(); }
    e.stopPropagation(); // typing here is not W/A/S/D
  });

  const closePop = () => { pop.hidden = true; pop.replaceChildren(); delete pop.dataset.kind; };
  const openAt = (kind, x, y, children) => {
    hideTooltip();
    pop.replaceChildren(...children);
    pop.dataset.kind = kind;
    pop.hidden = false;
    const r = pop.parentElement.getBoundingClientRect(), w = pop.offsetWidth, h = pop.offsetHeight;
    pop.style.left = `${Math.max(0, Math.min(x - r.left, r.width - w - 4))}px`;
    pop.style.top = `${Math.max(0, Math.min(y - r.top, r.height - h - 4))}px`;
  };

  // the list of hidden tracks: show one, show all, clear the filter
  const openHiddenList = () => {
    const l = tl.layout, c = l.counts;
    const hidden = l.tracks.filter((t) => l.hidden.has(t.track_id));
    const items = hidden.map((t) => el("li", {},
      el("button", { class: "show-track", dataset: { track: String(t.track_id) }, onclick: () => { l.showTrack(t.track_id); changed(); } }, "show"),
      el("span", { class: "name", title: describe(t) }, String(t.name)),
      el("span", { class: "muted" }, ` ${t.group_name}`)));
    const r = count.getBoundingClientRect();
    openAt("hidden", r.left, r.bottom + 2, [
      el("div", { class: "pop-title" }, `${c.shown} of ${c.total} tracks shown`),
      el("p", { class: "muted" }, `${c.hidden} hidden by you, ${c.filtered} filtered out${l.filter.text ? ` by \u201c${l.filter.text}\u201d` : ""}`),
      items.length ? el("ul", { class: "hidden-list" }, items) : null,
      el("div", { class: "pop-actions" },
        c.hidden ? el("button", { id: "show-all-tracks", onclick: () => { l.showAll(); changed(); } }, "Show all hidden") : null,
        l.filter.text ? el("button", { id: "clear-track-filter", onclick: () => { input.value = ""; l.setFilter(""); changed(); } }, "Clear filter") : null),
    ]);
  };
  count?.addEventListener("click", (e) => { e.stopPropagation(); if (!pop.hidden && pop.dataset.kind === "hidden") closePop(); else openHiddenList(); });

  // a track's menu
  const openMenu = (t, cx, cy) => {
    const l = tl.layout;
    const pinned = l.pinned.includes(t.track_id);
    const kids = [
      el("div", { class: "pop-title" }, String(t.name)),
      el("p", { class: "muted" }, describe(t)),
      el("button", { class: "menu-item", dataset: { act: "hide" }, onclick: () => { closePop(); l.hideTrack(t.track_id); changed(); } }, "Hide track"),
      el("button", { class: "menu-item", dataset: { act: "pin" }, onclick: () => { closePop(); l.togglePin(t.track_id); changed(); } }, pinned ? "Unpin" : "Pin to top"),
    ];
    if (!pinned) {
      const ids = l.groupTracks(t).map((x) => x.track_id);
      if (ids.length > 1) {
        kids.push(el("button", { class: "menu-item", dataset: { act: "top" }, onclick: () => { closePop(); l.moveTrack(t.track_id, ids[0]); changed(); } }, "Move to top of group"),
                  el("button", { class: "menu-item", dataset: { act: "bottom" }, onclick: () => { closePop(); l.moveTrack(t.track_id, null); changed(); } }, "Move to bottom of group"));
      }
    }
    if (t.lane !== "counter" && depthCount(t) > 1) {
      const all = depthCount(t);
      const num = el("input", { type: "number", id: "track-depths", min: "1", max: String(all), value: String(shownDepths(t)) });
      const apply = () => {
        const n = Math.round(Number(num.value));
        if (!Number.isFinite(n) || n < 1) { num.setCustomValidity(`a whole number from 1 to ${all}`); num.reportValidity(); return; }
        closePop();
        tl.setDepths(t.track_id, Math.min(all, n));
        onchange?.();
      };
      num.addEventListener("keydown", (e) => { e.stopPropagation(); if (e.key === "Enter") apply(); if (e.key === "Escape") closePop(); });
      kids.push(el("label", { class: "menu-depths" }, "Depths shown ", num, ` of ${all} `,
        el("button", { dataset: { act: "depths" }, onclick: apply }, "Apply")));
    }
    openAt("menu", cx, cy, kids);
  };

  const cv = tl.canvas;
  const pos = (e) => { const r = cv.getBoundingClientRect(); return [e.clientX - r.left, e.clientY - r.top]; };
  const trackUnder = (x, y) => {
    if (x >= NAMES_PX || y < AXIS_PX) return null;
    const at = rowAt(tl, y);
    return at && at.row.kind === "track" ? { t: at.row.track, y0: at.y0 } : null;
  };
  cv.addEventListener("click", (e) => {
    const [x, y] = pos(e);
    const hit = trackUnder(x, y);
    // the ⋮ button: its column on the track's first line
    if (hit && x >= NAMES_PX - MENU_RIGHT_PX && x < NAMES_PX - 24 && y < hit.y0 + 20) { e.stopPropagation(); openMenu(hit.t, e.clientX, e.clientY); }
  });
  cv.addEventListener("contextmenu", (e) => {
    const [x, y] = pos(e);
    const hit = trackUnder(x, y);
    if (!hit) return;
    e.preventDefault();
    openMenu(hit.t, e.clientX, e.clientY);
  });
  document.addEventListener("pointerdown", (e) => { if (!pop.hidden && !pop.contains(e.target) && e.target !== count) closePop(); });
  // Esc closes an open menu or list and does nothing else (capture phase, ahead of the page's key table)
  window.addEventListener("keydown", (e) => {
    if (e.key !== "Escape" || pop.hidden) return;
    e.preventDefault();
    e.stopImmediatePropagation();
    closePop();
  }, true);

  attachTrackDrag(tl, () => onchange?.());

  installDragResize(handle, {
    width: () => NAMES_PX,
    set: (px) => { setNamesWidth(Math.min(px, tl.root.getBoundingClientRect().width - 200)); place(); tl.resize(); },
    grow: 1,
    done: () => onchange?.(),
  });
  place();
  showCounts();
  return { openMenu, openHiddenList, close: closePop };
}
