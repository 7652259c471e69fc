// The trace page's action table: every action with its title, section and keys. One table drives the key
// dispatcher, the command palette (panels/palette.js) and the keyboard help sheet, so a shortcut cannot be in
// one and missing from another. Entries with `held` are W/A/S/D: timeline/input.js runs them while the key
// is held (smooth zoom and pan); the dispatcher leaves those keys alone. Entries with `mouse` are gestures,
// listed in the help only.

import { NAMES_PX } from "../timeline/layout.js";

const SECTIONS = ["Navigate", "Select and flows", "Bookmarks and measure", "Tracks", "Panels and sharing", "Mouse"];

/** A keydown as the table writes keys: "M", "[", "?", "Ctrl+K", "Escape". */
export function keyOf(e) {
  const k = e.key.length === 1 ? e.key.toUpperCase() : e.key;
  const mods = [];
  // AltGr (Ctrl+Alt on some layouts) types [ ] / ? itself: not a modifier of the key it makes
  const altGr = e.getModifierState?.("AltGraph");
  if ((e.ctrlKey || e.metaKey) && !altGr) mods.push("Ctrl");
  if (e.altKey && !altGr) mods.push("Alt");
  return [...mods, k].join("+");
}

const KEY_LABEL = { Escape: "Esc", ArrowUp: "\u2191", ArrowDown: "\u2193" };
export function keyLabel(k) { return k.split("+").map((p) => KEY_LABEL[p] || p).join("+"); }

/**
 * Dispatch keydowns to the table's actions (capture phase on window, ahead of the timeline's own key
 * handler, which then sees only the held W/A/S/D keys). A key typed into a field is the field's, except
 * Ctrl+K. `actions()` returns the current table (some entries depend on the trace: overlays, live).
 */
export function installKeys(actions) {
  window.addEventListener("keydown", (e) => {
    const key = keyOf(e);
    const tag = (e.target && e.target.tagName) || "";
    if ((tag === "INPUT" || tag === "TEXTAREA" || e.target?.isContentEditable) && key !== "Ctrl+K") return;
    const a = actions().find((x) => !x.held && x.keys?.includes(key) && (!x.enabled || x.enabled()));
    if (!a) return;
    e.preventDefault();
    e.stopImmediatePropagation();
    a.run();
  }, true);
}

/** The help sheet from the table: one block per section, each row the keys (or gesture) and the title. */
export function renderHelp(box, actions) {
  box.replaceChildren();
  for (const section of SECTIONS) {
    const rows = actions.filter((a) => a.section === section && (a.keys?.length || a.mouse));
    if (!rows.length) continue;
    const h = document.createElement("h4");
    h.textContent = section;
    const table = document.createElement("table");
    for (const a of rows) {
      const tr = table.insertRow();
      tr.dataset.action = a.id;
      const th = document.createElement("th");
      th.textContent = a.mouse || a.keys.map(keyLabel).join(" / ");
      const td = document.createElement("td");
      td.textContent = a.help || a.title;
      tr.append(th, td);
    }
    box.append(h, table);
  }
}

/**
 * The table for the trace page. `app` is what the page gives: the timeline, its select / clear, the nav
 * parts (bookmarks, measure, flows stepping, palette, help) and the top bar's buttons.
 */
export function traceActions(app) {
  const tl = app.tl, v = tl.view;
  const hoverNs = () => (tl.hover && tl.hover.x > NAMES_PX ? v.ns_at(tl.hover.x - NAMES_PX) : null);
  const step = 0.2; // one press of W/S/A/D (timeline/input.js KEY_STEP)
  const list = [
    { id: "zoom-in", title: "Zoom in", keys: ["W"], held: true, section: "Navigate", help: "Zoom in (about the mouse; hold to keep zooming)",
      run: () => v.zoomAbout(v.width_css_px / 2, 1 - step) },
    { id: "zoom-out", title: "Zoom out", keys: ["S"], held: true, section: "Navigate", help: "Zoom out (about the mouse)",
      run: () => v.zoomAbout(v.width_css_px / 2, 1 / (1 - step)) },
    { id: "pan-left", title: "Pan left", keys: ["A"], held: true, section: "Navigate", run: () => v.panPx(-step * v.width_css_px) },
    { id: "pan-right", title: "Pan right", keys: ["D"], held: true, section: "Navigate", run: () => v.panPx(step * v.width_css_px) },
    { id: "zoom-fit", title: "Zoom to fit: the whole trace", keys: ["0"], section: "Navigate", run: () => v.reset() },
    { id: "frame", title: "Frame the selection (or the area, or the whole trace)", keys: ["F"], section: "Navigate",
      run: () => {
        if (tl.selected) v.frame(tl.selected.ts, tl.selected.dur);
        else if (tl.area) v.set(Math.min(tl.area.start_ns, tl.area.end_ns), Math.max(tl.area.start_ns, tl.area.end_ns));
        else v.reset();
      } },
    { id: "clear", title: "Clear: close the palette or help, the measurement, the selection and the area", keys: ["Escape"],
      section: "Select and flows", run: () => app.escape() },
    { id: "flow-prev", title: "Previous link of the selection's correlation chain", keys: ["["], section: "Select and flows",
      run: () => app.stepFlow(-1) },
    { id: "flow-next", title: "Next link of the selection's correlation chain", keys: ["]"], section: "Select and flows",
      run: () => app.stepFlow(1) },
    { id: "search", title: "Search slices by name", section: "Select and flows", run: () => app.focusSearch() },
    { id: "bookmark-add", title: "Add a bookmark (at the mouse, else the selection's start, else the view's centre)", keys: ["M"],
      section: "Bookmarks and measure",
      run: () => app.addBookmark(hoverNs() ?? (tl.selected ? tl.selected.ts : (v.start_ns + v.end_ns) / 2)) },
    { id: "bookmark-prev", title: "Previous bookmark", keys: [","], section: "Bookmarks and measure", run: () => app.bookmarks.step(-1) },
    { id: "bookmark-next", title: "Next bookmark", keys: ["."], section: "Bookmarks and measure", run: () => app.bookmarks.step(1) },
    { id: "bookmarks-show", title: "Show the bookmarks", keys: ["B"], section: "Bookmarks and measure", run: () => app.showTab("bookmarks") },
    { id: "measure", title: "Measure mode on / off (drag between two points; ends snap to slice edges)", keys: ["R"],
      section: "Bookmarks and measure", run: () => app.measure.setMode(!app.measure.mode) },
    { id: "measure-clear", title: "Clear the measurement", section: "Bookmarks and measure", run: () => app.measure.clear() },
    { id: "tracks-filter", title: "Filter tracks (words match names; lane:, dev:, proc:, thread:, -word excludes)", keys: ["T"],
      section: "Tracks", run: () => app.focusTrackFilter() },
    { id: "tracks-filter-clear", title: "Clear the track filter", section: "Tracks",
      enabled: () => tl.layout.filter.terms.length > 0, run: () => app.setTrackFilter("") },
    { id: "tracks-show-all", title: "Show all hidden tracks", section: "Tracks",
      enabled: () => tl.layout.counts.hidden > 0, run: () => { tl.layout.showAll(); app.tracksChanged(); } },
    { id: "palette", title: "Command palette", keys: ["Ctrl+K", "/"], section: "Panels and sharing", run: () => app.palette.open() },
    { id: "help", title: "Keyboard help (this sheet)", keys: ["?"], section: "Panels and sharing", run: () => app.toggleHelp() },
    { id: "copy-link", title: "Copy a link to this view", section: "Panels and sharing", run: () => app.click("copy-link") },
    { id: "open-views", title: "Open the aggregate views of the visible range", keys: ["V"], section: "Panels and sharing",
      run: () => app.click("open-views") },
  ];
  for (const [tab, title] of [["details", "Details"], ["area", "Area"], ["summary", "Summary"], ["findings", "Findings"], ["info", "Info"]]) {
    list.push({ id: `tab-${tab}`, title: `Show the ${title} tab`, section: "Panels and sharing", run: () => app.showTab(tab) });
  }
  if (app.live) {
    list.push({ id: "follow", title: "Follow the newest events (live trace)", keys: ["End"], held: true, section: "Navigate",
                run: () => app.click("follow") });
  }
  for (const p of app.passes()) {
    list.push({ id: `overlay-${p}`, title: `Toggle the overlay of ${p} findings (${tl.overlays.has(p) ? "shown" : "hidden"})`,
                section: "Panels and sharing", run: () => app.toggleOverlay(p) });
  }
  list.push(
    { id: "m-wheel", mouse: "wheel / pinch", title: "zoom about the cursor (horizontal wheel pans)", section: "Mouse" },
    { id: "m-alt-wheel", mouse: "Alt + wheel, wheel over names", title: "scroll the tracks", section: "Mouse" },
    { id: "m-drag", mouse: "drag", title: "pan (and scroll); in measure mode: measure", section: "Mouse" },
    { id: "m-shift-drag", mouse: "Shift + drag", title: "select an area: aggregate per name", section: "Mouse" },
    { id: "m-click", mouse: "click", title: "select a slice: details, flows and its correlation chain", section: "Mouse" },
    { id: "m-dblclick", mouse: "double-click", title: "zoom to a slice", section: "Mouse" },
    { id: "m-track-drag", mouse: "drag a track name", title: "reorder the track within its group", section: "Mouse" },
    { id: "m-track-menu", mouse: "\u22ee or right-click a track name", title: "hide it, move it, choose its depths", section: "Mouse" },
    { id: "m-pin", mouse: "\u25c7 by a track name", title: "pin the track to the top", section: "Mouse" },
    { id: "m-collapse", mouse: "click a lane / group row", title: "collapse or expand it", section: "Mouse" },
    { id: "m-search", mouse: "Enter in search", title: "next hit (Shift+Enter: previous)", section: "Mouse" },
  );
  return list;
}
