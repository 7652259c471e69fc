// The trace page's navigation parts wired together: bookmarks, the measure tool, flow stepping, the command
// palette and the keyboard help, all driven by one action table (panels/actions.js). Returns the test hooks
// documented in docs/ui.md (window.acceltrace.nav).

import { NavLayer } from "../timeline/nav_layer.js";
import { Measure } from "../timeline/measure.js";
import { stepTarget } from "../panels/flows.js";
import { Palette } from "../panels/palette.js";
import { traceActions, installKeys, renderHelp } from "../panels/actions.js";

const $ = (id) => document.getElementById(id);

/**
 * `page`: {tl, bookmarks, select(id, opts), clear(), showTab(name), live, passes(), toggleOverlay(pass)}.
 * The help sheet (#help-keys), the palette overlay (#palette) and the Measure button (#measure-button) are in
 * the template.
 */
export function installNav(page) {
  const { tl, bookmarks } = page;
  const layer = new NavLayer(tl);
  const measureButton = $("measure-button");
  const measure = new Measure(tl, () => {
    if (measureButton) { measureButton.setAttribute("aria-pressed", String(measure.mode)); measureButton.classList.toggle("on", measure.mode); }
    tl.root.dataset.measure = measure.state ? String(measure.state.dur_ns) : "";
  });
  layer.add((ctx) => bookmarks.paint(ctx, tl));
  layer.add((ctx) => measure.paint(ctx, tl));
  bookmarks.repaint = measure.repaint = () => layer.draw(); // never a redraw of the tracks
  // a double-click in measure mode is two measuring clicks, not a zoom
  tl.canvas.addEventListener("dblclick", (e) => { if (measure.mode) e.stopImmediatePropagation(); }, true);
  if (measureButton) measureButton.addEventListener("click", () => measure.setMode(!measure.mode));

  const help = $("help");
  let lastFlowStep = null; // {from, to} of the last [ / ] press, for the hook
  const app = {
    tl, bookmarks, measure, live: page.live,
    showTab: page.showTab,
    passes: page.passes,
    toggleOverlay: page.toggleOverlay,
    click: (id) => { const b = $(id); if (b && !b.hidden) b.click(); },
    focusSearch: () => { const s = $("search"); s.focus(); s.select(); },
    focusTrackFilter: () => { const f = $("track-filter"); if (f) { f.focus(); f.select(); } },
    tracksChanged: () => { tl.relayout(); page.saveUrl?.(); },
    setTrackFilter: (text) => {
      const f = $("track-filter");
      if (f) f.value = text;
      tl.layout.setFilter(text);
      app.tracksChanged();
    },
    toggleHelp: () => { help.hidden = !help.hidden; },
    addBookmark: (ns) => {
      const i = bookmarks.add(ns);
      page.showTab("bookmarks");
      bookmarks.render(i); // its note field focused: type, then Enter
    },
    stepFlow: (dir) => {
      const detail = tl.selected ? { slice: tl.selected, chain: tl.chain } : null;
      const to = stepTarget(detail, dir);
      if (!to) return false;
      lastFlowStep = { from: tl.selected.id, to: to.id };
      page.select(to.id, { centre: true });
      return true;
    },
    escape: () => {
      if (palette.isOpen) palette.close();
      else if (!help.hidden) help.hidden = true;
      else if (measure.state || measure.mode) { measure.clear(); measure.setMode(false); }
      else page.clear();
    },
  };
  const actions = () => traceActions(app);
  const palette = new Palette($("palette"), actions);
  app.palette = palette;
  installKeys(actions);
  renderHelp($("help-keys"), actions());

  const hooks = {
    get bookmarks() { return bookmarks.list.map((b) => ({ ...b })); },
    get measure() { return measure.state; },
    get measureMode() { return measure.mode; },
    get palette() { return { open: palette.isOpen, items: palette.items.map((a) => a.id), active: palette.active }; },
    get actions() { return actions().map((a) => ({ id: a.id, title: a.title, keys: a.keys || [], mouse: a.mouse || null, held: !!a.held })); },
    get lastFlowStep() { return lastFlowStep; },
    run: (id) => { const a = actions().find((x) => x.id === id && x.run); if (!a) throw new Error(`no action ${id}`); return a.run(); },
  };
  return { hooks, measure, palette };
}
