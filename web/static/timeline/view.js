// The visible time window, in ns relative to the trace start, and the px <-> ns mapping of the tracks area.

import { clamp } from "../lib/util.js";

const MIN_SPAN_NS = 10; // never zoom in beyond 10 ns across the whole width

export class View {
  constructor(duration_ns) {
    this.duration_ns = Math.max(1, duration_ns);
    this.start_ns = 0;
    this.end_ns = this.duration_ns;
    this.width_css_px = 1; // width of the tracks area (excluding the names column)
    this.onchange = null;
  }

  get span_ns() { return this.end_ns - this.start_ns; }
  get ns_per_px() { return this.span_ns / this.width_css_px; }

  /** Tile level for this view: floor(log2(visible_ns / width_px)), at least 0. */
  level() {
    return Math.max(0, Math.floor(Math.log2(Math.max(1, this.ns_per_px))));
  }

  x_of(rel_ns) { return (rel_ns - this.start_ns) / this.span_ns * this.width_css_px; }
  ns_at(x_css_px) { return this.start_ns + x_css_px / this.width_css_px * this.span_ns; }

  /** Set the window, keeping it inside [-10% , duration + 10%] and at least MIN_SPAN_NS wide. */
  set(start_ns, end_ns) {
    const margin = this.duration_ns * 0.1;
    let span = clamp(end_ns - start_ns, MIN_SPAN_NS, this.duration_ns + 2 * margin);
    let s = clamp(start_ns, -margin, this.duration_ns + margin - span);
    if (s === this.start_ns && s + span === this.end_ns) return;
    this.start_ns = s;
    this.end_ns = s + span;
    if (this.onchange) this.onchange();
  }

  /** Zoom by `factor` (<1 zooms in) keeping the time under x_css_px fixed. */
  zoomAbout(x_css_px, factor) {
    const anchor = this.ns_at(x_css_px);
    const frac = x_css_px / this.width_css_px;
    const span = this.span_ns * factor;
    this.set(anchor - frac * span, anchor - frac * span + span);
  }

  panPx(dx_css_px) {
    const d = dx_css_px * this.ns_per_px;
    this.set(this.start_ns + d, this.end_ns + d);
  }

  /** Frame [start, start+dur] with a margin on each side (a point event gets a small window). */
  frame(start_ns, dur_ns) {
    const span = Math.max(dur_ns, 1000);
    const pad = span * 0.15;
    this.set(start_ns - pad, start_ns + span + pad);
  }

  /** Centre on a time keeping the current zoom. */
  centre(rel_ns) {
    const half = this.span_ns / 2;
    this.set(rel_ns - half, rel_ns + half);
  }

  reset() { this.set(0, this.duration_ns); }
}
