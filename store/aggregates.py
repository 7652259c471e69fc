"""Aggregate views of a time range: call trees (CPU stacks, or device work under the ops that launched
it; top-down or bottom-up) and the op-to-device rollup, in SQL over the stored slices.

- A slice's parent is the latest slice of its track one level up that starts at or before it
  (an ASOF join: depths nest by construction, store/schema.py), so no parent column is needed.
- Times are clipped to the range [t0, t1): a slice overlapping the range counts for its part
  inside it; a slice's self time is its clipped time minus its children's clipped time.
- A top-down node is a path of names from a root (depth 0); a bottom-up node is a path of names
  from a frame up through its callers, and holds the self time of the frames it starts from, so
  the roots of both trees sum to the same total self time.
- Device source: each kernel, memset or copy of the range (clipped) is a leaf frame under the CPU
  call that carries its correlation id (the earliest, as the chain does), under that call's
  callers; a CPU frame's time is the device time launched beneath it, its self time 0. Work whose
  correlation id no CPU slice carries sits under one "(no launching call)" root.
- The rollup credits every CPU slice (op, annotation, runtime call) with the device work its
  correlation chains launched: a kernel, memset or copy whose correlation id a runtime call
  nested inside that slice carries (inclusive, like total time: nested ops each get it).

The whole trace is asked for most and costs most, so `build` runs the same statements once at
ingest over all of it into `agg_tree`, `agg_totals` and `agg_rollup` (docs/schema.md), and a
request for the whole trace (no track filter) reads those; a window is computed from the slices.
"""

from __future__ import annotations

import time

import duckdb

from acceltrace.store.duck import insert_rows
from acceltrace.store.frames import (LAUNCHES_SQL, build_frames, build_source, device_frames, device_work, node_sql,
                                     rollup_sql, totals_sql)

NODES_MAX = 5000  # tree nodes returned; the rest of a level is folded into "(other)"
ROLLUP_MAX = 1000
AGG_VERSION = "3"  # bump when a precomputed table's meaning changes; older traces compute live

MODES = ("top-down", "bottom-up")
SOURCES = ("cpu", "device")
_NODE_KEYS = ("name", "count", "total_ns", "self_ns", "p95_ns", "slice_id", "lane")
ROLLUP_KEYS = ("name", "count", "host_ns", "device_ns", "copy_ns", "bytes", "kernels", "copies")


# -- the precomputed whole trace ------------------------------------------------------------------------
def _precomputed(cur) -> dict | None:
    """agg_info when this trace has the precomputed tables of this version (a trace ingested before
    them, or whose precompute failed, answers from the slices)."""
    try:
        info = dict(cur.execute("SELECT key, value FROM agg_info").fetchall())
    except duckdb.CatalogException:
        return None
    return info if info.get("version") == AGG_VERSION else None


def _whole_trace(cur, t0: int, t1: int, tracks) -> bool:
    """Whether [t0, t1) without a track filter covers every slice of a precomputed trace."""
    info = None if tracks else _precomputed(cur)
    return info is not None and t0 <= int(info["start_ns"]) and t1 > int(info["end_ns"])


_AGG_TABLES = ("agg_tree", "agg_totals", "agg_rollup", "agg_launch", "agg_info")
_TEMP_TABLES = ("_range", "_parents", "_paths", "_frames", "_cpun", "_cpuname", "_work", "_dcalls", "_dwork", "_dn",
                "_dname")


def build(con: duckdb.DuckDBPyConnection) -> float:
    """Create agg_tree, agg_totals, agg_rollup and agg_info over the whole trace (build_side: in the
    views side file, after the trace is published): the statements a request runs, once.
    Returns the seconds it took. A precompute that fails (out of memory on a huge trace) leaves
    only agg_info saying why: the trace is still published and its views compute from the slices."""
    started = time.perf_counter()
    (order,) = con.execute("SELECT current_setting('preserve_insertion_order')").fetchone()
    con.execute("SET preserve_insertion_order = false")  # no table here relies on row order
    try:
        t0, t1 = _build_tables(con)
        info = [("version", AGG_VERSION), ("start_ns", str(t0)), ("end_ns", str(t1 - 1))]
    except duckdb.Error as e:
        for name in _AGG_TABLES:
            con.execute(f"DROP TABLE IF EXISTS {name}")
        info = [("version", "none"), ("error", f"{type(e).__name__}: {str(e).splitlines()[0][:300]}")]
    finally:
        for name in _TEMP_TABLES:
            con.execute(f"DROP TABLE IF EXISTS {name}")
        con.execute(f"SET preserve_insertion_order = {'true' if order else 'false'}")
    took = time.perf_counter() - started
    con.execute("CREATE OR REPLACE TABLE agg_info (key VARCHAR, value VARCHAR)")
    insert_rows(con, "agg_info", [*info, ("build_s", f"{took:.3f}")])
    return took


VIEWS_SIDE = "views"  # traces/<id>.views.duckdb: the agg_* tables


def build_side(store, trace_id: str) -> float:
    """The precompute as a side file of a published trace (traces/<id>.views.duckdb), written after
    publication so it never delays the time to a viewable trace; until it exists (and for a trace
    stored before it), the views compute from the slices. Returns the seconds build() took."""
    took = 0.0

    def make(con: duckdb.DuckDBPyConnection) -> None:
        nonlocal took
        con.execute(f"ATTACH '{str(store.trace_path(trace_id)).replace(chr(39), chr(39) * 2)}' AS trace (READ_ONLY)")
        # the precompute's statements name the trace's tables bare: temp views (not stored) point at them
        for (name,) in con.execute("SELECT table_name FROM duckdb_tables() WHERE database_name = 'trace'").fetchall():
            con.execute(f'CREATE TEMP VIEW "{name}" AS SELECT * FROM trace."{name}"')
        took = build(con)

    store.write_side(trace_id, VIEWS_SIDE, make)
    return took


def _build_tables(con) -> tuple[int, int]:
    t0, t1 = con.execute("SELECT coalesce(min(ts), 0), coalesce(max(ts + dur), 0) FROM slices").fetchone()
    t0, t1 = int(t0), int(t1) + 1
    con.execute("""CREATE OR REPLACE TABLE agg_tree (source VARCHAR, mode VARCHAR, node UBIGINT, parent_node UBIGINT,
                   name VARCHAR, count BIGINT, total_ns BIGINT, self_ns BIGINT, p95_ns BIGINT, slice_id BIGINT,
                   lane VARCHAR)""")
    con.execute("CREATE OR REPLACE TABLE agg_totals (source VARCHAR, mode VARCHAR, total_ns BIGINT, self_total_ns BIGINT)")
    # one set of frames serves every tree: on the whole trace the device source's launching calls
    # are all among the CPU frames
    build_frames(con, t0, t1, [])
    con.execute(f"CREATE OR REPLACE TABLE agg_launch AS {LAUNCHES_SQL}")
    device_work(con, t0, t1, [], launches=True)
    device_frames(con)
    for source in SOURCES:
        totals = con.execute(totals_sql(source)).fetchone()
        for mode in MODES:
            con.execute(f"INSERT INTO agg_tree SELECT '{source}', '{mode}', * FROM ({node_sql(mode, source)})")
            con.execute("INSERT INTO agg_totals VALUES (?, ?, ?, ?)", [source, mode, *totals])
    con.execute(f"CREATE OR REPLACE TABLE agg_rollup AS SELECT row_number() OVER "
                f"(ORDER BY device_ns DESC, host_ns DESC, name) AS rank, * FROM ({rollup_sql(t0, t1)})")
    return t0, t1


# -- the views -------------------------------------------------------------------------------------------
def call_tree(cur: duckdb.DuckDBPyConnection, t0: int, t1: int, tracks: list[int] | None = None,
              mode: str = "top-down", source: str = "cpu", precomputed: bool = True) -> dict:
    """The tree of a range: {"name", "count", "total_ns", "self_ns", "p95_ns", "slice_id", "lane",
    "children": [...]} under a root. p95_ns: the 95th percentile (nearest rank) of the node's per-slice
    time in the range: clipped duration top-down, self time of the start frames bottom-up; slice_id:
    the node's longest slice. `precomputed=False` computes a whole-trace request from the slices."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}")
    if source not in SOURCES:
        raise ValueError(f"source must be one of {', '.join(SOURCES)}")
    if precomputed and _whole_trace(cur, t0, t1, tracks):
        nodes = "SELECT node, parent_node, name, count, total_ns, self_ns, p95_ns, slice_id, lane FROM agg_tree" \
                f" WHERE source = '{source}' AND mode = '{mode}'"
        totals = cur.execute("SELECT total_ns, self_total_ns FROM agg_totals WHERE source = ? AND mode = ?",
                             [source, mode]).fetchone() or (0, 0)
    else:
        build_source(cur, t0, t1, tracks, source, launches=_precomputed(cur) is not None)
        nodes = node_sql(mode, source)
        totals = cur.execute(totals_sql(source)).fetchone()
    root_total, total_self = (int(v or 0) for v in totals)
    tree = _assemble(cur.execute(_top_nodes_sql(nodes)).fetchall(), root_total if mode == "top-down" else total_self,
                     total_self)
    tree["source"], tree["mode"] = source, mode
    return tree


def _top_nodes_sql(nodes: str) -> str:
    """The NODES_MAX nodes of largest total (a child's total never exceeds its parent's, so they hang
    together from the root; ties are dropped in _assemble), and per parent of one of them (or the root)
    its children's number, count, total and self time: what a folded "(other: N more)" node holds."""
    return f"""
        WITH n(node, parent_node, name, count, total_ns, self_ns, p95_ns, slice_id, lane) AS MATERIALIZED ({nodes}),
        top AS (SELECT * FROM n ORDER BY total_ns DESC, name, node LIMIT {NODES_MAX})
        SELECT TRUE, node, parent_node, name, count, total_ns, self_ns, p95_ns, slice_id, lane FROM top
        UNION ALL
        SELECT FALSE, parent_node, NULL, NULL, count(*), sum(count), sum(total_ns), sum(self_ns), NULL, NULL FROM n
        WHERE parent_node IS NULL OR parent_node IN (SELECT node FROM top) GROUP BY parent_node"""


def _assemble(rows: list[tuple], root_total: int, root_self_total: int) -> dict:
    kids: dict = {}
    siblings: dict = {}
    for is_node, node, parent, *vals in rows:
        if not is_node:  # (parent, -, -, -, children, their count, total, self)
            siblings[node] = tuple(int(v or 0) for v in vals[1:5])
            continue
        n = dict(zip(_NODE_KEYS, vals))
        for k in ("count", "total_ns", "self_ns"):
            n[k] = int(n[k] or 0)
        n["p95_ns"] = None if n["p95_ns"] is None else int(n["p95_ns"])
        if n["slice_id"] is not None and n["slice_id"] < 0:  # the "(no launching call)" root is no slice
            n["slice_id"] = None
        n["id"] = node
        kids.setdefault(parent, []).append(n)
    truncated = [False]

    def build(parent) -> list[dict]:
        out = sorted(kids.get(parent, ()), key=lambda n: (-n["total_ns"], n["name"]))
        for n in out:
            n["children"] = build(n.pop("id"))
        n_all, count, total, self_ns = siblings.get(parent, (0, 0, 0, 0))
        if n_all > len(out):  # the rest of this level, folded
            truncated[0] = True
            out.append({"name": f"(other: {n_all - len(out)} more)", "count": count - sum(c["count"] for c in out),
                        "total_ns": total - sum(c["total_ns"] for c in out),
                        "self_ns": self_ns - sum(c["self_ns"] for c in out),
                        "p95_ns": None, "slice_id": None, "lane": None, "children": [], "truncated": True})
        return out

    children = build(None)
    return {"name": "(root)", "count": sum(c["count"] for c in children), "total_ns": root_total,
            "self_ns": 0, "p95_ns": None, "slice_id": None, "lane": None, "children": children,
            "self_total_ns": root_self_total, "truncated": truncated[0]}


def rollup(cur: duckdb.DuckDBPyConnection, t0: int, t1: int, limit: int = ROLLUP_MAX,
           precomputed: bool = True) -> list[dict]:
    """Per CPU slice name: its count and host time in the range, and the device time, copy time and
    bytes of the device work of the range launched from inside it ({"name", "count", "host_ns",
    "device_ns", "copy_ns", "bytes", "kernels", "copies"}), largest device time first."""
    if precomputed and _whole_trace(cur, t0, t1, None):
        rows = cur.execute(f"SELECT {', '.join(ROLLUP_KEYS)} FROM agg_rollup ORDER BY rank LIMIT ?",
                           [int(limit)]).fetchall()
    else:
        build_frames(cur, t0, t1, [])
        device_work(cur, t0, t1, [], launches=_precomputed(cur) is not None)
        device_frames(cur)
        rows = cur.execute(f"{rollup_sql(t0, t1)} LIMIT {int(limit)}").fetchall()
    return [dict(zip(ROLLUP_KEYS, r)) for r in rows]
