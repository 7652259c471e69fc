"""`acceltrace fleet PATH... [--name N] [--tag-pattern P] [--scheduler ADDRESS | --workers N] [--json]`
and `acceltrace fleet query FLEET SQL [--format csv|json]`."""

from __future__ import annotations

import csv
import json
import sys


def fleet_command(args) -> int:
    from acceltrace.store.catalog import Store

    store = Store(args.store)
    if args.paths and args.paths[0] == "query":
        return _query(store, args)
    return _build(store, args)


def _build(store, args) -> int:
    from acceltrace.fleet import query
    from acceltrace.fleet.build import FleetError, build_fleet

    if args.scheduler and args.workers:
        print("acceltrace fleet: give --scheduler or --workers, not both", file=sys.stderr)
        return 2
    if args.workers is not None and args.workers < 1:
        print(f"acceltrace fleet: --workers must be at least 1, got {args.workers}", file=sys.stderr)
        return 2
    bar = _Bar() if sys.stderr.isatty() else None
    try:
        res = build_fleet(store, args.paths, name=args.name, tag_pattern=args.tag_pattern,
                          scheduler=args.scheduler, workers=args.workers, progress=bar.update if bar else None)
    except FleetError as e:
        print(f"acceltrace fleet: {e}", file=sys.stderr)
        return 2
    finally:
        if bar:
            bar.close()
    rep = query.report(store, res.fleet["id"])
    if args.json:
        print(json.dumps(rep, default=str))
    else:
        _print_report(rep)
    if args.json:  # the report lists them otherwise
        for f in res.failed:
            print(f"acceltrace fleet: failed: {f['error']}", file=sys.stderr)
    return 1 if res.failed else 0


def _query(store, args) -> int:
    from acceltrace.fleet import layout
    from acceltrace.fleet.query import run_readonly
    from acceltrace.store.sandbox import QueryError

    if len(args.paths) != 3:
        print("acceltrace fleet query: expected FLEET SQL (a fleet id or name, and one SQL statement)",
              file=sys.stderr)
        return 2
    _, given, sql = args.paths
    try:
        fleet = layout.resolve(store, given)
        cols, rows, truncated = run_readonly(store, fleet["id"], sql)
    except layout.FleetNotFound as e:
        print(f"acceltrace fleet query: {e}", file=sys.stderr)
        return 1
    except QueryError as e:
        print(f"acceltrace fleet query: {e}", file=sys.stderr)
        return 2 if e.code in ("bad_request", "query_refused") else 1
    if args.format == "json":
        print(json.dumps({"columns": cols, "rows": rows, "truncated": truncated}, default=str))
    else:
        w = csv.writer(sys.stdout)
        w.writerow(cols)
        w.writerows(rows)
    if truncated:
        print(f"acceltrace fleet query: output cut at {len(rows)} rows", file=sys.stderr)
    return 0


def _fmt(v, unit: str) -> str:
    if v is None:
        return "-"
    if unit == "ns":
        return f"{v / 1e6:.2f} ms"
    if unit == "frac":
        return f"{100 * v:.1f}%"
    return f"{v:.2f}"


def _print_report(rep: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    c = Console(highlight=False)
    counts = rep.get("counts", {})
    c.print(f"fleet {rep['fleet']} ({rep.get('name')}): {counts.get('ok', 0)} traces ok, "
            f"{counts.get('failed', 0)} failed, {counts.get('outliers', 0)} outliers"
            + (f", {len(rep['skipped'])} files skipped as not traces" if rep.get("skipped") else ""))
    out = [t for t in rep["traces"] if t["outlier"]]
    if out:
        t = Table(title="outliers (robust: median/MAD per metric across the job's ranks)")
        for col in ("rank", "trace", "cause", "outlier metrics", "step work", "device busy"):
            t.add_column(col)
        for r in out:
            t.add_row(str(r.get("rank") if r.get("rank") is not None else "-"), f"{r['trace_id']} {r['name']}",
                      str(r.get("cause")), ", ".join(r["outlier_metrics"]), _fmt(r["step_work_ns_median"], "ns"),
                      _fmt(r["device_busy"], "frac"))
        c.print(t)
    failed = [t for t in rep["traces"] if t["status"] != "ok"]
    for r in failed:
        c.print(f"failed: {r['error'] or r['path']}", markup=False)
    if rep["findings"]:
        t = Table(title="fleet findings (passes by total impact)")
        for col in ("pass", "traces", "findings", "impact", "worst trace"):
            t.add_column(col)
        for f in rep["findings"]:
            worst = f["worst"][0] if f["worst"] else None
            t.add_row(f["pass"], str(f["traces"]), str(f["findings"]), _fmt(f["impact_ns"], "ns"),
                      f"{worst['trace_id']} {worst['name']}" if worst else "-")
        c.print(t)


class _Bar:
    """Traces done / failed on the terminal (stderr), while the map runs."""

    def __init__(self):
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

        self.p = Progress(TextColumn("fleet"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[failed]}"),
                          TimeRemainingColumn(), console=Console(stderr=True), transient=True)
        self.p.start()
        self.task = None

    def update(self, done: int, failed: int, total: int) -> None:
        if self.task is None:
            self.task = self.p.add_task("fleet", total=total, failed="")
        self.p.update(self.task, completed=done, failed=f"{failed} failed" if failed else "")

    def close(self) -> None:
        self.p.stop()
