// The side panel's width: dragged on its left edge (#side-resize), kept in localStorage for the next page.

const KEY = "acceltrace.side_w";
const MIN_PX = 240;

/** Make `handle` resize `panel` (its CSS width); `onresize` runs after each change. */
export function installSideResize(handle, panel, onresize) {
  if (!handle || !panel) return;
  const saved = Number(localStorage.getItem(KEY));
  if (Number.isFinite(saved) && saved >= MIN_PX) panel.style.width = `${Math.min(saved, window.innerWidth * 0.8)}px`;
  let drag = null;
  handle.addEventListener("mousedown", (e) => {
    if (e.button !== 0) return;
    e.preventDefault();
    drag = { x: e.clientX, w: panel.getBoundingClientRect().width };
    handle.classList.add("dragging");
  });
  window.addEventListener("mousemove", (e) => {
    if (!drag) return;
    const w = Math.max(MIN_PX, Math.min(window.innerWidth * 0.8, drag.w + (drag.x - e.clientX)));
    panel.style.width = `${Math.round(w)}px`;
    onresize?.();
  });
  window.addEventListener("mouseup", () => {
    if (!drag) return;
    drag = null;
    handle.classList.remove("dragging");
    localStorage.setItem(KEY, String(Math.round(panel.getBoundingClientRect().width)));
  });
}
