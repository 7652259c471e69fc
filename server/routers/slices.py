"""One slice with its correlation chain, and name search."""

from __future__ import annotations

import json

from fastapi import APIRouter, Depends, Query

from acceltrace.store.schema import CHAIN_FLOW_KINDS
from acceltrace.server.deps import ApiError, AppState, get_state

router = APIRouter(prefix="/api/traces", tags=["slices"])

CHAIN_MAX_SLICES = 1000
CHAIN_MAX_HOPS = 32
SEARCH_TOTAL_CAP = 100_000
_SLICE_COLS = ("slice_id", "track_id", "ts", "dur", "depth", "name", "category", "corr_id", "bytes", "direction",
               "host_mem", "args")
_KINDS_SQL = ", ".join(f"'{k}'" for k in CHAIN_FLOW_KINDS)


@router.get("/{trace_id}/slices/{slice_id}", summary="Slice details with its correlation chain",
            description="All columns (ts relative), args parsed, its track, every flow touching it, and the "
                        "correlation chain: submit, launch, dma and exec flows followed both ways, transitively "
                        f"(never dependency), at most {CHAIN_MAX_SLICES} slices.")
def slice_details(trace_id: str, slice_id: int, state: AppState = Depends(get_state)) -> dict:
    h = state.trace(trace_id)
    cur = h.cursor()
    try:
        row = cur.execute(f"SELECT {', '.join(_SLICE_COLS)} FROM slices WHERE slice_id = ?", [slice_id]).fetchone()
        if row is None:
            raise ApiError(404, "not_found", f"no slice {slice_id} in trace {trace_id!r}")
        s = dict(zip(_SLICE_COLS, row))
        s["id"] = s.pop("slice_id")
        s["ts"] -= h.start_ns
        s["end"] = s["ts"] + s["dur"]
        try:
            s["args"] = json.loads(s["args"]) if s["args"] else {}
        except ValueError:
            pass  # keep the raw text
        trow = cur.execute("SELECT track_id, lane, group_name, name, device, unit FROM tracks WHERE track_id = ?",
                           [s["track_id"]]).fetchone()
        s["track"] = dict(zip(("track_id", "lane", "group_name", "name", "device", "unit"), trow)) if trow else None
        flow_cols = ("flow_id", "src_slice", "dst_slice", "kind", "raw_kind")
        direct = [dict(zip(flow_cols, r)) for r in cur.execute(
            "SELECT flow_id, src_slice, dst_slice, kind, raw_kind FROM flows WHERE src_slice = ? OR dst_slice = ?"
            " ORDER BY flow_id LIMIT 1000", [slice_id, slice_id]).fetchall()]
        chain_rows = cur.execute(
            f"""WITH RECURSIVE chain(sid, hops) AS (
                SELECT ?::BIGINT, 0
                UNION
                SELECT CASE WHEN f.src_slice = c.sid THEN f.dst_slice ELSE f.src_slice END, c.hops + 1
                FROM chain c JOIN flows f ON f.src_slice = c.sid OR f.dst_slice = c.sid
                WHERE f.kind IN ({_KINDS_SQL}) AND f.src_slice IS NOT NULL AND f.dst_slice IS NOT NULL
                  AND c.hops < {CHAIN_MAX_HOPS})
            SELECT sid, min(hops) AS hops FROM chain GROUP BY sid ORDER BY hops, sid LIMIT {CHAIN_MAX_SLICES + 1}""",
            [slice_id]).fetchall()
        truncated = len(chain_rows) > CHAIN_MAX_SLICES
        chain_rows = chain_rows[:CHAIN_MAX_SLICES]
        hops = {sid: n for sid, n in chain_rows}
        ids = list(hops)
        chain = [
            {"id": r[0], "slice_id": r[0], "track_id": r[1], "lane": r[2], "ts": r[3] - h.start_ns, "dur": r[4], "depth": r[5],
             "name": r[6], "hops": hops[r[0]]}
            for r in cur.execute(
                "SELECT s.slice_id, s.track_id, t.lane, s.ts, s.dur, s.depth, s.name FROM slices s"
                " JOIN tracks t USING (track_id) WHERE s.slice_id IN (SELECT unnest(?::BIGINT[])) ORDER BY s.ts",
                [ids]).fetchall()
        ]
        chain_flows = [dict(zip(flow_cols, r)) for r in cur.execute(
            f"SELECT flow_id, src_slice, dst_slice, kind, raw_kind FROM flows WHERE kind IN ({_KINDS_SQL})"
            " AND src_slice IN (SELECT unnest($1::BIGINT[])) AND dst_slice IN (SELECT unnest($1::BIGINT[]))"
            " ORDER BY flow_id", [ids]).fetchall()] if len(ids) > 1 else []
    finally:
        cur.close()
    return {"slice": s, "chain": {"slices": chain, "flows": chain_flows, "truncated": truncated},
            "flows": {"in": [f for f in direct if f["dst_slice"] == slice_id],
                      "out": [f for f in direct if f["src_slice"] == slice_id]}}


def _name_filter(q: str) -> tuple[str, str]:
    """SQL condition on lod_names.name and its parameter: substring ILIKE, or a glob with * or ?."""
    if "*" in q or "?" in q:
        return "lower(name) GLOB ?", q.lower()
    escaped = q.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return "name ILIKE ? ESCAPE '\\'", f"%{escaped}%"


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
    cond, param = _name_filter(q)
    where = ["name IN (SELECT name FROM matching)"]
    params: list = [param]
    if track is not None:
        where.append("track_id = ?")
        params.append(track)
    if after_ns is not None:
        where.append("ts >= ?")
        params.append(after_ns + h.start_ns)
    if before_ns is not None:
        where.append("ts < ?")
        params.append(before_ns + h.start_ns)
    names_table = "lod_names" if h.info is not None else "(SELECT DISTINCT name FROM slices)"
    base = f"WITH matching AS (SELECT name FROM {names_table} WHERE {cond}) SELECT {{cols}} FROM slices WHERE " + \
        " AND ".join(where)
    order = "ts DESC, slice_id DESC" if before_ns is not None and after_ns is None else "ts, slice_id"
    cur = h.cursor()
    try:
        rows = cur.execute(base.format(cols="slice_id, track_id, ts, dur, depth, name") +
                           f" ORDER BY {order} LIMIT {limit} OFFSET {offset}", params).fetchall()
        (total,) = cur.execute(f"SELECT count(*) FROM ({base.format(cols='1')} LIMIT {SEARCH_TOTAL_CAP})",
                               params).fetchone()
    finally:
        cur.close()
    results = [{"id": r[0], "slice_id": r[0], "track_id": r[1], "ts": r[2] - h.start_ns, "dur": r[3],
                "depth": r[4], "name": r[5]} for r in rows]
    more = offset + len(results) < total
    return {"q": q, "offset": offset, "limit": limit, "total": total, "total_capped": total >= SEARCH_TOTAL_CAP,
            "results": results, "has_more": more, "next_offset": offset + len(results) if more else None}
