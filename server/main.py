"""`acceltrace serve`: ingest the given files not yet in the store, then serve the UI and API.

With --workers N (default: one per core) uvicorn's supervisor runs N server processes on one
listening socket; each builds its own app (worker_app) from the settings in
ACCELTRACE_SERVE_CONFIG, opens every trace read-only (published traces are immutable) and
shares the catalog through SQLite in WAL mode. A worker that dies is replaced; requests in
the other workers go on. docs/operations.md lists the limits and how to change them.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

CONFIG_ENV = "ACCELTRACE_SERVE_CONFIG"
PROTOCOL = "acceltrace.server.protocol:GuardedHttpToolsProtocol"
CONNECTIONS_PER_WORKER = 2048  # uvicorn's own backstop (its 503 has no Retry-After; ours comes first)


def _demo_inputs(paths: list[Path]) -> list[Path]:
    """Files to ingest: directories expand to their traces, minus any `invalid/` folder inside
    them (sample_traces keeps its deliberately broken files there); files given by name stay."""
    from acceltrace.ingest.pipeline import expand_inputs

    out: list[Path] = []
    for p in paths:
        if p.is_dir():
            out.extend(f for f in expand_inputs([p]) if "invalid" not in f.relative_to(p).parts)
        else:
            out.append(p)
    return out


def worker_app():
    """The app of one worker process, from the settings serve_command put in the environment."""
    from acceltrace.server.app import create_app

    import gc

    cfg = json.loads(os.environ[CONFIG_ENV])
    app = create_app(cfg["store"], max_upload_bytes=cfg["max_upload_bytes"], bind_host=cfg["host"],
                     extra_hosts=cfg["allowed_hosts"], max_inflight=cfg.get("max_inflight"), queries_ahead=True)
    # everything imported so far (FastAPI, DuckDB, numpy, pyarrow, our modules: ~90 k objects) lives
    # as long as the worker: out of the collector's sight, a full collection no longer walks it
    # (it took 110-150 ms, every in-flight tile of this worker waiting; issue 15)
    gc.freeze()
    return app


def serve_command(args) -> int:
    import uvicorn

    from acceltrace.analysis.runner import after_publish
    from acceltrace.ingest.pipeline import ingest_paths
    from acceltrace.server.limits import cores, env_int
    from acceltrace.store.catalog import Store

    store = Store(args.store)
    paths = [Path(p) for p in (getattr(args, "paths", None) or [])]
    missing = [p for p in paths if not p.exists()]
    if missing:
        print(f"acceltrace: error: no such file or directory: {missing[0]}", file=sys.stderr)
        return 2
    workers = getattr(args, "workers", None)
    if workers is not None and workers < 1:
        print(f"acceltrace: error: --workers must be at least 1, got {workers}", file=sys.stderr)
        return 2
    if workers is None:
        # a live capture lives in one process's memory: its page and websocket need that process
        live = os.environ.get("ACCELTRACE_LIVE_FILE") or os.environ.get("ACCELTRACE_SOCKET")
        workers = 1 if live else cores()
    if paths:
        for r in ingest_paths(store, _demo_inputs(paths), skip_existing=True, after_publish=after_publish):
            if r.error:
                print(f"acceltrace: warning: not ingested: {r.error}", file=sys.stderr)
            else:
                what = "already in the store" if r.skipped else f"ingested ({r.counts.get('slices', 0)} slices)"
                print(f"{r.id}  {r.name}  {what}", file=sys.stderr)
    host, port = args.host, args.port
    os.environ[CONFIG_ENV] = json.dumps({
        "store": str(store.root), "max_upload_bytes": args.max_upload_bytes, "host": host,
        "allowed_hosts": getattr(args, "allowed_host", None), "max_inflight": getattr(args, "max_inflight", None)})
    shown = f"[{host}]" if ":" in host else host
    print(f"acceltrace: serving {store.root} at http://{shown}:{port}/ with {workers} worker"
          f"{'s' if workers > 1 else ''}", flush=True)
    uvicorn.run("acceltrace.server.main:worker_app", factory=True, host=host, port=port, workers=workers,
                http=PROTOCOL, log_level="warning", access_log=False, timeout_keep_alive=5,
                limit_concurrency=CONNECTIONS_PER_WORKER, timeout_graceful_shutdown=10,
                # a worker that does not answer the supervisor's health check in time is replaced (docs/operations.md)
                timeout_worker_healthcheck=env_int("ACCELTRACE_WORKER_HEALTHCHECK_S", 5))
    return 0
