// Reorder tracks by dragging their row in the names column (pointer events, so mouse, pen and touch).
// A track moves within its group (lane and process or device), a pinned one within the pinned band; the
// layout keeps the order by track id (Layout.moveTrack; the URL's ord=). A press that does not move is
// left to the names column's clicks (timeline/input.js: pin, collapse, depth controls).

import { NAMES_PX, MENU_RIGHT_PX } from "./layout.js";
import { rowAt } from "./hit.js";

const DRAG_PX = 4; // vertical movement beyond this starts a drag

/** Where a track dragged to canvas y would land: {before_id, line_y} among its group's drawn rows. */
export function dropTarget(tl, track_id, y) {
  const t = tl.layout.byId.get(track_id);
  const pinned = tl.layout.pinned.includes(track_id);
  const rows = tl.visibleRows().filter((r) => r.row.kind === "track" && r.pinned === pinned
    && (pinned || (r.row.track.lane === t.lane && r.row.track.group_name === t.group_name)));
  if (!rows.length) return { before_id: null, line_y: null };
  for (const r of rows) if (y < r.y + r.row.h / 2) return { before_id: r.row.track.track_id, line_y: r.y };
  const last = rows[rows.length - 1];
  // below the last drawn row: after it (to the group's end only when that row is the group's last)
  const ids = pinned ? tl.layout.pinned : tl.layout.groupTracks(t).map((x) => x.track_id);
  const after = ids.indexOf(last.row.track.track_id);
  return { before_id: after >= 0 && after + 1 < ids.length ? ids[after + 1] : null, line_y: last.y + last.row.h };
}

/** Install the drag on a timeline's canvas; `onmove(track_id)` runs after a track moved. */
export function attachTrackDrag(tl, onmove) {
  const cv = tl.canvas;
  const pos = (e) => { const r = cv.getBoundingClientRect(); return [e.clientX - r.left, e.clientY - r.top]; };
  cv.addEventListener("pointerdown", (e) => {
    if (e.button !== 0 || e.shiftKey) return;
    const [x, y] = pos(e);
    if (x >= NAMES_PX - MENU_RIGHT_PX) return; // the menu and pin buttons
    for (const c of tl.nameControls || []) if (x >= c.x0 && x <= c.x1 && y >= c.y0 && y <= c.y1) return; // depth controls
    const at = rowAt(tl, y);
    if (!at || at.row.kind !== "track") return;
    tl.trackDrag = { track_id: at.row.track.track_id, y0: y, moved: false, line_y: null, pointer: e.pointerId };
    cv.setPointerCapture?.(e.pointerId);
  });
  cv.addEventListener("pointermove", (e) => {
    const d = tl.trackDrag;
    if (!d || d.pointer !== e.pointerId) return;
    const [, y] = pos(e);
    if (!d.moved && Math.abs(y - d.y0) <= DRAG_PX) return;
    d.moved = true;
    Object.assign(d, dropTarget(tl, d.track_id, y));
    cv.style.cursor = "grabbing";
    tl.requestDraw();
  });
  const end = (e, cancel) => {
    const d = tl.trackDrag;
    if (!d || d.pointer !== e.pointerId) return;
    tl.trackDrag = null;
    cv.style.cursor = "";
    if (!d.moved) return;
    if (!cancel) {
      const [, y] = pos(e);
      const { before_id } = dropTarget(tl, d.track_id, y);
      if (before_id !== d.track_id) {
        tl.layout.moveTrack(d.track_id, before_id);
        tl.relayout();
        onmove?.(d.track_id);
      }
    }
    tl.requestDraw();
  };
  cv.addEventListener("pointerup", (e) => end(e, false));
  cv.addEventListener("pointercancel", (e) => end(e, true));
}
