"""The temp tables and statements behind the aggregate views (store/aggregates.py explains the
model): CPU frames with their parents, self times and top-down path nodes; device work with its
launching call; and the node-level SQL of each tree and of the rollup over them.

Every temp table is of the cursor that builds it (a request's own, or the builder's at ingest).
"""

from __future__ import annotations

MAX_DEPTH = 512  # ancestor walks stop here (deeper stacks than any profiler writes)
NO_LAUNCH = "(no launching call)"
WALK_CTE_MAX_ROWS = 2_000_000  # CPU frames up to which the path walk is one recursive statement


def build_frames(cur, t0: int, t1: int, tracks: list[int]) -> None:
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
        CREATE OR REPLACE TEMP TABLE _parents AS
        SELECT c.slice_id, c.track_id, c.ts, c.te, c.depth, c.name, c.cdur, p.slice_id AS parent
        FROM _range c ASOF LEFT JOIN _range p
          ON p.track_id = c.track_id AND p.depth = c.depth - 1 AND p.ts <= c.ts""")
    cur.execute("DROP TABLE _range")
    (deepest, n) = cur.execute("SELECT coalesce(max(depth), -1), count(*) FROM _parents").fetchone()
    if n <= WALK_CTE_MAX_ROWS:  # one recursive statement: cheapest for deep stacks of a modest trace
        cur.execute(f"""
            CREATE OR REPLACE TEMP TABLE _paths AS
            WITH RECURSIVE walk(slice_id, node, parent_node, lvl) AS (
                SELECT slice_id, hash(name, 0::UBIGINT), NULL::UBIGINT, 0 FROM _parents WHERE parent IS NULL
                UNION ALL
                SELECT f.slice_id, hash(f.name, w.node), w.node, w.lvl + 1
                FROM _parents f JOIN walk w ON f.parent = w.slice_id
                WHERE w.lvl < {MAX_DEPTH}
            )
            SELECT f.*, w.node, w.parent_node FROM _parents f JOIN walk w USING (slice_id)""")
    else:
        # one depth at a time: plain joins spill to disk where a recursive CTE's state cannot (a
        # 10 M-slice trace ran out of the builder's 1 GB that way)
        cur.execute("""CREATE OR REPLACE TEMP TABLE _paths AS SELECT *, 0::UBIGINT AS node, 0::UBIGINT AS parent_node
                       FROM _parents LIMIT 0""")
        for depth in range(0, min(int(deepest), MAX_DEPTH) + 1):
            cur.execute("""
                INSERT INTO _paths
                SELECT f.*, hash(f.name, coalesce(p.node, 0::UBIGINT)), p.node
                FROM _parents f LEFT JOIN (SELECT slice_id, node FROM _paths WHERE depth = $1 - 1) p ON p.slice_id = f.parent
                WHERE f.depth = $1""", [depth])
    cur.execute("DROP TABLE _parents")
    cur.execute("""
        CREATE OR REPLACE TEMP TABLE _frames AS
        SELECT f.slice_id, f.track_id, f.ts, f.te, f.parent, f.name, f.cdur, f.cdur - coalesce(k.child_dur, 0) AS self_dur,
               f.node, f.parent_node
        FROM _paths f LEFT JOIN (SELECT parent, sum(cdur) AS child_dur FROM _paths
                                 WHERE parent IS NOT NULL GROUP BY parent) k ON k.parent = f.slice_id""")
    cur.execute("DROP TABLE _paths")
    # per top-down node and per name, once: every tree and the rollup read these (a few rows per
    # distinct path) instead of grouping the frames again
    cur.execute("""
        CREATE OR REPLACE TEMP TABLE _cpun AS
        SELECT node, any_value(parent_node) AS parent_node, any_value(name) AS name, count(*) AS n, sum(cdur) AS host,
               sum(self_dur) AS self, quantile_disc(cdur, 0.95) AS p95, arg_max(slice_id, ((cdur)::HUGEINT * 18446744073709551616) - slice_id) AS longest,
               max(self_dur) AS maxself, arg_max(slice_id, ((self_dur)::HUGEINT * 18446744073709551616) - slice_id) AS longest_self
        FROM _frames GROUP BY node""")
    cur.execute("CREATE OR REPLACE TEMP TABLE _cpuname AS SELECT name, quantile_disc(self_dur, 0.95) AS p95"
                " FROM _frames GROUP BY name")


# every correlation id's launching call: the earliest CPU or driver slice carrying it (agg_launch at
# ingest, so that a window's device work does not scan every slice for its calls)
LAUNCHES_SQL = """
    SELECT * FROM (
        SELECT s.corr_id, arg_min(s.slice_id, (s.ts::HUGEINT * 18446744073709551616) + s.slice_id) AS launch,
               arg_min(s.track_id, (s.ts::HUGEINT * 18446744073709551616) + s.slice_id) AS call_track,
               min(s.ts) AS launch_ts
        FROM slices s JOIN tracks t USING (track_id)
        WHERE t.lane IN ('cpu', 'driver') AND s.dur > 0 AND s.corr_id IS NOT NULL
        GROUP BY s.corr_id)"""


def device_work(cur, t0: int, t1: int, tracks: list[int], launches: bool = False) -> None:
    """Temp table `_work`: the kernels, memsets and copies of [t0, t1), clipped, with the call that
    launched each (the earliest CPU or driver slice carrying its correlation id), its time, lane and
    CPU thread (a driver track's: the cpu track of the same process and thread). With tracks: a
    device track keeps its own work, a CPU or driver thread what it launched. `launches`: read the
    calls from agg_launch."""
    cur.execute(f"""
        CREATE OR REPLACE TEMP TABLE _work AS
        WITH w AS (
            SELECT d.slice_id, d.track_id, d.name, t.lane, d.corr_id, d.bytes,
                   -- a copy: a transfer on a link, or a device-local copy (DtoD: direction set, on an eu track)
                   t.lane = 'pcie' OR d.direction IS NOT NULL AS is_copy,
                   least(d.ts + d.dur, $1) - greatest(d.ts, $2) AS cdur
            FROM slices d JOIN tracks t USING (track_id)
            WHERE t.lane IN ('eu', 'pcie') AND d.dur > 0 AND d.ts < $1 AND d.ts + d.dur > $2
        ),
        launches AS ({"SELECT * FROM agg_launch" if launches else LAUNCHES_SQL}
                     WHERE corr_id IN (SELECT corr_id FROM w WHERE corr_id IS NOT NULL)),
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


def build_source(cur, t0: int, t1: int, tracks, source: str, launches: bool = False) -> None:
    """The temp tables a tree of `source` is read from: `_frames` for cpu; for device also `_work` and
    `_dwork` (the work as leaves under their launching calls' nodes)."""
    tracks = [int(t) for t in tracks or ()]
    if source == "cpu":
        build_frames(cur, t0, t1, tracks)
        return
    device_work(cur, t0, t1, tracks, launches)
    # the launching calls and their callers: CPU frames from the earliest launch (a kernel in the
    # range may have been launched before it) to the range's end, on the launching threads
    (first_launch,) = cur.execute("SELECT min(launch_ts) FROM _work").fetchone()
    launch_tracks = [r[0] for r in cur.execute(
        "SELECT DISTINCT launch_track FROM _work WHERE launch_track IS NOT NULL").fetchall()]
    build_frames(cur, min(int(t0), int(first_launch if first_launch is not None else t0)), t1, launch_tracks or [-1])
    device_frames(cur)


def device_frames(cur) -> None:
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
        SELECT d.launch AS slice_id, d.name, d.ts, d.dur, h.node AS parent_node, hash(d.name, coalesce(h.node, 0::UBIGINT)) AS node
        FROM d LEFT JOIN host h USING (launch)""")
    cur.execute("""
        CREATE OR REPLACE TEMP TABLE _dwork AS
        SELECT w.slice_id, w.name, w.lane, w.cdur, w.bytes, w.is_copy, coalesce(f.node, c.node, 2) AS parent_node,
               hash(w.name, coalesce(f.node, c.node, 2::UBIGINT)) AS node
        FROM _work w LEFT JOIN _frames f ON f.slice_id = w.launch LEFT JOIN _dcalls c ON c.slice_id = w.launch""")
    cur.execute("""
        CREATE OR REPLACE TEMP TABLE _dn AS
        SELECT node, any_value(parent_node) AS parent_node, any_value(name) AS name, any_value(lane) AS lane,
               count(*) AS n, sum(cdur) AS t, quantile_disc(cdur, 0.95) AS p95, arg_max(slice_id, ((cdur)::HUGEINT * 18446744073709551616) - slice_id) AS longest,
               max(cdur) AS maxv, coalesce(sum(cdur) FILTER (WHERE NOT is_copy), 0) AS dev,
               coalesce(sum(cdur) FILTER (WHERE is_copy), 0) AS cp,
               coalesce(sum(bytes) FILTER (WHERE is_copy), 0) AS b,
               count(*) FILTER (WHERE NOT is_copy) AS nk, count(*) FILTER (WHERE is_copy) AS nc
        FROM _dwork GROUP BY node""")
    cur.execute("CREATE OR REPLACE TEMP TABLE _dname AS SELECT name, quantile_disc(cdur, 0.95) AS p95"
                " FROM _dwork GROUP BY name")


# the longest slice of a group, ties to the smallest id (arg_max alone picks any of equals, and a
# node's link must not change between two runs): arg_max(id, v * 2^64 - id)
# every top-down caller node once: the CPU frames' and the driver calls' (a driver call and a CPU
# sibling of one name share a node id: their counts add up)
_CALLERS = """
    SELECT node, any_value(parent_node) AS parent_node, any_value(name) AS name, sum(n) AS n,
           arg_max(longest, ((maxv)::HUGEINT * 18446744073709551616) - longest) AS longest, max(lane) AS lane
    FROM (SELECT node, parent_node, name, n, longest, 0 AS maxv, 'cpu' AS lane FROM _cpun
          UNION ALL
          SELECT node, any_value(parent_node), any_value(name), count(*), arg_max(slice_id, ((dur)::HUGEINT * 18446744073709551616) - slice_id), max(dur), 'driver'
          FROM _dcalls GROUP BY node)
    GROUP BY node"""


def cpu_credit_sql() -> str:
    """Per top-down CPU node: the device work launched at it or below (eu time, pcie time, bytes,
    kernel and copy counts), walked up the node tree (a few rows per distinct path, not per slice)."""
    return f"""
        WITH RECURSIVE nodes AS ({_CALLERS}),
        at_node AS (
            SELECT parent_node AS node, sum(dev) AS dev, sum(cp) AS cp, sum(b) AS b, sum(nk) AS nk, sum(nc) AS nc
            FROM _dn WHERE parent_node <> 2 GROUP BY parent_node
        ),
        up(node, dev, cp, b, nk, nc, lvl) AS (
            SELECT node, dev, cp, b, nk, nc, 0 FROM at_node
            UNION ALL
            SELECT n.parent_node, u.dev, u.cp, u.b, u.nk, u.nc, u.lvl + 1
            FROM up u JOIN nodes n ON n.node = u.node WHERE n.parent_node IS NOT NULL AND u.lvl < {MAX_DEPTH}
        )
        SELECT node, sum(dev) AS dev, sum(cp) AS cp, sum(b) AS b, sum(nk) AS nk, sum(nc) AS nc FROM up GROUP BY node"""


def bottom_up_sql(groups: str, firsts: str, calls: bool) -> str:
    """Bottom-up nodes from start groups `groups(caller, name, lane, n, t, maxv, longest)` (the frames of
    one top-down node: their count, self time, longest; `caller` the top-down node of their caller),
    walked up the CPU node tree: a node's count and self time are exact; its p95 is the nearest-rank
    percentile of one frame's self time at the first level (`firsts(name, p95)`), none deeper (a
    percentile of a union is not a sum of percentiles)."""
    return f"""
        WITH RECURSIVE nodes AS (
            SELECT node, parent_node, name, lane FROM ({_CALLERS if calls else "SELECT *, 'cpu' AS lane FROM _cpun"})
            UNION ALL SELECT 2, NULL, '{NO_LAUNCH}', 'cpu'
        ),
        up(caller, bnode, parent_bnode, name, lane, n, t, maxv, longest, lvl) AS (
            SELECT caller, hash(name, 1), NULL::UBIGINT, name, lane, n, t, maxv, longest, 0 FROM ({groups})
            UNION ALL
            SELECT nd.parent_node, hash(nd.name, u.bnode), u.bnode, nd.name, nd.lane, u.n, u.t, u.maxv, u.longest, u.lvl + 1
            FROM up u JOIN nodes nd ON nd.node = u.caller WHERE u.lvl < {MAX_DEPTH}
        ),
        b AS (SELECT bnode, any_value(parent_bnode) AS parent_bnode, any_value(name) AS name, sum(n) AS n,
                     sum(t) AS t, arg_max(longest, ((maxv)::HUGEINT * 18446744073709551616) - longest) AS longest, any_value(lane) AS lane, min(lvl) AS lvl
              FROM up GROUP BY bnode)
        SELECT b.bnode, b.parent_bnode, b.name, b.n, b.t, b.t, CASE WHEN b.lvl = 0 THEN p.p95 END, b.longest, b.lane
        FROM b LEFT JOIN ({firsts}) p ON b.lvl = 0 AND p.name = b.name"""


def node_sql(mode: str, source: str) -> str:
    """Tree nodes: (node, parent_node, name, count, total, self, p95, slice_id, lane); slice_id is the
    node's longest slice (its link to the timeline)."""
    if mode == "top-down" and source == "cpu":
        return "SELECT node, parent_node, name, n, host, self, p95, longest, 'cpu' FROM _cpun"
    if mode == "top-down":
        # caller nodes: the device time launched beneath them (count: the node's slices; no per-slice
        # p95); leaves: the work, grouped by name under its launching call's node
        return f"""
            WITH credit AS ({cpu_credit_sql()})
            SELECT c.node, c.parent_node, c.name, c.n, k.dev + k.cp, 0, NULL, c.longest, c.lane
            FROM ({_CALLERS}) c JOIN credit k USING (node)
            UNION ALL
            SELECT node, parent_node, name, n, t, t, p95, longest, lane FROM _dn
            UNION ALL
            SELECT 2, NULL, '{NO_LAUNCH}', sum(n), sum(t), 0, NULL, NULL, 'cpu'
            FROM _dn WHERE parent_node = 2 HAVING count(*) > 0"""
    if source == "cpu":
        return bottom_up_sql("SELECT parent_node AS caller, name, 'cpu' AS lane, n, self AS t, maxself AS maxv,"
                             " longest_self AS longest FROM _cpun", "SELECT name, p95 FROM _cpuname", calls=False)
    return bottom_up_sql("SELECT parent_node AS caller, name, lane, n, t, maxv, longest FROM _dn",
                         "SELECT name, p95 FROM _dname", calls=True)


def totals_sql(source: str) -> str:
    """(the roots' total, the sum of self times) of a source's tree."""
    if source == "cpu":
        return """SELECT coalesce((SELECT sum(host) FROM _cpun WHERE parent_node IS NULL), 0),
                         coalesce((SELECT sum(self) FROM _cpun), 0)"""
    return "SELECT coalesce(sum(t), 0), coalesce(sum(t), 0) FROM _dn"


def rollup_sql(t0: int, t1: int) -> str:
    """Per CPU slice name (and driver-lane launching call): its slices' count and clipped time, and the
    device work credited to its nodes, largest device time first."""
    return f"""
        WITH credit AS ({cpu_credit_sql()}),
        cpu AS (SELECT node, name, n, host FROM _cpun
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
