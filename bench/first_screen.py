"""A dropped trace's first screen of tiles, as a page loading on another machine asks for them.

    .venv/bin/python bench/first_screen.py --input /tmp/a100.json [--input ...] [--repeat 4] [--after 0.15]

The drop's page opens the whole trace; its tiles are asked once the page has loaded, 0.15-0.2 s after the
upload's answer for a small trace (bench/drop.py --browser). Here curl uploads the file (multipart, as the
page's upload box) to a fresh `acceltrace serve` on loopback; `--after` seconds after the answer (an upload
answered 202 is followed on its progress stream to `ready` first, as the page does), the screen's tiles are
asked all at once, as the page asks them: the whole trace at the level of a WIDTH px tracks area, each tile
group's depth pages in the order the page stacks the groups, the first SCREEN of them (A100's first screen at 1500 px takes 8).

Each repeat runs twice, alternated on fresh servers: the upload says the page's width (`?view_px=`, what the
web UI's upload box sends: the server builds those tiles while the page loads, server/first_view.py), and
it does not (the tiles are built when asked). Printed: the first, middle and last tile's answer after they
were asked (ms), the medians over the repeats. When the browser runs on the server's own two cores (the
bench/drop.py --browser case), the page's loading and the tiles built meanwhile share those cores; measured that
way, the two were level (docs/performance.md).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:] = [str(ROOT)] + [p for p in sys.path if Path(p or ".").resolve() != ROOT / "bench"]

from bench._server import BenchServer  # noqa: E402
from bench.drop import _settled  # noqa: E402
from acceltrace.server.first_view import first_level, last_pages, page_order  # noqa: E402

WIDTH = 885  # the tracks area of a 1500 px window in the default layout
SCREEN = 8


def _screen(url: str, trace_id: str) -> list[str]:
    """The screen's tile paths, from the trace's metadata and depths: the tiles tests/test_first_view.py shows a
    page asks first (the level of its width, the groups in its order, the depth pages its tracks show)."""
    meta = json.load(urllib.request.urlopen(f"{url}/api/traces/{trace_id}"))
    depths = json.load(urllib.request.urlopen(f"{url}/api/traces/{trace_id}/depths"))["tracks"]
    d = meta["duration_ns"]
    level = first_level(d, WIDTH, meta["max_level"])
    tracks = [{**t, "grp": int(t["group"][1:])} for t in meta["tracks"]]
    pages = last_pages(tracks, depths)
    paths = [f"/api/traces/{trace_id}/tiles/{level}/{i}?group=g{g}&page={p}"
             for g in page_order(tracks) for p in range(pages[g] + 1) for i in range(d // (1024 << level) + 1)]
    return paths[:SCREEN]


def once(path: Path, say_width: bool, after_s: float) -> list[float]:
    """Seconds from asking the screen's tiles to each answer, sorted."""
    with tempfile.TemporaryDirectory(prefix="first-screen-", ignore_cleanup_errors=True) as d:
        srv = BenchServer(Path(d))
        try:
            _settled(srv)
            q = f"?view_px={WIDTH}" if say_width else ""
            out = subprocess.run(["curl", "-s", "-X", "POST", f"{srv.url}/api/traces{q}", "-F", f"file=@{path}"],
                                 capture_output=True, text=True, check=True)
            answer = json.loads(out.stdout)
            if answer.get("status") == "ingesting":
                with urllib.request.urlopen(f"{srv.url}/api/traces/{answer['id']}/progress{q}") as stream:
                    for line in stream:
                        if b'"ready"' in line or b'"failed"' in line:
                            break
            time.sleep(after_s)
            paths = _screen(srv.url, answer["id"])
            done: list[float] = []
            t0 = time.perf_counter()

            def ask(p: str) -> None:
                req = urllib.request.Request(srv.url + p, headers={"Accept-Encoding": "gzip"})
                urllib.request.urlopen(req, timeout=60).read()
                done.append(time.perf_counter() - t0)

            threads = [threading.Thread(target=ask, args=(p,)) for p in paths]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            return sorted(done)
        finally:
            srv.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--input", action="append", type=Path, required=True)
    ap.add_argument("--repeat", type=int, default=4)
    ap.add_argument("--after", type=float, default=0.15, help="seconds from the answer to the page's tile requests")
    a = ap.parse_args()
    print(f"| trace (MB) | tiles | width said: first / middle / last (ms) | not said: first / middle / last (ms) |")
    print("| --- | ---: | ---: | ---: |")
    for path in a.input:
        said, unsaid = [], []
        for _ in range(a.repeat):  # alternated: both see the same machine
            said.append(once(path, True, a.after))
            unsaid.append(once(path, False, a.after))

        def cell(runs: list[list[float]]) -> str:
            return " / ".join(f"{1000 * statistics.median(r[k] for r in runs):.0f}"
                              for k in (0, len(runs[0]) // 2, -1))

        print(f"| {path.name} ({path.stat().st_size / 1e6:.1f}) | {len(said[0])} | {cell(said)} | {cell(unsaid)} |",
              flush=True)


if __name__ == "__main__":
    main()
