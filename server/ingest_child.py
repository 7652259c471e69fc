"""`python -m acceltrace.server.ingest_child ARGS_JSON`: one upload's ingest, in a process of its own.

Started by server/upload.py at lower CPU priority (os.nice) so viewers' tiles keep the cores;
fills the catalog row the server began (progress included, through the catalog like the CLI's)
and runs the post-publish step. Prints one JSON line: {"id", "error"}.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path


def main(argv: list[str]) -> int:
    a = json.loads(argv[0])
    try:
        os.nice(int(a.get("nice", 10)))
    except OSError:
        pass
    from acceltrace.analysis.runner import after_publish
    from acceltrace.ingest import pipeline
    from acceltrace.store.catalog import Store

    store = Store(a["root"], sweep=False)
    trace_id = a["trace_id"]
    last = [0.0]

    def progress(_label: str, fraction: float) -> None:
        now = time.monotonic()
        if now - last[0] > 0.2 or fraction >= 1.0:  # the catalog is SQLite: don't write per read()
            last[0] = now
            try:
                store.set_progress(trace_id, min(0.99, fraction))
            except Exception:
                pass

    res = pipeline.ingest_one(store, [Path(a["path"])], a["name"], keep_failed=True, progress=progress,
                              trace_id=trace_id, tmp_path=Path(a["tmp_path"]), after_publish=after_publish)
    print(json.dumps({"id": trace_id, "error": res.error}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
