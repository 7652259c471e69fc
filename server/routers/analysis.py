"""Read-only SQL, findings, the trace summary and area aggregation."""

from __future__ import annotations

import time

from fastapi import APIRouter, Body, Depends, Query
from fastapi.concurrency import run_in_threadpool
from pydantic import BaseModel, Field

from acceltrace.store.sandbox import DEFAULT_TIMEOUT_S, QueryError, run_readonly
from acceltrace.store import queries, summary
from acceltrace.server.deps import ApiError, AppState, get_state, not_found

router = APIRouter(prefix="/api/traces", tags=["analysis"])

QUERY_MAX_ROWS = 10_000


class QueryIn(BaseModel):
    sql: str = Field(..., min_length=1, max_length=100_000, description="one read-only SQL statement")
    max_rows: int = Field(1000, ge=1, le=QUERY_MAX_ROWS, description="rows returned at most (flagged when cut)")


class AreaIn(BaseModel):
    start_ns: int = Field(..., ge=0, description="window start, ns relative to the trace start")
    end_ns: int = Field(..., ge=0, description="window end (exclusive)")
    tracks: list[int] | None = Field(None, max_length=10_000, description="track ids (default: all)")
    track_ids: list[int] | None = Field(None, max_length=10_000, description="alias of tracks")


def _json_value(v):
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    return str(v)


@router.post("/{trace_id}/query", summary="Read-only SQL on one trace",
             description="Runs one statement on this trace only (tables of docs/schema.md, plus `findings`), "
                         f"with a {DEFAULT_TIMEOUT_S:g} s time limit and a row limit (truncated flagged). Writes, "
                         "ATTACH, COPY, file readers, INSTALL/LOAD, SET and the network are refused.")
def query(trace_id: str, body: QueryIn, state: AppState = Depends(get_state)) -> dict:
    state.ready_row(trace_id)
    t0 = time.perf_counter()
    try:
        cols, rows, truncated = run_readonly(state.store, trace_id, body.sql, max_rows=body.max_rows,
                                             timeout_s=state.query_timeout_s)
    except QueryError as e:
        raise ApiError(400, e.code, str(e)) from None
    except FileNotFoundError:
        raise not_found(trace_id) from None
    return {"columns": cols, "rows": [[_json_value(v) for v in r] for r in rows], "truncated": truncated,
            "row_count": len(rows), "elapsed_ms": round((time.perf_counter() - t0) * 1000, 3)}


@router.get("/{trace_id}/findings", summary="Analysis findings",
            description="The findings of `acceltrace analyze` (ts relative), biggest impact first; an empty "
                        "list until the trace has been analysed.")
def findings(trace_id: str, state: AppState = Depends(get_state)) -> dict:
    h = state.trace(trace_id)
    if not state.store.side_path(trace_id, "findings").exists():
        return {"findings": []}
    with state.connection(trace_id) as con:
        rows = queries.findings(con)
    out = []
    for r in rows:
        d = {k: _json_value(v) for k, v in r.items()}
        if d["ts"] is not None:
            d["ts"] = int(d["ts"]) - h.start_ns
        out.append(d)
    return {"findings": out}


@router.get("/{trace_id}/summary", summary="Trace summary",
            description="Per lane the top names by total time (count, total, mean, p50, p95, max ns), copies by "
                        "direction and host memory kind (bytes, achieved GB/s), and each lane's busy fraction "
                        "over ~100 buckets. Computed once, then cached in a side file.")
async def trace_summary(trace_id: str, state: AppState = Depends(get_state)) -> dict:
    h = await run_in_threadpool(state.trace, trace_id)

    def build():
        with h.cursor() as cur:
            return summary.load_or_build(state.store, trace_id, cur, h.start_ns)

    cached = h.cache.get("summary")
    if cached is not None:
        return cached
    doc = await run_in_threadpool(build)
    h.cache["summary"] = doc
    return doc


def _aggregate(state: AppState, trace_id: str, area: AreaIn) -> dict:
    if area.end_ns <= area.start_ns:
        raise ApiError(400, "bad_request", f"end_ns ({area.end_ns}) must be greater than start_ns ({area.start_ns})")
    h = state.trace(trace_id)
    tracks = area.tracks if area.tracks is not None else area.track_ids
    with h.cursor() as cur:
        agg = queries.area_aggregate(cur, area.start_ns + h.start_ns, area.end_ns + h.start_ns, tracks)
    return {"start_ns": area.start_ns, "end_ns": area.end_ns, **agg}


@router.get("/{trace_id}/aggregate", summary="Area aggregation",
            description="Over slices overlapping [start_ns, end_ns) (relative) on the given tracks (default all): "
                        "per name count, total, mean, max duration, bytes, GB/s; transfers by direction and host "
                        "memory kind; counters min, mean, max. Whole slices, not clipped.")
def aggregate_get(trace_id: str, start_ns: int = Query(..., ge=0), end_ns: int = Query(..., ge=0),
                  track: list[int] | None = Query(None, description="track id (repeatable)"),
                  track_ids: str | None = Query(None, max_length=100_000, description="comma-separated track ids"),
                  state: AppState = Depends(get_state)) -> dict:
    if track_ids:
        try:
            track = (track or []) + [int(t) for t in track_ids.split(",") if t.strip()]
        except ValueError:
            raise ApiError(400, "bad_request", f"track_ids must be comma-separated integers, got {track_ids[:80]!r}")
    return _aggregate(state, trace_id, AreaIn(start_ns=start_ns, end_ns=end_ns, tracks=track))


@router.post("/{trace_id}/aggregate", summary="Area aggregation (JSON body)",
             description="As GET /aggregate, with {start_ns, end_ns, tracks} in the body.")
def aggregate_post(trace_id: str, area: AreaIn = Body(...), state: AppState = Depends(get_state)) -> dict:
    return _aggregate(state, trace_id, area)
