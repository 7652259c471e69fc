"""Every finding's impact_ns: the run's saving if it alone is fixed, from a replay of the trace's graph.

Runs in the analysis connection after the passes (it reads _common.sql's tables through
analysis/replay.py's build). The findings with the largest local estimates are each replayed alone,
as many as `whatif_max_replays` and a budget of `whatif_replay_nodes` replayed nodes allow (one
replay costs about a microsecond per node, so a big trace gets fewer); every other finding with
something to fix gets its pass's all-fixed saving split by local estimate (`impact_basis` = `pass
share`). Each pass is also replayed with all its findings fixed together, and the run with every
finding fixed: those savings are the pass's and the run's. docs/analysis.md "What if".
"""

from __future__ import annotations

import heapq
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from collections.abc import Sequence
from dataclasses import dataclass, field

import duckdb
import numpy as np
import pyarrow as pa

from acceltrace.analysis import replay as R
from acceltrace.analysis import transform as T
from acceltrace.store import heap, schema

WHATIF_COLUMNS = ("makespan_ns", "replayed_makespan_ns", "edges_only_makespan_ns", "all_fixed_saving_ns",
                  "nodes", "edges", "unexplained_wait_ns", "replays", "elapsed_ms")
CRITICAL_PATH_COLUMNS = [("seq", "BIGINT NOT NULL"), ("start_ns", "BIGINT NOT NULL"), ("end_ns", "BIGINT NOT NULL"),
                         ("type", "VARCHAR NOT NULL"), ("slice_id", "BIGINT"), ("track_id", "INTEGER")]


class Path(Sequence):
    """The critical path's segments as arrays (a 10 M-event trace has millions): a sequence of
    (start, end, type, slice_id or -1, track_id or -1) tuples for who reads it one by one, the
    arrays for who sums or stores it."""

    def __init__(self, start, end, type_code, slice_id, track_id):
        self.start, self.end, self.type_code = start, end, type_code
        self.slice_id, self.track_id = slice_id, track_id

    def __len__(self) -> int:
        return len(self.start)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[k] for k in range(*i.indices(len(self)))]
        return (int(self.start[i]), int(self.end[i]), R.SEGMENT_TYPES[int(self.type_code[i])],
                int(self.slice_id[i]), int(self.track_id[i]))

    def __iter__(self):
        names = R.SEGMENT_TYPES
        return iter(zip(self.start.tolist(), self.end.tolist(), [names[x] for x in self.type_code.tolist()],
                        self.slice_id.tolist(), self.track_id.tolist()))

    def by_type_ns(self) -> dict[str, int]:
        ns = np.bincount(self.type_code.astype(np.int64), weights=(self.end - self.start).astype(np.float64),
                         minlength=len(R.SEGMENT_TYPES)) if len(self) else np.zeros(len(R.SEGMENT_TYPES))
        return {t: int(round(x)) for t, x in zip(R.SEGMENT_TYPES, ns)}

    def table(self) -> pa.Table:
        names = pa.array(R.SEGMENT_TYPES, pa.string())
        return pa.table({"seq": pa.array(np.arange(len(self)), pa.int64()), "start_ns": pa.array(self.start, pa.int64()),
                         "end_ns": pa.array(self.end, pa.int64()),
                         "type": names.take(pa.array(self.type_code.astype(np.int32))),
                         "slice_id": pa.array(self.slice_id, pa.int64(), mask=self.slice_id < 0),
                         "track_id": pa.array(self.track_id.astype(np.int32), pa.int32(), mask=self.track_id < 0)})


@dataclass
class WhatIf:
    impact_ns: np.ndarray  # per finding, in the order given
    basis: list[str]  # per finding: replay | pass share | none (with the pass's bound, where it has one)
    pass_saving_ns: dict[str, int]
    all_fixed_saving_ns: int
    replayed_makespan_ns: int  # the graph's edges alone replayed (without its unexplained waits)
    exact_makespan_ns: int  # with them: the trace's own schedule, the base every saving is measured from
    nodes: int = 0
    edges: int = 0
    unexplained_wait_ns: int = 0
    replays: int = 0
    critical_path: list = field(default_factory=list)  # (start, end, type, slice_id or -1, track_id or -1)
    elapsed_ms: float = 0.0
    graph_span_ns: int = 0  # the trace's own span of the graph's nodes (first start to last end)
    steps_ms: dict = field(default_factory=dict)  # step -> [wall ms, process CPU ms] (graph build, each replay, ...)


# the run's helper tables the what-if step reads (graph.build, with_impacts); the run drops the others before
# it (analysis/runner.py): at 830 MB of Kineto the passes' own 800 k-row tables held ~200 MB beside the graph
REPLAY_READS = ("_run", "_track_dev", "_dev_work", "_ready", "_sync_calls", "_sat_members")
# ... and its DuckDB held to this from then on: the graph is numpy, outside DuckDB's limit, and the run's tables went
# to the spill files (a 4 M-slice Nsight trace: 1.09 GB -> 0.50 GB before the build, its command 1.84 -> 1.60 GB)
REPLAY_DUCKDB_MEMORY = "300MB"
PARALLEL_WHATIFS = 2  # what-ifs replayed at once (two cores)
PARALLEL_FROM_NODES = 1_000_000  # smaller graphs replay one what-if at a time (each takes milliseconds)


def _basis(pid: str, how: str) -> str:
    bound = T.BOUNDS.get(pid)
    return f"{how}; {bound}" if bound and how != "none" else how


def replay_impacts(con, fixes: list[T.Fix], link_speedup: float = 2.0, max_replays: int = 20,
                   replay_nodes: int = 30_000_000, max_nodes: int | None = None) -> WhatIf:
    """Build the graph of the analysed trace, replay it per pass, all fixed, and per finding (the
    largest first, within the budget); the rest share their pass's saving by local estimate. A graph
    of more than max_nodes is replayed once, as it is (its critical path), and no fix is replayed:
    every impact is None (the caller says why). The graph is built once: every transformation edits
    a copy of its duration and edge arrays (analysis/transform.py) and is replayed by the compiled
    list scheduler (analysis/_replay.c). WhatIf.steps_ms times each step (bench/whatif.py prints them)."""
    t0 = time.perf_counter()
    steps: dict[str, list[float]] = {}

    def timed(name, fn):
        t, c = time.perf_counter(), time.process_time()
        out = fn()
        ms = steps.setdefault(name, [0.0, 0.0])
        ms[0] += (time.perf_counter() - t) * 1e3
        ms[1] += (time.process_time() - c) * 1e3
        return out

    # savings are measured from the trace's own schedule: the graph replayed with its unexplained waits
    # kept (each relative to its node's edges, so work behind a fixed cause still moves with it); a fix
    # removes the waits it explains (analysis/transform.py). The edges-only replay is reported beside it.
    exact = g = timed("graph build", lambda: R.build(con))
    # the build's query results and edge parts are freed, most of them below glibc's mmap threshold: kept in
    # the heap, they stay the process's (360 MB at 830 MB of Kineto) under the copies the what-ifs make next
    heap.hand_back()
    exact_s = timed("replay as traced", lambda: R.replay(g))
    base = exact_s.makespan
    span = int((g.ts + g.dur).max() - g.ts.min()) if len(g.ts) else 0

    def path_of(gr, sched):
        a, b, t, v = R.critical_path_arrays(gr, sched)
        sl = np.where(v >= 0, gr.slice_id[np.maximum(v, 0)], -1) if len(v) else v
        tr = np.where(v >= 0, gr.track[np.maximum(v, 0)], -1) if len(v) else v
        return Path(a, b, t, sl, tr)

    path = timed("critical path", lambda: path_of(exact, exact_s))
    if max_nodes is not None and len(g.ts) > max_nodes:
        return WhatIf(None, [], None, None, None, base, len(g.ts), len(g.src), int(g.slack.sum()), 1, path,
                      (time.perf_counter() - t0) * 1e3, span, steps)
    edges_only = timed("replay edges only", lambda: R.replay(R.without_slack(g)).makespan)
    n_nodes = max(1, len(g.ts))
    replays = 2

    lock = threading.Lock()

    def saving(fs: list[T.Fix], step: str) -> int:
        nonlocal replays
        h = g.copy()
        if not timed(step + " (transform)", lambda: T.apply_all(h, fs, link_speedup)):
            return 0
        with lock:
            replays += 1
        return max(0, base - timed(step + " (replay)", lambda: R.replay(h).makespan))

    n = len(fixes)
    impact = np.zeros(n, np.int64)
    basis = ["none"] * n
    ok = T.applicable_all(g, fixes) if fixes else np.zeros(0, bool)
    todo = [i for i, (f, a) in enumerate(zip(fixes, ok.tolist())) if a and f.local_ns > 0]
    by_pass: dict[str, list[int]] = {}
    for i in todo:
        by_pass.setdefault(fixes[i].pass_id, []).append(i)
    # each pass's fix and all of them together: independent copies of the graph, two at a time on a big
    # graph (the replay and numpy release the GIL; each copy is ~100 bytes a node); steps' CPU then overlaps
    jobs = {pid: ([fixes[i] for i in idx], f"what-if {pid} ({len(idx)})") for pid, idx in by_pass.items()}
    if todo:
        jobs[None] = ([fixes[i] for i in todo], f"what-if all fixed ({len(todo)})")
    workers = PARALLEL_WHATIFS if n_nodes >= PARALLEL_FROM_NODES else 1
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="what-if") as pool:
        got = dict(zip(jobs, pool.map(lambda job: saving(*job), jobs.values())))
    all_fixed = got.pop(None, 0)
    pass_saving = got
    budget = min(max_replays, max(0, replay_nodes // n_nodes - replays))
    # the biggest local estimates replayed alone (a 10 M-event trace has no budget: no sort of its 400 k)
    alone = heapq.nsmallest(budget, todo, key=lambda i: (-fixes[i].local_ns, fixes[i].ts)) if budget else []
    for i in alone:
        impact[i] = saving([fixes[i]], f"per-finding replays ({len(alone)})")
        basis[i] = _basis(fixes[i].pass_id, "replay")
    done = set(alone)
    for pid, idx in by_pass.items():
        rest = [i for i in idx if i not in done]
        if not rest:
            continue
        # what the pass saves beyond its replayed findings, split over the others by local estimate,
        # never more than a finding's own local estimate
        left = max(0, pass_saving[pid] - sum(int(impact[i]) for i in idx if i in done))
        local = np.array([fixes[i].local_ns for i in rest], np.int64)
        share = left / float(local.sum()) if local.sum() > 0 else 0.0
        rest_idx = np.array(rest, np.int64)  # each its local estimate x the share, never more (half to even)
        impact[rest_idx] = np.minimum(local, np.rint(local * share).astype(np.int64))
        how = _basis(pid, "pass share")
        for i in rest:
            basis[i] = how
    return WhatIf(impact, basis, pass_saving, all_fixed, edges_only, exact_s.makespan, len(g.ts), len(g.src),
                  int(exact.slack.sum()), replays, path, (time.perf_counter() - t0) * 1e3, span, steps)


def with_impacts(con, table: pa.Table, values: dict[str, float]) -> tuple[pa.Table, dict, list]:
    """impact_ns and impact_basis per finding from the graph replay (analysis/impact.py), the findings
    sorted by impact_ns; the run's what-if summary and critical path. A trace whose graph cannot be
    replayed keeps its findings with impact_ns NULL and says why in impact_basis."""
    cols = table.to_pydict()
    fixes = [T.Fix(p, s, int(t or 0), int(d or 0), int(ln or 0)) for p, s, t, d, ln in
             zip(cols["pass"], cols["slice_id"], cols["ts"], cols["dur"], cols["local_ns"])]
    wi: dict = {}
    path: list = []
    try:
        max_nodes = int(values["whatif_max_nodes"])
        # the graph has a node per device slice at least: a trace past the cap is not built at all at
        # analysis (its build alone costs minutes and GBs at 10 M events); `acceltrace whatif` replays any size
        (n_dev,) = con.execute("SELECT count(*) FROM _dev_work").fetchone()
        if n_dev > max_nodes:
            (run_ns,) = con.execute("SELECT run_ns FROM _run").fetchone()
            why = (f"none; the trace's {n_dev:,} device slices exceed whatif_max_nodes ({max_nodes:,}): the graph is"
                   " not built at analysis; the what-if step (acceltrace whatif ID, or the server after an upload's"
                   " analysis) replays it and stores the impacts")
            wi = {c: None for c in WHATIF_COLUMNS} | {"makespan_ns": int(run_ns or 0), "nodes": int(n_dev),
                                                      "replays": 0, "pass_saving_ns": None, "skipped": True}
            table = table.drop_columns(["local_ns"]).append_column("impact_ns", pa.nulls(table.num_rows, pa.int64()))
            table = table.append_column("impact_basis", pa.array([why] * table.num_rows, pa.string()))
            table = table.select([c for c, _ in schema.FINDINGS])
            if table.num_rows:
                table = table.sort_by([("exclusive_ns", "descending"), ("ts", "ascending"), ("pass", "ascending")])
            return table, wi, []
        r = replay_impacts(con, fixes, values["whatif_link_speedup"], int(values["whatif_max_replays"]),
                           int(values["whatif_replay_nodes"]), max_nodes)
        (run_ns,) = con.execute("SELECT run_ns FROM _run").fetchone()
        if r.impact_ns is None:
            impacts = pa.nulls(table.num_rows, pa.int64())
            basis = pa.array([f"none; the graph's {r.nodes:,} nodes exceed whatif_max_nodes ({max_nodes:,}): "
                              "the what-if step (acceltrace whatif ID) replays it and stores the impacts"]
                             * table.num_rows, pa.string())
        else:
            impacts, basis = pa.array(r.impact_ns, pa.int64()), pa.array(r.basis, pa.string())
        # host work before the graph's first node and after its last is kept as it is
        outside = int(run_ns or 0) - r.graph_span_ns
        wi = {"makespan_ns": int(run_ns or 0), "replayed_makespan_ns": r.exact_makespan_ns + outside,
              "edges_only_makespan_ns": None if r.replayed_makespan_ns is None else r.replayed_makespan_ns + outside,
              "all_fixed_saving_ns": r.all_fixed_saving_ns,
              "nodes": r.nodes, "edges": r.edges, "unexplained_wait_ns": r.unexplained_wait_ns,
              "replays": r.replays, "elapsed_ms": r.elapsed_ms, "pass_saving_ns": r.pass_saving_ns,
              "skipped": r.impact_ns is None}
        path = r.critical_path
    except (ValueError, duckdb.Error) as e:
        impacts = pa.nulls(table.num_rows, pa.int64())
        basis = pa.array([f"none; the graph could not be replayed: {e}"] * table.num_rows, pa.string())
    table = table.drop_columns(["local_ns"]).append_column("impact_ns", impacts).append_column("impact_basis", basis)
    table = table.select([c for c, _ in schema.FINDINGS])
    if table.num_rows:
        table = table.sort_by([("impact_ns", "descending"), ("exclusive_ns", "descending"), ("ts", "ascending"),
                               ("pass", "ascending")])
    return table, wi, path


# the parameters that do not change what a stored what-if replayed (the cap only decides whether analysis
# replays at all)
_CARRY_IGNORES = ("whatif_max_nodes",)
_FINDING_KEY = ("pass", "ts", "dur", "track_id", "slice_id", "metric", "value")


def open_side(store, trace_id: str, side: str = "findings") -> duckdb.DuckDBPyConnection | None:
    """The trace's side file (its stored analysis), read-only; None when there is none or it cannot be opened."""
    path = store.side_path(trace_id, side)
    if not path.exists():
        return None
    try:
        return duckdb.connect(str(path), read_only=True)
    except duckdb.Error:
        return None


def carry_over(store, trace_id: str, table: pa.Table, values: dict[str, float]):
    """The impacts the what-if step stored for these same findings (acceltrace whatif, or the server's
    step after an upload's analysis), for an analysis that did not replay them (the graph past the cap):
    (findings with impact_ns / impact_basis, the whatif row, pass savings, critical path), or None when
    the stored side file has no replayed what-if, was made with other parameters, or holds other findings."""
    con = open_side(store, trace_id)
    if con is None:
        return None
    try:
        names = {r[0] for r in con.execute("SELECT table_name FROM duckdb_tables()").fetchall()}
        if not {"findings", "analysis_params", "whatif", "analysis_status", "critical_path"} <= names:
            return None
        stored = dict(con.execute("SELECT name, value FROM analysis_params").fetchall())
        same = {k: v for k, v in values.items() if k not in _CARRY_IGNORES}
        if {k: v for k, v in stored.items() if k not in _CARRY_IGNORES} != same:
            return None
        rows = con.execute(f"SELECT {', '.join(WHATIF_COLUMNS)} FROM whatif").fetchall()
        if len(rows) != 1 or rows[0][WHATIF_COLUMNS.index("all_fixed_saving_ns")] is None:
            return None
        wi = dict(zip(WHATIF_COLUMNS, rows[0]))
        ((n_stored,),) = con.execute("SELECT count(*) FROM findings").fetchall()
        if n_stored != table.num_rows:
            return None
        # one finding per key and rank within the key (findings of one key ordered the same on both sides)
        key = ", ".join(f'"{c}"' for c in _FINDING_KEY)
        con.register("_now", table.append_column("_row", pa.array(range(table.num_rows), pa.int64())))
        rank = f"row_number() OVER (PARTITION BY {key} ORDER BY exclusive_ns, message)"
        got = con.execute(f"""
            WITH a AS (SELECT *, {rank} AS _k FROM _now), b AS (SELECT *, {rank} AS _k FROM findings)
            SELECT a._row, b.impact_ns, b.impact_basis, b.exclusive_ns = a.exclusive_ns AS same_share
            FROM a JOIN b ON {" AND ".join(f'a."{c}" IS NOT DISTINCT FROM b."{c}"' for c in _FINDING_KEY)}
                         AND a._k = b._k
            ORDER BY a._row""").fetchall()
        if len(got) != table.num_rows or not all(r[3] for r in got):
            return None
        passes = dict(con.execute("SELECT pass, impact_ns FROM analysis_status WHERE impact_ns IS NOT NULL").fetchall())
        types = ", ".join(f"'{t}'" for t in R.SEGMENT_TYPES)  # the type as its code, in SQL (millions of rows)
        seg = con.execute(f"""SELECT start_ns, end_ns, coalesce(list_position([{types}], type), 0) - 1 AS code,
                                     coalesce(slice_id, -1) AS slice_id, coalesce(track_id, -1) AS track_id
                              FROM critical_path ORDER BY seq""").fetchnumpy()
    except duckdb.Error:
        return None
    finally:
        con.close()
    code = np.asarray(seg["code"], np.int64)
    code = np.where(code < 0, len(R.SEGMENT_TYPES) - 1, code).astype(np.int8)  # an unknown type: idle
    path = Path(np.asarray(seg["start_ns"], np.int64), np.asarray(seg["end_ns"], np.int64), code,
                np.asarray(seg["slice_id"], np.int64), np.asarray(seg["track_id"], np.int64))
    table = table.set_column(table.schema.get_field_index("impact_ns"), "impact_ns",
                             pa.array([r[1] for r in got], pa.int64()))
    table = table.set_column(table.schema.get_field_index("impact_basis"), "impact_basis",
                             pa.array([r[2] for r in got], pa.string()))
    if table.num_rows:
        table = table.sort_by([("impact_ns", "descending"), ("exclusive_ns", "descending"), ("ts", "ascending"),
                               ("pass", "ascending")])
    wi["pass_saving_ns"] = passes
    return table, wi, path


def critical_path_summary(path: list, start_ns: int, wi: dict) -> dict:
    """The critical path's time per segment type (every type named, 0 when absent), its span and
    segment count; times relative to start_ns."""
    if isinstance(path, Path):
        by = path.by_type_ns()
    else:
        by = {t: 0 for t in R.SEGMENT_TYPES}
        for a, b, t, *_ in path:
            by[t] = by.get(t, 0) + (b - a)
    span = (path[-1][1] - path[0][0]) if path else 0
    return {"makespan_ns": int(wi.get("makespan_ns", 0)), "path_ns": int(sum(by.values())),
            "span_ns": int(span), "start_ns": int(path[0][0] - start_ns) if path else None,
            "segments": len(path), "by_type_ns": dict(sorted(by.items(), key=lambda kv: -kv[1]))}


def format_critical_path(path: list, start_ns: int, wi: dict) -> str:
    """The critical path's breakdown per segment type as a text table."""
    doc = critical_path_summary(path, start_ns, wi)
    if not doc["segments"]:
        return "no critical path: the trace has no device work or its graph could not be replayed"
    lines = [f"critical path: {doc['segments']} segments, {_ms(doc['path_ns'])} of a {_ms(doc['makespan_ns'])} run"]
    for t, ns in doc["by_type_ns"].items():
        pct = 100.0 * ns / doc["path_ns"] if doc["path_ns"] else 0.0
        lines.append(f"  {t:<16} {_ms(ns):>14} {pct:5.1f}%")
    return "\n".join(lines)


def write_tables(side, wi: dict, path: list) -> None:
    """The side file's `whatif` row and `critical_path` segments (docs/analysis.md "What is stored")."""
    side.execute("CREATE TABLE whatif (" + ", ".join(f'"{c}" DOUBLE' if c == "elapsed_ms" else f'"{c}" BIGINT'
                                                      for c in WHATIF_COLUMNS) + ")")
    if wi:
        side.execute(f"INSERT INTO whatif VALUES ({', '.join('?' * len(WHATIF_COLUMNS))})",
                     [wi[c] for c in WHATIF_COLUMNS])
    side.execute(schema.create_sql("critical_path", CRITICAL_PATH_COLUMNS))
    if isinstance(path, Path) and len(path):
        side.register("_new_path", path.table())
        side.execute("INSERT INTO critical_path SELECT * FROM _new_path")
        side.unregister("_new_path")
    elif path:
        seg = pa.table({"seq": pa.array(range(len(path)), pa.int64()),
                        "start_ns": pa.array([p[0] for p in path], pa.int64()),
                        "end_ns": pa.array([p[1] for p in path], pa.int64()),
                        "type": pa.array([p[2] for p in path], pa.string()),
                        "slice_id": pa.array([p[3] if p[3] >= 0 else None for p in path], pa.int64()),
                        "track_id": pa.array([p[4] if p[4] >= 0 else None for p in path], pa.int32())})
        side.register("_new_path", seg)
        side.execute("INSERT INTO critical_path SELECT * FROM _new_path")
        side.unregister("_new_path")


def _ms(ns: int) -> str:
    return f"{ns / 1e6:.3f} ms"
