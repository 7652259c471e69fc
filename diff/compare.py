"""The comparison itself: per-name rows, call-tree attribution, the findings diff and the headline.

Every figure is one SQL query over the per-side tables of pair.py and steps.py (no per-event
Python); `compare` assembles them into the one object the CLI prints and the API returns
(docs/diff.md documents its keys).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import duckdb

from acceltrace.diff import names, pair, steps as steps_mod
from acceltrace.store.catalog import Store

LANES = ("cpu_op", "runtime", "driver", "kernel", "copy")
TOP_CONTRIBUTORS = 10
TOP_ATTRIBUTED_OPS = 20
KERNELS_PER_OP = 5
IDLE_NAME = "(thread idle)"
STEP_SELF_NAME = "(in step, no op running)"


@dataclass(frozen=True)
class Noise:
    """The band inside which a change is 'unchanged': relative change < pct % or |delta| < ns."""
    pct: float = 5.0
    ns: int = 10_000

    def sql(self, delta: str, base: str) -> str:
        return f"(abs({delta}) < {int(self.ns)} OR abs({delta}) < {float(self.pct) / 100.0} * {base})"


def _status_sql(noise: Noise) -> str:
    return (f"CASE WHEN count_a = 0 THEN 'added' WHEN count_b = 0 THEN 'removed'"
            f" WHEN {noise.sql('delta_ns', 'total_a_ns')} THEN 'unchanged'"
            f" WHEN delta_ns > 0 THEN 'increased' ELSE 'decreased' END")


def _records(cur: duckdb.DuckDBPyConnection, sql: str, params: list | None = None) -> list[dict]:
    cur.execute(sql, params or [])
    cols = [d[0] for d in cur.description]
    return [dict(zip(cols, r)) for r in cur.fetchall()]


def _num(v):
    """DuckDB numbers as JSON numbers: whole ns as int, means and ratios as float."""
    if v is None:
        return None
    f = float(v)
    return int(f) if f.is_integer() and abs(f) < 2**62 else round(f, 6)


def rows(con: duckdb.DuckDBPyConnection, noise: Noise, focus: int, start_a: int, start_b: int) -> list[dict]:
    """Per (lane, device rank, name): count, total, mean, p50, p95 per side, delta, ratio, status, and
    where the name's slices lie in the focus step (rel ns) so a view can frame them."""
    stat = f"""
        SELECT side, lane, coalesce(dev_rank, -1) AS dr, name_id, min(dev) AS dev, count(*) AS n, sum(dur) AS total,
               avg(dur) AS mean, quantile_cont(dur, 0.5) AS p50, quantile_cont(dur, 0.95) AS p95,
               coalesce(min(ts) FILTER (WHERE step = {int(focus)}), min(ts)) AS f0,
               coalesce(max(ts + dur) FILTER (WHERE step = {int(focus)}), max(ts + dur)) AS f1,
               coalesce(arg_min(track_id, ts) FILTER (WHERE step = {int(focus)}), arg_min(track_id, ts)) AS tr
        FROM _scope GROUP BY side, lane, dr, name_id"""
    return _records(con, f"""
        WITH st AS ({stat}), a AS (SELECT * FROM st WHERE side = 0), b AS (SELECT * FROM st WHERE side = 1),
        j AS (
            SELECT coalesce(a.lane, b.lane) AS lane, coalesce(a.name_id, b.name_id) AS name_id,
                   coalesce(a.dr, b.dr) AS dev_rank, a.dev AS device_a, b.dev AS device_b,
                   coalesce(a.n, 0) AS count_a, coalesce(b.n, 0) AS count_b,
                   coalesce(a.total, 0)::BIGINT AS total_a_ns, coalesce(b.total, 0)::BIGINT AS total_b_ns,
                   a.mean AS mean_a_ns, b.mean AS mean_b_ns, a.p50 AS p50_a_ns, b.p50 AS p50_b_ns,
                   a.p95 AS p95_a_ns, b.p95 AS p95_b_ns,
                   a.f0 - {int(start_a)} AS frame_a0, a.f1 - {int(start_a)} AS frame_a1,
                   b.f0 - {int(start_b)} AS frame_b0, b.f1 - {int(start_b)} AS frame_b1,
                   a.tr AS track_a, b.tr AS track_b
            FROM a FULL OUTER JOIN b ON a.lane = b.lane AND a.dr = b.dr AND a.name_id = b.name_id)
        SELECT j.lane, n.name, j.* EXCLUDE (lane, name_id), total_b_ns - total_a_ns AS delta_ns,
               CASE WHEN total_a_ns > 0 THEN total_b_ns / total_a_ns END AS ratio,
               {_status_sql(noise).replace('delta_ns', '(total_b_ns - total_a_ns)')} AS status
        FROM j JOIN _name_list n USING (name_id) ORDER BY abs(total_b_ns - total_a_ns) DESC, j.lane, n.name, dev_rank""")


def attribution(con: duckdb.DuckDBPyConnection) -> list[dict]:
    """Device-time deltas attributed to the CPU op that launched them: the outermost cpu op around the
    launching runtime call (or that call itself when no op encloses it)."""
    con.execute("""CREATE TEMP TABLE _op_of AS
        WITH h AS (
            SELECT l.side, l.dev_id, c.track_id, c.ts, c.ts + c.dur AS te, c.name_id, c.lane
            FROM _launch l JOIN _host c ON c.side = l.side AND c.slice_id = l.host_id)
        SELECT h.side, h.dev_id,
               CASE WHEN o.te >= h.te THEN o.name_id ELSE h.name_id END AS op_name_id,
               CASE WHEN o.te >= h.te THEN 'cpu_op' ELSE h.lane END AS op_lane
        FROM h ASOF LEFT JOIN _top_ops o ON o.side = h.side AND o.track_id = h.track_id AND h.ts >= o.ts""")
    per = """
        SELECT s.side, o.op_lane, o.op_name_id, s.lane, coalesce(s.dev_rank, -1) AS dr, s.name_id,
               min(s.dev) AS dev, sum(s.dur) AS total
        FROM _scope s JOIN _op_of o ON o.side = s.side AND o.dev_id = s.slice_id
        WHERE s.lane IN ('kernel', 'copy') GROUP BY ALL"""
    recs = _records(con, f"""
        WITH p AS ({per}),
        j AS (
            SELECT coalesce(a.op_lane, b.op_lane) AS op_lane, coalesce(a.op_name_id, b.op_name_id) AS op_name_id,
                   coalesce(a.lane, b.lane) AS lane, coalesce(a.name_id, b.name_id) AS name_id,
                   CASE WHEN a.dev IS NULL OR a.dev = b.dev THEN coalesce(a.dev, b.dev)
                        WHEN b.dev IS NULL THEN a.dev ELSE a.dev || '/' || b.dev END AS device,
                   coalesce(a.total, 0)::BIGINT AS total_a_ns, coalesce(b.total, 0)::BIGINT AS total_b_ns
            FROM (SELECT * FROM p WHERE side = 0) a FULL OUTER JOIN (SELECT * FROM p WHERE side = 1) b
              ON a.op_lane = b.op_lane AND a.op_name_id = b.op_name_id AND a.lane = b.lane AND a.dr = b.dr
             AND a.name_id = b.name_id),
        ranked AS (
            SELECT *, total_b_ns - total_a_ns AS delta_ns,
                   sum(total_b_ns - total_a_ns) OVER (PARTITION BY op_lane, op_name_id) AS device_delta_ns,
                   row_number() OVER (PARTITION BY op_lane, op_name_id
                                      ORDER BY abs(total_b_ns - total_a_ns) DESC, name_id) AS k
            FROM j)
        SELECT r.*, opn.name AS op, kn.name AS name FROM ranked r
        JOIN _name_list opn ON opn.name_id = r.op_name_id JOIN _name_list kn ON kn.name_id = r.name_id
        ORDER BY abs(device_delta_ns) DESC, op_lane, op, k""")
    ops: dict[tuple[str, str], dict] = {}
    for r in recs:
        key = (r["op_lane"], r["op"])
        o = ops.get(key)
        if o is None:
            if len(ops) >= TOP_ATTRIBUTED_OPS:
                continue
            o = ops[key] = {"op": r["op"], "op_lane": r["op_lane"], "device_delta_ns": _num(r["device_delta_ns"]),
                            "device_a_ns": 0, "device_b_ns": 0, "kernels": []}
        o["device_a_ns"] += int(r["total_a_ns"])
        o["device_b_ns"] += int(r["total_b_ns"])
        if r["k"] <= KERNELS_PER_OP:
            o["kernels"].append({"lane": r["lane"], "name": r["name"], "device": r["device"],
                                 "total_a_ns": int(r["total_a_ns"]), "total_b_ns": int(r["total_b_ns"]),
                                 "delta_ns": int(r["delta_ns"])})
    return list(ops.values())


def findings(con: duckdb.DuckDBPyConnection, sides: dict[str, pair.Side], noise: Noise, windowed: bool) -> list[dict]:
    """Per pass: findings and impact on each side; fixed (only in A), new (only in B), changed, unchanged.
    With an explicit step selection only findings starting inside the selected steps count."""
    parts = []
    for x in sides.values():
        if x.findings_db is None:
            continue
        where = (f" WHERE EXISTS (SELECT 1 FROM _sel w WHERE w.side = {x.code} AND f.ts >= w.ts AND f.ts < w.te)"
                 if windowed else "")
        # a pass's impact on a side: its findings' exclusive shares summed (additive, within the run); a
        # side file from before exclusive_ns holds that share in impact_ns
        cols = [d[0] for d in con.execute(f"SELECT * FROM {x.findings_db}.findings LIMIT 0").description]
        col = "exclusive_ns" if "exclusive_ns" in cols else "impact_ns"
        parts.append(f"SELECT {x.code} AS side, f.pass, count(*) AS n, coalesce(sum(f.{col}), 0) AS impact"
                     f" FROM {x.findings_db}.findings f{where} GROUP BY f.pass")
    if not parts:
        return []
    union = " UNION ALL ".join(parts)
    return [{k: _num(v) if k.endswith(("_ns", "_a", "_b")) else v for k, v in r.items()} for r in _records(con, f"""
        WITH p AS ({union}),
        j AS (
            SELECT coalesce(a.pass, b.pass) AS pass, coalesce(a.n, 0) AS count_a, coalesce(b.n, 0) AS count_b,
                   coalesce(a.impact, 0)::BIGINT AS impact_a_ns, coalesce(b.impact, 0)::BIGINT AS impact_b_ns
            FROM (SELECT * FROM p WHERE side = 0) a FULL OUTER JOIN (SELECT * FROM p WHERE side = 1) b
              ON a.pass = b.pass)
        SELECT *, impact_b_ns - impact_a_ns AS delta_ns,
               CASE WHEN count_b = 0 THEN 'fixed' WHEN count_a = 0 THEN 'new'
                    WHEN count_a = count_b AND {noise.sql('impact_b_ns - impact_a_ns', 'impact_a_ns')} THEN 'unchanged'
                    ELSE 'changed' END AS status
        FROM j ORDER BY abs(impact_b_ns - impact_a_ns) DESC, pass""")]


def headline(con: duckdb.DuckDBPyConnection, basis: str) -> dict:
    """Step time (sum of the selected steps) or makespan, A vs B, and the contributors to the
    difference: self time per name on the step's (or the busiest) host thread, which partitions
    that time exactly; what the top contributors leave is `unexplained_ns`, shown, never dropped."""
    tot = {pair.letter(k): v for k, v in con.execute("SELECT side, sum(te - ts)::BIGINT FROM _sel GROUP BY side").fetchall()}
    a_ns, b_ns = int(tot.get("a") or 0), int(tot.get("b") or 0)
    if basis == "trace":
        # every slice of the thread lies inside the window; time in no top-level slice is idle
        on_thread = "b.side = w.side AND b.track_id = w.track_id"
        idle = f"SELECT w.side, '' AS lane, -1 AS name_id, (max(w.te - w.ts) - coalesce(sum(b.dur) FILTER (" \
               "WHERE b.depth = 0), 0)) AS self FROM _sel w LEFT JOIN _base b ON " + on_thread + " GROUP BY w.side"
    else:
        on_thread = "b.side = w.side AND b.track_id = w.track_id AND b.ts >= w.ts AND b.ts < w.te AND b.slice_id <> w.slice_id"
        idle = None
    self_sql = f"""
        WITH t AS (
            SELECT b.side, b.slice_id, b.lane, b.name_id, b.dur FROM _sel w JOIN _base b ON {on_thread}),
        kids AS (
            SELECT p.side, p.parent_id, sum(p.clipped_dur) AS kd FROM _parent p
            SEMI JOIN (SELECT side, slice_id FROM t UNION ALL SELECT side, slice_id FROM _sel) q
              ON q.side = p.side AND q.slice_id = p.parent_id
            GROUP BY ALL),
        steps_self AS (
            SELECT w.side, '' AS lane, -2 AS name_id, sum((w.te - w.ts) - coalesce(k.kd, 0)) AS self
            FROM _sel w LEFT JOIN kids k ON k.side = w.side AND k.parent_id = w.slice_id
            WHERE w.slice_id IS NOT NULL GROUP BY w.side)
        SELECT t.side, t.lane, t.name_id, sum(t.dur - coalesce(k.kd, 0)) AS self FROM t
        LEFT JOIN kids k ON k.side = t.side AND k.parent_id = t.slice_id GROUP BY ALL
        UNION ALL SELECT * FROM steps_self""" + (f" UNION ALL {idle}" if idle else "")
    recs = _records(con, f"""
        WITH s AS ({self_sql}),
        j AS (
            SELECT coalesce(a.lane, b.lane) AS lane, coalesce(a.name_id, b.name_id) AS name_id,
                   coalesce(a.self, 0)::BIGINT AS a_ns, coalesce(b.self, 0)::BIGINT AS b_ns
            FROM (SELECT * FROM s WHERE side = 0) a FULL OUTER JOIN (SELECT * FROM s WHERE side = 1) b
              ON a.lane = b.lane AND a.name_id = b.name_id)
        SELECT j.lane, CASE j.name_id WHEN -1 THEN '{IDLE_NAME}' WHEN -2 THEN '{STEP_SELF_NAME}' ELSE n.name END AS name,
               a_ns, b_ns, b_ns - a_ns AS delta_ns, sum(b_ns - a_ns) OVER () AS all_ns
        FROM j LEFT JOIN _name_list n USING (name_id)
        ORDER BY abs(b_ns - a_ns) DESC, j.lane, name LIMIT {TOP_CONTRIBUTORS}""")
    contributors = [{"lane": r["lane"] or None, "name": r["name"], "a_ns": int(r["a_ns"]), "b_ns": int(r["b_ns"]),
                     "delta_ns": int(r["delta_ns"])} for r in recs if r["delta_ns"] != 0]
    delta = b_ns - a_ns
    partitioned = int(recs[0]["all_ns"]) if recs else 0
    top = sum(c["delta_ns"] for c in contributors)
    n = int(con.execute("SELECT count(DISTINCT step) FROM _sel").fetchone()[0])
    return {"basis": "step" if basis != "trace" else "makespan", "a_ns": a_ns, "b_ns": b_ns, "delta_ns": delta,
            "steps": n, "a_mean_ns": a_ns / n if n else None, "b_mean_ns": b_ns / n if n else None,
            "ratio": (b_ns / a_ns) if a_ns else None, "contributors": contributors,
            # the names below the top list, and what no slice of the thread accounts for (0 when
            # the thread's slices nest cleanly); together with the contributors they add up to delta_ns
            "other_names_ns": partitioned - top, "unpartitioned_ns": delta - partitioned,
            "unexplained_ns": delta - top}


def _side_meta(store: Store, s: pair.Side, devices: list) -> dict:
    row = store.get(s.trace_id) or {}
    start, end = int(s.meta.get("start_ns", 0)), int(s.meta.get("end_ns", 0))
    return {"id": s.trace_id, "name": row.get("name"), "format": s.meta.get("format"), "start_ns": start,
            "end_ns": end, "duration_ns": end - start, "devices": devices, "analysed": s.findings_db is not None}


def compare(store: Store, id_a: str, id_b: str, steps: str | None = None, noise: Noise = Noise(),
            strip_templates: bool = False) -> dict:
    """The comparison object of docs/diff.md for traces id_a (before) and id_b (after)."""
    t0 = time.perf_counter()
    con, sides = pair.open_pair(store, id_a, id_b)
    try:
        pair.build_base(con, sides, strip_templates)
        st = steps_mod.build_steps(con, sides, steps)
        focus = st.selected[0] if st.selected else 0
        start = {s: int(sides[s].meta.get("start_ns", 0)) for s in pair.SIDES}
        out_rows = []
        for r in rows(con, noise, focus, start["a"], start["b"]):
            dev_a, dev_b = r.pop("device_a"), r.pop("device_b")
            frames = {s: [r.pop(f"frame_{s}0"), r.pop(f"frame_{s}1")] for s in pair.SIDES}
            r.pop("dev_rank")
            d = {k: _num(v) if k.endswith(("_ns", "count_a", "count_b")) or k == "ratio" else v for k, v in r.items()}
            d["device"] = dev_a if dev_b is None or dev_a == dev_b else dev_b if dev_a is None else f"{dev_a}/{dev_b}"
            d["device_a"], d["device_b"] = dev_a, dev_b
            d["frame_a_ns"] = [_num(v) for v in frames["a"]] if frames["a"][0] is not None else None
            d["frame_b_ns"] = [_num(v) for v in frames["b"]] if frames["b"][0] is not None else None
            out_rows.append(d)
        devices = {s: [d for (d,) in con.execute("SELECT dev FROM _devrank WHERE side = ? ORDER BY dev_rank", [pair.SIDES.index(s)])
                       .fetchall()] for s in pair.SIDES}
        explicit = steps is not None and steps.strip().lower() not in ("", "all")
        doc = {
            "a": _side_meta(store, sides["a"], devices["a"]),
            "b": _side_meta(store, sides["b"], devices["b"]),
            "steps": {"basis": st.basis, "name": st.name, "aligned": st.aligned, "selected": st.selected,
                      "focus": focus, "pairs": steps_mod.step_pairs(con, sides, st)},
            "noise": {"pct": noise.pct, "ns": noise.ns},
            "headline": headline(con, st.basis),
            "rows": out_rows,
            "attribution": attribution(con),
            "findings": findings(con, sides, noise, windowed=explicit and st.basis != "trace"),
            "normalise": [{"pattern": p, "replace": r} for p, r in names.rules(strip_templates)],
            "notes": st.notes + [f"{s.upper()} has no findings (not analysed): the findings diff leaves it out"
                                 for s in pair.SIDES if sides[s].findings_db is None],
        }
        doc["elapsed_ms"] = round((time.perf_counter() - t0) * 1000, 1)
        return doc
    finally:
        con.close()
