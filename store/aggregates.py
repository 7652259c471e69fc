"""Aggregate views of a time range: call trees (top-down, bottom-up) and the op-to-device rollup.

All SQL over the stored slices (docs/api.md "Aggregate views"):
- A slice's parent is the latest slice of its track one level up that starts at or before it
  (an ASOF join: depths nest by construction, store/schema.py), so no parent column is needed.
- Times are clipped to the range [t0, t1): a slice overlapping the range counts for its part
  inside it; a slice's self time is its clipped time minus its children's clipped time.
- A top-down node is a path of names from a root (depth 0); a bottom-up node is a path of names
  from a frame up through its callers, and holds the self time of the frames it starts from, so
  the roots of both trees sum to the same total self time.
- The rollup credits every CPU slice (op, annotation, runtime call) with the device work its
  correlation chains launched: a kernel, memset or copy whose correlation id a runtime call
  nested inside that slice carries (inclusive, like total time: nested ops each get it).
"""

from __future__ import annotations

import duckdb

NODES_MAX = 5000  # tree nodes returned; the rest of a level is folded into "(other)"
ROLLUP_MAX = 1000
MAX_DEPTH = 512  # ancestor walks stop here (deeper stacks than any profiler writes)

_MODES = ("top-down", "bottom-up")


def _build_frames(cur: duckdb.DuckDBPyConnection, t0: int, t1: int, tracks: list[int] | None) -> None:
    """Temp table `_frames`: the CPU slices of [t0, t1), clipped, with their parent and self time."""
    tracks = [int(t) for t in tracks or ()]
    where = f" AND s.track_id IN ({', '.join(f'${i + 3}' for i in range(len(tracks)))})" if tracks else ""
    cur.execute(f"""
        CREATE OR REPLACE TEMP TABLE _range AS
        SELECT s.slice_id, s.track_id, s.ts, s.depth, s.name,
               least(s.ts + s.dur, $1) - greatest(s.ts, $2) AS cdur
        FROM slices s JOIN tracks t USING (track_id)
        WHERE t.lane = 'cpu' AND s.dur > 0 AND s.ts < $1 AND s.ts + s.dur > $2{where}""",
                [int(t1), int(t0), *tracks])
    cur.execute("""
        CREATE OR REPLACE TEMP TABLE _frames AS
        SELECT c.*, p.slice_id AS parent
        FROM _range c ASOF LEFT JOIN _range p
          ON p.track_id = c.track_id AND p.depth = c.depth - 1 AND p.ts <= c.ts""")
    cur.execute("""
        CREATE OR REPLACE TEMP TABLE _frames AS
        SELECT f.*, f.cdur - coalesce(k.child_dur, 0) AS self_dur
        FROM _frames f LEFT JOIN (SELECT parent, sum(cdur) AS child_dur FROM _frames
                                  WHERE parent IS NOT NULL GROUP BY parent) k ON k.parent = f.slice_id""")


def call_tree(cur: duckdb.DuckDBPyConnection, t0: int, t1: int, tracks: list[int] | None = None,
              mode: str = "top-down") -> dict:
    """The tree of a range: {"name", "count", "total_ns", "self_ns", "p95_ns", "children": [...]} under a root.
    p95_ns: the 95th percentile (nearest rank) of the node's per-slice time in the range: clipped
    duration top-down, self time of the start frames bottom-up."""
    if mode not in _MODES:
        raise ValueError(f"mode must be one of {', '.join(_MODES)}")
    _build_frames(cur, t0, t1, tracks)
    if mode == "top-down":
        # path ids from the roots down: one recursive step per level
        rows = cur.execute(f"""
            WITH RECURSIVE walk(slice_id, node, parent_node, name, lvl) AS (
                SELECT slice_id, hash(name, 0), NULL::UBIGINT, name, 0 FROM _frames WHERE parent IS NULL
                UNION ALL
                SELECT f.slice_id, hash(f.name, w.node), w.node, f.name, w.lvl + 1
                FROM _frames f JOIN walk w ON f.parent = w.slice_id
                WHERE w.lvl < {MAX_DEPTH}
            )
            SELECT w.node, any_value(w.parent_node), any_value(w.name), count(*), sum(f.cdur), sum(f.self_dur),
                   quantile_disc(f.cdur, 0.95)
            FROM walk w JOIN _frames f USING (slice_id)
            GROUP BY w.node""").fetchall()
    else:
        # from every frame up through its callers; each node holds the self time of its start frames
        rows = cur.execute(f"""
            WITH RECURSIVE up(start_id, cur_id, node, parent_node, name, self_dur, cdur, lvl) AS (
                SELECT slice_id, parent, hash(name, 1), NULL::UBIGINT, name, self_dur, cdur, 0 FROM _frames
                UNION ALL
                SELECT u.start_id, f.parent, hash(f.name, u.node), u.node, f.name, u.self_dur, u.cdur, u.lvl + 1
                FROM up u JOIN _frames f ON f.slice_id = u.cur_id
                WHERE u.lvl < {MAX_DEPTH}
            )
            SELECT node, any_value(parent_node), any_value(name), count(*), sum(self_dur), sum(self_dur),
                   quantile_disc(self_dur, 0.95)
            FROM up GROUP BY node""").fetchall()
    (total_self,) = cur.execute("SELECT coalesce(sum(self_dur), 0) FROM _frames").fetchone()
    (root_total,) = cur.execute("SELECT coalesce(sum(cdur), 0) FROM _frames WHERE parent IS NULL").fetchone()
    return _assemble(rows, int(root_total if mode == "top-down" else total_self), int(total_self))


def _assemble(rows: list[tuple], root_total: int, root_self_total: int) -> dict:
    kids: dict = {}
    for node, parent, name, count, total, self_ns, p95 in rows:
        kids.setdefault(parent, []).append(
            {"id": node, "name": name, "count": int(count), "total_ns": int(total or 0), "self_ns": int(self_ns or 0),
             "p95_ns": None if p95 is None else int(p95)})
    budget = [NODES_MAX]

    def build(parent) -> list[dict]:
        level = sorted(kids.get(parent, ()), key=lambda n: (-n["total_ns"], n["name"]))
        out = []
        for i, n in enumerate(level):
            if budget[0] <= 0:
                rest = level[i:]
                out.append({"name": f"(other: {len(rest)} more)", "count": sum(r["count"] for r in rest),
                            "total_ns": sum(r["total_ns"] for r in rest), "self_ns": sum(r["self_ns"] for r in rest),
                            "p95_ns": None, "children": [], "truncated": True})
                break
            budget[0] -= 1
            node_id = n.pop("id")
            n["children"] = build(node_id)
            out.append(n)
        return out

    children = build(None)
    return {"name": "(root)", "count": sum(c["count"] for c in children), "total_ns": root_total,
            "self_ns": 0, "p95_ns": None, "children": children, "self_total_ns": root_self_total,
            "truncated": budget[0] <= 0}


def rollup(cur: duckdb.DuckDBPyConnection, t0: int, t1: int, limit: int = ROLLUP_MAX) -> list[dict]:
    """Per CPU slice name: its count and host time in the range, and the device time, copy time and
    bytes of the device work launched from inside it ({"name", "lane", "count", "host_ns",
    "device_ns", "copy_ns", "bytes"}), largest device time first."""
    _build_frames(cur, t0, t1, None)
    return [dict(zip(("name", "count", "host_ns", "device_ns", "copy_ns", "bytes", "kernels", "copies"), r))
            for r in cur.execute(f"""
        WITH RECURSIVE work AS (  -- device work of the range with its correlation id
            SELECT d.corr_id, t.lane, least(d.ts + d.dur, {int(t1)}) - greatest(d.ts, {int(t0)}) AS cdur, d.bytes
            FROM slices d JOIN tracks t USING (track_id)
            WHERE t.lane IN ('eu', 'pcie') AND d.corr_id IS NOT NULL AND d.dur > 0
              AND d.ts < {int(t1)} AND d.ts + d.dur > {int(t0)}
        ),
        per_corr AS (
            SELECT corr_id, sum(cdur) FILTER (WHERE lane = 'eu') AS dev, sum(cdur) FILTER (WHERE lane = 'pcie') AS cp,
                   sum(bytes) FILTER (WHERE lane = 'pcie') AS b,
                   count(*) FILTER (WHERE lane = 'eu') AS nk, count(*) FILTER (WHERE lane = 'pcie') AS nc
            FROM work GROUP BY corr_id
        ),
        launch AS (  -- the CPU call that carries each correlation id (the earliest, as the chain does)
            SELECT arg_min(f.slice_id, f.ts) AS slice_id, p.corr_id, any_value(p.dev) AS dev, any_value(p.cp) AS cp,
                   any_value(p.b) AS b, any_value(p.nk) AS nk, any_value(p.nc) AS nc
            FROM per_corr p JOIN slices s ON s.corr_id = p.corr_id JOIN _frames f ON f.slice_id = s.slice_id
            GROUP BY p.corr_id
        ),
        up(slice_id, corr_id, dev, cp, b, nk, nc, lvl) AS (  -- the call and every slice it is nested in
            SELECT slice_id, corr_id, dev, cp, b, nk, nc, 0 FROM launch
            UNION ALL
            SELECT f.parent, u.corr_id, u.dev, u.cp, u.b, u.nk, u.nc, u.lvl + 1
            FROM up u JOIN _frames f ON f.slice_id = u.slice_id
            WHERE f.parent IS NOT NULL AND u.lvl < {MAX_DEPTH}
        ),
        credit AS (
            SELECT slice_id, sum(coalesce(dev, 0)) AS dev, sum(coalesce(cp, 0)) AS cp, sum(coalesce(b, 0)) AS b,
                   sum(nk) AS nk, sum(nc) AS nc
            FROM (SELECT DISTINCT ON (slice_id, corr_id) * FROM up) GROUP BY slice_id
        )
        SELECT f.name, count(*), sum(f.cdur), CAST(coalesce(sum(c.dev), 0) AS BIGINT),
               CAST(coalesce(sum(c.cp), 0) AS BIGINT), CAST(coalesce(sum(c.b), 0) AS BIGINT),
               CAST(coalesce(sum(c.nk), 0) AS BIGINT), CAST(coalesce(sum(c.nc), 0) AS BIGINT)
        FROM _frames f LEFT JOIN credit c USING (slice_id)
        GROUP BY f.name
        ORDER BY 4 DESC, 3 DESC, 1
        LIMIT {int(limit)}""").fetchall()]


# -- the events of a range (the events table) ------------------------------------------------------
EVENTS_PAGE_MAX = 1000
EVENTS_CSV_MAX = 1_000_000
EVENT_SORTS = {"name": "s.name", "lane": "t.lane", "track": "t.name", "ts": "s.ts", "dur": "s.dur",
               "bytes": "s.bytes", "depth": "s.depth"}
EVENT_COLUMNS = ("slice_id", "track_id", "lane", "track", "ts", "dur", "depth", "name", "category", "bytes", "args")


def _events_sql(t0: int, t1: int, tracks: list[int] | None, text: str | None, sort: str, desc: bool,
                lanes: list[str] | None) -> tuple[str, str, list]:
    """(select of the rows, select of their count, parameters) over slices overlapping [t0, t1)."""
    if sort not in EVENT_SORTS:
        raise ValueError(f"sort must be one of {', '.join(EVENT_SORTS)}")
    where, params = [f"s.ts < {int(t1)}", f"s.ts + s.dur >= {int(t0)}"], []  # instants at t0 count
    if tracks:
        where.append(f"s.track_id IN ({', '.join('?' for _ in tracks)})")
        params += [int(t) for t in tracks]
    if lanes:
        where.append(f"t.lane IN ({', '.join('?' for _ in lanes)})")
        params += list(lanes)
    if text:
        escaped = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        where.append("s.name ILIKE ? ESCAPE '\\'")
        params.append(f"%{escaped}%")
    base = "FROM slices s JOIN tracks t USING (track_id) WHERE " + " AND ".join(where)
    order = f"{EVENT_SORTS[sort]} {'DESC' if desc else 'ASC'} NULLS LAST, s.ts, s.slice_id"
    cols = "s.slice_id, s.track_id, t.lane, t.name AS track, s.ts, s.dur, s.depth, s.name, s.category, s.bytes, s.args"
    return f"SELECT {cols} {base} ORDER BY {order}", f"SELECT count(*) {base}", params


def range_events(cur: duckdb.DuckDBPyConnection, t0: int, t1: int, *, tracks: list[int] | None = None,
                 text: str | None = None, sort: str = "ts", desc: bool = False, offset: int = 0,
                 limit: int = 200, lanes: list[str] | None = None) -> tuple[list[dict], int]:
    """One page of the slices overlapping [t0, t1) (absolute ns; name substring `text`, case-insensitive,
    wildcards literal), sorted by `sort`, and how many match in all: (rows of EVENT_COLUMNS, total)."""
    rows_sql, count_sql, params = _events_sql(t0, t1, tracks, text, sort, desc, lanes)
    limit = max(0, min(int(limit), EVENTS_PAGE_MAX))
    rows = cur.execute(f"{rows_sql} LIMIT {limit} OFFSET {max(0, int(offset))}", params).fetchall()
    (total,) = cur.execute(count_sql, params).fetchone()
    return [dict(zip(EVENT_COLUMNS, r)) for r in rows], int(total)


def range_events_arrow(cur: duckdb.DuckDBPyConnection, t0: int, t1: int, start_ns: int, *,
                       tracks: list[int] | None = None, text: str | None = None, sort: str = "ts",
                       desc: bool = False, lanes: list[str] | None = None, limit: int = EVENTS_CSV_MAX):
    """The same rows as range_events, all of them up to `limit`, as an Arrow table with ts relative to
    `start_ns` (for CSV export), and whether more matched."""
    rows_sql, _, params = _events_sql(t0, t1, tracks, text, sort, desc, lanes)
    rel = rows_sql.replace("s.ts, s.dur, s.depth", f"s.ts - {int(start_ns)} AS ts, s.dur, s.depth", 1)
    table = cur.sql(f"{rel} LIMIT {int(limit) + 1}", params=params).to_arrow_table()
    return table.slice(0, int(limit)), table.num_rows > int(limit)
