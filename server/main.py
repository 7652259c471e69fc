"""`acceltrace serve`: ingest the given files not yet in the store, then serve the UI and API."""

from __future__ import annotations

import sys
from pathlib import Path


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


def serve_command(args) -> int:
    import uvicorn

    from acceltrace.analysis.runner import after_publish
    from acceltrace.ingest.pipeline import ingest_paths
    from acceltrace.store.catalog import Store
    from acceltrace.server.app import create_app

    store = Store(args.store)
    paths = [Path(p) for p in (getattr(args, "paths", None) or [])]
    missing = [p for p in paths if not p.exists()]
    if missing:
        print(f"acceltrace: error: no such file or directory: {missing[0]}", file=sys.stderr)
        return 2
    if paths:
        for r in ingest_paths(store, _demo_inputs(paths), skip_existing=True, after_publish=after_publish):
            if r.error:
                print(f"acceltrace: warning: not ingested: {r.error}", file=sys.stderr)
            else:
                what = "already in the store" if r.skipped else f"ingested ({r.counts.get('slices', 0)} slices)"
                print(f"{r.id}  {r.name}  {what}", file=sys.stderr)
    host, port = args.host, args.port
    app = create_app(store.root, max_upload_bytes=args.max_upload_bytes, bind_host=args.host,
                     extra_hosts=getattr(args, "allowed_host", None))
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", access_log=False)
    server = uvicorn.Server(config)
    shown = f"[{host}]" if ":" in host else host
    print(f"acceltrace: serving {store.root} at http://{shown}:{port}/", flush=True)
    server.run()
    return 0
