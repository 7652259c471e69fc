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

NODES_MAX = 5000  # tree nodes returned; the rest of a level is folded into "(other)"
ROLLUP_MAX = 1000
MAX_DEPTH = 512  # ancestor walks stop here (deeper stacks than any profiler writes)
AGG_VERSION = "1"  # bump when a precomputed table's meaning changes; older traces compute live
NO_LAUNCH = "(no launching call)"

MODES = ("top-down", "bottom-up")
SOURCES = ("cpu", "device")
_NODE_KEYS = ("name", "count", "total_ns", "self_ns", "p95_ns", "slice_id", "lane")
ROLLUP_KEYS = ("name", "count", "host_ns", "device_ns", "copy_ns", "bytes", "kernels", "copies")


# -- frames: the slices a tree is built from ----------------------------------------------------------
def _build_frames(cur, t0: int, t1: int, tracks: list[int]) -> None:
    """Temp table `_frames(slice_id, track_id, ts, te, parent, name, cdur, self_dur, node, parent_node)`: the CPU
    slices of [t0, t1), clipped, with their parent, self time and top-down path node (hash of the
    names from the root: one recursive step per level)."""
    where = f" AND s.track_id IN ({', '.join(f'${i + 3}' for i in range(len(tracks)))})" if tracks else ""
    cur.execute(f"""
        CREATE OR REPLACE TEMP TABLE _range AS
        SELECT s.slice_id, s.track_id, s.ts, s.ts + s.dur AS te, s.depth, s.name,
               least(s.ts + s.dur, $1) - greatest(s.ts, $2) AS cdur
        FROM slices s JOIN tracks t USING (track_id)
        WHERE t.lane = 'cpu' AND s.dur > 0 AND s.ts < $1 AND s.ts + s.dur > $2{where}""",
                [int(t1), int(t0), *tracks])
    cur.execute("""
        CREATE OR REPLACE TEMP TABLE _frames AS
        SELECT c.slice_id, c.track_id, c.ts, c.te, c.name, c.cdur, p.slice_id AS parent
        FROM _range c ASOF LEFT JOIN _range p
          ON p.track_id = c.track_id AND p.depth = c.depth - 1 AND p.ts <= c.ts""")
    cur.execute(f"""
        CREATE OR REPLACE TEMP TABLE _frames AS
        WITH RECURSIVE walk(slice_id, node, parent_node, lvl) AS (
            SELECT slice_id, hash(name, 0), NULL::UBIGINT, 0 FROM _frames WHERE parent IS NULL
            UNION ALL
            SELECT f.slice_id, hash(f.name, w.node), w.node, w.lvl + 1
            FROM _frames f JOIN walk w ON f.parent = w.slice_id
            WHERE w.lvl < {MAX_DEPTH}
        )
        SELECT f.slice_id, f.track_id, f.ts, f.te, f.parent, f.name, f.cdur, f.cdur - coalesce(k.child_dur, 0) AS self_dur,
               w.node, w.parent_node
        FROM _frames f JOIN walk w USING (slice_id)
        LEFT JOIN (SELECT parent, sum(cdur) AS child_dur FROM _frames
                   WHERE parent IS NOT NULL GROUP BY parent) k ON k.parent = f.slice_id""")
    cur.execute("DROP TABLE _range")


def _device_work(cur, t0: int, t1: int, tracks: list[int]) -> None:
    """Temp table `_work`: the kernels, memsets and copies of [t0, t1), clipped, with the call that
    launched each (the earliest CPU or driver slice carrying its correlation id), its time, lane and
    CPU thread (a driver track's: the cpu track of the same process and thread). With tracks: a
    device track keeps its own work, a CPU or driver thread what it launched."""
    cur.execute("""
        CREATE OR REPLACE TEMP TABLE _work AS
        WITH w AS (
            SELECT d.slice_id, d.track_id, d.name, t.lane, d.corr_id, d.bytes,
                   least(d.ts + d.dur, $1) - greatest(d.ts, $2) AS cdur
            FROM slices d JOIN tracks t USING (track_id)
            WHERE t.lane IN ('eu', 'pcie') AND d.dur > 0 AND d.ts < $1 AND d.ts + d.dur > $2
        ),
        launches AS (
            SELECT s.corr_id, arg_min(s.slice_id, s.ts) AS launch, arg_min(s.track_id, s.ts) AS call_track,
                   min(s.ts) AS launch_ts
            FROM slices s JOIN tracks t USING (track_id)
            WHERE t.lane IN ('cpu', 'driver') AND s.dur > 0
              AND s.corr_id IN (SELECT corr_id FROM w WHERE corr_id IS NOT NULL)
            GROUP BY s.corr_id
        ),
        hosts AS (
            SELECT t.track_id, t.lane, CASE WHEN t.lane = 'cpu' THEN t.track_id ELSE min(c.track_id) END AS host
            FROM tracks t LEFT JOIN tracks c ON c.lane = 'cpu' AND c.process = t.process AND c.thread = t.thread
            WHERE t.lane IN ('cpu', 'driver') GROUP BY t.track_id, t.lane
        )
        SELECT w.*, l.launch, l.launch_ts, l.call_track, h.lane AS launch_lane, h.host AS launch_track
        FROM w LEFT JOIN launches l USING (corr_id) LEFT JOIN hosts h ON h.track_id = l.call_track""",
                [int(t1), int(t0)])
    if tracks:
        marks = ", ".join("?" for _ in tracks)
        cur.execute(f"DELETE FROM _work WHERE NOT (track_id IN ({marks}) OR coalesce(launch_track, -1) IN ({marks})"
                    f" OR coalesce(call_track, -1) IN ({marks}))", tracks * 3)


def _build(cur, t0: int, t1: int, tracks, source: str) -> None:
    """The temp tables a tree of `source` is read from: `_frames` for cpu; for device also `_work` and
    `_dwork` (the work as leaves under their launching calls' nodes)."""
    tracks = [int(t) for t in tracks or ()]
    if source == "cpu":
        _build_frames(cur, t0, t1, tracks)
        return
    _device_work(cur, t0, t1, tracks)
    # the launching calls and their callers: CPU frames from the earliest launch (a kernel in the
    # range may have been launched before it) to the range's end, on the launching threads
    (first_launch,) = cur.execute("SELECT min(launch_ts) FROM _work").fetchone()
    launch_tracks = [r[0] for r in cur.execute(
        "SELECT DISTINCT launch_track FROM _work WHERE launch_track IS NOT NULL").fetchall()]
    _build_frames(cur, min(int(t0), int(first_launch if first_launch is not None else t0)), t1, launch_tracks or [-1])
    _device_frames(cur)


def _device_frames(cur) -> None:
    """`_dcalls`: the launching calls on driver tracks, each under the CPU frame of its thread it ran
    inside (the deepest one containing its start; none: a root); `_dwork`: the work as leaves under
    the top-down node of its launching call (work whose call is not among the frames or driver calls
    under one "(no launching call)" root, node 2)."""
    cur.execute(f"""
        CREATE OR REPLACE TEMP TABLE _dcalls AS
        WITH RECURSIVE d AS (
            SELECT DISTINCT w.launch, w.launch_track AS host_track, s.ts, s.dur, s.name
            FROM _work w JOIN slices s ON s.slice_id = w.launch WHERE w.launch_lane = 'driver'
        ),
        cand AS (SELECT d.launch, f.slice_id AS frame FROM d ASOF LEFT JOIN _frames f
                 ON f.track_id = d.host_track AND f.ts <= d.ts),
        climb(launch, frame, lvl) AS (  -- the latest frame to start before the call, or its callers
            SELECT launch, frame, 0 FROM cand
            UNION ALL
            SELECT c.launch, f.parent, c.lvl + 1
            FROM climb c JOIN _frames f ON f.slice_id = c.frame JOIN d ON d.launch = c.launch
            WHERE f.te <= d.ts AND c.lvl < {MAX_DEPTH}
        ),
        host AS (SELECT c.launch, f.node FROM climb c JOIN _frames f ON f.slice_id = c.frame JOIN d USING (launch)
                 WHERE f.te > d.ts)
        SELECT d.launch AS slice_id, d.name, d.ts, d.dur, h.node AS parent_node, hash(d.name, coalesce(h.node, 0)) AS node
        FROM d LEFT JOIN host h USING (launch)""")
    cur.execute("""
        CREATE OR REPLACE TEMP TABLE _dwork AS
        SELECT w.slice_id, w.name, w.lane, w.cdur, w.bytes, coalesce(f.node, c.node, 2) AS parent_node,
               hash(w.name, coalesce(f.node, c.node, 2)) AS node
        FROM _work w LEFT JOIN _frames f ON f.slice_id = w.launch LEFT JOIN _dcalls c ON c.slice_id = w.launch""")


def _cpu_credit_sql() -> str:
    """Per top-down CPU node: the device work launched at it or below (eu time, pcie time, bytes,
    kernel and copy counts), walked up the node tree (a few rows per distinct path, not per slice)."""
    return f"""
        WITH RECURSIVE nodes AS (SELECT DISTINCT node, parent_node FROM _frames
                                 UNION SELECT DISTINCT node, parent_node FROM _dcalls),
        at_node AS (
            SELECT parent_node AS node, coalesce(sum(cdur) FILTER (WHERE lane = 'eu'), 0) AS dev,
                   coalesce(sum(cdur) FILTER (WHERE lane = 'pcie'), 0) AS cp,
                   coalesce(sum(bytes) FILTER (WHERE lane = 'pcie'), 0) AS b,
                   count(*) FILTER (WHERE lane = 'eu') AS nk, count(*) FILTER (WHERE lane = 'pcie') AS nc
            FROM _dwork WHERE parent_node <> 2 GROUP BY parent_node
        ),
        up(node, dev, cp, b, nk, nc, lvl) AS (
            SELECT node, dev, cp, b, nk, nc, 0 FROM at_node
            UNION ALL
            SELECT n.parent_node, u.dev, u.cp, u.b, u.nk, u.nc, u.lvl + 1
            FROM up u JOIN nodes n ON n.node = u.node WHERE n.parent_node IS NOT NULL AND u.lvl < {MAX_DEPTH}
        )
        SELECT node, sum(dev) AS dev, sum(cp) AS cp, sum(b) AS b, sum(nk) AS nk, sum(nc) AS nc FROM up GROUP BY node"""


def _bottom_up_sql(groups: str, firsts: str, calls: bool) -> str:
    """Bottom-up nodes from start groups `groups(caller, name, lane, n, t, maxv, longest)` (the frames of
    one top-down node: their count, self time, longest; `caller` the top-down node of their caller),
    walked up the CPU node tree: a node's count and self time are exact; its p95 is the nearest-rank
    percentile of one frame's self time at the first level (`firsts(name, p95)`), none deeper (a
    percentile of a union is not a sum of percentiles)."""
    return f"""
        WITH RECURSIVE nodes AS (
            SELECT node, any_value(parent_node) AS parent_node, any_value(name) AS name, 'cpu' AS lane
            FROM _frames GROUP BY node
            {"UNION ALL SELECT node, any_value(parent_node), any_value(name), 'driver' FROM _dcalls GROUP BY node"
             if calls else ""}
            UNION ALL SELECT 2, NULL, '{NO_LAUNCH}', 'cpu'
        ),
        up(caller, bnode, parent_bnode, name, lane, n, t, maxv, longest, lvl) AS (
            SELECT caller, hash(name, 1), NULL::UBIGINT, name, lane, n, t, maxv, longest, 0 FROM ({groups})
            UNION ALL
            SELECT nd.parent_node, hash(nd.name, u.bnode), u.bnode, nd.name, nd.lane, u.n, u.t, u.maxv, u.longest, u.lvl + 1
            FROM up u JOIN nodes nd ON nd.node = u.caller WHERE u.lvl < {MAX_DEPTH}
        ),
        b AS (SELECT bnode, any_value(parent_bnode) AS parent_bnode, any_value(name) AS name, sum(n) AS n,
                     sum(t) AS t, arg_max(longest, maxv) AS longest, any_value(lane) AS lane, min(lvl) AS lvl
              FROM up GROUP BY bnode)
        SELECT b.bnode, b.parent_bnode, b.name, b.n, b.t, b.t, CASE WHEN b.lvl = 0 THEN p.p95 END, b.longest, b.lane
        FROM b LEFT JOIN ({firsts}) p ON b.lvl = 0 AND p.name = b.name"""


def _node_sql(mode: str, source: str) -> str:
    """Tree nodes: (node, parent_node, name, count, total, self, p95, slice_id, lane); slice_id is the
    node's longest slice (its link to the timeline)."""
    if mode == "top-down" and source == "cpu":
        return """
            SELECT node, any_value(parent_node), any_value(name), count(*), sum(cdur), sum(self_dur),
                   quantile_disc(cdur, 0.95), arg_max(slice_id, cdur), 'cpu'
            FROM _frames GROUP BY node"""
    if mode == "top-down":
        # CPU nodes: the device time launched beneath them, per node (count: the node's slices; no
        # per-slice p95); leaves: the work, grouped by name under its launching call's node
        return f"""
            WITH credit AS ({_cpu_credit_sql()}),
            cpu AS (SELECT node, any_value(parent_node) AS parent_node, any_value(name) AS name, count(*) AS n,
                           arg_max(slice_id, cdur) AS longest, 'cpu' AS lane FROM _frames GROUP BY node
                    UNION ALL
                    SELECT node, any_value(parent_node), any_value(name), count(*), arg_max(slice_id, dur), 'driver'
                    FROM _dcalls GROUP BY node)
            SELECT c.node, c.parent_node, c.name, c.n, k.dev + k.cp, 0, NULL, c.longest, c.lane
            FROM cpu c JOIN credit k USING (node)
            UNION ALL
            SELECT node, any_value(parent_node), any_value(name), count(*), sum(cdur), sum(cdur),
                   quantile_disc(cdur, 0.95), arg_max(slice_id, cdur), any_value(lane)
            FROM _dwork GROUP BY node
            UNION ALL
            SELECT 2, NULL, '{NO_LAUNCH}', count(*), sum(cdur), 0, NULL, NULL, 'cpu'
            FROM _dwork WHERE parent_node = 2 HAVING count(*) > 0"""
    if source == "cpu":
        return _bottom_up_sql(
            """SELECT any_value(parent_node) AS caller, any_value(name) AS name, 'cpu' AS lane, count(*) AS n,
                      sum(self_dur) AS t, max(self_dur) AS maxv, arg_max(slice_id, self_dur) AS longest
               FROM _frames GROUP BY node""",
            "SELECT name, quantile_disc(self_dur, 0.95) AS p95 FROM _frames GROUP BY name", calls=False)
    return _bottom_up_sql(
        """SELECT any_value(parent_node) AS caller, any_value(name) AS name, any_value(lane) AS lane, count(*) AS n,
                  sum(cdur) AS t, max(cdur) AS maxv, arg_max(slice_id, cdur) AS longest
           FROM _dwork GROUP BY node""",
        "SELECT name, quantile_disc(cdur, 0.95) AS p95 FROM _dwork GROUP BY name", calls=True)


def _totals_sql(source: str) -> str:
    """(the roots' total, the sum of self times) of a source's tree."""
    if source == "cpu":
        return """SELECT coalesce((SELECT sum(cdur) FROM _frames WHERE parent IS NULL), 0),
                         coalesce((SELECT sum(self_dur) FROM _frames), 0)"""
    return "SELECT coalesce(sum(cdur), 0), coalesce(sum(cdur), 0) FROM _dwork"


# -- the precomputed whole trace ------------------------------------------------------------------------
def _whole_trace(cur, t0: int, t1: int, tracks) -> bool:
    """Whether [t0, t1) without a track filter covers every slice and this trace has the precomputed
    tables of this version (a trace ingested before them answers from the slices)."""
    if tracks:
        return False
    try:
        info = dict(cur.execute("SELECT key, value FROM agg_info").fetchall())
    except duckdb.CatalogException:
        return False
    return info.get("version") == AGG_VERSION and t0 <= int(info["start_ns"]) and t1 > int(info["end_ns"])


def build(con: duckdb.DuckDBPyConnection) -> float:
    """Create agg_tree, agg_totals, agg_rollup and agg_info over the whole trace (at ingest, in the
    builder's connection, before the trace is published): the statements a request runs, once.
    Returns the seconds it took."""
    started = time.perf_counter()
    t0, t1 = con.execute("SELECT coalesce(min(ts), 0), coalesce(max(ts + dur), 0) FROM slices").fetchone()
    t1 = int(t1) + 1
    con.execute("""CREATE OR REPLACE TABLE agg_tree (source VARCHAR, mode VARCHAR, node UBIGINT, parent_node UBIGINT,
                   name VARCHAR, count BIGINT, total_ns BIGINT, self_ns BIGINT, p95_ns BIGINT, slice_id BIGINT,
                   lane VARCHAR)""")
    con.execute("CREATE OR REPLACE TABLE agg_totals (source VARCHAR, mode VARCHAR, total_ns BIGINT, self_total_ns BIGINT)")
    # one set of frames serves every tree: on the whole trace the device source's launching calls
    # are all among the CPU frames
    _build_frames(con, t0, t1, [])
    _device_work(con, t0, t1, [])
    _device_frames(con)
    for source in SOURCES:
        totals = con.execute(_totals_sql(source)).fetchone()
        for mode in MODES:
            con.execute(f"INSERT INTO agg_tree SELECT '{source}', '{mode}', * FROM ({_node_sql(mode, source)})")
            con.execute("INSERT INTO agg_totals VALUES (?, ?, ?, ?)", [source, mode, *totals])
    con.execute(f"CREATE OR REPLACE TABLE agg_rollup AS SELECT row_number() OVER "
                f"(ORDER BY device_ns DESC, host_ns DESC, name) AS rank, * FROM ({_rollup_sql(t0, t1)})")
    for name in ("_frames", "_work", "_dcalls", "_dwork"):
        con.execute(f"DROP TABLE IF EXISTS {name}")
    took = time.perf_counter() - started
    con.execute("CREATE OR REPLACE TABLE agg_info (key VARCHAR, value VARCHAR)")
    con.executemany("INSERT INTO agg_info VALUES (?, ?)", [
        ("version", AGG_VERSION), ("start_ns", str(int(t0))), ("end_ns", str(int(t1) - 1)), ("build_s", f"{took:.3f}")])
    return took


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
        _build(cur, t0, t1, tracks, source)
        nodes = _node_sql(mode, source)
        totals = cur.execute(_totals_sql(source)).fetchone()
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


def _rollup_sql(t0: int, t1: int) -> str:
    """Per CPU slice name (and driver-lane launching call): its slices' count and clipped time, and the
    device work credited to its nodes, largest device time first."""
    return f"""
        WITH credit AS ({_cpu_credit_sql()}),
        cpu AS (SELECT node, any_value(name) AS name, count(*) AS n, sum(cdur) AS host FROM _frames GROUP BY node
                UNION ALL
                SELECT node, any_value(name), count(*), sum(least(ts + dur, {int(t1)}) - greatest(ts, {int(t0)}))
                FROM _dcalls WHERE ts < {int(t1)} AND ts + dur > {int(t0)} GROUP BY node)
        SELECT c.name, sum(c.n)::BIGINT AS count, sum(c.host)::BIGINT AS host_ns,
               coalesce(sum(k.dev), 0)::BIGINT AS device_ns, coalesce(sum(k.cp), 0)::BIGINT AS copy_ns,
               coalesce(sum(k.b), 0)::BIGINT AS bytes, coalesce(sum(k.nk), 0)::BIGINT AS kernels,
               coalesce(sum(k.nc), 0)::BIGINT AS copies
        FROM cpu c LEFT JOIN credit k USING (node)
        GROUP BY c.name
        ORDER BY device_ns DESC, host_ns DESC, c.name"""


def rollup(cur: duckdb.DuckDBPyConnection, t0: int, t1: int, limit: int = ROLLUP_MAX,
           precomputed: bool = True) -> list[dict]:
    """Per CPU slice name: its count and host time in the range, and the device time, copy time and
    bytes of the device work of the range launched from inside it ({"name", "count", "host_ns",
    "device_ns", "copy_ns", "bytes", "kernels", "copies"}), largest device time first."""
    if precomputed and _whole_trace(cur, t0, t1, None):
        rows = cur.execute(f"SELECT {', '.join(ROLLUP_KEYS)} FROM agg_rollup ORDER BY rank LIMIT ?",
                           [int(limit)]).fetchall()
    else:
        _build_frames(cur, t0, t1, [])
        _device_work(cur, t0, t1, [])
        _device_frames(cur)
        rows = cur.execute(f"{_rollup_sql(t0, t1)} LIMIT {int(limit)}").fetchall()
    return [dict(zip(ROLLUP_KEYS, r)) for r in rows]
