"""What an engineer reads before zooming in: top names per lane, copies, busy fraction per lane.

Computed once per trace with a few aggregate queries, then kept in the side file
`traces/<id>.summary.duckdb` (written atomically; the published trace is never touched).
"""

from __future__ import annotations

import json

import duckdb

from acceltrace.store.catalog import Store
from acceltrace.store.utilization import busy as busy_time

TOP_NAMES = 10
BUSY_BUCKETS = 100
SIDE = "summary"
SUMMARY_VERSION = "2"  # 2: "busy" (device and CPU busy, store/utilization.py); no annotation lane busy


def load_or_build(store: Store, trace_id: str, con: duckdb.DuckDBPyConnection, start_ns: int) -> dict:
    path = store.side_path(trace_id, SIDE)
    if path.exists():
        try:
            side = duckdb.connect(str(path), read_only=True)
            try:
                row = side.execute("SELECT version, doc FROM summary").fetchone()
            finally:
                side.close()
            if row and row[0] == SUMMARY_VERSION:
                return json.loads(row[1])
        except duckdb.Error:
            pass  # unreadable or being replaced: rebuild
    doc = compute(con, start_ns)

    def write(side_con):
        side_con.execute("CREATE TABLE summary (version VARCHAR, doc VARCHAR)")
        side_con.execute("INSERT INTO summary VALUES (?, ?)", [SUMMARY_VERSION, json.dumps(doc)])

    try:
        store.write_side(trace_id, SIDE, write)
    except (OSError, duckdb.Error):
        pass  # a cache only; the answer stands
    return doc


def copies_sql(where: str = "TRUE") -> str:
    """Transfers grouped by direction and host memory kind: count, bytes, busy ns, achieved GB/s."""
    return (
        "SELECT direction, host_mem, count(*) AS count, sum(bytes)::BIGINT AS bytes, sum(dur)::BIGINT AS busy_ns,"
        " CASE WHEN sum(dur) > 0 THEN sum(bytes) / sum(dur) END AS gbps FROM slices"
        f" WHERE bytes IS NOT NULL AND direction IS NOT NULL AND {where}"
        " GROUP BY ALL ORDER BY bytes DESC NULLS LAST"
    )


def copies(con: duckdb.DuckDBPyConnection, where: str = "TRUE", params: list | None = None) -> list[dict]:
    """copies_sql's rows as dicts: direction, host_mem, count, bytes, busy_ns, gbps."""
    return [{"direction": r[0], "host_mem": r[1], "count": r[2], "bytes": r[3], "busy_ns": r[4], "gbps": r[5]}
            for r in con.execute(copies_sql(where), params or []).fetchall()]


def compute(con: duckdb.DuckDBPyConnection, start_ns: int) -> dict:
    (end_ns,) = con.execute("SELECT value::BIGINT FROM trace_meta WHERE key = 'end_ns'").fetchone()
    duration = max(1, end_ns - start_ns)
    bucket_ns = max(1, -(-duration // BUSY_BUCKETS))
    lanes: dict[str, dict] = {}
    top = con.execute(
        f"""SELECT lane, name, count, total_ns, mean_ns, p50_ns, p95_ns, max_ns FROM (
            SELECT t.lane, s.name, count(*) AS count, sum(s.dur)::BIGINT AS total_ns, avg(s.dur) AS mean_ns,
                   quantile_disc(s.dur, 0.5) AS p50_ns, quantile_disc(s.dur, 0.95) AS p95_ns, max(s.dur) AS max_ns,
                   row_number() OVER (PARTITION BY t.lane ORDER BY sum(s.dur) DESC, s.name) AS rank
            FROM slices s JOIN tracks t USING (track_id) WHERE s.dur > 0 GROUP BY t.lane, s.name)
        WHERE rank <= {TOP_NAMES} ORDER BY lane, total_ns DESC"""
    ).fetchall()
    for lane, name, count, total, mean, p50, p95, mx in top:
        lanes.setdefault(lane, {"top": [], "busy": None})["top"].append(
            {"name": name, "count": count, "total_ns": total, "mean_ns": mean, "p50_ns": p50, "p95_ns": p95,
             "max_ns": mx})
    # depth-0 slices of one track never overlap, so summing their clipped overlaps per bucket is
    # the union; divided by (bucket width x tracks in the lane) it is the busy fraction
    busy = con.execute(
        f"""WITH top AS (
            SELECT t.lane, s.ts - {start_ns} AS ts, s.ts - {start_ns} + s.dur AS te FROM slices s
            JOIN tracks t USING (track_id) WHERE s.depth = 0 AND s.dur > 0 AND t.lane NOT IN ('counter', 'annotation')),
        cut AS (SELECT lane, ts, te, unnest(range(ts // {bucket_ns}, (te - 1) // {bucket_ns} + 1)) AS b FROM top)
        SELECT lane, b, sum(least(te, (b + 1) * {bucket_ns}) - greatest(ts, b * {bucket_ns}))::DOUBLE AS busy
        FROM cut GROUP BY lane, b ORDER BY lane, b"""
    ).fetchall()
    ntracks = dict(con.execute("SELECT lane, count(*) FROM tracks GROUP BY lane").fetchall())
    series: dict[str, list[float]] = {}
    for lane, b, busy_ns in busy:
        frac = series.setdefault(lane, [0.0] * BUSY_BUCKETS)
        if 0 <= b < BUSY_BUCKETS:
            frac[b] = min(1.0, busy_ns / (bucket_ns * max(1, ntracks.get(lane, 1))))
    for lane, frac in series.items():
        lanes.setdefault(lane, {"top": [], "busy": None})["busy"] = {"bucket_ns": bucket_ns, "fraction": frac}
    # the numbers to quote: device busy (union of its kernels, memsets and copies) and CPU busy per
    # thread (union of its real ops), with their definitions (store/utilization.py)
    return {"duration_ns": duration, "lanes": lanes, "copies": copies(con),
            "busy": busy_time(con, start_ns, end_ns, buckets=BUSY_BUCKETS)}
