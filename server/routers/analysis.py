"""Read-only SQL, findings, the trace summary and area aggregation."""

from __future__ import annotations

import time

import duckdb
from fastapi import APIRouter, Body, Depends, Query
from fastapi.concurrency import run_in_threadpool
from pydantic import BaseModel, Field

from acceltrace.store.sandbox import DEFAULT_TIMEOUT_S, QueryError, run_readonly
from acceltrace.store import summary
from acceltrace.server.deps import ApiError, AppState, get_state

router = APIRouter(prefix="/api/traces", tags=["analysis"])

QUERY_MAX_ROWS = 10_000
FINDING_COLS = ("pass", "severity", "ts", "dur", "track_id", "slice_id", "metric", "value", "threshold",
                "impact_ns", "message")


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
        raise ApiError(404, "not_found", f"no trace with id {trace_id!r} in this store") from None
    return {"columns": cols, "rows": [[_json_value(v) for v in r] for r in rows], "truncated": truncated,
            "row_count": len(rows), "elapsed_ms": round((time.perf_counter() - t0) * 1000, 3)}


@router.get("/{trace_id}/findings", summary="Analysis findings",
            description="The findings of `acceltrace analyze` (ts relative), biggest impact first; an empty "
                        "list until the trace has been analysed.")
def findings(trace_id: str, state: AppState = Depends(get_state)) -> dict:
    h = state.trace(trace_id)
    if not state.store.side_path(trace_id, "findings").exists():
        return {"findings": []}
    try:
        con = state.store.connect(trace_id)
    except FileNotFoundError:
        raise ApiError(404, "not_found", f"no trace with id {trace_id!r} in this store") from None
    try:
        cols = [c for (c,) in con.execute(
            "SELECT column_name FROM duckdb_columns() WHERE table_name = 'findings'").fetchall()]
        sel = ", ".join(f'"{c}"' if c in cols else f'NULL AS "{c}"' for c in FINDING_COLS)
        rows = con.execute(f"SELECT {sel} FROM findings ORDER BY impact_ns DESC NULLS LAST, ts").fetchall()
    except duckdb.CatalogException:
        return {"findings": []}
    finally:
        con.close()
    out = []
    for r in rows:
        d = dict(zip(FINDING_COLS, (_json_value(v) for v in r)))
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
        cur = h.cursor()
        try:
            return summary.load_or_build(state.store, trace_id, cur, h.start_ns)
        finally:
            cur.close()

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
    t0, t1 = area.start_ns + h.start_ns, area.end_ns + h.start_ns
    tracks = area.tracks if area.tracks is not None else area.track_ids
    track_filter = "TRUE" if tracks is None else "track_id IN (SELECT unnest(?::INTEGER[]))"
    tparams = [] if tracks is None else [tracks]
    where = f"{track_filter} AND ts < {t1} AND ts + dur > {t0} AND (dur > 0 OR ts >= {t0})"
    cur = h.cursor()
    try:
        names = [{"name": r[0], "count": r[1], "total_ns": r[2], "mean_ns": r[3], "max_ns": r[4],
                  "bytes": r[5], "gbps": r[6]}
                 for r in cur.execute(
                     "SELECT name, count(*), sum(dur)::BIGINT, avg(dur), max(dur), sum(bytes)::BIGINT,"
                     f" CASE WHEN sum(dur) > 0 THEN sum(bytes) / sum(dur) END FROM slices WHERE {where}"
                     " GROUP BY name ORDER BY sum(dur) DESC, name LIMIT 500", tparams).fetchall()]
        transfers = [{"direction": r[0], "host_mem": r[1], "count": r[2], "bytes": r[3], "busy_ns": r[4],
                      "gbps": r[5]} for r in cur.execute(summary.copies_sql(where), tparams).fetchall()]
        counters = [{"track_id": r[0], "name": r[1], "unit": r[2], "count": r[3], "min": r[4], "mean": r[5],
                     "max": r[6]} for r in cur.execute(
            "SELECT c.track_id, t.name, t.unit, count(*), min(c.value), avg(c.value), max(c.value)"
            " FROM counters c JOIN tracks t USING (track_id)"
            f" WHERE {track_filter.replace('track_id', 'c.track_id')} AND c.ts >= {t0} AND c.ts < {t1}"
            " GROUP BY ALL ORDER BY c.track_id", tparams).fetchall()]
    finally:
        cur.close()
    return {"start_ns": area.start_ns, "end_ns": area.end_ns, "names": names, "transfers": transfers,
            "counters": counters}


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
