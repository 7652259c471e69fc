"""Runs the SQL analysis passes on one trace and stores their findings in a side file.

A pass is analysis/<pass id>.sql: a header comment (what, why, what to do, its
`precedence:` and optional `depends:` lines), private helper views (prefixed _), a
view `_<pass id>_check` with one row whose column `reason` is NULL when the trace has
what the pass needs (else why not), and last a SELECT of candidate rows with the
columns in CANDIDATE_COLUMNS. _common.sql runs first; _allocate.sql then turns all
candidates into findings without double counting (docs/analysis.md).

Everything runs as SQL on a read-only connection to the published trace; results go
to traces/<id>.findings.duckdb (tables findings, analysis_status, analysis_params),
replaced atomically.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import pyarrow as pa

from acceltrace.analysis import impact
from acceltrace.analysis import params as P
from acceltrace.store import duck, schema

SQL_DIR = Path(__file__).parent
SIDE = "findings"

# What each pass's final SELECT returns, in this order (docs/analysis.md explains them).
CANDIDATE_COLUMNS = (
    "ts", "dur", "track_id", "slice_id", "metric", "value", "threshold", "message",
    "local_ns", "dev", "claim_mode", "claim_start", "claim_end", "min_share",
)

STATUS_COLUMNS = [
    ("pass", "VARCHAR NOT NULL"),
    ("status", "VARCHAR NOT NULL"),      # ran | not applicable | failed | not selected
    ("reason", "VARCHAR"),
    ("n_findings", "INTEGER NOT NULL"),
    ("impact_ns", "BIGINT"),              # the saving if all its findings are fixed together (a replay)
    ("exclusive_ns", "BIGINT NOT NULL"),  # the sum of its findings' exclusive shares
    ("n_candidates", "INTEGER NOT NULL"),  # before the per-pass cap and residual filter
    ("elapsed_ms", "DOUBLE NOT NULL"),
]

_PARAM_RE = re.compile(r"\$\{(\w+)\}")


@dataclass
class PassSpec:
    id: str
    path: Path
    title: str
    precedence: int
    depends: list[str] = field(default_factory=list)


@dataclass
class PassStatus:
    pass_id: str
    status: str
    reason: str | None = None
    n_findings: int = 0
    impact_ns: int = 0
    n_candidates: int = 0
    elapsed_ms: float = 0.0
    exclusive_ns: int = 0

    def row(self) -> tuple:
        return (self.pass_id, self.status, self.reason, self.n_findings, self.impact_ns, self.exclusive_ns,
                self.n_candidates, self.elapsed_ms)


@dataclass
class Report:
    trace_id: str
    findings: list[dict]
    statuses: list[PassStatus]
    run_ns: int
    elapsed_ms: float
    phase_ms: dict = field(default_factory=dict)  # _common, _allocate, write
    run_start_ns: int = 0  # the trace's first instant (findings' times are absolute)
    whatif: dict = field(default_factory=dict)  # the run's replay (impact.WHATIF_COLUMNS); {} when it failed
    critical_path: list = field(default_factory=list)  # (start_ns, end_ns, type, slice_id, track_id), absolute
    written: bool = False  # the side file was written


class AnalysisError(Exception):
    """Analysis could not run at all (unknown pass, bad parameter, missing trace)."""


def discover() -> dict[str, PassSpec]:
    """Every pass file in analysis/ (files starting with _ are helpers)."""
    specs = {}
    for path in sorted(SQL_DIR.glob("*.sql")):
        if path.name.startswith("_"):
            continue
        head = path.read_text().split("\n", 40)[:40]
        title, prec, deps = path.stem, None, []
        for line in head:
            m = re.match(r"--\s*(\w+):\s*(.*)$", line.strip())
            if not m:
                continue
            key, val = m.group(1), m.group(2).strip()
            if key == path.stem and title == path.stem:
                title = val
            elif key == "precedence":
                prec = int(val)
            elif key == "depends":
                deps = [d.strip() for d in val.split(",") if d.strip()]
        if prec is None:
            raise AnalysisError(f"{path}: header lacks a 'precedence:' line")
        specs[path.stem] = PassSpec(path.stem, path, title, prec, deps)
    return specs


def dependency_order(specs: dict[str, PassSpec], wanted: list[str]) -> list[str]:
    """The wanted passes and what they depend on, dependencies first (precedence breaks ties)."""
    order: list[str] = []
    visiting: set[str] = set()

    def visit(pid: str, chain: tuple[str, ...]) -> None:
        if pid in order:
            return
        if pid not in specs:
            raise AnalysisError(f"pass {chain[-1] if chain else pid!r} depends on unknown pass {pid!r}")
        if pid in visiting:
            raise AnalysisError(f"pass dependency cycle: {' -> '.join(chain + (pid,))}")
        visiting.add(pid)
        for d in specs[pid].depends:
            visit(d, chain + (pid,))
        visiting.discard(pid)
        order.append(pid)

    for pid in sorted(wanted, key=lambda p: (specs[p].precedence, p)):
        visit(pid, ())
    return order


def substitute(sql: str, values: dict[str, float], where: str) -> str:
    def repl(m: re.Match) -> str:
        name = m.group(1)
        if name not in values:
            raise AnalysisError(f"{where}: uses unknown parameter ${{{name}}}")
        return P.sql_literal(values[name])

    return _PARAM_RE.sub(repl, sql)


def _statements(con: duckdb.DuckDBPyConnection, path: Path, values: dict[str, float]) -> list[str]:
    text = substitute(path.read_text(), values, path.name)
    return [s.query.strip().rstrip(";") for s in con.extract_statements(text) if s.query.strip(" ;\n\t")]


def _exec_file(con, path: Path, values: dict[str, float]) -> None:
    for stmt in _statements(con, path, values):
        con.execute(stmt)


def run_passes(store, trace_id: str, passes: list[str] | None = None, params: dict | None = None,
               write: bool = True, threads: int | None = None, write_check=None) -> Report:
    """Run the passes (all by default) in dependency order; store and return the findings.

    A trace whose graph analysis does not replay (past whatif_max_nodes) keeps the impacts the what-if
    step stored for the same findings and parameters (analysis/impact.py carry_over). write_check: called
    right before the side file is written; False skips the write (Report.written says which)."""
    t_start = time.perf_counter()
    values = P.resolve(params)
    specs = discover()
    selected = list(specs) if not passes else list(dict.fromkeys(passes))
    unknown = [p for p in selected if p not in specs]
    if unknown:
        raise AnalysisError(f"unknown pass {unknown[0]!r}; passes: {', '.join(sorted(specs))}")
    order = dependency_order(specs, selected)

    con = store.connect(trace_id, sides=())
    try:
        if threads:
            con.execute(f"SET threads = {int(threads)}")
        t_phase = time.perf_counter()
        _exec_file(con, SQL_DIR / "_common.sql", values)
        phase_ms = {"_common": (time.perf_counter() - t_phase) * 1e3}
        run_start_ns, run_ns = con.execute("SELECT run_start_ns, run_ns FROM _run").fetchone()
        statuses: dict[str, PassStatus] = {}
        ran: list[str] = []
        for pid in order:
            statuses[pid] = st = _run_one(con, specs[pid], values)
            if st.status == "ran" and pid in selected:
                ran.append(pid)
        for pid in specs:
            if pid not in statuses:
                statuses[pid] = PassStatus(pid, "not selected", "not selected in this run")
        t_phase = time.perf_counter()
        table = _allocate(con, specs, ran, values)
        phase_ms["_allocate"] = (time.perf_counter() - t_phase) * 1e3
        t_phase = time.perf_counter()
        _drop_helpers(con, keep=impact.REPLAY_READS)
        duck.give_up_memory(con, impact.REPLAY_DUCKDB_MEMORY)
        table, wi, path = impact.with_impacts(con, table, values)
        if wi.get("skipped"):
            carried = impact.carry_over(store, trace_id, table, values)
            if carried is not None:
                table, wi, path = carried
        phase_ms["whatif"] = (time.perf_counter() - t_phase) * 1e3
        findings = table.to_pylist()
        per_pass = table.group_by("pass").aggregate([("pass", "count"), ("exclusive_ns", "sum")]).to_pylist()
        for row in per_pass:
            st = statuses[row["pass"]]
            st.n_findings = int(row["pass_count"])
            st.exclusive_ns = int(row["exclusive_ns_sum"] or 0)
            saving = wi.get("pass_saving_ns")
            st.impact_ns = int(saving.get(row["pass"], 0)) if saving is not None else None  # None: not replayed
    finally:
        con.close()
    status_list = [statuses[p] for p in sorted(statuses, key=lambda p: (specs[p].precedence, p))]
    written = bool(write) and (write_check is None or bool(write_check()))
    if written:
        t_phase = time.perf_counter()
        _write_side(store, trace_id, table, status_list, values, wi, path)
        phase_ms["write"] = (time.perf_counter() - t_phase) * 1e3
    return Report(trace_id, findings, status_list, int(run_ns or 0), (time.perf_counter() - t_start) * 1e3,
                  phase_ms, int(run_start_ns or 0),
                  {k: v for k, v in wi.items() if k not in ("pass_saving_ns", "skipped")}, path, written)


def _run_one(con, spec: PassSpec, values: dict[str, float]) -> PassStatus:
    t0 = time.perf_counter()
    try:
        stmts = _statements(con, spec.path, values)
        if not stmts:
            raise AnalysisError(f"{spec.path.name}: no statements")
        # the check is asked as soon as its view exists: a pass that does not apply to this
        # trace then skips its helper tables (they were built and thrown away before)
        check_re = re.compile(rf"\bVIEW\s+_{re.escape(spec.id)}_check\b", re.IGNORECASE)
        n_pre = next((i + 1 for i, stmt in enumerate(stmts[:-1]) if check_re.search(stmt)), len(stmts) - 1)
        for stmt in stmts[:n_pre]:
            con.execute(stmt)
        (reason,) = con.execute(f"SELECT reason FROM _{spec.id}_check").fetchone()
        if reason is not None:
            return PassStatus(spec.id, "not applicable", reason, elapsed_ms=(time.perf_counter() - t0) * 1e3)
        for stmt in stmts[n_pre:-1]:
            con.execute(stmt)
        # cand_row: the candidate's number within its pass (the allocation works on narrow rows
        # and joins the wide ones, messages included, back only for the findings it keeps)
        con.execute(f"CREATE OR REPLACE TEMP TABLE _cand_{spec.id} AS "
                    f"SELECT row_number() OVER () AS cand_row, * FROM ({stmts[-1]})")
        cols = [r[0] for r in con.execute(f"DESCRIBE _cand_{spec.id}").fetchall()][1:]
        if tuple(cols) != CANDIDATE_COLUMNS:
            raise AnalysisError(f"{spec.path.name}: candidate columns {cols} != {list(CANDIDATE_COLUMNS)}")
        (n,) = con.execute(f"SELECT count(*) FROM _cand_{spec.id}").fetchone()
        return PassStatus(spec.id, "ran", None, n_candidates=int(n), elapsed_ms=(time.perf_counter() - t0) * 1e3)
    except (duckdb.Error, AnalysisError) as e:
        return PassStatus(spec.id, "failed", f"{type(e).__name__}: {e}", elapsed_ms=(time.perf_counter() - t0) * 1e3)


def _drop_helpers(con, keep: tuple[str, ...]) -> None:
    """The run's helper tables but those in keep dropped: the passes' and the allocation's, done with."""
    for (name,) in con.execute("SELECT table_name FROM duckdb_tables() WHERE temporary").fetchall():
        if name not in keep:
            con.execute(f'DROP TABLE "{name}"')


_ALLOCATED = [c for c, _ in schema.FINDINGS if c not in ("impact_ns", "impact_basis")] + ["local_ns"]


def _allocate(con, specs: dict[str, PassSpec], ran: list[str], values: dict[str, float]) -> pa.Table:
    """The findings with their exclusive share (impact_ns and impact_basis are _replay's)."""
    cols = _ALLOCATED
    if not ran:
        types = dict(schema.FINDINGS) | {"local_ns": "BIGINT"}
        return pa.table({c: pa.array([], type=schema.arrow_type(types[c])) for c in cols})
    union = " UNION ALL ".join(
        f"SELECT '{pid}' AS pass, {specs[pid].precedence} AS precedence, * FROM _cand_{pid}" for pid in ran
    )
    con.execute(f"CREATE OR REPLACE TEMP VIEW _candidates AS {union}")
    _exec_file(con, SQL_DIR / "_allocate.sql", values)
    quoted = ", ".join(f'"{c}"' for c in cols)
    return con.sql(f"SELECT {quoted} FROM _findings ORDER BY exclusive_ns DESC, ts, pass").to_arrow_table()


def _write_side(store, trace_id: str, findings: pa.Table, statuses: list[PassStatus],
                values: dict[str, float], wi: dict, path: list) -> None:
    def build(side: duckdb.DuckDBPyConnection) -> None:
        side.execute(schema.create_sql("findings", schema.FINDINGS))
        if findings.num_rows:
            side.register("_new_findings", findings)
            side.execute("INSERT INTO findings SELECT * FROM _new_findings")
            side.unregister("_new_findings")
        side.execute(schema.create_sql("analysis_status", STATUS_COLUMNS))
        side.executemany("INSERT INTO analysis_status VALUES (?, ?, ?, ?, ?, ?, ?, ?)", [s.row() for s in statuses])
        impact.write_tables(side, wi, path)
        side.execute('CREATE TABLE analysis_params ("name" VARCHAR NOT NULL, "value" DOUBLE NOT NULL)')
        side.executemany("INSERT INTO analysis_params VALUES (?, ?)", sorted(values.items()))

    store.write_side(trace_id, SIDE, build)


def after_publish(store, trace_id: str) -> None:
    """Post-ingest hook (the after_publish of ingest/pipeline.py): analyse every new trace once.

    ACCELTRACE_AUTO_ANALYZE=0 turns it off (e.g. to time ingest alone); `acceltrace analyze`
    still runs the passes on demand.
    """
    if os.environ.get("ACCELTRACE_AUTO_ANALYZE", "1").strip().lower() in ("0", "false", "no", "off"):
        return
    run_passes(store, trace_id, params=env_params())


def env_params() -> dict[str, str]:
    """Parameter overrides for the analysis after ingest: $ACCELTRACE_ANALYSIS_PARAMS, NAME=VALUE items
    separated by commas or spaces (e.g. whatif_max_nodes=5000000); checked as `analyze --param` is."""
    raw = os.environ.get("ACCELTRACE_ANALYSIS_PARAMS", "").replace(",", " ").split()
    try:
        values = P.parse_assignments(raw)
        P.resolve(values)
    except P.ParamError as e:
        raise P.ParamError(f"$ACCELTRACE_ANALYSIS_PARAMS: {e}") from None
    return values


# -- command line -------------------------------------------------------------------------

def analyze_command(args) -> int:
    """`acceltrace analyze ID [--pass P] [--param NAME=VALUE] [--json]`."""
    from acceltrace.store.catalog import Store

    store = Store(args.store)
    trace_id = _resolve_id(store, args.id)
    if trace_id is None:
        print(f"acceltrace: no ready trace with id {args.id!r} in {store.root}", file=sys.stderr)
        return 1
    try:
        overrides = P.parse_assignments(args.param)
        report = run_passes(store, trace_id, passes=args.passes, params=overrides)
    except (P.ParamError, AnalysisError) as e:
        print(f"acceltrace: analyze: {e}", file=sys.stderr)
        return 2
    except duckdb.Error as e:  # the shared helpers failed on this trace: say so, no traceback
        print(f"acceltrace: analyze: {trace_id}: analysis failed: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    if getattr(args, "critical_path", False):
        if args.json:
            print(json.dumps(impact.critical_path_summary(report.critical_path, report.run_start_ns, report.whatif)))
        else:
            print(impact.format_critical_path(report.critical_path, report.run_start_ns, report.whatif))
        return 0
    if args.json:
        print(json.dumps(report.findings))
        return 0
    print(format_report(report))
    return 0


def _resolve_id(store, given: str) -> str | None:
    row = store.get(given)
    if row is None and len(given) >= 4:
        rows = [r for r in store.list() if r["id"].startswith(given)]
        row = rows[0] if len(rows) == 1 else None
    return row["id"] if row is not None and row["status"] == "ready" else None


def format_report(report: Report) -> str:
    """The findings as a text table sorted by impact, then one status line per pass."""
    start_ns = report.run_start_ns
    lines = []
    total = sum(int(f["exclusive_ns"] or 0) for f in report.findings)
    share = f" ({100.0 * total / report.run_ns:.1f}% of the run)" if report.run_ns else ""
    all_fixed = report.whatif.get("all_fixed_saving_ns")
    fixed = (f"; all fixed: the run saves {_ms(all_fixed)} (replay)" if all_fixed is not None
             else "; not replayed (see impact_basis)")
    lines.append(f"{len(report.findings)} findings, exclusive critical-path total {_ms(total)}{share}{fixed}")
    if report.findings:
        lines.append("impact: the saving if that finding alone is fixed; exclusive: its share, never counted twice")
        lines.append(f"{'impact':>11} {'exclusive':>11}  {'severity':<8} {'pass':<27} {'at':>12} {'dur':>11}  message")
        for f in report.findings:
            at = _ms((f["ts"] or start_ns) - start_ns)
            imp = _ms(f["impact_ns"]) if f["impact_ns"] is not None else "-"
            how = "" if (f["impact_basis"] or "").startswith("replay") else f" [impact: {f['impact_basis']}]"
            lines.append(f"{imp:>11} {_ms(f['exclusive_ns'] or 0):>11}  {f['severity']:<8} {f['pass']:<27} {at:>12} "
                         f"{_ms(f['dur'] or 0):>11}  {f['message']}{how}")
    lines.append("")
    lines.append("passes:")
    for s in report.statuses:
        fixed = _ms(s.impact_ns) if s.impact_ns is not None else "- (not replayed)"
        detail = (f"{s.n_findings} findings, all fixed saves {fixed}, exclusive {_ms(s.exclusive_ns)}"
                  if s.status == "ran" else (s.reason or ""))
        lines.append(f"  {s.pass_id:<27} {s.status:<15} {detail}")
    lines.append(f"analysis took {report.elapsed_ms:.0f} ms")
    return "\n".join(lines)


def _ms(ns: int) -> str:
    return f"{ns / 1e6:.3f} ms"
