"""Tiles: immutable, cacheable pieces of a track group at one resolution (docs/api.md)."""

from __future__ import annotations

from typing import Callable

from fastapi import APIRouter, Depends, Path, Query, Request, Response
from fastapi.concurrency import run_in_threadpool

from acceltrace.server.deps import GROUPS, ApiError, AppState, get_state
from acceltrace.server.tile_cache import IMMUTABLE, TILE_MEDIA_TYPE, held_etag, tile_etag
from acceltrace.tiles.disk import empty_sections
from acceltrace.tiles.query import MAX_LEVEL, MAX_PAGE, build_page, page_key

router = APIRouter(prefix="/api/traces", tags=["tiles"])



def group_index(h, trace_id: str, group: str | None) -> tuple[int | None, frozenset[str], int]:
    """The group number behind ?group=gN, the sections it cannot have rows in, its deepest depth."""
    counts, depths = h.tile_groups()
    if group is None:
        total = [sum(v[k] for v in counts.values()) for k in range(3)]
        return None, empty_sections(*total), max(depths.values(), default=0)
    if not (group.startswith("g") and group[1:].isdigit() and int(group[1:]) in counts):
        raise ApiError(404, "not_found", f"no tile group {group!r} in trace {trace_id!r}; see 'groups' in its metadata")
    grp = int(group[1:])
    return grp, empty_sections(*counts[grp]), depths.get(grp, 0)


def tile_job(h, trace_id: str, level: int, index: int, group: str | None, page: int,
         grp: tuple[int | None, frozenset[str], int]) -> tuple[tuple, Callable[[], bytes]]:
    """(cache key, build) of one depth page of a tile; `grp` is group_index's answer for `group`."""
    g, empty, max_depth = grp
    if (index << (level + 10)) >= max(1, h.info.duration_ns) + (1 << (level + 10)):
        empty = frozenset({"slices", "merged", "instants", "counters"})  # wholly after the trace's end

    def build() -> bytes:
        # this depth page alone, from queries bounded by its depths (tiles/query.py build_page)
        with h.cursor() as cur:
            return build_page(cur, h.info, level, index, g, page, group, empty, h.tile_names(cur), max_depth)

    return (trace_id, level, index, page_key(group, page)), build


def cold_job(state: AppState, trace_id: str, level: int, index: int, group: str | None,
             page: int) -> tuple[tuple, Callable[[], bytes]] | None:
    """What the tile fast path (server/tile_cache.py) may build itself, without FastAPI's routing and
    validation (~2 ms of a cold fine tile's ~12): an open trace whose tables and group counts are
    loaded, a level it has, a group it has. None for anything else: the route answers it (its errors
    included). The same job as the route's, so the same bytes and cache entries."""
    h = state.open_trace(trace_id)
    if h is None or h.info is None or GROUPS not in h.cache or level > h.info.max_level \
            or index > (1 << 40) or page > MAX_PAGE:
        return None
    try:
        grp = group_index(h, trace_id, group)
    except ApiError:
        return None
    return tile_job(h, trace_id, level, index, group, page, grp)


@router.get(
    "/{trace_id}/tiles/{level}/{index}",
    summary="One tile (binary)",
    description="Level = log2(bucket ns); the tile covers 1024 buckets starting at index*1024*2^level ns after "
                "the trace start. Per track: slices >= 1 bucket exactly, shorter ones merged per bucket and "
                "depth, instants thinned per bucket, counters min/max/first/last per bucket; the rows of one "
                "depth page (?page=, 4 depths) exactly and every deeper depth as coverage runs. Typed-array "
                "binary (docs/api.md). Strong ETag, immutable caching, 304 on If-None-Match.",
    response_class=Response,
    responses={200: {"content": {TILE_MEDIA_TYPE: {}}, "description": "the encoded tile"},
               304: {"description": "not modified"}},
)
async def get_tile(
    request: Request,
    trace_id: str,
    level: int = Path(..., ge=0, le=MAX_LEVEL, description="log2 of the bucket width in ns"),
    index: int = Path(..., ge=0, le=(1 << 40), description="tile index from the trace start"),
    group: str | None = Query(None, description="a tile group id from the metadata (e.g. g0)"),
    page: int = Query(0, ge=0, le=MAX_PAGE, description="depth page: depths [4*page, 4*page+3] exactly"),
    state: AppState = Depends(get_state),
) -> Response:
    # the common case answers in the event loop: an open trace and a tile in memory. Anything that
    # may touch SQLite, DuckDB or the disk goes to the thread pool.
    h = state.open_trace(trace_id) or await run_in_threadpool(state.trace, trace_id)
    h.asked.set()
    if h.info is None:
        raise ApiError(409, "not_ready", f"trace {trace_id!r} has no level-of-detail tables; ingest it again")
    if level > h.info.max_level:
        raise ApiError(422, "validation_error",
                       f"level {level} is above this trace's max level {h.info.max_level} (where tile 0 already "
                       "covers the whole trace)")
    if GROUPS in h.cache:
        grp = group_index(h, trace_id, group)
    else:
        grp = await run_in_threadpool(group_index, h, trace_id, group)
    want_gzip = "gzip" in request.headers.get("accept-encoding", "")
    gkey = page_key(group, page)
    held = held_etag(request.headers.get("if-none-match"), trace_id, level, index, gkey)
    if held is not None:
        return Response(status_code=304, headers={"ETag": held, "Cache-Control": IMMUTABLE, "Vary": "Accept-Encoding"})
    key, build = tile_job(h, trace_id, level, index, group, page, grp)
    body, enc = state.tile_bytes.in_memory(key, want_gzip)
    if body is None:
        body, enc = await run_in_threadpool(state.tile_bytes.get, key, want_gzip, build)
    headers = {"ETag": tile_etag(trace_id, level, index, gkey, enc), "Cache-Control": IMMUTABLE,
               "Vary": "Accept-Encoding"}
    if enc == "gzip":
        headers["Content-Encoding"] = "gzip"
    return Response(body, media_type=TILE_MEDIA_TYPE, headers=headers)
