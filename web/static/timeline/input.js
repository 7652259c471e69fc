// Gestures on the timeline canvas and keyboard shortcuts (Perfetto's W/S/A/D convention).
// `act` is the page controller: {select(id, {frame}), clear(), areaDone(area), hoverAt(item, x, y), help()};
// act.keys === false leaves the keyboard to another timeline on the page.

import { NAMES_PX, AXIS_PX } from "./layout.js";
import { hitTest, rowAt } from "./hit.js";

const DRAG_PX = 4;            // movement beyond this turns a click into a drag
const KEY_ZOOM_PER_S = 2.2;   // W/S: e-fold zoom rate while held
const KEY_PAN_PER_S = 0.9;    // A/D: fraction of the visible span per second while held
const KEY_STEP = 0.2;         // the immediate step a single key press makes

export function attachInput(tl, act) {
  const cv = tl.canvas;
  let drag = null; // {mode: 'pending'|'pan'|'area'|'scroll', x, y, last_x, last_y}

  const pos = (e) => {
    const r = cv.getBoundingClientRect();
    return [e.clientX - r.left, e.clientY - r.top];
  };

  cv.addEventListener("mousedown", (e) => {
    if (e.button !== 0) return;
    const [x, y] = pos(e);
    e.preventDefault();
    cv.focus?.();
    if (x >= tl.width_css_px - 8 && y > tl.scrollTop_px) { drag = { mode: "scroll", x, y, last_x: x, last_y: y }; return; }
    if (x < NAMES_PX) { clickNames(tl, x, y); return; }
    if (y < AXIS_PX) return;
    if (e.shiftKey) {
      const t = tl.view.ns_at(x - NAMES_PX);
      // y0/y1 are canvas px at the time of the drag (for picking tracks); scroll0 lets the drawn box
      // follow the tracks when they scroll afterwards
      tl.area = { start_ns: t, end_ns: t, y0: y, y1: y, scroll0: tl.scrollY };
      drag = { mode: "area", x, y, last_x: x, last_y: y };
    } else {
      drag = { mode: "pending", x, y, last_x: x, last_y: y };
    }
  });

  window.addEventListener("mousemove", (e) => {
    const [x, y] = pos(e);
    if (!drag) {
      const inside = x >= 0 && y >= 0 && x < tl.width_css_px && y < tl.height_css_px;
      tl.hover = inside ? { x, y } : null;
      act.hoverAt(inside ? hitTest(tl, x, y) : null, e.clientX, e.clientY, inside && x < NAMES_PX ? rowAt(tl, y) : null);
      return;
    }
    if (drag.mode === "pending" && Math.hypot(x - drag.x, y - drag.y) > DRAG_PX) drag.mode = "pan";
    if (drag.mode === "pan") {
      tl.view.panPx(drag.last_x - x);
      tl.scrollBy(drag.last_y - y);
      cv.style.cursor = "grabbing";
    } else if (drag.mode === "area") {
      tl.area.end_ns = tl.view.ns_at(Math.max(0, x - NAMES_PX));
      tl.area.y1 = Math.max(AXIS_PX, Math.min(tl.height_css_px, y));
      tl.requestDraw();
    } else if (drag.mode === "scroll") {
      const ratio = tl.layout.height / Math.max(1, tl.scrollArea_px);
      tl.scrollBy((y - drag.last_y) * ratio);
    }
    drag.last_x = x;
    drag.last_y = y;
    act.hoverAt(null);
  });

  window.addEventListener("mouseup", (e) => {
    if (!drag) return;
    const [x, y] = pos(e);
    const d = drag;
    drag = null;
    cv.style.cursor = "";
    if (d.mode === "pending") {
      const hit = hitTest(tl, x, y);
      if (hit && hit.kind === "fold") tl.setDepths(hit.track.track_id, hit.to + 1); // the fold row: show every depth
      else if (hit && hit.id !== undefined) act.select(hit.id, { frame: false });
      else act.clear();
    } else if (d.mode === "area") {
      if (Math.abs(x - d.x) < DRAG_PX) { tl.area = null; tl.requestDraw(); return; }
      act.areaDone(tl.area);
    } else if (d.mode === "pan") {
      act.viewSettled?.();
    }
  });

  cv.addEventListener("dblclick", (e) => {
    const [x, y] = pos(e);
    const hit = hitTest(tl, x, y);
    if (hit) { tl.view.frame(hit.ts, hit.dur); if (hit.id !== undefined) act.select(hit.id, { frame: false }); }
  });

  cv.addEventListener("wheel", (e) => {
    const [x] = pos(e);
    e.preventDefault();
    const dy = e.deltaMode === 1 ? e.deltaY * 16 : e.deltaY;
    const dx = e.deltaMode === 1 ? e.deltaX * 16 : e.deltaX;
    if (x < NAMES_PX || e.altKey) { act.hoverAt(null, e.clientX, e.clientY); tl.scrollBy(dy); return; } // rows move under it
    if (Math.abs(dx) > Math.abs(dy)) { tl.view.panPx(dx); return; }
    // trackpad pinch arrives as ctrl+wheel with small deltas: zoom harder per unit
    const k = e.ctrlKey ? 0.01 : 0.0018;
    tl.view.zoomAbout(x - NAMES_PX, Math.exp(dy * k));
  }, { passive: false });

  cv.addEventListener("mouseleave", () => { if (!drag) { tl.hover = null; act.hoverAt(null); } });

  // whatever moved the view (wheel, keys, a chain step, a jump, the other side of a diff), the item the
  // tooltip names is no longer under the still mouse: it goes (the cursor line stays) until the next move
  tl.on("view", () => { if (tl.hover && !drag) act.hoverAt(null, 0, 0); });

  if (act.keys !== false) attachKeys(tl, act); // a page with two timelines gives the keys to one
}

function clickNames(tl, x, y) {
  // a deep track's depth controls (timeline/frame.js drawDepthControls)
  for (const c of tl.nameControls || []) {
    if (x >= c.x0 && x <= c.x1 && y >= c.y0 && y <= c.y1) { tl.setDepths(c.track_id, c.depths); return; }
  }
  const at = rowAt(tl, y);
  if (!at) return;
  if (at.row.kind !== "track") { tl.layout.toggleCollapse(at.row.key); tl.relayout(); return; }
  if (x >= NAMES_PX - 24) { tl.layout.togglePin(at.row.track.track_id); tl.relayout(); }
}

function attachKeys(tl, act) {
  const held = new Set();
  let last = 0;
  const anchorX = () => (tl.hover && tl.hover.x > NAMES_PX ? tl.hover.x - NAMES_PX : tl.view.width_css_px / 2);

  const tick = (now) => {
    if (!held.size) { tl.animating = false; tl.requestDraw(); act.viewSettled?.(); return; }
    const dt = Math.min(0.05, (now - last) / 1000);
    last = now;
    if (held.has("w")) tl.view.zoomAbout(anchorX(), Math.exp(-KEY_ZOOM_PER_S * dt));
    if (held.has("s")) tl.view.zoomAbout(anchorX(), Math.exp(KEY_ZOOM_PER_S * dt));
    if (held.has("a")) tl.view.panPx(-KEY_PAN_PER_S * dt * tl.view.width_css_px);
    if (held.has("d")) tl.view.panPx(KEY_PAN_PER_S * dt * tl.view.width_css_px);
    requestAnimationFrame(tick);
  };

  window.addEventListener("keydown", (e) => {
    const tag = (e.target && e.target.tagName) || "";
    if (tag === "INPUT" || tag === "TEXTAREA" || e.ctrlKey || e.metaKey || e.altKey) return;
    const k = e.key.length === 1 ? e.key.toLowerCase() : e.key;
    if ("wasd".includes(k) && k.length === 1) {
      e.preventDefault();
      if (held.has(k)) return;
      // a single press makes a visible step at once; holding the key keeps moving smoothly
      if (k === "w") tl.view.zoomAbout(anchorX(), 1 - KEY_STEP);
      if (k === "s") tl.view.zoomAbout(anchorX(), 1 / (1 - KEY_STEP));
      if (k === "a") tl.view.panPx(-KEY_STEP * tl.view.width_css_px);
      if (k === "d") tl.view.panPx(KEY_STEP * tl.view.width_css_px);
      held.add(k);
      if (!tl.animating) { tl.animating = true; last = performance.now(); requestAnimationFrame(tick); }
    } else if (k === "f") {
      if (tl.selected) tl.view.frame(tl.selected.ts, tl.selected.dur);
      else if (tl.area) tl.view.set(Math.min(tl.area.start_ns, tl.area.end_ns), Math.max(tl.area.start_ns, tl.area.end_ns));
      else tl.view.reset();
    } else if (k === "Escape") {
      act.clear();
    } else if (k === "?") {
      act.help();
    }
  });
  window.addEventListener("keyup", (e) => held.delete(e.key.length === 1 ? e.key.toLowerCase() : e.key));
  window.addEventListener("blur", () => held.clear());
}
