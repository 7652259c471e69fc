"""The tiles a dropped trace's page asks for first, built while that page loads (docs/operations.md).

A drop's page opens the whole trace. Its level is the view's: floor(log2(duration / width of the tracks
area)), the width sent with the upload (`?view_px=`: the window less the side panel and names column the last
trace page kept, web/static/panels/upload.js) or, for an upload answered 202, with the progress stream its
page follows. It asks for every tile of that level over [0, duration] of each group page on screen. Between the upload's answer and those requests the page loads
(0.15-0.2 s for a small trace here), and the tiles took 0.1-0.3 s more to build once asked (A100: 9 tiles).

So the warming thread that opens a just-published upload's handle (AppState.warm) builds them: group by
group and depth page by depth page in order (the layout's top first), into the same caches a request
fills (TileBytes.get, which makes a request for a tile being built here wait for it). It stops after
FIRST_VIEW_TILES tiles, or as soon as the page's own tile requests begin (TraceHandle.asked): the page
knows which group pages are on screen, and builds whatever it still needs itself. `asked` and the wait for a
tile being built are per worker: where the page's requests reach another worker, this one builds its 16 tiles
and the other may build some of them again (both caches are shared on disk once written).
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
DEFAULT_ROWS = 24  # depths a track shows at first (web/static/timeline/layout.js DEFAULT_ROWS)


def first_level(duration_ns: int, view_px: int, max_level: int) -> int:
    """The level a page whose tracks area is view_px wide shows the whole trace at (web/static/timeline/
    view.js level(): the same double arithmetic, so the same level)."""
    ns_per_px = max(1, duration_ns) / view_px
    return min(max_level, max(0, math.floor(math.log2(max(1.0, ns_per_px)))))


def shown_depths(max_depth: int, launch_depth: int | None) -> int:
    """How many depths a track shows at first, the rest folded (web/static/timeline/layout.js defaultDepths)."""
    deepest = max_depth + 1
    return min(deepest, DEFAULT_ROWS if launch_depth is None else max(launch_depth + 2, DEFAULT_ROWS))


def last_pages(tracks: list[dict], depths: list[dict]) -> dict[int, int]:
    """Per tile group (`grp` of `tracks`), the last depth page its tracks show at first; `depths`: the
    /depths answer's tracks (max_depth, launch_depth), none for a track without slices (page 0)."""
    deep = {d["track_id"]: d for d in depths}
    pages: dict[int, int] = {}
    for t in tracks:
        d = deep.get(t["track_id"])
        if d is None:
            shown = 1
        elif t["lane"] == "pcie":  # its bandwidth band sums every depth: the page asks them all
            shown = d["max_depth"] + 1
        else:
            shown = shown_depths(d["max_depth"], d["launch_depth"])
        pages[t["grp"]] = max(pages.get(t["grp"], 0), (shown - 1) // DEPTH_PAGE)
    return pages


def first_tiles(h: TraceHandle, view_px: int) -> list[tuple[int, int, str, int]]:
    """(level, index, group, page) of the whole-trace view, at most FIRST_VIEW_TILES: the groups in the page's
    order, each group's depth pages of the depths its tracks show at first (every page of a PCIe group: its
    bandwidth band sums all depths)."""
    info = h.info
    level = first_level(info.duration_ns, view_px, info.max_level)
    last = max(0, info.duration_ns) // (1024 << level)  # web/static/tiles/cache.js tileRange
    with h.cursor() as cur:
        tracks = layout.tracks_in_ui_order(cur)
    pages = last_pages(tracks, h.track_depths()["tracks"])
    out = []
    for g in page_order(tracks):
        for page in range(pages.get(g, 0) + 1):
            for index in range(last + 1):
                if len(out) == FIRST_VIEW_TILES:
                    return out
                out.append((level, index, f"g{g}", page))
    return out


def _natural(text) -> tuple:
    """Text with its digit runs compared as numbers ("rank 2" before "rank 10"), as the page's collator."""
    return tuple(int(p) if p.isdecimal() else p.lower() for p in re.split(r"(\d+)", str(text)))


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


def build_first_view(state: AppState, trace_id: str, view_px: int | None):
    """A `then` for AppState.warm: the handle's tile groups and names, then (given the page's width) its
    first tiles, unless the page asks first."""
    def then(h: TraceHandle) -> None:
        h.ready_for_tiles()
        if view_px is None or h.info is None or h.asked.is_set():
            return
        for level, index, group, page in first_tiles(h, view_px):
            if h.asked.is_set():
                return
            key, build = tile_job(h, trace_id, level, index, group, page, group_index(h, trace_id, group))
            state.tile_bytes.get(key, True, build)
    return then
