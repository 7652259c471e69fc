// Adaptive time-axis ticks: a 1-2-5 step chosen so labels sit ~100 px apart, labelled in ns/us/ms/s.

const UNITS = [[1e9, "s"], [1e6, "ms"], [1e3, "us"], [1, "ns"]];

/** Tick step in ns for a view of span_ns over width_px. */
export function tickStep(span_ns, width_px, target_px = 110) {
  const raw = span_ns / Math.max(1, width_px) * target_px;
  const p = Math.pow(10, Math.floor(Math.log10(Math.max(raw, 1))));
  for (const m of [1, 2, 5, 10]) if (m * p >= raw) return m * p;
  return 10 * p;
}

/** Unit that keeps labels short for a given step. */
function unitFor(step_ns) {
  for (const [div, name] of UNITS) if (step_ns >= div) return [div, name];
  return [1, "ns"];
}

/** Ticks [{rel_ns, label}] covering [start_ns, end_ns]. */
export function ticks(start_ns, end_ns, width_px) {
  const step = tickStep(end_ns - start_ns, width_px);
  // the unit follows the magnitude of the times shown, the decimals follow the step: deep in a long
  // trace this reads "5.0005 s" rather than "5000500 us"
  const [div, unit] = unitFor(Math.max(Math.abs(start_ns), Math.abs(end_ns), step));
  const decimals = Math.min(9, Math.max(0, Math.ceil(-Math.log10(step / div) - 1e-9)));
  const out = [];
  const first = Math.ceil(start_ns / step) * step;
  for (let t = first; t <= end_ns && out.length < 200; t += step) {
    const v = t / div;
    out.push({ rel_ns: t, label: `${v.toFixed(decimals)} ${unit}` });
  }
  return { step, ticks: out };
}

/** Draw the axis band (height h, css px) across the tracks area starting at x0. */
export function drawAxis(ctx, view, x0, h, theme) {
  const w = view.width_css_px;
  ctx.fillStyle = theme.axisBg;
  ctx.fillRect(x0, 0, w, h);
  const { ticks: ts } = ticks(view.start_ns, view.end_ns, w);
  ctx.strokeStyle = theme.grid;
  ctx.fillStyle = theme.text;
  ctx.font = theme.font;
  ctx.textBaseline = "middle";
  ctx.beginPath();
  for (const t of ts) {
    const x = Math.round(x0 + view.x_of(t.rel_ns)) + 0.5;
    ctx.moveTo(x, h - 6);
    ctx.lineTo(x, h);
    ctx.fillText(t.label, x + 3, h / 2);
  }
  ctx.stroke();
  ctx.strokeStyle = theme.border;
  ctx.beginPath();
  ctx.moveTo(x0, h - 0.5);
  ctx.lineTo(x0 + w, h - 0.5);
  ctx.stroke();
  return ts;
}

/** Vertical grid lines through the tracks area, at the same ticks as the axis. */
export function drawGrid(ctx, view, x0, y0, y1, ts, theme) {
  ctx.strokeStyle = theme.grid;
  ctx.beginPath();
  for (const t of ts) {
    const x = Math.round(x0 + view.x_of(t.rel_ns)) + 0.5;
    ctx.moveTo(x, y0);
    ctx.lineTo(x, y1);
  }
  ctx.stroke();
}
