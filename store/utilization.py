"""Busy time, defined once (docs/analysis.md "Busy"), for the summary, the area aggregate and tests.

- Device busy: per device, the union of its kernel, memset and copy intervals (every slice with a
  duration on its `eu` and `pcie` tracks, all streams and engines together) within the span. Not
  an average of per-stream fractions, and never annotations (lane `annotation`): two streams
  busy at once count once, a marker range counts nothing.
- CPU busy: per thread (cpu-lane track), the union of its real ops within the span: slices with
  a duration whose category is not an annotation (CPU_NOT_WORK). Ops nest, so the union is the
  time covered by the outermost real op at each instant ("depth 0 of real ops"): a user
  annotation such as ProfilerStep#3 that encloses the ops is not itself counted, its ops are.

All in SQL: the intervals are merged per owner by a running maximum of ends (gaps and islands),
so the cost is one sort of the span's slices, whatever their overlap.
"""

from __future__ import annotations

import duckdb

from acceltrace.store.schema import DEVICE_WORK_LANES

# cpu-lane categories that mark time rather than do work: record_function / NVTX-style ranges,
# thread scheduling (when the thread was on a core) and CPU samples (instants).
CPU_NOT_WORK = ("user_annotation", "gpu_user_annotation", "Trace", "sched", "cpu_sample")

DEFINITIONS = {
    "device": "union of the device's kernel, memset and copy intervals (all its eu and pcie tracks) within the "
              "span, divided by the span; annotations never count, overlapping streams count once",
    "cpu": "per thread, the union of its real ops (cpu-lane slices with a duration, annotations, scheduling and "
           "samples excluded) within the span, divided by the span: the outermost real op at each instant",
}

_IN = ", ".join(f"'{c}'" for c in CPU_NOT_WORK)
_DEV_LANES = ", ".join(f"'{lane}'" for lane in DEVICE_WORK_LANES)


def _islands_sql(intervals_sql: str) -> str:
    """(owner, a, b) intervals -> their union per owner as disjoint (owner, a, b) islands."""
    return f"""
        WITH w AS ({intervals_sql}),
        o AS (SELECT owner, a, b, max(b) OVER (PARTITION BY owner ORDER BY a, b
                                                ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_end FROM w),
        g AS (SELECT owner, a, b, sum(CASE WHEN prev_end IS NULL OR a > prev_end THEN 1 ELSE 0 END)
                  OVER (PARTITION BY owner ORDER BY a, b ROWS UNBOUNDED PRECEDING) AS island FROM o)
        SELECT owner, min(a) AS a, max(b) AS b FROM g GROUP BY owner, island"""


def _device_intervals(t0: int, t1: int, track_filter: str) -> str:
    return (f"SELECT coalesce(t.device, t.group_name) AS owner, greatest(s.ts, {t0}) AS a,"
            f" least(s.ts + s.dur, {t1}) AS b FROM slices s JOIN tracks t USING (track_id)"
            f" WHERE t.lane IN ({_DEV_LANES}) AND s.dur > 0 AND s.ts < {t1} AND s.ts + s.dur > {t0}"
            f" AND {track_filter}")


def _thread_intervals(t0: int, t1: int, track_filter: str) -> str:
    return (f"SELECT s.track_id AS owner, greatest(s.ts, {t0}) AS a, least(s.ts + s.dur, {t1}) AS b"
            f" FROM slices s JOIN tracks t USING (track_id)"
            f" WHERE t.lane = 'cpu' AND s.dur > 0 AND coalesce(s.category, '') NOT IN ({_IN})"
            f" AND s.ts < {t1} AND s.ts + s.dur > {t0} AND {track_filter}")


def _series(con, islands: str, t0: int, bucket_ns: int, buckets: int) -> dict:
    rows = con.execute(f"""
        WITH u AS ({islands}),
        cut AS (SELECT owner, a, b, unnest(range((a - {t0}) // {bucket_ns}, (b - 1 - {t0}) // {bucket_ns} + 1)) AS k
                FROM u)
        SELECT owner, k, sum(least(b, {t0} + (k + 1) * {bucket_ns}) - greatest(a, {t0} + k * {bucket_ns}))::DOUBLE
        FROM cut GROUP BY owner, k""").fetchall()
    out: dict = {}
    for owner, k, busy in rows:
        frac = out.setdefault(owner, [0.0] * buckets)
        if 0 <= k < buckets:
            frac[k] = min(1.0, busy / bucket_ns)
    return out


def busy(con: duckdb.DuckDBPyConnection, t0: int, t1: int, tracks: list[int] | None = None,
         buckets: int = 0) -> dict:
    """Busy time within [t0, t1) (absolute ns) of every device and CPU thread with work there.

    {"span_ns", "definition": DEFINITIONS, "devices": [{"device", "group_name", "busy_ns", "fraction"
    (, "series")}], "threads": [{"track_id", "name", "group_name", "busy_ns", "fraction" (, "series")}]};
    `tracks` restricts both to those tracks; `buckets` > 0 adds a per-bucket busy fraction series.
    """
    t0, t1 = int(t0), int(t1)
    span = max(1, t1 - t0)
    tf = "TRUE" if not tracks else "t.track_id IN (" + ", ".join(str(int(t)) for t in tracks) + ")"
    dev_isl = _islands_sql(_device_intervals(t0, t1, tf))
    thr_isl = _islands_sql(_thread_intervals(t0, t1, tf))
    groups = dict(con.execute("SELECT coalesce(device, group_name), any_value(group_name) FROM tracks"
                              f" WHERE lane IN ({_DEV_LANES}) GROUP BY 1").fetchall())
    devices = [{"device": d, "group_name": groups.get(d, d), "busy_ns": int(n), "fraction": n / span}
               for d, n in con.execute(f"SELECT owner, sum(b - a) FROM ({dev_isl}) GROUP BY owner ORDER BY owner")
               .fetchall()]
    threads = [{"track_id": int(tid), "name": name, "group_name": group, "busy_ns": int(n), "fraction": n / span}
               for tid, name, group, n in con.execute(
                   f"SELECT u.owner, t.name, t.group_name, sum(u.b - u.a) FROM ({thr_isl}) u"
                   " JOIN tracks t ON t.track_id = u.owner GROUP BY ALL ORDER BY 4 DESC, 1").fetchall()]
    if buckets > 0:
        bucket_ns = max(1, -(-span // buckets))
        dev_series = _series(con, dev_isl, t0, bucket_ns, buckets)
        thr_series = _series(con, thr_isl, t0, bucket_ns, buckets)
        for d in devices:
            d["series"] = dev_series.get(d["device"], [0.0] * buckets)
        for t in threads:
            t["series"] = thr_series.get(t["track_id"], [0.0] * buckets)
    return {"span_ns": span, "definition": DEFINITIONS, "devices": devices, "threads": threads,
            **({"bucket_ns": max(1, -(-span // buckets))} if buckets > 0 else {})}
