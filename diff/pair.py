"""Two stored traces on one DuckDB connection, and the per-side tables every comparison reads.

Both trace files (and their findings side files, when analysed) are attached read-only, as
`ta`/`tb` and `fa`/`fb`. The temp tables built here carry a `side` column (UTINYINT: 0 for A, 1 for B:
joins on it cost a fraction of a text key), so every later query is written once for both sides. Times stay absolute ns, as stored.
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

    @property
    def code(self) -> str:
        """The side as it is stored in the temp tables' `side` column (a SQL literal)."""
        return f"{SIDES.index(self.side)}::UTINYINT"


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
    """`template` (with {s} = the side's code, {db} = its trace alias) for each side, joined by UNION ALL."""
    return "\nUNION ALL\n".join(template.format(s=x.code, db=x.db) for x in sides.values())


def build_base(con: duckdb.DuckDBPyConnection, sides: dict[str, Side], strip_templates: bool) -> None:
    """_name_list (normalised name <-> name_id, shared by both sides), _tracks, _base (every interval and
    instant slice with its diff lane and name id), _parent (call tree of host tracks), _launch (device
    slice -> the host call that launched it) and _top_ops (ops enclosed by no other op)."""
    con.execute("CREATE TEMP TABLE _names AS " + both(
        sides, f"SELECT {{s}} AS side, name AS raw, {names.sql_expr('name', strip_templates)} AS name"
               " FROM (SELECT DISTINCT name FROM {db}.slices)"))
    # integers, not names, travel through the joins; names come back only for the few result rows
    con.execute("""CREATE TEMP TABLE _name_list AS
        SELECT name, (row_number() OVER (ORDER BY name))::INTEGER AS name_id FROM (SELECT DISTINCT name FROM _names)""")
    native = {s.side: any(f in (s.meta.get("format") or "") for f in NATIVE_FORMATS) for s in sides.values()}
    # devices are matched by rank (first device of A with first of B): the same job on two GPUs
    con.execute("CREATE TEMP TABLE _tracks AS " + both(
        sides, "SELECT {s} AS side, track_id, lane AS store_lane, name AS track_name, group_name,"
               " coalesce(device, group_name) AS dev FROM {db}.tracks WHERE lane <> 'counter'"))
    con.execute("""CREATE TEMP TABLE _devrank AS
        SELECT side, dev, dense_rank() OVER (PARTITION BY side ORDER BY TRY_CAST(dev AS BIGINT) NULLS LAST, dev)
               - 1 AS dev_rank
        FROM (SELECT DISTINCT side, dev FROM _tracks WHERE store_lane IN ('eu', 'pcie'))""")
    con.execute("""CREATE TEMP TABLE _trk AS
        SELECT t.side, t.track_id, t.store_lane, r.dev_rank, CASE WHEN r.dev_rank IS NOT NULL THEN t.dev END AS dev
        FROM _tracks t LEFT JOIN _devrank r ON r.side = t.side AND r.dev = t.dev AND t.store_lane IN ('eu', 'pcie')""")
    lane_sql = (
        "CASE WHEN t.store_lane = 'pcie' OR (t.store_lane = 'eu' AND (s.direction IS NOT NULL"
        " OR s.category ILIKE '%memcpy%')) THEN 'copy'"
        " WHEN t.store_lane = 'eu' THEN 'kernel'"
        " WHEN t.store_lane = 'driver' THEN 'driver'"
        " WHEN t.store_lane = 'annotation' THEN 'annotation'"
        f" WHEN {RUNTIME_CATEGORY_SQL.replace('category', 's.category')} THEN 'runtime'"
        " WHEN s.category IS NULL AND {native} THEN 'runtime'"
        " ELSE 'cpu_op' END")
    parts = []
    for x in sides.values():
        lane = lane_sql.replace("{native}", "TRUE" if native[x.side] else "FALSE")
        parts.append(
            f"SELECT {x.code} AS side, s.slice_id, s.track_id, s.ts, s.dur, s.depth, l.name_id, {lane} AS lane,"
            f" t.store_lane, t.dev_rank, t.dev,"
            f" t.store_lane = 'annotation' OR coalesce({ANNOTATION_CATEGORY_SQL.replace('category', 's.category')}, FALSE)"
            f" AS is_annotation"
            f" FROM {x.db}.slices s JOIN _trk t ON t.side = {x.code} AND t.track_id = s.track_id"
            f" JOIN _names n ON n.side = {x.code} AND n.raw = s.name JOIN _name_list l ON l.name = n.name")
    con.execute("CREATE TEMP TABLE _base AS " + "\nUNION ALL\n".join(parts))
    # the call tree of host-side tracks (cpu, driver, and annotation: ranges that mark time, such as
    # NVTX, where steps may come from): a slice's parent is the latest one a level up that contains it
    con.execute("""CREATE TEMP TABLE _host AS
        SELECT side, slice_id, track_id, ts, dur, depth, depth - 1 AS pdepth, store_lane, name_id, lane,
               lane = 'cpu_op' AND NOT is_annotation AS is_op FROM _base
        WHERE store_lane IN ('cpu', 'driver', 'annotation')""")
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
        WITH hop1 AS (
            SELECT f.side, f.dst_slice AS dev_id, min(f.src_slice) AS src
            FROM _flows f SEMI JOIN _base d ON d.side = f.side AND d.slice_id = f.dst_slice
              AND d.store_lane IN ('eu', 'pcie')
            GROUP BY ALL),
        src AS (
            SELECT h.side, h.dev_id, h.src, b.store_lane, b.depth FROM hop1 h
            JOIN _host b ON b.side = h.side AND b.slice_id = h.src),
        drv AS (
            SELECT s.side, s.dev_id, coalesce(p.parent_id, s.src) AS submit_id FROM src s
            LEFT JOIN _parent p ON p.side = s.side AND p.slice_id = s.src WHERE s.store_lane = 'driver'),
        via AS (
            SELECT d.side, d.dev_id, min(f.src_slice) AS host_id
            FROM drv d JOIN _flows f ON f.side = d.side AND f.dst_slice = d.submit_id
            SEMI JOIN _host c ON c.side = f.side AND c.slice_id = f.src_slice AND c.store_lane = 'cpu'
            GROUP BY ALL)
        SELECT side, dev_id, src AS host_id FROM src WHERE store_lane = 'cpu'
        UNION ALL SELECT * FROM via""")
    # ops that no other op encloses (nested ones end by the latest end before them on their track):
    # disjoint per track, so the outermost op around any host slice is one ASOF lookup
    con.execute("""CREATE TEMP TABLE _top_ops AS
        SELECT side, slice_id, track_id, ts, te, name_id FROM (
            SELECT side, slice_id, track_id, ts, ts + dur AS te, name_id,
                   max(ts + dur) OVER (PARTITION BY side, track_id ORDER BY ts, depth, slice_id
                                       ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_te
            FROM _host WHERE is_op)
        WHERE prev_te IS NULL OR prev_te < te""")


def letter(code: int) -> str:
    """'a' or 'b' for a `side` value read back from SQL."""
    return SIDES[int(code)]


def name_of(con: duckdb.DuckDBPyConnection, name_ids: list[int]) -> dict[int, str]:
    """The normalised names of some name ids."""
    if not name_ids:
        return {}
    ids = ", ".join(str(int(i)) for i in set(name_ids))
    return dict(con.execute(f"SELECT name_id, name FROM _name_list WHERE name_id IN ({ids})").fetchall())
