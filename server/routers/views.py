"""Aggregate views of a range: call trees (top-down, bottom-up) and the op-to-device rollup."""

from __future__ import annotations

import io
from contextlib import contextmanager

import pyarrow.csv as pa_csv
from fastapi import APIRouter, Depends, Query
from fastapi.responses import Response

from acceltrace.server.deps import ApiError, AppState, get_state
from acceltrace.store import aggregates, range_events, tables

router = APIRouter(prefix="/api/traces", tags=["views"])


@contextmanager
def _views_cursor(state: AppState, h):
    """A cursor that sees the views' precomputed tables once their side file exists (written after
    publication): a connection of its own with it attached; before that, the trace's shared one."""
    if state.store.side_path(h.trace_id, aggregates.VIEWS_SIDE).exists():
        with state.connection(h.trace_id) as con:
            yield con
    else:
        with h.cursor() as cur:
            yield cur


def _range(h, start_ns: int | None, end_ns: int | None) -> tuple[int, int]:
    """Relative [start, end) -> absolute; the whole trace by default."""
    t0 = h.start_ns + (start_ns or 0)
    t1 = h.start_ns + end_ns if end_ns is not None else 1 << 62  # stored times never reach 2^62 (the builder)
    if t1 <= t0:
        raise ApiError(400, "bad_request", f"end_ns ({end_ns}) must be greater than start_ns ({start_ns or 0})")
    return t0, t1


@router.get("/{trace_id}/tree", summary="Call tree of a range (top-down or bottom-up; CPU stacks or device work)",
            description="CPU slices of [start_ns, end_ns) (relative; the whole trace by default), clipped to it, "
                        "as a tree of nodes {name, count, total_ns, self_ns, p95_ns, slice_id, lane, children} "
                        "under a root. top-down: paths from depth 0 down; bottom-up: each frame's self time up "
                        "through its callers. source=device: the kernels, memsets and copies of the range as "
                        "leaves under the CPU call that launched them (correlation id) and its callers. At "
                        f"most {aggregates.NODES_MAX} nodes; the rest of a level is one '(other: N more)' node.")
def tree(trace_id: str, start_ns: int | None = Query(None, ge=0), end_ns: int | None = Query(None, ge=1),
         track: list[int] | None = Query(None, description="only these tracks (repeatable)"),
         mode: str = Query("top-down", pattern="^(top-down|bottom-up)$"),
         source: str = Query("cpu", pattern="^(cpu|device)$"),
         state: AppState = Depends(get_state)) -> dict:
    h = state.trace(trace_id)
    t0, t1 = _range(h, start_ns, end_ns)
    with _views_cursor(state, h) as cur:
        return aggregates.call_tree(cur, t0, t1, track, mode, source)


@router.get("/{trace_id}/rollup", summary="Op-to-device rollup of a range",
            description="Per CPU slice name in [start_ns, end_ns): count, host_ns (its clipped time), and the "
                        "device_ns, copy_ns and bytes of the kernels, memsets and copies launched from inside it "
                        "through correlation ids (inclusive: nested ops each get their launches), kernels and "
                        f"copies counts; largest device time first, at most {aggregates.ROLLUP_MAX} rows.")
def rollup(trace_id: str, start_ns: int | None = Query(None, ge=0), end_ns: int | None = Query(None, ge=1),
           state: AppState = Depends(get_state)) -> dict:
    h = state.trace(trace_id)
    t0, t1 = _range(h, start_ns, end_ns)
    with _views_cursor(state, h) as cur:
        return {"rows": aggregates.rollup(cur, t0, t1)}


@router.get("/{trace_id}/tables", summary="The trace's tables with row counts",
            description="Every table of the stored trace and of its side files (findings), as {name, kind "
                        "(stored, analysis, derived, views precompute, level of detail), rows, columns}: what "
                        "POST /query can read.")
def trace_tables(trace_id: str, state: AppState = Depends(get_state)) -> dict:
    h = state.trace(trace_id)
    with h.cursor() as cur:
        return {"tables": tables.trace_tables(cur, (state.store.side_path(trace_id, "findings"),
                                                    state.store.side_path(trace_id, aggregates.VIEWS_SIDE)))}


def _event_filters(h, start_ns, end_ns, track, lane, q, sort, desc):
    t0, t1 = _range(h, start_ns, end_ns)
    return dict(t0=t0, t1=t1, tracks=track, lanes=lane, text=q or None, sort=sort, desc=desc)


_SORT_PATTERN = "^(" + "|".join(range_events.EVENT_SORTS) + ")$"


@router.get("/{trace_id}/events", summary="Slices of a range, one sorted page (the events table)",
            description="Every slice overlapping [start_ns, end_ns) (relative; the whole trace by default), on the "
                        "given tracks and lanes, whose name contains q (case-insensitive), sorted by `sort` "
                        f"({', '.join(range_events.EVENT_SORTS)}), `desc` for descending; a page of at most "
                        f"{range_events.EVENTS_PAGE_MAX} rows {{slice_id, track_id, lane, track, ts (relative), dur, "
                        "depth, name, category, bytes, args}} and the total that match.")
def events(trace_id: str, start_ns: int | None = Query(None, ge=0), end_ns: int | None = Query(None, ge=1),
           track: list[int] | None = Query(None, description="only these tracks (repeatable)"),
           lane: list[str] | None = Query(None, description="only these lanes (repeatable)"),
           q: str | None = Query(None, max_length=500), sort: str = Query("ts", pattern=_SORT_PATTERN),
           desc: bool = False, offset: int = Query(0, ge=0),
           limit: int = Query(200, ge=1, le=range_events.EVENTS_PAGE_MAX),
           state: AppState = Depends(get_state)) -> dict:
    h = state.trace(trace_id)
    f = _event_filters(h, start_ns, end_ns, track, lane, q, sort, desc)
    with h.cursor() as cur:
        rows, total = range_events.range_events(cur, f.pop("t0"), f.pop("t1"), offset=offset, limit=limit, **f)
    for r in rows:
        r["ts"] -= h.start_ns
    return {"total": total, "offset": offset, "limit": limit, "rows": rows}


@router.get("/{trace_id}/events.csv", summary="Slices of a range as CSV",
            description="The rows of GET /events with the same filters and order, all of them up to "
                        f"{range_events.EVENTS_CSV_MAX:,} (ts relative), as text/csv with a header line; the "
                        "X-Acceltrace-Truncated header is 'true' when more matched.",
            response_class=Response)
def events_csv(trace_id: str, start_ns: int | None = Query(None, ge=0), end_ns: int | None = Query(None, ge=1),
               track: list[int] | None = Query(None), lane: list[str] | None = Query(None),
               q: str | None = Query(None, max_length=500), sort: str = Query("ts", pattern=_SORT_PATTERN),
               desc: bool = False, state: AppState = Depends(get_state)) -> Response:
    h = state.trace(trace_id)
    f = _event_filters(h, start_ns, end_ns, track, lane, q, sort, desc)
    with h.cursor() as cur:
        table, truncated = range_events.range_events_arrow(cur, f.pop("t0"), f.pop("t1"), h.start_ns,
                                                              limit=range_events.EVENTS_CSV_MAX, **f)
    buf = io.BytesIO()
    pa_csv.write_csv(table, buf)
    return Response(buf.getvalue(), media_type="text/csv; charset=utf-8",
                    headers={"X-Acceltrace-Truncated": "true" if truncated else "false",
                             "Content-Disposition": f'attachment; filename="{trace_id}-events.csv"'})
