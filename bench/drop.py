"""Drop to timeline: a trace uploaded through the server as the page's drop zone sends it, until
its first tile answers; beside `acceltrace ingest` of the same file and orjson.loads, same run.

    .venv/bin/python bench/drop.py --input /tmp/vllm.json [--input ...] [--repeat 3]

Each repeat uses a fresh store and a fresh `acceltrace serve` on a loopback port (its start is
not timed), so nothing is deduplicated. The upload is curl's multipart POST (`-F file=@...`, what
a browser's FormData sends). Times, from the start of the upload:
  response   the POST answered (the body received, hashed and on disk; the ingest started)
  published  the trace row is `ready` (polled every 10 ms)
  first tile the coarsest tile of the first group answered 200 (the page's first draw needs it)
Anchors (each in a child process of its own, same run): `ingest_paths` of the file (what
`acceltrace ingest --no-analyze` does, the time to a viewable trace of bench/ingest.py) and
orjson.loads of its bytes (the parse alone).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:] = [str(ROOT)] + [p for p in sys.path if Path(p or ".").resolve() != ROOT / "bench"]

from bench._server import BenchServer  # noqa: E402

_CHILD = r"""
import json, sys, time, tempfile
from pathlib import Path
mode, path = sys.argv[1], sys.argv[2]
if mode == "orjson":
    import orjson
    data = open(path, "rb").read()
    t0 = time.perf_counter(); orjson.loads(data)
else:
    from acceltrace.ingest.pipeline import ingest_paths
    from acceltrace.store.catalog import Store
    store = Store(tempfile.mkdtemp(prefix="drop-cli-"))
    t0 = time.perf_counter()
    (r,) = ingest_paths(store, [Path(path)], views=False)
    if r.error:
        raise SystemExit(r.error)
print(json.dumps({"s": time.perf_counter() - t0}))
"""


def _child(mode: str, path: Path) -> float:
    out = subprocess.run([sys.executable, "-c", _CHILD, mode, str(path)], cwd=ROOT, capture_output=True,
                         text=True, timeout=1800)
    if out.returncode:
        raise SystemExit(f"{mode} {path}: {out.stderr.strip()[-400:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])["s"]


def _get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=60) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def drop_once(path: Path) -> dict:
    with tempfile.TemporaryDirectory(prefix="drop-", ignore_cleanup_errors=True) as d:  # analysis may still write
        srv = BenchServer(Path(d))
        try:
            t0 = time.perf_counter()
            out = subprocess.run(["curl", "-s", "-X", "POST", f"{srv.url}/api/traces", "-F", f"file=@{path}"],
                                 capture_output=True, text=True, timeout=1800)
            t_resp = time.perf_counter() - t0
            tid = json.loads(out.stdout)["id"]
            while True:
                row = json.loads(_get(f"{srv.url}/api/traces/{tid}")[1])
                if row.get("status") == "ready" and "levels" in row:
                    break
                if row.get("status") == "failed":
                    raise SystemExit(f"{path}: upload failed: {row.get('error')}")
                time.sleep(0.01)
            t_pub = time.perf_counter() - t0
            group = row["groups"][0]["id"] if row.get("groups") else 0
            status, _ = _get(f"{srv.url}/api/traces/{tid}/tiles/{row['levels']['max']}/0?group={group}")
            if status != 200:
                raise SystemExit(f"{path}: first tile answered {status}")
            return {"response": t_resp, "published": t_pub, "tile": time.perf_counter() - t0}
        finally:
            srv.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--input", action="append", type=Path, required=True)
    ap.add_argument("--repeat", type=int, default=3, help="runs per row; the fastest is shown")
    a = ap.parse_args()
    print("| trace (MB) | orjson.loads | acceltrace ingest | drop: response | drop: published | drop: first tile"
          " | drop MB/s | drop / ingest | drop / orjson |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for path in a.input:
        mb = path.stat().st_size / 1e6
        orj = min(_child("orjson", path) for _ in range(a.repeat))
        cli = min(_child("ingest", path) for _ in range(a.repeat))
        drop = min((drop_once(path) for _ in range(a.repeat)), key=lambda r: r["tile"])
        print(f"| {path.name} ({mb:.1f}) | {orj:.2f} s | {cli:.2f} s | {drop['response']:.2f} s"
              f" | {drop['published']:.2f} s | {drop['tile']:.2f} s | {mb / drop['tile']:.1f}"
              f" | {drop['tile'] / cli:.2f}x | {drop['tile'] / orj:.2f}x |", flush=True)


if __name__ == "__main__":
    main()
