"""Reading a fleet: the named queries behind `fleet --json`, the CLI report and /api/fleets/ID,
and read-only SQL over the fleet tables, sandboxed like store/sandbox.py (fleet.duckdb attached
READ_ONLY, then external access off and the configuration locked, a watchdog on time)."""

from __future__ import annotations

import json
import threading

import duckdb

from acceltrace.fleet import layout
from acceltrace.store.sandbox import DEFAULT_MAX_ROWS, DEFAULT_TIMEOUT_S, QueryError

TABLES = ("traces", "steps", "kernels", "transfers", "pass_findings", "metric_scores", "outliers", "stragglers",
          "findings", "metric_defs", "fleet_meta")


def connect(store, fleet_id: str, memory_limit: str = "1GB") -> duckdb.DuckDBPyConnection:
    """A locked read-only connection on the fleet tables (unqualified names resolve to them)."""
    path = layout.db_path(store, fleet_id)
    if not path.exists():
        raise layout.FleetNotFound(f"fleet {fleet_id} has no tables yet (no build finished): {path} is missing")
    con = duckdb.connect(":memory:")
    con.execute("ATTACH '" + str(path).replace("'", "''") + "' AS fleet (READ_ONLY)")
    con.execute("USE fleet")
    con.execute(f"SET memory_limit = '{memory_limit}'")
    con.execute("SET threads = 2")
    con.execute("SET enable_external_access = false")
    con.execute("SET lock_configuration = true")
    return con


def run_readonly(store, fleet_id: str, sql: str, max_rows: int | None = DEFAULT_MAX_ROWS,
                 timeout_s: float | None = DEFAULT_TIMEOUT_S) -> tuple[list[str], list[tuple], bool]:
    """(columns, rows, truncated) of one read-only statement; QueryError with the reason otherwise."""
    if not sql or not sql.strip():
        raise QueryError("empty query; expected one SQL statement", "bad_request")
    con = connect(store, fleet_id)
    timed_out = threading.Event()

    def stop():
        timed_out.set()
        con.interrupt()

    timer = threading.Timer(timeout_s, stop) if timeout_s else None
    try:
        if timer:
            timer.start()
        cur = con.execute(sql)
        if cur.description is None:
            return [], [], False
        cols = [d[0] for d in cur.description]
        rows = cur.fetchall() if max_rows is None else cur.fetchmany(max_rows + 1)
        truncated = max_rows is not None and len(rows) > max_rows
        return cols, rows[:max_rows] if max_rows is not None else rows, truncated
    except duckdb.Error as e:
        if timed_out.is_set():
            raise QueryError(f"query stopped after the {timeout_s:g} s time limit", "query_timeout") from None
        kind = type(e).__name__
        code = "query_refused" if kind in ("PermissionException", "InvalidInputException") else "query_failed"
        raise QueryError(f"{kind}: {e}", code) from None
    finally:
        if timer:
            timer.cancel()
        con.close()


_TRACES_SQL = """
SELECT t.trace_id, t.name, t.path, t.status, t.error, t.tags_json, t.rank, t.job,
       t.step_ns_median, t.step_work_ns_median, t.device_busy, t.compute_busy, t.host_busy, t.host_gap_frac,
       t.launch_ns_median, t.h2d_gbps, t.d2h_gbps, t.pageable_frac, t.link_gen, t.link_width, t.link_peak_gbps,
       t.link_util, t.collective_ns, t.comm_frac, t.kernel_time_ratio, t.run_ns, t.steps, t.transfer_ns,
       t.h2d_bytes, t.d2h_bytes, t.ingested, t.map_ms,
       o.trace_id IS NOT NULL AS outlier, coalesce(o.metrics, []) AS outlier_metrics, o.cause, o.severity
FROM traces t LEFT JOIN outliers o USING (trace_id)
ORDER BY outlier DESC, (t.status <> 'ok') DESC, o.severity DESC NULLS LAST, t.job, t.rank NULLS LAST, t.path
"""

# columns of the page's ranks x metrics table: name, label, unit, which side is bad
PAGE_METRICS = [
    ("step_ns_median", "step", "ns", "high"),
    ("step_work_ns_median", "step work", "ns", "high"),
    ("comm_frac", "comm share", "frac", "low"),
    ("device_busy", "device busy", "frac", "low"),
    ("compute_busy", "compute busy", "frac", "low"),
    ("host_busy", "host busy", "frac", None),
    ("host_gap_frac", "host gaps", "frac", "high"),
    ("launch_ns_median", "launch", "ns", "high"),
    ("kernel_time_ratio", "kernel time x", "ratio", "high"),
    ("h2d_gbps", "H2D GB/s", "gbps", "low"),
    ("link_peak_gbps", "link peak GB/s", "gbps", "low"),
    ("link_util", "link util", "frac", None),
    ("pageable_frac", "pageable", "frac", "high"),
]


def report(store, fleet_id: str, full: bool = False) -> dict:
    """The fleet as JSON: the contract keys (fleet, traces[...], findings[...]) and, with full,
    what the page draws besides (stragglers, per-job medians, step-time distribution)."""
    fleet = _fleet_json(store, fleet_id)
    con = connect(store, fleet_id)
    try:
        traces = []
        cur = con.execute(_TRACES_SQL)
        cols = [d[0] for d in cur.description]
        for r in cur.fetchall():
            d = dict(zip(cols, r))
            d["tags"] = json.loads(d.pop("tags_json") or "{}")
            traces.append(d)
        findings = [{"pass": p, "traces": int(n), "findings": int(f), "impact_ns": int(i),
                     "worst": [dict(w) for w in worst]}
                    for p, n, f, i, worst in con.execute(
                        "SELECT pass, traces, findings, impact_ns, worst FROM findings "
                        "ORDER BY impact_ns DESC, pass").fetchall()]
        out = {"fleet": fleet_id, "name": fleet.get("name"), "updated": fleet.get("updated"),
               "counts": fleet.get("counts", {}), "skipped": fleet.get("skipped", []),
               "traces": traces, "findings": findings}
        if full:
            out["stragglers"] = _rows(con, "SELECT * FROM stragglers ORDER BY excess_ns DESC")
            out["metrics"] = [{"key": k, "label": lab, "unit": u, "bad": b} for k, lab, u, b in PAGE_METRICS]
            out["medians"] = _rows(con, "SELECT job, metric, median, mad FROM metric_scores "
                                        "GROUP BY ALL ORDER BY job, metric")
            out["step_hist"] = _step_hist(con)
        return out
    finally:
        con.close()


def _step_hist(con, bins: int = 40) -> dict:
    """Every step of every rank, binned: the step-time distribution (one bar per bin)."""
    lo, hi, n = con.execute("SELECT min(step_ns), max(step_ns), count(*) FROM steps").fetchone()
    if not n:
        return {"lo_ns": None, "hi_ns": None, "counts": []}
    width = max((hi - lo) / bins, 1.0)
    counts = [0] * bins
    for b, c in con.execute(f"SELECT least(floor((step_ns - {lo}) / {width})::INT, {bins - 1}), count(*) "
                            "FROM steps GROUP BY 1").fetchall():
        counts[int(b)] = int(c)
    return {"lo_ns": int(lo), "hi_ns": int(hi), "bin_ns": width, "counts": counts}


def _rows(con, sql: str) -> list[dict]:
    cur = con.execute(sql)
    cols = [d[0] for d in cur.description]
    return [dict(zip(cols, r)) for r in cur.fetchall()]


def _fleet_json(store, fleet_id: str) -> dict:
    f = layout.fleet_dir(store, fleet_id) / "fleet.json"
    if not f.is_file():
        raise layout.FleetNotFound(f"no fleet {fleet_id} in {layout.fleets_dir(store)}")
    return json.loads(f.read_text())
