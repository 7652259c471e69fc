// An overlay canvas over the tracks (under the hover cursor) for what the user adds to the view rather than
// what the trace holds: bookmarks and the measurement. Repainted after every timeline frame, so it pans and
// zooms with the tracks; painters only draw (canvas text, never markup).

export class NavLayer {
  constructor(tl) {
    this.tl = tl;
    this.painters = [];
    this.canvas = document.createElement("canvas");
    this.canvas.className = "nav-layer";
    const cursor = tl.root.querySelector("canvas.cursor-layer");
    tl.root.insertBefore(this.canvas, cursor); // null: appended
    this.ctx = this.canvas.getContext("2d");
    tl.on("frame", () => this.draw());
  }

  /** Register fn(ctx, tl), called on every repaint in canvas css px. */
  add(fn) { this.painters.push(fn); }

  draw() {
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
    for (const p of this.painters) { ctx.save(); p(ctx, tl); ctx.restore(); }
  }
}

/** Text clipped to `px` css px with an ellipsis, measured on the context (names from traces vary in width). */
export function fitText(ctx, text, px) {
  const s = String(text);
  if (ctx.measureText(s).width <= px) return s;
  let lo = 0, hi = s.length;
  while (lo < hi) {
    const mid = (lo + hi + 1) >> 1;
    if (ctx.measureText(s.slice(0, mid) + "\u2026").width <= px) lo = mid; else hi = mid - 1;
  }
  return lo ? s.slice(0, lo) + "\u2026" : "";
}
