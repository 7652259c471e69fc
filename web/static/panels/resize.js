// Widths the user drags: the side panel (its left edge, #side-resize) and the timeline's names column
// (its right edge, #names-resize). Both are kept in the URL (pw=, nw=: lib/url_state.js); the side
// panel's also in localStorage as the default for a page whose URL does not say.

const SIDE_KEY = "acceltrace.side_w";
export const SIDE_MIN_PX = 240;

/**
 * Drag `handle` to change a width: `width()` reads it, `set(px)` applies it (clamping is the caller's),
 * `grow` is +1 when dragging right widens (a column on the left), -1 when dragging left does (a panel on
 * the right); `done(px)` runs once when the drag ends. Pointer events, captured on the handle.
 */
export function installDragResize(handle, { width, set, grow = 1, done }) {
  if (!handle) return;
  let drag = null;
  handle.addEventListener("pointerdown", (e) => {
    if (e.button !== 0) return;
    e.preventDefault();
    e.stopPropagation();
    drag = { x: e.clientX, w: width(), id: e.pointerId };
    handle.setPointerCapture?.(e.pointerId);
    handle.classList.add("dragging");
  });
  handle.addEventListener("pointermove", (e) => {
    if (!drag || e.pointerId !== drag.id) return;
    set(drag.w + grow * (e.clientX - drag.x));
  });
  const end = (e) => {
    if (!drag || e.pointerId !== drag.id) return;
    drag = null;
    handle.classList.remove("dragging");
    done?.(width());
  };
  handle.addEventListener("pointerup", end);
  handle.addEventListener("pointercancel", end);
}

/** The side panel's width clamped to what the window allows. */
function clampSide(px) { return Math.round(Math.max(SIDE_MIN_PX, Math.min(window.innerWidth * 0.8, px))); }

/** Set the side panel's width (css px, clamped); the timeline follows through its ResizeObserver. */
export function setSideWidth(panel, px) {
  if (!panel || !Number.isFinite(Number(px))) return;
  panel.style.width = `${clampSide(Number(px))}px`;
}

/** The side panel's width when the user set one (dragged, or from the URL / localStorage), else null. */
export function sideWidth(panel) {
  return panel && panel.style.width ? Math.round(panel.getBoundingClientRect().width) : null;
}

/**
 * Make `handle` resize `panel`; `initial_px` (the URL's pw=) wins over the width saved in localStorage.
 * `ondone(px)` runs after each drag.
 */
export function installSideResize(handle, panel, { initial_px = null, ondone } = {}) {
  if (!handle || !panel) return;
  const saved = Number(localStorage.getItem(SIDE_KEY));
  if (initial_px !== null && initial_px !== undefined) setSideWidth(panel, initial_px);
  else if (Number.isFinite(saved) && saved >= SIDE_MIN_PX) setSideWidth(panel, saved);
  installDragResize(handle, {
    width: () => panel.getBoundingClientRect().width,
    set: (px) => setSideWidth(panel, px),
    grow: -1,
    done: (px) => { localStorage.setItem(SIDE_KEY, String(Math.round(px))); ondone?.(Math.round(px)); },
  });
}
