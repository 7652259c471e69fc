"""The small per-trace result of a fleet's map: named SQL queries over one stored trace.

Everything is computed in DuckDB over the trace's own tables (and its findings side file),
so the result is a few hundred bytes whatever the trace's size. What each metric means is in
docs/fleet.md; units are in the names (ns, bytes, gbps = bytes per ns = GB/s, frac = 0..1).
"""

from __future__ import annotations

import json

from acceltrace.store.link import link_peak_bytes_per_s

# Device work that is communication, by the names NCCL/RCCL/oneCCL and our model give it.
COLLECTIVE_RE = ("(?i)(nccl|rccl|ccl_|allreduce|all_reduce|allgather|all_gather|reducescatter|reduce_scatter"
                 "|alltoall|all_to_all|broadcast|sendrecv)")
HOST_GAP_MIN_NS = 50_000  # a pause between two runtime calls longer than this is a host-side gap
MAX_KERNEL_NAMES = 64  # per-name kernel statistics kept per trace (by total time)

_RUN_SQL = """
SELECT CAST(max(value) FILTER (WHERE key = 'start_ns') AS BIGINT),
       CAST(max(value) FILTER (WHERE key = 'end_ns') AS BIGINT)
FROM trace_meta
"""

# Busy time = length of the union of intervals, per group: each slice adds what lies past the
# furthest end of the slices that started before it.
_UNION_SQL = """
WITH iv AS (
    SELECT {group} AS g, s.ts, s.ts + s.dur AS e
    FROM slices s JOIN tracks t USING (track_id)
    WHERE t.lane IN ({lanes}) AND s.dur > 0 {extra}
), o AS (
    SELECT g, ts, e, max(e) OVER (PARTITION BY g ORDER BY ts, e
                                  ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_e
    FROM iv
)
SELECT g, sum(greatest(0, e - greatest(ts, coalesce(prev_e, ts))))::BIGINT FROM o GROUP BY g
"""

_TRANSFERS_SQL = """
SELECT s.direction, coalesce(s.host_mem, 'device') AS host_mem, count(*)::BIGINT,
       coalesce(sum(s.bytes), 0)::BIGINT, coalesce(sum(s.dur), 0)::BIGINT
FROM slices s JOIN tracks t USING (track_id)
WHERE t.lane IN ('pcie', 'eu') AND s.direction IS NOT NULL AND s.dur > 0
GROUP BY ALL ORDER BY 1, 2
"""

_KERNELS_SQL = f"""
SELECT s.name, count(*)::BIGINT, sum(s.dur)::BIGINT, quantile_cont(s.dur, 0.5)::DOUBLE
FROM slices s JOIN tracks t USING (track_id)
WHERE t.lane = 'eu' AND s.dur > 0 AND s.direction IS NULL AND NOT regexp_matches(s.name, '{COLLECTIVE_RE}')
GROUP BY 1 ORDER BY 3 DESC, 1 LIMIT {MAX_KERNEL_NAMES}
"""

_COLLECTIVES = f"""
SELECT s.ts, s.ts + s.dur AS e, t.device
FROM slices s JOIN tracks t USING (track_id)
WHERE t.lane IN ('eu', 'pcie') AND s.dur > 0 AND regexp_matches(s.name, '{COLLECTIVE_RE}')
"""

# Steps: ProfilerStep#N slices when the trace has them; else the intervals between consecutive
# collective ends on the first device that has collectives; else the whole trace as one step.
_PROFILER_STEPS_SQL = """
SELECT s.ts, s.ts + s.dur FROM slices s JOIN tracks t USING (track_id)
WHERE t.lane = 'cpu' AND s.name LIKE 'ProfilerStep#%' AND s.dur > 0 ORDER BY s.ts
"""

_COLLECTIVE_STEPS_SQL = f"""
WITH c AS ({_COLLECTIVES}), first_dev AS (SELECT min(device) AS d FROM c),
ends AS (SELECT e FROM c, first_dev WHERE c.device IS NOT DISTINCT FROM first_dev.d)
SELECT lag(e) OVER (ORDER BY e), e FROM ends QUALIFY lag(e) OVER (ORDER BY e) IS NOT NULL ORDER BY e
"""

_STEP_COMM_SQL = f"""
WITH c AS ({_COLLECTIVES})
SELECT w.i, coalesce(sum(greatest(0, least(c.e, w.b) - greatest(c.ts, w.a))), 0)::BIGINT
FROM _steps w LEFT JOIN c ON c.ts < w.b AND c.e > w.a
GROUP BY w.i ORDER BY w.i
"""

_HOST_GAPS_SQL = f"""
WITH top AS (
    SELECT s.track_id, s.ts, s.ts + s.dur AS e
    FROM slices s JOIN tracks t USING (track_id) WHERE t.lane = 'cpu' AND s.depth = 0
), g AS (
    SELECT ts - max(e) OVER (PARTITION BY track_id ORDER BY ts
                             ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS gap FROM top
)
SELECT coalesce(sum(gap) FILTER (WHERE gap > {HOST_GAP_MIN_NS}), 0)::BIGINT,
       count(*) FILTER (WHERE gap > {HOST_GAP_MIN_NS}) FROM g
"""

_LAUNCH_SQL = """
SELECT quantile_cont(s.dur, 0.5)::DOUBLE, count(*) FROM slices s JOIN tracks t USING (track_id)
WHERE t.lane = 'cpu' AND s.name ILIKE '%launch%kernel%'
"""

# a pass's impact in a trace: its findings' exclusive shares summed (they add up without counting a
# nanosecond twice, so a fleet's sum across passes and traces stays within the runs); a side file from
# before exclusive_ns holds that share in impact_ns
_FINDINGS_SQL = """
SELECT pass, count(*)::BIGINT, coalesce(sum({col}), 0)::BIGINT FROM findings GROUP BY 1 ORDER BY 1
"""


def trace_metrics(con) -> dict:
    """The per-trace result of the map (everything but identity and tags), from an open trace."""
    start_ns, end_ns = con.execute(_RUN_SQL).fetchone()
    run_ns = max(int((end_ns or 0) - (start_ns or 0)), 1)
    meta = dict(con.execute("SELECT key, value FROM trace_meta").fetchall())
    out: dict = {"run_ns": run_ns}

    dev = con.execute(_UNION_SQL.format(group="coalesce(t.device, '')", lanes="'eu'", extra="")).fetchall()
    compute = con.execute(_UNION_SQL.format(group="coalesce(t.device, '')", lanes="'eu'",
                                            extra=f"AND NOT regexp_matches(s.name, '{COLLECTIVE_RE}')")).fetchall()
    n_dev = max(len(dev), 1)
    out["devices"] = len(dev)
    out["device_busy"] = sum(b for _g, b in dev) / n_dev / run_ns if dev else None
    out["compute_busy"] = sum(b for _g, b in compute) / n_dev / run_ns if compute else None
    host = con.execute(_UNION_SQL.format(group="0", lanes="'cpu'", extra="")).fetchall()
    out["host_busy"] = host[0][1] / run_ns if host else None
    gap_ns, n_gaps = con.execute(_HOST_GAPS_SQL).fetchone()
    out["host_gap_ns"] = int(gap_ns)
    out["host_gaps"] = int(n_gaps)
    out["host_gap_frac"] = gap_ns / run_ns if host else None
    launch_ns, n_launch = con.execute(_LAUNCH_SQL).fetchone()
    out["launch_ns_median"] = launch_ns if n_launch else None

    transfers = [{"direction": d, "host_mem": m, "count": int(c), "bytes": int(b), "ns": int(ns)}
                 for d, m, c, b, ns in con.execute(_TRANSFERS_SQL).fetchall()]
    out["transfers"] = transfers
    for direction in ("h2d", "d2h"):
        rows = [t for t in transfers if t["direction"] == direction]
        b = sum(t["bytes"] for t in rows)
        ns = sum(t["ns"] for t in rows)
        out[f"{direction}_bytes"] = b
        out[f"{direction}_ns"] = ns
        out[f"{direction}_gbps"] = b / ns if ns else None
    host_bytes = sum(t["bytes"] for t in transfers if t["direction"] in ("h2d", "d2h"))
    pageable = sum(t["bytes"] for t in transfers if t["host_mem"] == "pageable")
    out["transfer_ns"] = sum(t["ns"] for t in transfers)
    out["pageable_bytes"] = pageable
    out["pageable_frac"] = pageable / host_bytes if host_bytes else None
    out.update(_link(meta, out, run_ns))

    coll = con.execute(f"SELECT coalesce(sum(e - ts), 0)::BIGINT, count(*) FROM ({_COLLECTIVES})").fetchone()
    out["collective_ns"] = int(coll[0])
    out["collectives"] = int(coll[1])

    out.update(_steps(con, start_ns, end_ns))
    out["kernels"] = [{"name": n, "count": int(c), "total_ns": int(t), "median_ns": float(m)}
                      for n, c, t, m in con.execute(_KERNELS_SQL).fetchall()]
    has_findings = con.execute(
        "SELECT count(*) FROM duckdb_views() WHERE view_name = 'findings' AND temporary").fetchone()[0]
    cols = [d[0] for d in con.execute("SELECT * FROM findings LIMIT 0").description] if has_findings else []
    col = "exclusive_ns" if "exclusive_ns" in cols else "impact_ns"
    out["findings"] = ([{"pass": p, "count": int(c), "impact_ns": int(i)}
                        for p, c, i in con.execute(_FINDINGS_SQL.format(col=col)).fetchall()] if has_findings else [])
    out["analyzed"] = bool(has_findings)
    return out


def _link(meta: dict, m: dict, run_ns: int) -> dict:
    """The link the trace says it trained at, its peak, and how much of it the transfers used."""
    try:
        gen, width = int(meta["link_gen"]), int(meta["link_width"])
        peak = link_peak_bytes_per_s(gen, width, int(meta.get("max_payload_bytes", 256)))
    except (KeyError, ValueError):
        return {"link_gen": None, "link_width": None, "link_peak_gbps": None, "link_util": None}
    util = max(m["h2d_bytes"], m["d2h_bytes"]) / (peak * run_ns * 1e-9) if peak else None
    return {"link_gen": gen, "link_width": width, "link_peak_gbps": peak / 1e9, "link_util": util}


def _steps(con, start_ns, end_ns) -> dict:
    rows = con.execute(_PROFILER_STEPS_SQL).fetchall()
    source = "profiler_step"
    if not rows:
        rows = con.execute(_COLLECTIVE_STEPS_SQL).fetchall()
        source = "collective"
    if not rows:
        rows = [(start_ns, end_ns)]
        source = "trace"
    con.execute("CREATE OR REPLACE TEMP TABLE _steps (i INTEGER, a BIGINT, b BIGINT)")
    con.executemany("INSERT INTO _steps VALUES (?, ?, ?)", [(i, a, b) for i, (a, b) in enumerate(rows)])
    comm = [int(c) for _i, c in con.execute(_STEP_COMM_SQL).fetchall()]
    step_ns = [int(b - a) for a, b in rows]
    work = [s - c for s, c in zip(step_ns, comm)]
    con.execute("DROP TABLE _steps")
    return {"step_source": source, "steps": len(step_ns), "step_ns": step_ns, "step_comm_ns": comm,
            "step_ns_median": _median(step_ns), "step_work_ns_median": _median(work),
            "comm_frac": (sum(comm) / sum(step_ns)) if sum(step_ns) else None}


def _median(xs: list[int]) -> float | None:
    if not xs:
        return None
    s = sorted(xs)
    n = len(s)
    return float(s[n // 2]) if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2.0


def tags_from_meta(meta: dict) -> dict:
    """job / rank / host / world_size as the trace's own metadata states them."""
    tags: dict = {}
    for key in ("job", "rank", "world_size"):
        if meta.get(key) not in (None, ""):
            tags[key] = meta[key]
    if meta.get("hostname"):
        tags["host"] = meta["hostname"]
    if "rank" not in tags and meta.get("chrome_ranks"):
        try:
            ranks = json.loads(meta["chrome_ranks"])
        except (TypeError, ValueError):
            ranks = None
        if isinstance(ranks, list) and len(set(ranks)) == 1:
            tags["rank"] = str(ranks[0])
    return tags
