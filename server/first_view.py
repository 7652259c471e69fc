"""The tiles a dropped trace's page asks for first, built while that page loads (docs/operations.md).

A drop's page opens the whole trace. Its level is the view's: floor(log2(duration / width of the tracks
area)), the width the drop's page sent with its upload (`?view_px=`; the page knows its window, its side
panel and its names column, web/static/panels/upload.js). It asks for every tile of that level over
[0, duration] of each group page on screen. Between the upload's answer and those requests the page loads
(0.15-0.2 s for a small trace here), and the tiles took 0.1-0.3 s more to build once asked (A100: 9 tiles).

So the warming thread that opens a just-published upload's handle (AppState.warm) builds them: group by
group and depth page by depth page in order (the layout's top first), into the same caches a request
fills (TileBytes.get, which makes a request for a tile being built here wait for it). It stops after
FIRST_VIEW_TILES tiles, or as soon as the page's own tile requests begin (TraceHandle.asked): the page
knows which group pages are on screen, and builds whatever it still needs itself.
"""

from __future__ import annotations

import math
import re

from acceltrace.server.deps import AppState, TraceHandle
from acceltrace.server.routers.tiles import group_index, tile_job
from acceltrace.tiles import layout
from acceltrace.tiles.query import DEPTH_PAGE

FIRST_VIEW_TILES = 16  # A100's first screen at 1500 px takes 8 (two indices of 4 group pages)
VIEW_PX_MIN, VIEW_PX_MAX = 100, 16384  # what `?view_px=` accepts
PAGE_LANES = ("cpu", "driver", "pcie", "eu", "annotation", "counter")  # web/static/lib/util.js LANES


def first_level(duration_ns: int, view_px: int, max_level: int) -> int:
    """The level a page whose tracks area is view_px wide shows the whole trace at (web/static/timeline/
    view.js level(): the same double arithmetic, so the same level)."""
    ns_per_px = max(1, duration_ns) / view_px
    return min(max_level, max(0, math.floor(math.log2(max(1.0, ns_per_px)))))


def first_tiles(h: TraceHandle, view_px: int) -> list[tuple[int, int, str, int]]:
    """(level, index, group, page) of the whole-trace view, group pages in the page's order, at most
    FIRST_VIEW_TILES."""
    info = h.info
    level = first_level(info.duration_ns, view_px, info.max_level)
    last = max(0, info.duration_ns) // (1024 << level)  # web/static/tiles/cache.js tileRange
    counts, depths = h.tile_groups()
    out = []
    for g in _page_order(h, counts):
        for page in range(depths.get(g, 0) // DEPTH_PAGE + 1):
            for index in range(last + 1):
                if len(out) == FIRST_VIEW_TILES:
                    return out
                out.append((level, index, f"g{g}", page))
    return out


def _natural(text) -> tuple:
    """Text with its digit runs compared as numbers ("rank 2" before "rank 10"), as the page's collator."""
    return tuple(int(p) if p.isdigit() else p.lower() for p in re.split(r"(\d+)", str(text)))


def page_order(tracks: list[dict]) -> list[int]:
    """The tile group numbers (`grp`) of `tracks` (dicts of lane, group_name, sort_key, name, track_id, grp) in the
    order the page stacks them (web/static/timeline/layout.js orderTracks: lane, then the group's smallest sort
    key, then its name, then the track's sort key and name)."""
    first_key: dict[tuple, int] = {}
    for t in tracks:
        k = (t["lane"], t["group_name"])
        first_key[k] = min(first_key.get(k, t["sort_key"] or 0), t["sort_key"] or 0)  # (a null is 0 in the page)

    def lane(name: str) -> int:
        return PAGE_LANES.index(name) if name in PAGE_LANES else len(PAGE_LANES)

    ordered = sorted(tracks, key=lambda t: (lane(t["lane"]), first_key[(t["lane"], t["group_name"])],
                                            _natural(t["group_name"]), t["sort_key"] or 0, _natural(t["name"]),
                                            t["track_id"]))
    return list(dict.fromkeys(t["grp"] for t in ordered))


def _page_order(h: TraceHandle, counts: dict) -> list[int]:
    with h.cursor() as cur:
        order = [g for g in page_order(layout.tracks_in_ui_order(cur)) if g in counts]
    return order + sorted(set(counts) - set(order))


def build_first_view(state: AppState, trace_id: str, view_px: int | None):
    """A `then` for AppState.warm: the handle's tile groups and names, then (given the page's width) its
    first tiles, unless the page asks first."""
    def then(h: TraceHandle) -> None:
        h.ready_for_tiles()
        if view_px is None or h.info is None:
            return
        for level, index, group, page in first_tiles(h, view_px):
            if h.asked.is_set():
                return
            key, build = tile_job(h, trace_id, level, index, group, page, group_index(h, trace_id, group))
            state.tile_bytes.get(key, True, build)
    return then
