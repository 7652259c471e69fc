// A hover cursor on its own overlay canvas: a vertical line through the tracks and the time under the
// mouse in the axis band. Moving the mouse repaints only this thin layer, never the timeline.

import { NAMES_PX, AXIS_PX } from "./layout.js";
import { fmtTime } from "../lib/util.js";

export class Cursor {
  constructor(tl) {
    this.tl = tl;
    this.x = null;
    this.canvas = document.createElement("canvas");
    this.canvas.className = "cursor-layer";
    tl.root.append(this.canvas);
    this.ctx = this.canvas.getContext("2d");
    new ResizeObserver(() => this.draw(this.x)).observe(tl.root);
    tl.on("view", () => this.draw(this.x));
  }

  /** Show the cursor at canvas css-px x (null hides it). */
  draw(x) {
    this.x = x;
    const tl = this.tl, dpr = tl.dpr || 1, W = tl.width_css_px, H = tl.height_css_px;
    if (this.canvas.width !== Math.round(W * dpr) || this.canvas.height !== Math.round(H * dpr)) {
      this.canvas.width = Math.round(W * dpr);
      this.canvas.height = Math.round(H * dpr);
      this.canvas.style.width = `${W}px`;
      this.canvas.style.height = `${H}px`;
    }
    const ctx = this.ctx;
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.clearRect(0, 0, W, H);
    if (x === null || x < NAMES_PX || x > W) return;
    const px = Math.round(x) + 0.5;
    ctx.strokeStyle = "rgba(17,24,39,0.45)";
    ctx.beginPath();
    ctx.moveTo(px, AXIS_PX);
    ctx.lineTo(px, H);
    ctx.stroke();
    const label = fmtTime(tl.view.ns_at(x - NAMES_PX));
    ctx.font = "11px system-ui, -apple-system, 'Segoe UI', sans-serif";
    const w = ctx.measureText(label).width + 10;
    const lx = Math.min(Math.max(px - w / 2, NAMES_PX), W - w);
    ctx.fillStyle = "#1f2937";
    ctx.fillRect(lx, 3, w, AXIS_PX - 6);
    ctx.fillStyle = "#ffffff";
    ctx.textBaseline = "middle";
    ctx.fillText(label, lx + 5, AXIS_PX / 2);
  }
}
