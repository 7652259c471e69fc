"""Named queries on one stored trace: metadata, slices, flows, the correlation chain, search, areas, findings.

Plain functions: each takes a DuckDB connection or cursor of the trace (unqualified table names
resolve to it) and typed arguments, and returns Python data. Times in and out are absolute ns,
as stored; the API makes them relative. No caller's text reaches SQL but through parameters
(the name search's pattern, track ids); the numbers formatted into SQL are ints taken here.
The level-of-detail tables are tiles/' business (tiles/layout.py, tiles/query.py).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import duckdb

from acceltrace.store.schema import CHAIN_FLOW_KINDS
from acceltrace.store.summary import copies
from acceltrace.store.utilization import busy as busy_time

SLICE_COLUMNS = ("slice_id", "track_id", "ts", "dur", "depth", "name", "category", "corr_id", "bytes", "direction",
                 "host_mem", "args")
TRACK_COLUMNS = ("track_id", "lane", "group_name", "name", "device", "unit")
FLOW_COLUMNS = ("flow_id", "src_slice", "dst_slice", "kind", "raw_kind")
FINDING_COLUMNS = ("pass", "severity", "ts", "dur", "track_id", "slice_id", "metric", "value", "threshold",
                   "impact_ns", "message")
CHAIN_MAX_SLICES = 1000
CHAIN_MAX_HOPS = 32
DIRECT_FLOWS_MAX = 1000
SEARCH_TOTAL_CAP = 100_000
AREA_NAMES_MAX = 500

_KINDS_SQL = ", ".join(f"'{k}'" for k in CHAIN_FLOW_KINDS)
_FLOW_SQL = f"SELECT {', '.join(FLOW_COLUMNS)} FROM flows"


# -- the trace ------------------------------------------------------------------------------------
def trace_meta(cur: duckdb.DuckDBPyConnection) -> dict[str, str]:
    """trace_meta as a dict (key -> value text)."""
    return dict(cur.execute("SELECT key, value FROM trace_meta").fetchall())


def trace_start_ns(cur: duckdb.DuckDBPyConnection) -> int:
    """The trace's start (absolute ns), from trace_meta."""
    (v,) = cur.execute("SELECT value FROM trace_meta WHERE key = 'start_ns'").fetchone()
    return int(v)


# -- one slice --------------------------------------------------------------------------------------
def slice_row(cur: duckdb.DuckDBPyConnection, slice_id: int) -> dict | None:
    """Every column of one slice (SLICE_COLUMNS order), args parsed from JSON (kept as text when it
    is not JSON, {} when empty); None when there is no such slice."""
    row = cur.execute(f"SELECT {', '.join(SLICE_COLUMNS)} FROM slices WHERE slice_id = ?", [slice_id]).fetchone()
    if row is None:
        return None
    s = dict(zip(SLICE_COLUMNS, row))
    try:
        s["args"] = json.loads(s["args"]) if s["args"] else {}
    except ValueError:
        pass  # keep the raw text
    return s


def track_row(cur: duckdb.DuckDBPyConnection, track_id: int) -> dict | None:
    """One track's TRACK_COLUMNS, or None."""
    row = cur.execute(f"SELECT {', '.join(TRACK_COLUMNS)} FROM tracks WHERE track_id = ?", [track_id]).fetchone()
    return dict(zip(TRACK_COLUMNS, row)) if row else None


def flows_touching(cur: duckdb.DuckDBPyConnection, slice_id: int, limit: int = DIRECT_FLOWS_MAX) -> list[dict]:
    """Every flow (any kind) with this slice at either end, by flow_id, at most `limit`."""
    return [dict(zip(FLOW_COLUMNS, r)) for r in cur.execute(
        f"{_FLOW_SQL} WHERE src_slice = ? OR dst_slice = ? ORDER BY flow_id LIMIT {int(limit)}",
        [slice_id, slice_id]).fetchall()]


@dataclass
class Chain:
    """A slice's correlation chain: its slices (by ts; each with `hops` from the start slice), the
    chain flows between them (by flow_id), and whether the chain was cut at max_slices."""

    slices: list[dict]
    flows: list[dict]
    truncated: bool


def correlation_chain(cur: duckdb.DuckDBPyConnection, slice_id: int, max_slices: int = CHAIN_MAX_SLICES,
                      max_hops: int = CHAIN_MAX_HOPS) -> Chain:
    """The slices reachable from `slice_id` over chain flows (CHAIN_FLOW_KINDS, never dependency)
    followed both ways, transitively, at most max_hops away; the max_slices nearest (fewest hops,
    then slice_id) are kept. Each slice: slice_id, track_id, lane, ts, dur, depth, name, hops. The
    start slice is in it (hops 0) when it exists."""
    rows = cur.execute(
        f"""WITH RECURSIVE chain(sid, hops) AS (
            SELECT ?::BIGINT, 0
            UNION
            SELECT CASE WHEN f.src_slice = c.sid THEN f.dst_slice ELSE f.src_slice END, c.hops + 1
            FROM chain c JOIN flows f ON f.src_slice = c.sid OR f.dst_slice = c.sid
            WHERE f.kind IN ({_KINDS_SQL}) AND f.src_slice IS NOT NULL AND f.dst_slice IS NOT NULL
              AND c.hops < {int(max_hops)})
        SELECT sid, min(hops) AS hops FROM chain GROUP BY sid ORDER BY hops, sid LIMIT {int(max_slices) + 1}""",
        [slice_id]).fetchall()
    truncated = len(rows) > max_slices
    hops = dict(rows[:max_slices])
    ids = list(hops)
    cols = ("slice_id", "track_id", "lane", "ts", "dur", "depth", "name")
    slices = [{**dict(zip(cols, r)), "hops": hops[r[0]]} for r in cur.execute(
        "SELECT s.slice_id, s.track_id, t.lane, s.ts, s.dur, s.depth, s.name FROM slices s"
        " JOIN tracks t USING (track_id) WHERE s.slice_id IN (SELECT unnest(?::BIGINT[])) ORDER BY s.ts",
        [ids]).fetchall()]
    flows = [dict(zip(FLOW_COLUMNS, r)) for r in cur.execute(
        f"{_FLOW_SQL} WHERE kind IN ({_KINDS_SQL})"
        " AND src_slice IN (SELECT unnest($1::BIGINT[])) AND dst_slice IN (SELECT unnest($1::BIGINT[]))"
        " ORDER BY flow_id", [ids]).fetchall()] if len(ids) > 1 else []
    return Chain(slices, flows, truncated)


# -- search ----------------------------------------------------------------------------------------
def name_condition(text: str) -> tuple[str, str]:
    """SQL condition on a `name` column and its parameter: a case-insensitive substring (LIKE
    wildcards literal), or, when the text holds * or ?, a case-insensitive glob over the whole name."""
    if "*" in text or "?" in text:
        return "lower(name) GLOB ?", text.lower()
    escaped = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return "name ILIKE ? ESCAPE '\\'", f"%{escaped}%"


@dataclass
class SearchPage:
    rows: list[dict]  # slice_id, track_id, ts, dur, depth, name
    total: int  # every hit, counted up to total_cap


def search_slices(cur: duckdb.DuckDBPyConnection, text: str, *, offset: int = 0, limit: int = 100,
                  track: int | None = None, after_ns: int | None = None, before_ns: int | None = None,
                  names: str | None = None, total_cap: int = SEARCH_TOTAL_CAP) -> SearchPage:
    """Slices whose name matches `text` (name_condition), on one track or all, starting in
    [after_ns, before_ns) (absolute; either bound optional): one page in time order, newest
    first when only before_ns is given. `names` is a table holding every distinct slice name
    (the trace's name dictionary, tiles.layout.NAMES_TABLE), matched once instead of per slice;
    None computes it from slices."""
    cond, param = name_condition(text)
    where = ["name IN (SELECT name FROM matching)"]
    params: list = [param]
    for clause, value in (("track_id = ?", track), ("ts >= ?", after_ns), ("ts < ?", before_ns)):
        if value is not None:
            where.append(clause)
            params.append(value)
    names_sql = names or "(SELECT DISTINCT name FROM slices)"
    base = (f"WITH matching AS (SELECT name FROM {names_sql} WHERE {cond}) SELECT {{cols}} FROM slices WHERE "
            + " AND ".join(where))
    order = "ts DESC, slice_id DESC" if before_ns is not None and after_ns is None else "ts, slice_id"
    cols = ("slice_id", "track_id", "ts", "dur", "depth", "name")
    rows = cur.execute(base.format(cols=", ".join(cols)) + f" ORDER BY {order} LIMIT {int(limit)} OFFSET {int(offset)}",
                       params).fetchall()
    (total,) = cur.execute(f"SELECT count(*) FROM ({base.format(cols='1')} LIMIT {int(total_cap)})",
                           params).fetchone()
    return SearchPage([dict(zip(cols, r)) for r in rows], total)


# -- an area ---------------------------------------------------------------------------------------
def area_aggregate(cur: duckdb.DuckDBPyConnection, t0: int, t1: int, tracks: list[int] | None = None) -> dict:
    """Over slices overlapping [t0, t1) (absolute; instants at or after t0) on `tracks` (None: all):
    `names` (per lane and name: count, total_ns and self_ns clipped to [t0, t1) -- self = the part
    not covered by the slice's children on its track --, mean_ns and max_ns of the whole slices,
    bytes, gbps; biggest total first, at most AREA_NAMES_MAX), `transfers` (store.summary.copies),
    `counters` (per counter track with samples in [t0, t1): track_id, name, unit, count, min, mean,
    max) and `busy` (store.utilization.busy: device and CPU busy within the range)."""
    t0, t1 = int(t0), int(t1)
    track_filter = "TRUE" if tracks is None else "track_id IN (SELECT unnest(?::INTEGER[]))"
    params = [] if tracks is None else [tracks]
    where = f"{track_filter} AND ts < {t1} AND ts + dur > {t0} AND (dur > 0 OR ts >= {t0})"
    # a child's parent: the latest slice one level up on its track that started at or before it
    names = [{"lane": r[0], "name": r[1], "count": r[2], "total_ns": r[3], "self_ns": r[4], "mean_ns": r[5],
              "max_ns": r[6], "bytes": r[7], "gbps": r[8]} for r in cur.execute(
        f"""WITH w AS (
            SELECT slice_id, track_id, ts, dur, depth, depth + 1 AS child_depth, name, bytes,
                   least(ts + dur, {t1}) - greatest(ts, {t0}) AS clip_ns FROM slices WHERE {where}),
        kids AS (
            SELECT p.slice_id, sum(c.clip_ns) AS kids_ns FROM w c
            ASOF JOIN w p ON c.track_id = p.track_id AND c.depth = p.child_depth AND c.ts >= p.ts
            WHERE c.ts < p.ts + p.dur OR (c.dur = 0 AND c.ts = p.ts + p.dur) GROUP BY p.slice_id)
        SELECT t.lane, w.name, count(*), sum(w.clip_ns)::BIGINT,
               sum(greatest(0, w.clip_ns - coalesce(k.kids_ns, 0)))::BIGINT, avg(w.dur), max(w.dur),
               sum(w.bytes)::BIGINT, CASE WHEN sum(w.dur) > 0 THEN sum(w.bytes) / sum(w.dur) END
        FROM w JOIN tracks t USING (track_id) LEFT JOIN kids k USING (slice_id)
        GROUP BY t.lane, w.name ORDER BY sum(w.clip_ns) DESC, t.lane, w.name LIMIT {AREA_NAMES_MAX}""",
        params).fetchall()]
    transfers = copies(cur, where, params)
    counters = [{"track_id": r[0], "name": r[1], "unit": r[2], "count": r[3], "min": r[4], "mean": r[5],
                 "max": r[6]} for r in cur.execute(
        "SELECT c.track_id, t.name, t.unit, count(*), min(c.value), avg(c.value), max(c.value)"
        " FROM counters c JOIN tracks t USING (track_id)"
        f" WHERE {track_filter.replace('track_id', 'c.track_id')} AND c.ts >= {t0} AND c.ts < {t1}"
        " GROUP BY ALL ORDER BY c.track_id", params).fetchall()]
    return {"names": names, "transfers": transfers, "counters": counters,
            "busy": busy_time(cur, t0, t1, tracks)}


# -- findings --------------------------------------------------------------------------------------
def findings(con: duckdb.DuckDBPyConnection) -> list[dict]:
    """The `findings` table (a connection with the findings side file attached, Store.connect), as
    FINDING_COLUMNS dicts (a column the file lacks reads None), biggest impact first, then by ts;
    [] when there is no findings table."""
    present = {c for (c,) in con.execute(
        "SELECT column_name FROM duckdb_columns() WHERE table_name = 'findings'").fetchall()}
    sel = ", ".join(f'"{c}"' if c in present else f'NULL AS "{c}"' for c in FINDING_COLUMNS)
    try:
        rows = con.execute(f"SELECT {sel} FROM findings ORDER BY impact_ns DESC NULLS LAST, ts").fetchall()
    except duckdb.CatalogException:
        return []
    return [dict(zip(FINDING_COLUMNS, r)) for r in rows]
