"""The reduce: DuckDB over a fleet's Parquet results -> the fleet tables in fleet.duckdb.

Latest result per input path wins (a later build supersedes an earlier one). Outliers are
robust per metric within one job: the median across the job's ranks and the MAD (median
absolute deviation) around it; a rank is an outlier on a metric when it lies on the metric's
bad side by more than MAD_Z robust z-scores (0.6745 * deviation / MAD, Iglewicz-Hoaglin) *and*
by more than the metric's floor (so ranks that agree to within jitter, MAD ~ 0, do not flag
each other). The metric decides the cause it points at (METRICS); docs/fleet.md lists them.
"""

from __future__ import annotations

import os
from pathlib import Path

import duckdb

MAD_Z = 3.5
MIN_RANKS = 3  # fewer traces in a job: no median worth comparing against

# metric, bad direction, floor kind ('rel' x |median| or 'abs'), floor, the cause it points at
METRICS = [
    ("step_work_ns_median", "high", "rel", 0.10, None),
    ("link_peak_gbps", "low", "rel", 0.01, "link_degraded"),
    ("h2d_gbps", "low", "rel", 0.15, "link_degraded"),
    ("kernel_time_ratio", "high", "rel", 0.10, "throttled"),
    ("pageable_frac", "high", "abs", 0.05, "pageable"),
    ("host_gap_frac", "high", "abs", 0.02, "noisy_neighbour"),
    ("launch_ns_median", "high", "rel", 0.25, "noisy_neighbour"),
]

_LOAD = """
CREATE TABLE results AS
SELECT * FROM read_parquet({files}, union_by_name = true)
QUALIFY row_number() OVER (PARTITION BY path ORDER BY build DESC) = 1
"""

_TABLES = [
    # per-kernel-name statistics, and each trace's kernel time against the job's medians at equal work
    """CREATE TABLE kernels AS
       SELECT trace_id, coalesce(tag_job, '') AS job, k.name, k.count, k.total_ns, k.median_ns
       FROM (SELECT trace_id, tag_job, unnest(kernels) AS k FROM results WHERE status = 'ok')""",
    """CREATE TEMP TABLE _kernel_ratio AS
       WITH jm AS (SELECT job, name, median(median_ns) AS job_median_ns FROM kernels GROUP BY ALL)
       SELECT k.trace_id, sum(k.total_ns) / nullif(sum(k.count * jm.job_median_ns), 0) AS kernel_time_ratio
       FROM kernels k JOIN jm USING (job, name) GROUP BY 1""",
    """CREATE TABLE traces AS
       SELECT r.* EXCLUDE (kernels, transfers, findings, step_ns, step_comm_ns),
              coalesce(r.tag_job, '') AS job, TRY_CAST(r.tag_rank AS BIGINT) AS rank, kr.kernel_time_ratio,
              r.run_ns * r.compute_busy / nullif(r.steps, 0) AS compute_ns_per_step,
              r.host_gap_ns / nullif(r.steps, 0) AS host_gap_ns_per_step,
              r.h2d_ns / nullif(r.steps, 0) AS h2d_ns_per_step
       FROM results r LEFT JOIN _kernel_ratio kr USING (trace_id)""",
    """CREATE TABLE steps AS
       SELECT trace_id, coalesce(tag_job, '') AS job, TRY_CAST(tag_rank AS BIGINT) AS rank,
              generate_subscripts(step_ns, 1) - 1 AS step, unnest(step_ns) AS step_ns, unnest(step_comm_ns) AS comm_ns
       FROM results WHERE status = 'ok'""",
    """CREATE TABLE transfers AS
       SELECT trace_id, t.direction, t.host_mem, t.count, t.bytes, t.ns
       FROM (SELECT trace_id, unnest(transfers) AS t FROM results WHERE status = 'ok')""",
    """CREATE TABLE pass_findings AS
       SELECT trace_id, f.pass, f.count AS findings, f.impact_ns
       FROM (SELECT trace_id, unnest(findings) AS f FROM results WHERE status = 'ok')""",
    # one row per (trace, metric): value, the job's median and MAD, robust z, outlier or not
    """CREATE TABLE metric_scores AS
       WITH v AS (
           SELECT t.trace_id, t.job, m.metric, m.direction, m.floor_kind, m.floor, m.cause,
                  CASE m.metric {value_cases} END AS value
           FROM traces t, metric_defs m WHERE t.status = 'ok'
       ), n AS (SELECT job, count(DISTINCT trace_id) AS n FROM v GROUP BY 1),
       med AS (SELECT job, metric, median(value) AS median FROM v WHERE value IS NOT NULL GROUP BY ALL),
       dev AS (SELECT v.*, med.median, abs(v.value - med.median) AS deviation
               FROM v JOIN med USING (job, metric) WHERE v.value IS NOT NULL),
       mad AS (SELECT job, metric, median(deviation) AS mad FROM dev GROUP BY ALL)
       SELECT dev.trace_id, dev.job, dev.metric, dev.direction, dev.cause, dev.value, dev.median, mad.mad,
              CASE WHEN dev.direction = 'high' THEN dev.value - dev.median ELSE dev.median - dev.value END AS excess,
              CASE WHEN dev.floor_kind = 'rel' THEN dev.floor * abs(dev.median) ELSE dev.floor END AS floor,
              CASE WHEN mad.mad > 0 THEN 0.6745 * dev.deviation / mad.mad END AS robust_z,
              n.n >= {min_ranks}
                AND (CASE WHEN dev.direction = 'high' THEN dev.value - dev.median ELSE dev.median - dev.value END)
                    > (CASE WHEN dev.floor_kind = 'rel' THEN dev.floor * abs(dev.median) ELSE dev.floor END)
                AND (mad.mad = 0 OR 0.6745 * dev.deviation / mad.mad > {mad_z}) AS is_outlier
       FROM dev JOIN mad USING (job, metric) JOIN n USING (job)""",
    # per outlier trace: its outlier metrics, worst first (excess over floor), and the cause the
    # worst metric that names one points at ('unknown' when only the step time is off)
    """CREATE TABLE outliers AS
       WITH o AS (SELECT *, excess / nullif(floor, 0) AS severity FROM metric_scores WHERE is_outlier)
       SELECT o.trace_id, t.name, t.job, t.rank,
              list(o.metric ORDER BY o.severity DESC NULLS FIRST, o.metric) AS metrics,
              coalesce(arg_max(o.cause, coalesce(o.severity, 1e300)) FILTER (WHERE o.cause IS NOT NULL), 'unknown') AS cause,
              max(o.severity) AS severity
       FROM o JOIN traces t USING (trace_id) GROUP BY ALL""",
    # stragglers: step work (step minus its communication) an outlier; its excess per step over
    # the job's median, and the parts of it that the trace itself shows (each also vs the median)
    """CREATE TABLE stragglers AS
       WITH j AS (SELECT job, median(compute_ns_per_step) AS c, median(host_gap_ns_per_step) AS g,
                         median(h2d_ns_per_step) AS h, median(comm_frac) AS cf
                  FROM traces WHERE status = 'ok' GROUP BY 1)
       SELECT s.trace_id, t.name, t.job, t.rank, s.value AS step_work_ns, s.median AS job_step_work_ns,
              s.value - s.median AS excess_ns,
              t.compute_ns_per_step - j.c AS excess_compute_ns,
              t.host_gap_ns_per_step - j.g AS excess_host_gap_ns,
              t.h2d_ns_per_step - j.h AS excess_h2d_ns,
              t.comm_frac, j.cf AS job_comm_frac, o.cause
       FROM metric_scores s JOIN traces t USING (trace_id) JOIN j ON j.job = t.job
       LEFT JOIN outliers o USING (trace_id)
       WHERE s.metric = 'step_work_ns_median' AND s.is_outlier""",
    # fleet-wide findings: the passes by total impact across traces, with their worst traces
    """CREATE TABLE findings AS
       WITH p AS (SELECT f.*, t.name FROM pass_findings f JOIN traces t USING (trace_id) WHERE f.findings > 0)
       SELECT pass, count(DISTINCT trace_id) AS traces, sum(findings)::BIGINT AS findings,
              sum(impact_ns)::BIGINT AS impact_ns,
              list({{'trace_id': trace_id, 'name': name, 'impact_ns': impact_ns}} ORDER BY impact_ns DESC)[1:5] AS worst
       FROM p GROUP BY 1 ORDER BY impact_ns DESC, pass""",
]


def reduce_fleet(results_dir: Path, out_path: Path, fleet: dict) -> dict:
    """Build fleet.duckdb from every results file; returns counts (traces, ok, failed, outliers)."""
    files = sorted(str(p) for p in Path(results_dir).glob("build-*.parquet"))
    tmp = out_path.with_name(f".{out_path.name}.{os.getpid()}.tmp")
    tmp.unlink(missing_ok=True)
    con = duckdb.connect(str(tmp))
    try:
        con.execute("SET threads = 2")
        if files:
            con.execute(_LOAD.format(files="[" + ", ".join(_lit(f) for f in files) + "]"))
        else:
            from acceltrace.fleet.results import SCHEMA

            con.register("_empty", SCHEMA.empty_table())
            con.execute("CREATE TABLE results AS SELECT * FROM _empty")
            con.unregister("_empty")
        con.execute("CREATE TABLE metric_defs (metric VARCHAR, direction VARCHAR, floor_kind VARCHAR, "
                    "floor DOUBLE, cause VARCHAR)")
        con.executemany("INSERT INTO metric_defs VALUES (?, ?, ?, ?, ?)", METRICS)
        value_cases = " ".join(f"WHEN '{m}' THEN t.{m}::DOUBLE" for m, *_ in METRICS)
        for stmt in _TABLES:
            con.execute(stmt.format(value_cases=value_cases, min_ranks=MIN_RANKS, mad_z=MAD_Z))
        con.execute("DROP TABLE results")
        con.execute("CREATE TABLE fleet_meta (key VARCHAR, value VARCHAR)")
        con.executemany("INSERT INTO fleet_meta VALUES (?, ?)",
                        [("id", fleet["id"]), ("name", fleet.get("name") or ""),
                         ("updated", fleet.get("updated") or ""), ("builds", str(fleet.get("builds", 0)))])
        counts = con.execute("""SELECT count(*), count(*) FILTER (WHERE status = 'ok'),
                                       count(*) FILTER (WHERE status <> 'ok'), (SELECT count(*) FROM outliers)
                                FROM traces""").fetchone()
        con.execute("CHECKPOINT")
    finally:
        con.close()
    os.replace(tmp, out_path)
    return {"traces": counts[0], "ok": counts[1], "failed": counts[2], "outliers": counts[3]}


def _lit(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"
