"""Read-only SQL, findings, the trace summary and area aggregation."""

from __future__ import annotations

import asyncio
import json
import time

from fastapi import APIRouter, Body, Depends, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, Field

from acceltrace.store.sandbox import DEFAULT_TIMEOUT_S, QueryError, run_limited
from acceltrace.store import queries, summary
from acceltrace.server.deps import ApiError, AppState, get_state, not_found
from acceltrace.server.query_pool import Overloaded

router = APIRouter(prefix="/api/traces", tags=["analysis"])

QUERY_MAX_ROWS = 10_000
ANALYSIS_POLL_S = 0.5        # how often the analysis event stream looks at the findings side file
ANALYSIS_EVENTS_MAX_S = 1800.0


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
             description="Runs one read-only statement on this trace only (tables of docs/schema.md, plus "
                         f"`findings`) in a process of its own, with a {DEFAULT_TIMEOUT_S:g} s time limit, a memory "
                         "cap and a row limit (truncated flagged). Writes, ATTACH, COPY, file readers, INSTALL/LOAD, "
                         "SET, PRAGMA, several statements and the network are refused. 429 when this client already runs its "
                         "share of queries, 503 when every query slot is busy (both with Retry-After).",
             responses={429: {"description": "too many queries from this client"},
                        503: {"description": "every query slot is busy"}})
async def query(trace_id: str, body: QueryIn, request: Request, state: AppState = Depends(get_state)) -> dict:
    await run_in_threadpool(state.ready_row, trace_id)
    pool = state.query_pool
    client = request.client.host if request.client else "unknown"
    t0 = time.perf_counter()
    try:
        async with pool.slot(client):
            cols, rows, truncated = await pool.run(run_limited, state.store, trace_id, body.sql, body.max_rows,
                                                   state.query_timeout_s, state.query_memory_bytes, ahead=True)
    except Overloaded as e:
        raise ApiError(e.status, e.code, e.message, e.headers) from None
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


def _analysis_state(state: AppState, trace_id: str, row: dict) -> dict:
    """{state, version}: `state` is the catalog's analysis status where it keeps one (running, done,
    failed, ...), else `done` once the findings side file exists and `pending` before; `version`
    changes whenever the side file is replaced (its mtime and size), None without one."""
    sp = state.store.side_path(trace_id, "findings")
    try:
        st = sp.stat()
        version = f"{st.st_mtime_ns:x}-{st.st_size:x}"
    except OSError:
        version = None
    status = row.get("analysis_status") or row.get("analysis")
    if isinstance(status, dict):
        status = status.get("status") or status.get("state")
    if not isinstance(status, str) or not status:
        status = "done" if version else "pending"
    out = {"state": status, "version": version}
    err = row.get("analysis_error")
    if err:
        out["error"] = str(err)
    return out


@router.get("/{trace_id}/analysis", summary="Analysis status",
            description="Whether the passes have run ({state: pending | running | done | failed, version}) and each "
                        "pass's status (ran, not applicable and why, failed and why, not selected) with its "
                        "findings count, impact and time.")
def analysis_info(trace_id: str, state: AppState = Depends(get_state)) -> dict:
    row = state.ready_row(trace_id)
    out = _analysis_state(state, trace_id, row)
    passes = []
    if out["version"]:
        with state.connection(trace_id) as con:
            passes = [{k: _json_value(v) for k, v in r.items()} for r in queries.analysis_status(con)]
    return {**out, "passes": passes}


@router.get("/{trace_id}/analysis/events", summary="Analysis status changes (server-sent events)",
            description="A text/event-stream of JSON events {state, version} each time the analysis state or its "
                        "findings change (first event: the current state), so a page shows findings when the "
                        f"passes finish without reloading; it ends after {ANALYSIS_EVENTS_MAX_S:g} s with "
                        "{\"end\": true}.", response_class=StreamingResponse)
async def analysis_events(trace_id: str, state: AppState = Depends(get_state)):
    await run_in_threadpool(state.ready_row, trace_id)

    async def events():
        last, waited = None, 0.0
        while waited <= ANALYSIS_EVENTS_MAX_S:
            try:
                row = await run_in_threadpool(state.row, trace_id)
            except ApiError:
                yield f"data: {json.dumps({'state': 'removed', 'version': None, 'end': True})}\n\n"
                return
            cur = _analysis_state(state, trace_id, row)
            if cur != last:
                yield f"data: {json.dumps(cur)}\n\n"
                last = cur
            await asyncio.sleep(ANALYSIS_POLL_S)
            waited += ANALYSIS_POLL_S
        yield f"data: {json.dumps({**(last or {}), 'end': True})}\n\n"

    return StreamingResponse(events(), media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})


@router.get("/{trace_id}/findings/groups", summary="Findings grouped by pass and name",
            description="Per pass (biggest total impact first): count, total impact and its groups by the name of "
                        "the slice each finding points at (kernel or op), each with count, total impact, worst "
                        f"severity and its worst {queries.FINDING_WORST_MAX} instances (ts relative); at most "
                        f"{queries.FINDING_GROUPS_MAX} groups per pass, `groups_total` saying how many there are.")
def findings_groups(trace_id: str, state: AppState = Depends(get_state)) -> dict:
    h = state.trace(trace_id)
    if not state.store.side_path(trace_id, "findings").exists():
        return {"passes": [], "analysed": False}
    with state.connection(trace_id) as con:
        passes = queries.findings_grouped(con)
    for p in passes:
        for g in p["groups"]:
            g["worst"] = [{**{k: _json_value(v) for k, v in f.items()},
                           "ts": None if f["ts"] is None else int(f["ts"]) - h.start_ns} for f in g["worst"]]
    return {"passes": passes, "analysed": True, "groups_max": queries.FINDING_GROUPS_MAX}


@router.get("/{trace_id}/critical_path", summary="The critical path",
            description="The chain of work and waits that sets the run's length, from the analysis's replay of the "
                        "trace's dependency graph (docs/analysis.md): its time per segment type (host-bound, launch "
                        "overhead, link/transfer, device compute, sync wait, idle) and its segments overlapping "
                        "[start_ns, end_ns) (ns relative; default the whole trace), each {start_ns, end_ns, type, "
                        "slice_id, track_id, merged}; at most max_segments, merged per time bucket beyond that "
                        "(`merged`: true). `analysed`: false until the passes have run.")
def critical_path(trace_id: str, start_ns: int = Query(0, ge=0), end_ns: int | None = Query(None, ge=0),
                  max_segments: int = Query(queries.CRITICAL_PATH_MAX_SEGMENTS, ge=1, le=20_000),
                  state: AppState = Depends(get_state)) -> dict:
    h = state.trace(trace_id)
    end = end_ns if end_ns is not None else 1 << 62  # the whole trace
    if end <= start_ns:
        raise ApiError(400, "bad_request", f"end_ns ({end}) must be greater than start_ns ({start_ns})")
    empty = {"analysed": False, "segments": [], "by_type_ns": {}, "segments_total": 0, "path_ns": 0}
    if not state.store.side_path(trace_id, "findings").exists():
        return empty
    with state.connection(trace_id) as con:
        doc = queries.critical_path(con, start_ns + h.start_ns, end + h.start_ns, max_segments)
    if doc is None:
        return empty
    rel = lambda v: None if v is None else int(v) - h.start_ns  # noqa: E731
    for seg in doc["segments"]:
        seg["start_ns"], seg["end_ns"] = rel(seg["start_ns"]), rel(seg["end_ns"])
    doc["first_ns"], doc["last_ns"] = rel(doc["first_ns"]), rel(doc["last_ns"])
    return {"analysed": True, "start_ns": start_ns, "end_ns": end_ns, **doc}


@router.get("/{trace_id}/summary", summary="Trace summary",
            description="Per lane the top names by total time (count, total, mean, p50, p95, max ns), copies by "
                        "direction and host memory kind (bytes, achieved GB/s), and each lane's busy fraction "
                        "over ~100 buckets. Computed once, then cached in a side file.")
async def trace_summary(trace_id: str, state: AppState = Depends(get_state)) -> dict:
    h = await run_in_threadpool(state.trace, trace_id)

    def build():
        with h.cursor() as cur:
            return summary.load_or_build(state.store, trace_id, cur, h.start_ns)

    if "summary" in h.cache:
        return h.cache["summary"]
    return await run_in_threadpool(h.once, "summary", build)


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
                  track_ids: str | None = Query(None, max_length=100_000, pattern=r"^(\s*-?\d+\s*(,\s*-?\d+\s*)*)?$",
                                              description="comma-separated track ids"),
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
