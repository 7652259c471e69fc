"""Two stored traces on one DuckDB connection, and the per-side tables every comparison reads.

Both trace files (and their findings side files, when analysed) are attached read-only, as
`ta`/`tb` and `fa`/`fb`. The temp tables built here carry a `side` column ('a' or 'b'), so every
later query is written once for both sides. Times stay absolute ns, as stored.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import duckdb

from acceltrace.diff import names
from acceltrace.store.catalog import Store
from acceltrace.store.schema import CHAIN_FLOW_KINDS

SIDES = ("a", "b")
# Kineto steps: "ProfilerStep#N"
PROFILER_STEP_RE = r"ProfilerStep#[0-9]+"
# categories of runtime and driver API calls on the cpu lane (Kineto, nsys); native traces'
# cpu lane holds runtime calls only (DESIGN.md), their category is empty
RUNTIME_CATEGORY_SQL = "(category ILIKE '%runtime%' OR category ILIKE '%driver%')"
ANNOTATION_CATEGORY_SQL = "(category ILIKE '%annotation%' OR category ILIKE 'nvtx%')"
NATIVE_FORMATS = ("atrace",)


@dataclass
class Side:
    side: str
    trace_id: str
    db: str                    # the attached trace's alias
    findings_db: str | None    # the attached findings side file's alias, or None when not analysed
    meta: dict[str, str] = field(default_factory=dict)


def _q(path: os.PathLike | str) -> str:
    return str(path).replace("'", "''")


def open_pair(store: Store, id_a: str, id_b: str) -> tuple[duckdb.DuckDBPyConnection, dict[str, Side]]:
    """A connection with both traces attached read-only; FileNotFoundError names a missing trace."""
    con = duckdb.connect(":memory:")
    sides: dict[str, Side] = {}
    for s, tid in zip(SIDES, (id_a, id_b)):
        path = store.trace_path(tid)
        if not path.exists():
            con.close()
            raise FileNotFoundError(f"trace {tid} not found in {store.root}")
        if s == "b" and tid == id_a:  # the same trace twice: one attachment serves both sides
            sides["b"] = Side("b", tid, sides["a"].db, sides["a"].findings_db, dict(sides["a"].meta))
            continue
        con.execute(f"ATTACH '{_q(path)}' AS t{s} (READ_ONLY)")
        fdb = None
        fp = store.side_path(tid, "findings")
        if fp.exists():
            try:
                con.execute(f"ATTACH '{_q(fp)}' AS f{s} (READ_ONLY)")
                fdb = f"f{s}"
            except duckdb.Error:
                fdb = None  # being replaced right now: compare without findings, and say so
        meta = dict(con.execute(f"SELECT key, value FROM t{s}.trace_meta").fetchall())
        sides[s] = Side(s, tid, f"t{s}", fdb, meta)
    return con, sides


def both(sides: dict[str, Side], template: str) -> str:
    """`template` (with {s} = side letter, {db} = its trace alias) for each side, joined by UNION ALL."""
    return "\nUNION ALL\n".join(template.format(s=f"'{x.side}'", db=x.db) for x in sides.values())


def build_base(con: duckdb.DuckDBPyConnection, sides: dict[str, Side], strip_templates: bool) -> None:
    """_names, _tracks, _base (every interval/instant slice with its diff lane and normalised name),
    _parent (call tree of host tracks) and _launch (device slice -> launching host slice)."""
    con.execute("CREATE TEMP TABLE _names AS " + both(
        sides, f"SELECT {{s}} AS side, name AS raw, {names.sql_expr('name', strip_templates)} AS name"
               " FROM (SELECT DISTINCT name FROM {db}.slices)"))
    native = {s.side: any(f in (s.meta.get("format") or "") for f in NATIVE_FORMATS) for s in sides.values()}
    # devices are matched by rank (first device of A with first of B): the same job on two GPUs
    con.execute("CREATE TEMP TABLE _tracks AS " + both(
        sides, "SELECT {s} AS side, track_id, lane AS store_lane, name AS track_name, group_name,"
               " coalesce(device, group_name) AS dev FROM {db}.tracks WHERE lane <> 'counter'"))
    con.execute("""CREATE TEMP TABLE _devrank AS
        SELECT side, dev, dense_rank() OVER (PARTITION BY side ORDER BY TRY_CAST(dev AS BIGINT) NULLS LAST, dev)
               - 1 AS dev_rank
        FROM (SELECT DISTINCT side, dev FROM _tracks WHERE store_lane IN ('eu', 'pcie'))""")
    lane_sql = (
        "CASE WHEN t.store_lane = 'pcie' OR (t.store_lane = 'eu' AND (s.direction IS NOT NULL"
        " OR s.category ILIKE '%memcpy%')) THEN 'copy'"
        " WHEN t.store_lane = 'eu' THEN 'kernel'"
        " WHEN t.store_lane = 'driver' THEN 'driver'"
        f" WHEN {RUNTIME_CATEGORY_SQL.replace('category', 's.category')} THEN 'runtime'"
        " WHEN s.category IS NULL AND {native} THEN 'runtime'"
        " ELSE 'cpu_op' END")
    parts = []
    for x in sides.values():
        lane = lane_sql.replace("{native}", "TRUE" if native[x.side] else "FALSE")
        parts.append(
            f"SELECT '{x.side}' AS side, s.slice_id, s.track_id, s.ts, s.dur, s.depth, n.name, {lane} AS lane,"
            f" t.store_lane, r.dev_rank, CASE WHEN r.dev_rank IS NOT NULL THEN t.dev END AS dev,"
            f" coalesce({ANNOTATION_CATEGORY_SQL.replace('category', 's.category')}, FALSE) AS is_annotation"
            f" FROM {x.db}.slices s JOIN _tracks t ON t.side = '{x.side}' AND t.track_id = s.track_id"
            f" JOIN _names n ON n.side = '{x.side}' AND n.raw = s.name"
            f" LEFT JOIN _devrank r ON r.side = '{x.side}' AND r.dev = t.dev AND t.store_lane IN ('eu', 'pcie')")
    con.execute("CREATE TEMP TABLE _base AS " + "\nUNION ALL\n".join(parts))
    # the call tree of host-side tracks: a slice's parent is the latest one a level up that contains it
    con.execute("""CREATE TEMP TABLE _host AS
        SELECT side, slice_id, track_id, ts, dur, depth, depth - 1 AS pdepth FROM _base
        WHERE store_lane IN ('cpu', 'driver')""")
    con.execute("""CREATE TEMP TABLE _parent AS
        SELECT c.side, c.slice_id, p.slice_id AS parent_id,
               least(c.ts + c.dur, p.ts + p.dur) - c.ts AS clipped_dur
        FROM _host c ASOF JOIN _host p
          ON p.side = c.side AND p.track_id = c.track_id AND p.depth = c.pdepth AND c.ts >= p.ts
        WHERE c.depth > 0 AND p.ts + p.dur >= c.ts""")
    kinds = ", ".join(f"'{k}'" for k in CHAIN_FLOW_KINDS)
    con.execute("CREATE TEMP TABLE _flows AS " + both(
        sides, f"SELECT {{s}} AS side, src_slice, dst_slice FROM {{db}}.flows WHERE kind IN ({kinds})"
               " AND src_slice IS NOT NULL AND dst_slice IS NOT NULL"))
    # device work -> the host call behind it: one flow back (Kineto: runtime call -> kernel), or
    # two when a driver record sits between (native: API call -> submit, doorbell inside it -> work)
    con.execute("""CREATE TEMP TABLE _launch AS
        WITH dev AS (SELECT side, slice_id FROM _base WHERE lane IN ('kernel', 'copy')),
        hop1 AS (
            SELECT d.side, d.slice_id AS dev_id, min(f.src_slice) AS src
            FROM dev d JOIN _flows f ON f.side = d.side AND f.dst_slice = d.slice_id GROUP BY ALL),
        src AS (
            SELECT h.side, h.dev_id, h.src, b.store_lane, coalesce(p.parent_id, h.src) AS submit_id
            FROM hop1 h JOIN _base b ON b.side = h.side AND b.slice_id = h.src
            LEFT JOIN _parent p ON p.side = h.side AND p.slice_id = h.src AND b.store_lane = 'driver')
        SELECT side, dev_id, src AS host_id FROM src WHERE store_lane = 'cpu'
        UNION ALL
        SELECT s.side, s.dev_id, min(f.src_slice) AS host_id
        FROM src s JOIN _flows f ON f.side = s.side AND f.dst_slice = s.submit_id
        JOIN _base b ON b.side = s.side AND b.slice_id = f.src_slice AND b.store_lane = 'cpu'
        WHERE s.store_lane = 'driver' GROUP BY ALL""")
