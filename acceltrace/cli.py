"""The `acceltrace` command: parses arguments and calls into the parts (no part imports this).

Each subcommand's work lives in its part; handlers import lazily so `acceltrace --help`
and every command start fast and a missing optional dependency only affects its command.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path


# Handlers of the commands whose part is heavy to import: each imports its part only when
# its command runs, so `acceltrace --help` and every other command start fast.


def _serve(args: argparse.Namespace) -> int:
    from acceltrace.server.main import serve_command

    return serve_command(args) or 0


def _analyze(args: argparse.Namespace) -> int:
    from acceltrace.analysis.runner import analyze_command

    return analyze_command(args) or 0


def _whatif(args: argparse.Namespace) -> int:
    from acceltrace.analysis.whatif import whatif_command

    return whatif_command(args) or 0


def _sim(args: argparse.Namespace) -> int:
    from acceltrace.sim.cli import sim_command

    return sim_command(args) or 0


def _traced(args: argparse.Namespace) -> int:
    from acceltrace.collect.traced.cli import traced_command

    return traced_command(args) or 0


def _collect(args: argparse.Namespace) -> int:
    from acceltrace.collect.counters.cli import collect_command
    from acceltrace.sim.counters import realtime_sim_source
    from acceltrace.sim.pm import PMSampler

    return collect_command(args, realtime_sim=realtime_sim_source, pm_unit=PMSampler) or 0


def _record(args: argparse.Namespace) -> int:
    from acceltrace.collect.record import record_command

    return record_command(args)


def _fleet(args: argparse.Namespace) -> int:
    from acceltrace.fleet.cli import fleet_command

    return fleet_command(args) or 0


def _export(args: argparse.Namespace) -> int:
    from acceltrace.export.command import export_command

    return export_command(args) or 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="acceltrace",
        description="Performance analysis for PCIe-attached ML accelerators: ingest traces, serve the"
        " correlated timeline, analyse, trace, collect counters, simulate, export.",
    )
    p.add_argument("--store", help="trace store directory (default: $ACCELTRACE_STORE or ./.acceltrace)")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    s = sub.add_parser("ingest", help="ingest files, archives or run directories as traces")
    s.add_argument("paths", nargs="+", type=Path, metavar="PATH")
    s.add_argument("--name", help="trace name (default: the file name)")
    s.add_argument("--merge", action="store_true", help="all paths become one trace (e.g. the ranks of one job)")
    s.add_argument("--json", action="store_true", help="one JSON object per trace, one per line")
    s.add_argument("--no-analyze", action="store_true",
                   help="publish without running the analysis passes (`acceltrace analyze ID` runs them later)")
    s.set_defaults(func=cmd_ingest)

    s = sub.add_parser("ls", help="list the traces in the store")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_ls)

    s = sub.add_parser("rm", help="remove traces")
    s.add_argument("ids", nargs="+", metavar="ID")
    s.set_defaults(func=cmd_rm)

    s = sub.add_parser("query", help="run a read-only SQL query on one trace")
    s.add_argument("id", metavar="ID")
    s.add_argument("sql", metavar="SQL")
    s.add_argument("--format", choices=("csv", "json"), default="csv")
    s.add_argument("--timeout", type=float, default=60.0, metavar="S",
                   help="stop the query after S seconds (default 60; 0 for none)")
    s.add_argument("--max-rows", type=int, default=1_000_000, metavar="N",
                   help="print at most N rows, saying so when cut (default 1000000; 0 for all)")
    s.set_defaults(func=cmd_query)

    s = sub.add_parser("serve", help="ingest the given files if new, then serve the UI and API")
    s.add_argument("paths", nargs="*", type=Path, metavar="FILE")
    s.add_argument("--host", default="127.0.0.1", help="interface to bind (default: localhost only)")
    s.add_argument("--allowed-host", action="append", metavar="NAME",
                   help="a Host name the server answers besides localhost and the bound address"
                        " (repeatable; '*' for any; also $ACCELTRACE_ALLOWED_HOSTS)")
    s.add_argument("--port", type=int, default=8000)
    s.add_argument("--max-upload-bytes", type=int, default=4 << 30, help="upload size limit (default 4 GiB)")
    s.add_argument("--workers", type=int, metavar="N",
                   help="server processes (default: one per core; 1 when following a live source)")
    s.add_argument("--max-inflight", type=int, metavar="N",
                   help="requests in progress per worker before 503 + Retry-After (default 256)")
    s.set_defaults(func=_serve)

    s = sub.add_parser("analyze", help="run the analysis passes on a trace and print the findings")
    s.add_argument("id", metavar="ID")
    s.add_argument("--pass", dest="passes", action="append", metavar="P", help="run only this pass (repeatable)")
    s.add_argument("--param", action="append", default=[], metavar="NAME=VALUE", help="override a threshold")
    s.add_argument("--critical-path", action="store_true",
                   help="print the critical path's time per segment type instead of the findings")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=_analyze)

    s = sub.add_parser("whatif", help="replay a trace's dependency graph (any size) with each pass's findings fixed:"
                                      " the saving per pass and finding, and the critical path; stored with the"
                                      " findings")
    s.add_argument("id", metavar="ID")
    s.add_argument("--pass", dest="passes", action="append", metavar="P",
                   help="only this pass (repeatable; printed, not stored)")
    s.add_argument("--link-speedup", type=float, default=None, metavar="X",
                   help="pcie_saturation's fix: a link X times faster (default: the trace's analysis setting,"
                        " 2: the next generation)")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=_whatif)

    s = sub.add_parser("sim", help="run the device model; writes run.atrace, run.actr, ground_truth.json")
    s.add_argument("scenario", metavar="SCENARIO")
    s.add_argument("--out", type=Path, required=True)
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--events", type=int, default=None, help="scale the run to roughly N events")
    s.add_argument("--live", action="store_true", help="pace in real time through a running tracing daemon")
    s.add_argument("--ranks", type=int, default=None, help="sim fleet: number of ranks (run directories)")
    s.set_defaults(func=_sim)

    s = sub.add_parser("fleet", help="fleet analysis on Dask: many traces (ranks, hosts, runs), one question;"
                                     " `fleet query FLEET SQL` queries a fleet's tables")
    s.add_argument("paths", nargs="+", metavar="PATH", help="traces, run directories, directories of them or globs")
    s.add_argument("--name", help="fleet name (a build with the name of an existing fleet updates it)")
    s.add_argument("--tag-pattern", metavar="P",
                   help="regex with named groups (job, rank, host, run) matched against each trace's path")
    s.add_argument("--scheduler", metavar="ADDRESS", help="an existing Dask scheduler (tcp://host:port)")
    s.add_argument("--workers", type=int, help="LocalCluster worker processes (default: one per core)")
    s.add_argument("--json", action="store_true")
    s.add_argument("--format", choices=("csv", "json"), default="csv", help="fleet query: output format")
    s.set_defaults(func=_fleet)

    s = sub.add_parser("traced", help="the tracing daemon (or, with ctl, control a running one)")
    s.add_argument("--socket", required=True, type=Path)
    s.add_argument("--out", type=Path)
    s.add_argument("--buffer-mb", type=int, default=64)
    s.add_argument("--mode", choices=("discard", "ring"), default="discard")
    s.add_argument("ctl", nargs="*", metavar="ctl start|stop|flush|status")
    s.set_defaults(func=_traced)

    s = sub.add_parser("collect", help="sample hardware counters into a .actr file")
    s.add_argument("--source", required=True)
    s.add_argument("--counters", help="comma-separated counter names (default: all)")
    s.add_argument("--rate", type=float, default=100.0, help="samples per second (1 to 10000)")
    s.add_argument("--duration", type=float, default=10.0, help="seconds")
    s.add_argument("--out", type=Path)
    s.add_argument("--list", action="store_true", help="list what the source offers")
    s.add_argument("--socket", type=Path, help="also stream to a running tracing daemon")
    s.add_argument("--realtime", action="store_true", help="ask for SCHED_FIFO so ticks are not delayed by load")
    s.add_argument("--device-sampling", action="store_true",
                   help="the device's PM unit samples its counters into a ring (rate 1 to 200000) that is drained "
                   "in batches (sim source)")
    s.add_argument("--drain-hz", type=float, default=20.0, help="with --device-sampling: drains per second (1 to 1000)")
    s.add_argument("--pm-ring", type=int, default=1 << 16, help="with --device-sampling: ring slots per device")
    s.set_defaults(func=_collect)

    s = sub.add_parser("record", help="run a command with tracing on (PyTorch profiler) and counters beside it",
                       description="Run CMD with the PyTorch profiler on (through the environment) and the counter "
                       "sampler in parallel, clocks aligned, into one run directory (docs/tracing.md, 'Recording').")
    s.add_argument("--counters", metavar="SOURCE", help="host, nvml or none (default: nvml where present, else host)")
    s.add_argument("--rate", type=float, default=100.0, help="counter samples per second (1 to 10000; default 100)")
    s.add_argument("--out", type=Path, help="the run directory (new or empty; default acceltrace-record-<time>)")
    s.add_argument("--no-torch", action="store_true", help="do not start the PyTorch profiler in the command")
    s.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- CMD ARGS...")
    s.set_defaults(func=_record)

    s = sub.add_parser("diff", help="compare two traces (ids or files): headline, per-name deltas, findings")
    s.add_argument("a", metavar="A", help="the trace before: an id (or unique prefix) or a file to ingest")
    s.add_argument("b", metavar="B", help="the trace after")
    s.add_argument("--steps", help="aligned step positions to compare, e.g. 0,2-4 (default: all)")
    s.add_argument("--json", action="store_true", help="one JSON object (docs/diff.md)")
    s.add_argument("--noise-pct", type=float, default=5.0, help="relative change below this is unchanged (5)")
    s.add_argument("--noise-ns", type=int, default=10_000, help="|delta| below this many ns is unchanged (10000)")
    s.add_argument("--strip-templates", action="store_true", help="match names with <...> template arguments removed")
    s.add_argument("--top", type=int, default=20, help="rows the table prints (20)")
    s.set_defaults(func=cmd_diff)

    s = sub.add_parser("export", help="write a trace for other tools (Chrome JSON, Parquet)")
    s.add_argument("id", metavar="ID")
    s.add_argument("--format", choices=("chrome", "parquet"), required=True)
    s.add_argument("--out", type=Path, required=True)
    s.set_defaults(func=_export)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args) or 0
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0


# -- store commands (the thin ones live here) ------------------------------------------------

def _store(args):
    from acceltrace.store.catalog import Store

    return Store(args.store)


def _resolve(store, trace_id: str) -> dict:
    row = store.get(trace_id)
    if row is None:
        # accept a unique prefix, as git does
        rows = [r for r in store.list() if r["id"].startswith(trace_id)] if len(trace_id) >= 4 else []
        if len(rows) == 1:
            row = rows[0]
    if row is None:
        raise SystemExit(f"acceltrace: no ready trace with id {trace_id!r} in {store.root}")
    if row["status"] != "ready":
        why = f": {row['error']}" if row.get("error") else ""
        raise SystemExit(f"acceltrace: trace {row['id']} is {row['status']}{why}")
    return row


def cmd_ingest(args) -> int:
    from acceltrace.ingest.opening import make_spare

    make_spare()  # the first build's DuckDB instance, made on a thread while the rest is imported
    from acceltrace.analysis.runner import after_publish
    from acceltrace.ingest.pipeline import ingest_paths

    store = _store(args)
    progress = _progress_bar() if sys.stderr.isatty() and not args.json else None
    try:
        results = ingest_paths(store, args.paths, name=args.name, merge=args.merge,
                               progress=progress.update if progress else None,
                               after_publish=None if args.no_analyze else after_publish)
    finally:
        if progress:
            progress.close()
    rc = 0
    if not results:  # e.g. an empty directory: saying nothing and exiting 0 would look like success
        print(f"acceltrace: error: {', '.join(map(str, args.paths))}: no trace files found (a directory needs "
              "trace files in it, or a run: run.atrace, run.actr)", file=sys.stderr)
        rc = 1
    for r in results:
        if args.json:
            print(json.dumps(r.as_json()), flush=True)
        elif r.error is None:
            c = r.counts
            print(f"{r.id}  {r.name}  [{r.format}]  tracks={c.get('tracks')} slices={c.get('slices')}"
                  f" flows={c.get('flows')} counters={c.get('counters')} warnings={c.get('warnings')}")
        if r.error:
            print(f"acceltrace: error: {r.error}", file=sys.stderr)
            rc = 1
        elif r.warnings and not args.json:
            for w in r.warnings[:10]:
                print(f"  warning: {w}", file=sys.stderr)
            if len(r.warnings) > 10 or r.counts.get("warnings", 0) > 10:
                print(f"  ... {r.counts.get('warnings')} warnings in all (acceltrace query {r.id} "
                      "\"SELECT value FROM trace_meta WHERE key='warnings'\")", file=sys.stderr)
    return rc


def cmd_ls(args) -> int:
    rows = _store(args).list()
    if args.json:
        for r in rows:
            print(json.dumps({k: r[k] for k in ("id", "name", "format", "status", "created", "source_bytes",
                                                "db_bytes", "counts", "error")}))
        return 0
    for r in rows:
        c = r["counts"]
        print(f"{r['id']}  {r['status']:<9} {r['format'] or '-':<8} slices={c.get('slices', 0):<10} "
              f"{r['created']}  {r['name']}")
    return 0


def cmd_rm(args) -> int:
    store = _store(args)
    rc = 0
    for i in args.ids:
        try:
            removed = store.remove(i)
        except ValueError as e:  # not an id at all (a glob, a path): nothing was touched
            print(f"acceltrace: {e}", file=sys.stderr)
            rc = 1
            continue
        if not removed:
            print(f"acceltrace: no trace with id {i!r}", file=sys.stderr)
            rc = 1
    return rc


def _trace_or_file(store, text: str) -> str:
    """A trace id (or unique prefix), or a file / run directory ingested first (with analysis; a file
    whose bytes are already in the store is not ingested again)."""
    if Path(text).exists():
        from acceltrace.analysis.runner import after_publish
        from acceltrace.ingest.pipeline import ingest_paths

        results = ingest_paths(store, [Path(text)], skip_existing=True, after_publish=after_publish)
        if len(results) != 1 or results[0].error:
            why = results[0].error if results else "no trace files found"
            raise SystemExit(f"acceltrace: error: {text}: {why}")
        return results[0].id
    return _resolve(store, text)["id"]


def cmd_diff(args) -> int:
    from acceltrace.diff.command import diff_command

    store = _store(args)
    return diff_command(args, store, _trace_or_file(store, args.a), _trace_or_file(store, args.b))


def cmd_query(args) -> int:
    import csv

    from acceltrace.store.sandbox import QueryError, run_limited

    store = _store(args)
    row = _resolve(store, args.id)
    memory = int(os.environ.get("ACCELTRACE_QUERY_MEMORY_BYTES", 2 << 30))
    try:  # a process of its own: hard memory cap, time limit (docs/operations.md)
        cols, rows, truncated = run_limited(store, row["id"], args.sql, max_rows=args.max_rows or None,
                                            timeout_s=args.timeout or None, memory_bytes=memory, nice=0)
    except QueryError as e:
        print(f"acceltrace: query failed: {e}", file=sys.stderr)
        return 1
    if truncated:
        print(f"acceltrace: showing the first {args.max_rows} rows (--max-rows N for more, 0 for all)",
              file=sys.stderr)
    if args.format == "json":
        print(json.dumps([dict(zip(cols, r)) for r in rows], default=str))
    else:
        w = csv.writer(sys.stdout, lineterminator="\n")
        w.writerow(cols)
        w.writerows(rows)
    return 0


class _progress_bar:
    """A rich progress bar on a terminal (none when piped)."""

    def __init__(self):
        from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn

        self.p = Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.percentage:>3.0f}%"),
                          TimeRemainingColumn(), transient=True)
        self.p.start()
        self.tasks: dict[str, int] = {}

    def update(self, label: str, fraction: float) -> None:
        if label not in self.tasks:
            self.tasks[label] = self.p.add_task(label, total=1.0)
        self.p.update(self.tasks[label], completed=fraction)

    def close(self) -> None:
        self.p.stop()


def run() -> None:
    """The `acceltrace` process (the console script, `python -m acceltrace`): main(), then out at once.

    Every command has its results on the disk and its threads joined when main() returns; what is left is
    the interpreter tearing down numpy, Arrow and DuckDB module by module: 20-120 ms of each command's
    wall time here (A100's `acceltrace ingest`: 1.07 -> 0.98 s, medians of 5). So the exit handlers run (the DuckDB
    spill folders go, logging flushes), the output is flushed, and the process ends, skipping the
    teardown. A thread still running (none of the commands leaves one) gets the interpreter's own exit,
    which waits for it."""
    import atexit
    import threading

    rc = main()
    if any(t.is_alive() and not t.daemon for t in threading.enumerate() if t is not threading.main_thread()):
        raise SystemExit(rc)
    atexit._run_exitfuncs()  # what the interpreter's exit would run first (spill folders, logging)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a reader gone (a closed pipe): nothing more to say to it
            pass
    os._exit(rc)


if __name__ == "__main__":
    run()
