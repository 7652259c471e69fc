// Bookmarks: markers at a time with a note, kept in the URL fragment (bm=, lib/url_state.js), drawn on the
// nav layer (a line through the tracks and a numbered flag with the note in the axis band, canvas text) and
// listed in the Bookmarks tab (jump, edit the note, delete). Notes are the user's text: textContent and
// input values only, never markup.

import { NAMES_PX, AXIS_PX } from "../timeline/layout.js";
import { el, fmtTime } from "../lib/util.js";
import { fitText } from "../timeline/nav_layer.js";

const COLOUR = "#7c3aed";
const FONT = "600 10px system-ui, -apple-system, 'Segoe UI', sans-serif";
const FLAG_MAX_PX = 160;   // a flag's note is cut to this width on the canvas (the tab shows it whole)
const NOTE_MAX = 500;

export class Bookmarks {
  /** `onchange()` after every change (the page saves the URL); `box` is the tab's pane. */
  constructor(tl, box, onchange = () => {}) {
    this.tl = tl;
    this.box = box;
    this.onchange = onchange;
    this.list = []; // [{ns, note}] sorted by time
    this.repaint = () => tl.requestDraw(); // the nav layer alone once it exists (pages/trace_nav.js)
  }

  restore(list) {
    this.list = (list || []).map((b) => ({ ns: Math.round(b.ns), note: String(b.note || "").slice(0, NOTE_MAX) }))
      .sort((a, b) => a.ns - b.ns);
    this.changed(false);
  }

  /** Add a bookmark at `ns` (relative); returns its index in time order. */
  add(ns, note = "") {
    const b = { ns: Math.round(ns), note: String(note).slice(0, NOTE_MAX) };
    let i = this.list.findIndex((x) => x.ns > b.ns);
    if (i < 0) i = this.list.length;
    this.list.splice(i, 0, b);
    this.changed();
    return i;
  }

  remove(i) { this.list.splice(i, 1); this.changed(); }

  setNote(i, note) {
    if (!this.list[i]) return;
    this.list[i].note = String(note).slice(0, NOTE_MAX);
    this.changed();
  }

  /** The next (dir 1) or previous (-1) bookmark from the view's centre, centred in the view; false if none. */
  step(dir) {
    const v = this.tl.view, c = (v.start_ns + v.end_ns) / 2, eps = Math.max(1, v.ns_per_px / 2);
    const b = dir > 0 ? this.list.find((x) => x.ns > c + eps) : [...this.list].reverse().find((x) => x.ns < c - eps);
    if (!b) return false;
    v.centre(b.ns);
    return true;
  }

  jump(i) { if (this.list[i]) this.tl.view.centre(this.list[i].ns); }

  changed(save = true) {
    this.render();
    this.repaint();
    if (save) this.onchange();
  }

  /** The tab: one row per bookmark (number, time link, note field, delete). `focus` is an index to edit. */
  render(focus = null) {
    const box = this.box;
    if (!box) return;
    box.replaceChildren(el("p", { class: "muted" },
      "M adds a bookmark at the mouse (or the selection's start, or the view's centre); , and . step between them. They are kept in the link."));
    if (!this.list.length) { box.append(el("p", { class: "muted bm-empty" }, "No bookmarks yet.")); return; }
    const rows = this.list.map((b, i) => {
      const note = el("input", { type: "text", class: "bm-note", value: b.note, placeholder: "note", maxlength: NOTE_MAX,
                                 "aria-label": `note of bookmark ${i + 1}` });
      note.addEventListener("change", () => this.setNote(i, note.value));
      note.addEventListener("keydown", (e) => { if (e.key === "Enter" || e.key === "Escape") { e.preventDefault(); note.blur(); } });
      return el("li", { class: "bm-row", dataset: { ns: String(b.ns) } },
        el("span", { class: "bm-num" }, String(i + 1)),
        el("a", { href: "#", class: "bm-time", onclick: (e) => { e.preventDefault(); this.jump(i); } }, fmtTime(b.ns)),
        note,
        el("button", { class: "bm-del", title: "delete this bookmark", "aria-label": `delete bookmark ${i + 1}`,
                       onclick: () => this.remove(i) }, "\u00d7"));
    });
    box.append(el("ol", { class: "bookmarks" }, rows));
    if (focus !== null && rows[focus]) rows[focus].querySelector("input").focus();
  }

  /** A line through the tracks and a numbered flag with the note in the axis band per visible bookmark. */
  paint(ctx, tl) {
    if (!this.list.length) return;
    const v = tl.view, W = tl.width_css_px, H = tl.height_css_px;
    ctx.beginPath();
    ctx.rect(NAMES_PX, 0, W - NAMES_PX, H);
    ctx.clip();
    ctx.font = FONT;
    ctx.textBaseline = "middle";
    this.list.forEach((b, i) => {
      const x = Math.round(NAMES_PX + v.x_of(b.ns)) + 0.5;
      if (x < NAMES_PX - FLAG_MAX_PX || x > W) return;
      ctx.strokeStyle = COLOUR;
      ctx.setLineDash([5, 3]);
      ctx.beginPath();
      ctx.moveTo(x, AXIS_PX);
      ctx.lineTo(x, H);
      ctx.stroke();
      ctx.setLineDash([]);
      const label = fitText(ctx, b.note ? `${i + 1} ${b.note}` : String(i + 1), FLAG_MAX_PX);
      const w = ctx.measureText(label).width + 8;
      ctx.fillStyle = COLOUR;
      ctx.fillRect(x, 2, w, AXIS_PX - 6);
      ctx.fillStyle = "#ffffff";
      ctx.fillText(label, x + 4, AXIS_PX / 2 - 1);
    });
  }
}
