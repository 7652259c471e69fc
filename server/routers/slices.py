"""One slice with its correlation chain, and name search."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Query, Response

from acceltrace.store import queries
from acceltrace.store.queries import CHAIN_MAX_SLICES, SEARCH_TOTAL_CAP
from acceltrace.server.deps import ApiError, AppState, TraceHandle, get_state
from acceltrace.tiles.layout import NAMES_TABLE

router = APIRouter(prefix="/api/traces", tags=["slices"])


def _no_slice(trace_id: str, slice_id: int) -> ApiError:
    return ApiError(404, "not_found", f"no slice {slice_id} in trace {trace_id!r}")


@router.get("/{trace_id}/slices/{slice_id}", summary="Slice details with its correlation chain",
            description="All columns (ts relative), args parsed, its track, every flow touching it, and the "
                        "correlation chain: submit, launch, dma and exec flows followed both ways, transitively "
                        f"(never dependency), at most {CHAIN_MAX_SLICES} slices.")
def slice_details(trace_id: str, slice_id: int, state: AppState = Depends(get_state)) -> dict:
    h = state.trace(trace_id)
    with h.cursor() as cur:
        s = queries.slice_row(cur, slice_id)
        if s is None:
            raise _no_slice(trace_id, slice_id)
        track = queries.track_row(cur, s["track_id"])
        direct = queries.flows_touching(cur, slice_id)
        chain = queries.correlation_chain(cur, slice_id)
        ends = queries.flow_ends(cur, slice_id, direct, {c["slice_id"] for c in chain.slices})
    s["id"] = s.pop("slice_id")
    s["ts"] -= h.start_ns
    s["end"] = s["ts"] + s["dur"]
    s["track"] = track
    return {"slice": s,
            "chain": {"slices": [_hit(h, c) for c in chain.slices], "flows": chain.flows, "truncated": chain.truncated},
            "flows": {"in": [f for f in direct if f["dst_slice"] == slice_id],
                      "out": [f for f in direct if f["src_slice"] == slice_id]},
            "flow_ends": [_hit(h, e) for e in ends]}


@router.get("/{trace_id}/slices/{slice_id}/args", summary="A slice's args, whole",
            description="The args JSON text exactly as stored, however long (the details cut args past "
                        f"{queries.ARGS_INLINE_MAX} characters and say how long they are: args_chars).",
            response_class=Response, responses={200: {"content": {"application/json": {}}}})
def slice_args(trace_id: str, slice_id: int, state: AppState = Depends(get_state)) -> Response:
    h = state.trace(trace_id)
    with h.cursor() as cur:
        text = queries.slice_args(cur, slice_id)
    if text is None:
        raise _no_slice(trace_id, slice_id)
    return Response(text or "{}", media_type="application/json",
                    headers={"Content-Disposition": f'attachment; filename="slice-{slice_id}-args.json"'})


@router.get("/{trace_id}/depths", summary="Slices per depth of each track",
            description="Per slice track: max_depth, counts (slices at each depth 0..max_depth) and launch_depth (the "
                        "deepest slice launching device work, null when none): what the UI shows of a deep track "
                        "before the user unfolds it, and what its fold row holds.")
def track_depths(trace_id: str, state: AppState = Depends(get_state)) -> dict:
    return state.trace(trace_id).track_depths()


def _hit(h: TraceHandle, s: dict) -> dict:
    """A slice row of a query (slice_id, ..., ts absolute, ...) as the API lists it: id first, ts relative."""
    return {"id": s["slice_id"], **s, "ts": s["ts"] - h.start_ns}


def _abs(h: TraceHandle, rel_ns: int | None) -> int | None:
    return None if rel_ns is None else rel_ns + h.start_ns


@router.get("/{trace_id}/search", summary="Search slices by name",
            description="Case-insensitive substring match on slice names (a pattern with * or ? is a glob over "
                        "the whole name), in time order, paginated; after_ns / before_ns give the first hits "
                        "after / the last hits before a time (relative ns).")
def search(trace_id: str, q: str = Query(..., min_length=1, max_length=500),
           offset: int = Query(0, ge=0, le=10_000_000), limit: int = Query(100, ge=1, le=1000),
           track: int | None = Query(None, description="only this track"),
           after_ns: int | None = Query(None, description="only hits starting at or after this relative time"),
           before_ns: int | None = Query(None, description="only hits starting before this time (newest first)"),
           state: AppState = Depends(get_state)) -> dict:
    h = state.trace(trace_id)
    with h.cursor() as cur:
        page = queries.search_slices(cur, q, offset=offset, limit=limit, track=track, after_ns=_abs(h, after_ns),
                                     before_ns=_abs(h, before_ns), names=NAMES_TABLE if h.info is not None else None)
    results = [_hit(h, r) for r in page.rows]
    more = offset + len(results) < page.total
    return {"q": q, "offset": offset, "limit": limit, "total": page.total,
            "total_capped": page.total >= SEARCH_TOTAL_CAP, "results": results, "has_more": more,
            "next_offset": offset + len(results) if more else None}
