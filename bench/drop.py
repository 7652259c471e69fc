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

--browser: the same drop as a user makes it, in Debian's Chromium (Playwright): the trace list page's
"Open a trace" file chooser given the file, timed from then until
  page       the page has the trace's URL (the upload answered: published, or still ingesting past the
             server's 2 s wait: the page then follows the ingest itself); the list page opens the trace in
             place (its URL, HTML and styles, its main() run; web/static/panels/upload.js), not by a navigation
  published  the trace row is `ready` (polled every 20 ms beside the browser)
  first tile a tile is in the page's tile cache (window.acceltrace.timeline.tiles; it is drawn in the
             frame that follows): the user sees the timeline
  idle       the timeline drew every tile of the view (#timeline[data-state=idle], docs/ui.md)
This includes what the curl rows leave out: the browser reading and sending the file, the page's own
load (its HTML, its tile worker, its first requests; its modules are loaded while the list page idles) and
the drawing, on the same two cores as the server.
"""

from __future__ import annotations

import argparse
import json
import os
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

_CHILD = r"""
import json, shutil, sys, time, tempfile
from pathlib import Path
mode, path = sys.argv[1], sys.argv[2]
if mode == "orjson":
    import orjson
    data = open(path, "rb").read()
    t0 = time.perf_counter(); orjson.loads(data); dt = time.perf_counter() - t0
else:
    from acceltrace.ingest.pipeline import ingest_paths
    from acceltrace.store.catalog import Store
    store = Store(tempfile.mkdtemp(prefix="drop-cli-"))
    try:
        t0 = time.perf_counter()
        (r,) = ingest_paths(store, [Path(path)], views=False)
        dt = time.perf_counter() - t0
    finally:
        shutil.rmtree(store.root, ignore_errors=True)  # timed (or failed): the store is not needed after
    if r.error:
        raise SystemExit(r.error)
print(json.dumps({"s": dt}))
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


def drop_once(path: Path, rate: str | None = None, overlap: bool = True) -> dict:
    """rate: curl's --limit-rate (a network's speed, e.g. 100M for ~1 Gb/s); overlap False: the server
    ingests the upload once it is whole (ACCELTRACE_INGEST_WHILE_UPLOADING=0), the anchor of the ingest
    that reads it as it arrives."""
    with tempfile.TemporaryDirectory(prefix="drop-", ignore_cleanup_errors=True) as d:  # analysis may still write
        os.environ["ACCELTRACE_INGEST_WHILE_UPLOADING"] = "1" if overlap else "0"
        try:
            srv = BenchServer(Path(d))
        finally:
            os.environ.pop("ACCELTRACE_INGEST_WHILE_UPLOADING")
        _settled(srv)
        try:
            t0 = time.perf_counter()
            out = subprocess.run(["curl", "-s", "-X", "POST", f"{srv.url}/api/traces", "-F", f"file=@{path}"]
                                 + (["--limit-rate", rate] if rate else []),
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


_POLL = """
window.__drop = {};
(function loop() {
  const a = window.acceltrace, m = window.__drop, t = document.getElementById("timeline");
  if (!m.tile && a && a.timeline && a.timeline.tiles && a.timeline.tiles.tiles.size > 0) m.tile = Date.now();
  if (m.tile && !m.idle && t && t.dataset.state === "idle") m.idle = Date.now();
  if (!m.idle) requestAnimationFrame(loop);
})();
"""


def _tree_cpu_s(root: int) -> float:
    """CPU seconds (user + system) of process `root` and every descendant, from /proc."""
    stats = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                f = (d / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            stats[int(d.name)] = (int(f[1]), int(f[11]) + int(f[12]))  # ppid, utime + stime
    tree, grew = {root}, True
    while grew:
        more = {pid for pid, (ppid, _) in stats.items() if ppid in tree} - tree
        grew = bool(more)
        tree |= more
    return sum(stats[pid][1] for pid in tree if pid in stats) / os.sysconf("SC_CLK_TCK")


def _settled(srv: BenchServer, timeout_s: float = 30.0) -> None:
    """Until the server's process tree is idle: its workers' ingest processes are started and have done
    their imports (spawned, ~1-2 s each on this VM), as they have by the time a user drops a file."""
    deadline = time.monotonic() + timeout_s
    last = _tree_cpu_s(srv.proc.pid)
    while time.monotonic() < deadline:
        time.sleep(0.5)
        now = _tree_cpu_s(srv.proc.pid)
        if now - last < 0.02:
            return
        last = now


def browser_drop_once(path: Path, browser) -> dict:
    """One drop through the page in Chromium, on a fresh store and server; seconds from the file's choice."""
    with tempfile.TemporaryDirectory(prefix="drop-", ignore_cleanup_errors=True) as d:
        srv = BenchServer(Path(d))
        _settled(srv)
        ctx = browser.new_context(viewport={"width": 1600, "height": 1000})
        try:
            ctx.add_init_script(_POLL)
            pg = ctx.new_page()
            errors: list[str] = []
            pg.on("pageerror", lambda e: errors.append(str(e)))
            pg.goto(srv.url + "/")
            pg.wait_for_load_state("networkidle")
            # an idle list page has loaded the trace page's modules (pages/in_place.js): the drop opens in place
            pg.wait_for_function("() => performance.getEntriesByType('resource')"
                                 ".some(e => e.name.endsWith('/pages/trace.js'))", timeout=30_000)
            with pg.expect_file_chooser() as chooser:
                pg.click("#open-file")
            published: dict = {}
            watch = threading.Thread(target=_watch_ready, args=(srv.url, published), daemon=True)
            watch.start()
            t0 = time.time()
            chooser.value.set_files(str(path))
            pg.wait_for_url("**/t/**", timeout=1_800_000, wait_until="commit")
            t_page = time.time() - t0
            pg.wait_for_function("() => window.__drop && window.__drop.idle", timeout=600_000)
            m = pg.evaluate("() => window.__drop")
            published["stop"] = True
            watch.join(10)
            if errors:
                raise SystemExit(f"{path}: the page failed: {errors[:3]}")
            return {"page": t_page, "published": published.get("t", float("nan")) - t0,
                    "tile": m["tile"] / 1000 - t0, "idle": m["idle"] / 1000 - t0}
        finally:
            ctx.close()
            srv.stop()


def _watch_ready(url: str, out: dict) -> None:
    """out["t"]: when the store's first trace row read `ready` (polled every 20 ms until out["stop"])."""
    while not out.get("stop") and "t" not in out:
        try:
            with urllib.request.urlopen(url + "/api/traces", timeout=5) as r:
                rows = json.load(r)["traces"]
            if rows and rows[0]["status"] == "ready":
                out["t"] = time.time()
        except OSError:
            pass
        time.sleep(0.02)


def browser_rows(a) -> None:
    from playwright.sync_api import sync_playwright

    chromium = "/usr/bin/chromium"
    _header("orjson.loads", "acceltrace ingest", "browser: trace page", "published", "browser: first tile",
            "published -> first tile", "browser: idle", "MB/s to first tile", "first tile / ingest")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=chromium, args=["--no-sandbox", "--disable-gpu",
                                                              "--disable-background-networking"])
        try:
            for path in a.input:
                mb = path.stat().st_size / 1e6
                orj = min(_child("orjson", path) for _ in range(a.repeat))
                cli = min(_child("ingest", path) for _ in range(a.repeat))
                runs = [browser_drop_once(path, b) for _ in range(a.repeat)]
                best = min(runs, key=lambda r: r["tile"])
                print(f"| {path.name} ({mb:.1f}) | {orj:.2f} s | {cli:.2f} s | {best['page']:.2f} s"
                      f" | {best['published']:.2f} s | {best['tile']:.2f} s | {best['tile'] - best['published']:.2f} s"
                      f" | {best['idle']:.2f} s | {mb / best['tile']:.1f} | {best['tile'] / cli:.2f}x |", flush=True)
        finally:
            b.close()


def rate_rows(a) -> None:
    print(f"uploads at curl --limit-rate {a.rate}; first tile answered, from the start of the upload:")
    _header("upload alone", "acceltrace ingest", "ingest after the upload", "ingest as it arrives", "saved")
    for path in a.input:
        mb = path.stat().st_size / 1e6
        cli = min(_child("ingest", path) for _ in range(a.repeat))
        after, during = [], []
        for _ in range(a.repeat):  # alternating, so both see the same machine
            after.append(drop_once(path, a.rate, overlap=False)["tile"])
            during.append(drop_once(path, a.rate, overlap=True)["tile"])
        upload = mb * 1e6 / _rate_bytes(a.rate)
        print(f"| {path.name} ({mb:.1f}) | {upload:.2f} s | {cli:.2f} s | {min(after):.2f} s | {min(during):.2f} s"
              f" | {min(after) - min(during):.2f} s |", flush=True)


def _header(*columns: str) -> None:
    """A markdown table's header: the trace, then `columns` (right-aligned)."""
    print("| trace (MB) | " + " | ".join(columns) + " |")
    print("| --- |" + " ---: |" * len(columns))


def _rate_bytes(rate: str) -> float:
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(rate[-1].upper(), 1)
    return float(rate.rstrip("KkMmGg")) * mult


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--input", action="append", type=Path, required=True)
    ap.add_argument("--repeat", type=int, default=3, help="runs per row; the fastest is shown")
    ap.add_argument("--browser", action="store_true", help="drop through the page in Chromium (see above)")
    ap.add_argument("--rate", help="curl --limit-rate for the upload (e.g. 100M: ~1 Gb/s); the drop rows then"
                                   " show the ingest read as the upload arrives beside the ingest after it")
    a = ap.parse_args()
    if a.browser:
        browser_rows(a)
        return
    if a.rate:
        rate_rows(a)
        return
    _header("orjson.loads", "acceltrace ingest", "drop: response", "drop: published", "drop: first tile",
            "drop MB/s", "drop / ingest", "drop / orjson")
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
