// The command palette (Ctrl+K or /): every action of the table (panels/actions.js) with its keys, filtered
// fuzzily as you type (the letters in order, contiguous runs and word starts ranking first), arrows to move,
// Enter or a click to run, Esc to close. Titles are set as text.

import { el } from "../lib/util.js";
import { keyLabel } from "./actions.js";

const SHOWN_MAX = 60;

/**
 * How well `query` matches `text`: null when its characters are not all in `text` in order; else a score,
 * higher for matches at word starts, in runs and early. Case-insensitive; spaces in the query are ignored.
 */
export function fuzzyScore(query, text) {
  const q = query.toLowerCase().replace(/\s+/g, ""), t = text.toLowerCase();
  if (!q) return 0;
  let score = 0, ti = 0, run = 0;
  for (const ch of q) {
    const i = t.indexOf(ch, ti);
    if (i < 0) return null;
    run = i === ti ? run + 1 : 0;
    const wordStart = i === 0 || !/[a-z0-9]/.test(t[i - 1]);
    score += 1 + run * 2 + (wordStart ? 3 : 0) - Math.min(2, (i - ti) * 0.05);
    ti = i + 1;
  }
  return score - t.length * 0.01;
}

export class Palette {
  /** `actions()`: the current table; `root`: the overlay element (hidden while closed). */
  constructor(root, actions) {
    this.root = root;
    this.actions = actions;
    this.items = [];
    this.active = 0;
    this.input = el("input", { type: "text", class: "palette-input", placeholder: "Type a command…", autocomplete: "off",
                               spellcheck: "false", "aria-label": "command" });
    this.listBox = el("ul", { class: "palette-list", role: "listbox" });
    root.replaceChildren(el("div", { class: "palette-box", role: "dialog", "aria-label": "command palette" }, this.input, this.listBox));
    this.input.addEventListener("input", () => this.filter(this.input.value));
    this.input.addEventListener("keydown", (e) => {
      if (e.key === "Escape") { e.preventDefault(); e.stopPropagation(); this.close(); }
      else if (e.key === "ArrowDown") { e.preventDefault(); this.move(1); }
      else if (e.key === "ArrowUp") { e.preventDefault(); this.move(-1); }
      else if (e.key === "Enter") { e.preventDefault(); this.run(this.active); }
    });
    root.addEventListener("mousedown", (e) => { if (e.target === root) this.close(); });
  }

  get isOpen() { return !this.root.hidden; }

  open() {
    this.root.hidden = false;
    this.input.value = "";
    this.filter("");
    this.input.focus();
  }

  close() {
    this.root.hidden = true;
    this.input.blur();
  }

  /** The runnable actions matching `q`, best first (table order when q is empty). */
  filter(q) {
    const scored = [];
    this.actions().forEach((a, order) => {
      if (!a.run) return;
      const s = fuzzyScore(q, a.title);
      if (s !== null) scored.push([s, order, a]);
    });
    if (q.trim()) scored.sort((x, y) => y[0] - x[0] || x[1] - y[1]);
    this.items = scored.slice(0, SHOWN_MAX).map((x) => x[2]);
    this.active = 0;
    this.listBox.replaceChildren(...this.items.map((a, i) => el("li", {
      class: i === 0 ? "active" : "", role: "option", dataset: { action: a.id },
      onmousedown: (e) => { e.preventDefault(); this.run(i); },
    }, el("span", { class: "palette-title" }, a.title), a.keys?.length ? el("kbd", {}, a.keys.map(keyLabel).join(" / ")) : "")));
    if (!this.items.length) this.listBox.append(el("li", { class: "muted" }, "No command matches."));
  }

  move(d) {
    if (!this.items.length) return;
    this.active = (this.active + d + this.items.length) % this.items.length;
    [...this.listBox.children].forEach((li, i) => li.classList.toggle("active", i === this.active));
    this.listBox.children[this.active]?.scrollIntoView({ block: "nearest" });
  }

  run(i) {
    const a = this.items[i];
    if (!a) return;
    this.close();
    a.run();
  }
}
