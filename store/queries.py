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
                   "impact_ns", "exclusive_ns", "impact_basis", "message")
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
# a slice's args text of more characters is not sent whole with its details (a profiler can put a 100 MB
# blob in one event: sent and drawn whole, it crashed the browser tab); slice_args() gives all of it
ARGS_INLINE_MAX = 256 << 10


def args_cut_sql(limit: int, table: str = "") -> str:
    """SQL for a slice's args cut to `limit` characters and their whole length, as the last two columns
    of a row (`table`: the slices' alias and a dot); cut_args() reads them back."""
    return f"left({table}args, {int(limit)}) AS args, length({table}args) AS args_chars"


def cut_args(row: dict, limit: int) -> bool:
    """A row read with args_cut_sql: `args_chars` kept only where the args were cut; whether they were."""
    n = row.pop("args_chars")
    if n is not None and n > limit:
        row["args_chars"] = int(n)
        return True
    return False


def slice_row(cur: duckdb.DuckDBPyConnection, slice_id: int) -> dict | None:
    """Every column of one slice (SLICE_COLUMNS order), args parsed from JSON (kept as text when it
    is not JSON, {} when empty); None when there is no such slice. Args of more than ARGS_INLINE_MAX
    characters come as the text of their first ARGS_INLINE_MAX, with `args_chars` their whole length."""
    cols = ", ".join(c for c in SLICE_COLUMNS if c != "args")
    row = cur.execute(f"SELECT {cols}, {args_cut_sql(ARGS_INLINE_MAX)} FROM slices WHERE slice_id = ?",
                      [slice_id]).fetchone()
    if row is None:
        return None
    s = dict(zip([c for c in SLICE_COLUMNS if c != "args"] + ["args", "args_chars"], row))
    if cut_args(s, ARGS_INLINE_MAX):
        return s
    try:
        s["args"] = json.loads(s["args"]) if s["args"] else {}
    except ValueError:
        pass  # keep the raw text
    return s


def slice_args(cur: duckdb.DuckDBPyConnection, slice_id: int) -> str | None:
    """One slice's args text, whole ("" when it has none); None when there is no such slice."""
    row = cur.execute("SELECT coalesce(args, '') FROM slices WHERE slice_id = ?", [slice_id]).fetchone()
    return None if row is None else row[0]


def track_row(cur: duckdb.DuckDBPyConnection, track_id: int) -> dict | None:
    """One track's TRACK_COLUMNS, or None."""
    row = cur.execute(f"SELECT {', '.join(TRACK_COLUMNS)} FROM tracks WHERE track_id = ?", [track_id]).fetchone()
    return dict(zip(TRACK_COLUMNS, row)) if row else None


def flows_touching(cur: duckdb.DuckDBPyConnection, slice_id: int, limit: int = DIRECT_FLOWS_MAX) -> list[dict]:
    """Every flow (any kind) with this slice at either end, by flow_id, at most `limit`."""
    return [dict(zip(FLOW_COLUMNS, r)) for r in cur.execute(
        f"{_FLOW_SQL} WHERE src_slice = ? OR dst_slice = ? ORDER BY flow_id LIMIT {int(limit)}",
        [slice_id, slice_id]).fetchall()]


BRIEF_COLUMNS = ("slice_id", "track_id", "lane", "ts", "dur", "depth", "name")


def slices_brief(cur: duckdb.DuckDBPyConnection, ids: list[int]) -> list[dict]:
    """BRIEF_COLUMNS (ts absolute, the track's lane) of the slices with these ids that exist, by ts."""
    if not ids:
        return []
    return [dict(zip(BRIEF_COLUMNS, r)) for r in cur.execute(
        "SELECT s.slice_id, s.track_id, t.lane, s.ts, s.dur, s.depth, s.name FROM slices s"
        " JOIN tracks t USING (track_id) WHERE s.slice_id IN (SELECT unnest(?::BIGINT[])) ORDER BY s.ts, s.slice_id",
        [ids]).fetchall()]


def flow_ends(cur: duckdb.DuckDBPyConnection, slice_id: int, flows: list[dict], known: set[int]) -> list[dict]:
    """slices_brief of the far ends of `flows` (each with `slice_id` at one end) not in `known`: what the
    details name a flow's other end by when it is not on the correlation chain (a dependency, an
    External id flow from an op, a flow event's far end)."""
    ends = {f["dst_slice"] if f["src_slice"] == slice_id else f["src_slice"] for f in flows}
    return slices_brief(cur, sorted(e for e in ends if e is not None and e not in known))


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
    slices = [{**r, "hops": hops[r["slice_id"]]} for r in slices_brief(cur, ids)]
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
    track_filter = "TRUE" if tracks is None else "track_id IN (SELECT unnest(?::BIGINT[]))"
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


# -- depths ----------------------------------------------------------------------------------------
def track_depths(cur: duckdb.DuckDBPyConnection) -> list[dict]:
    """Per slice track: `counts` (slices at each depth 0..max_depth, a list) and `launch_depth` (the
    deepest slice of the track that launches device work through a 'launch' flow, None when none): the
    UI shows a deep track down to its launch calls and folds what is deeper (docs/ui.md)."""
    per: dict[int, list[int]] = {}
    for tid, depth, n in cur.execute(
            "SELECT track_id, depth, count(*) FROM slices GROUP BY 1, 2 ORDER BY 1, 2").fetchall():
        row = per.setdefault(int(tid), [])
        row.extend([0] * (int(depth) + 1 - len(row)))
        row[int(depth)] = int(n)
    launch = dict(cur.execute(
        "SELECT s.track_id, max(s.depth) FROM flows f JOIN slices s ON s.slice_id = f.src_slice"
        " WHERE f.kind = 'launch' GROUP BY 1").fetchall())
    return [{"track_id": tid, "max_depth": len(c) - 1, "counts": c,
             "launch_depth": int(launch[tid]) if launch.get(tid) is not None else None}
            for tid, c in sorted(per.items())]


# -- findings, grouped -----------------------------------------------------------------------------
FINDING_GROUPS_MAX = 50   # groups listed per pass (the rest counted: "showing N of M")
FINDING_WORST_MAX = 5     # worst instances listed per group


def findings_grouped(con: duckdb.DuckDBPyConnection, groups_max: int = FINDING_GROUPS_MAX,
                     worst_max: int = FINDING_WORST_MAX) -> list[dict]:
    """The findings table grouped by pass, then by the name of the slice each finding points at (a
    kernel or op name; `(no slice)` when it points at none): per pass its count and total impact (the
    sum of its findings' alone-savings, impact_ns, and of their exclusive shares, exclusive_ns), per
    group its count, total impact and exclusive share, the worst severity and its worst `worst_max` instances (FINDING_COLUMNS
    plus `name`, ts absolute). Passes by total impact; at most `groups_max` groups per pass, biggest
    first, with `groups_total` saying how many there are. [] when there is no findings table."""
    try:
        con.execute("SELECT 1 FROM findings LIMIT 0")
    except duckdb.CatalogException:
        return []
    present = {c for (c,) in con.execute(
        "SELECT column_name FROM duckdb_columns() WHERE table_name = 'findings'").fetchall()}
    sel = ", ".join(f'f."{c}"' if c in present else f'NULL AS "{c}"' for c in FINDING_COLUMNS)
    base = (f"SELECT {sel}, coalesce(s.name, '(no slice)') AS name FROM findings f"
            " LEFT JOIN slices s ON s.slice_id = f.slice_id")
    cols = FINDING_COLUMNS + ("name",)
    passes = con.execute(
        f"SELECT pass, count(*), coalesce(sum(impact_ns), 0)::BIGINT, count(DISTINCT name),"
        f" coalesce(sum(exclusive_ns), 0)::BIGINT FROM ({base}) GROUP BY 1 ORDER BY 3 DESC, 5 DESC, 1").fetchall()
    sev_rank = "CASE severity WHEN 'error' THEN 3 WHEN 'warning' THEN 2 WHEN 'info' THEN 1 ELSE 0 END"
    groups = con.execute(
        f"SELECT pass, name, count(*), coalesce(sum(impact_ns), 0)::BIGINT, max({sev_rank}),"
        f" row_number() OVER (PARTITION BY pass ORDER BY coalesce(sum(impact_ns), 0) DESC,"
        f" coalesce(sum(exclusive_ns), 0) DESC, count(*) DESC, name) AS rk, coalesce(sum(exclusive_ns), 0)::BIGINT"
        f" FROM ({base}) GROUP BY 1, 2 QUALIFY rk <= {int(groups_max)} ORDER BY 1, rk").fetchall()
    worst = con.execute(
        f"SELECT * FROM (SELECT *, row_number() OVER (PARTITION BY pass, name ORDER BY impact_ns DESC NULLS LAST,"
        f" exclusive_ns DESC NULLS LAST, ts)"
        f" AS wk FROM ({base})) WHERE wk <= {int(worst_max)} ORDER BY pass, name, wk").fetchall()
    inst: dict[tuple, list[dict]] = {}
    for r in worst:
        d = dict(zip(cols, r[:len(cols)]))
        inst.setdefault((d["pass"], d["name"]), []).append(d)
    sev_name = {3: "error", 2: "warning", 1: "info", 0: None}
    by_pass: dict[str, list[dict]] = {}
    for p, name, n, impact, sev, _, excl in groups:
        by_pass.setdefault(p, []).append({"name": name, "count": int(n), "impact_ns": int(impact), "exclusive_ns": int(excl),
                                          "severity": sev_name.get(int(sev or 0)), "worst": inst.get((p, name), [])})
    return [{"pass": p, "count": int(n), "impact_ns": int(impact), "exclusive_ns": int(excl), "groups_total": int(ng),
             "groups": by_pass.get(p, [])} for p, n, impact, ng, excl in passes]


CRITICAL_PATH_MAX_SEGMENTS = 4000  # segments one answer carries at most (more are merged per bucket)


def critical_path(con: duckdb.DuckDBPyConnection, t0: int, t1: int, max_segments: int = CRITICAL_PATH_MAX_SEGMENTS,
                  run_ns: int | None = None) -> dict | None:
    """The critical path the analysis stored (side table `critical_path`, absolute ns): its time per
    segment type over the whole path, and its segments overlapping [t0, t1) -- at most max_segments:
    where more overlap, one per equal time bucket (the longest segment's type and track, `merged` how
    many it stands for). None when the trace has not been analysed with the replay."""
    try:
        (n_all, path_ns, first, last) = con.execute(
            "SELECT count(*), coalesce(sum(end_ns - start_ns), 0), min(start_ns), max(end_ns) FROM critical_path"
        ).fetchone()
    except duckdb.CatalogException:
        return None
    by = dict(con.execute("SELECT type, sum(end_ns - start_ns)::BIGINT FROM critical_path GROUP BY 1 ORDER BY 2 DESC"
                          ).fetchall())
    t0, t1, cap = int(t0), int(t1), max(1, int(max_segments))
    (n,) = con.execute("SELECT count(*) FROM critical_path WHERE end_ns > ? AND start_ns < ?", [t0, t1]).fetchone()
    cols = ("start_ns", "end_ns", "type", "slice_id", "track_id", "merged")
    if n <= cap:
        rows = con.execute("SELECT start_ns, end_ns, type, slice_id, track_id, 1 FROM critical_path"
                           " WHERE end_ns > ? AND start_ns < ? ORDER BY seq", [t0, t1]).fetchall()
    else:
        width = max(1, -(-(t1 - t0) // cap))
        rows = con.execute(
            "SELECT min(start_ns), max(end_ns), arg_max(type, end_ns - start_ns), arg_max(slice_id, end_ns - start_ns),"
            " arg_max(track_id, end_ns - start_ns), count(*) FROM critical_path WHERE end_ns > ? AND start_ns < ?"
            " GROUP BY (greatest(start_ns, ?) - ?) // ? ORDER BY 1", [t0, t1, t0, t0, width]).fetchall()
    return {"segments_total": int(n_all), "path_ns": int(path_ns), "first_ns": first, "last_ns": last,
            "by_type_ns": {k: int(v) for k, v in by.items()}, "in_window": int(n), "merged": n > cap,
            "segments": [dict(zip(cols, r)) for r in rows]}


def analysis_status(con: duckdb.DuckDBPyConnection) -> list[dict]:
    """Each pass's row of the analysis_status table (pass, status: ran | not applicable | failed |
    not selected, reason, n_findings, impact_ns, n_candidates, elapsed_ms); [] when absent."""
    try:
        cur = con.execute("SELECT * FROM analysis_status ORDER BY pass")
    except duckdb.CatalogException:
        return []
    cols = [d[0] for d in cur.description]
    return [dict(zip(cols, r)) for r in cur.fetchall()]
