"""UI benchmark: open synthetic traces in headless Chromium and time what a user feels.

For each trace it prints time to first complete render (navigation start -> #timeline idle),
settle time after single zoom and pan steps (input -> idle), frame time p50/p95 during a 5 s
continuous pan/zoom (the interval between animation frames, and the CPU cost of our render()),
and the JS heap after that. The anchor, measured in the same run and browser, is a tiny trace:
a viewer whose costs do not grow with the trace shows ratios near 1.

    python bench/ui.py                                   # anchor 10 k + 1 M slices (a few minutes)
    python bench/ui.py --sizes 10000000,100000000        # the issue's sizes (long: generation dominates)
    python bench/ui.py --store /tmp/st --trace-id ID     # an existing trace (anchor still generated)

Targets (issue 4): first render <= 1 s, settle <= 300 ms, frame p95 <= 16.7 ms, heap <= 300 MB.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench._server import BenchServer  # noqa: E402 (needs ROOT on sys.path)

LAUNCH_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
               "--disable-sync", "--no-first-run", "--enable-precise-memory-info"]

# Records, in the page, when #timeline first reaches "idle" (performance.now() is ms since navigation start).
INIT_JS = """
window.__bench = {firstIdle: null};
new MutationObserver(() => {
  const t = document.getElementById('timeline');
  if (t && t.dataset.state === 'idle' && window.__bench.firstIdle === null) window.__bench.firstIdle = performance.now();
}).observe(document, {subtree: true, attributes: true, attributeFilter: ['data-state'], childList: true});
"""

# Apply one view change in the page and resolve with ms until the timeline reports idle again.
SETTLE_JS = """async (kind) => {
  const tl = window.acceltrace.timeline, el = document.getElementById('timeline');
  const t0 = performance.now();
  if (kind === 'zoom_in') tl.view.zoomAbout(tl.view.width_css_px * 0.4, 0.5);
  if (kind === 'zoom_out') tl.view.zoomAbout(tl.view.width_css_px * 0.6, 2.0);
  if (kind === 'pan') tl.view.panPx(tl.view.width_css_px * 0.3);
  await new Promise((res) => {
    const check = () => (el.dataset.state === 'idle' ? res() : requestAnimationFrame(check));
    requestAnimationFrame(check);
  });
  return performance.now() - t0;
}"""

# 5 s of continuous zoom and pan, one step per animation frame; returns frame intervals and render costs.
ANIMATE_JS = """async (seconds) => {
  const tl = window.acceltrace.timeline;
  const intervals = [], costs0 = tl.frameTimes.length;
  const t0 = performance.now();
  let last = t0;
  await new Promise((res) => {
    const step = (now) => {
      intervals.push(now - last); last = now;
      const ph = (now - t0) / 1000;
      tl.view.zoomAbout(tl.view.width_css_px * 0.5, Math.exp(0.03 * Math.sin(ph * 2.1)));
      tl.view.panPx(6 * Math.cos(ph * 1.3));
      if (now - t0 < seconds * 1000) requestAnimationFrame(step); else res();
    };
    requestAnimationFrame(step);
  });
  return {intervals: intervals.slice(1), costs: tl.frameTimes.slice(costs0), tiles: tl.tiles.tiles.size,
          bytes: tl.tiles.bytes_fetched, retained: tl.tiles.retainedBytes()};
}"""


def pct(xs: list[float], p: float) -> float:
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def generate(store: Path, n: int) -> str:
    # as a module from the repository root: bench/ingest.py must not shadow the ingest package
    out = subprocess.run([sys.executable, "-m", "bench.gen_synthetic", "--slices", str(n),
                          "--store", str(store), "--name", f"bench-{n}"], cwd=ROOT, capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"gen_synthetic failed: {out.stderr[-2000:]}")
    return out.stdout.strip().splitlines()[-1]


def measure(browser, base: str, trace_id: str, seconds: float) -> dict:
    ctx = browser.new_context(viewport={"width": 1600, "height": 1000})
    ctx.add_init_script(INIT_JS)
    page = ctx.new_page()
    page.goto(f"{base}/t/{trace_id}")
    page.wait_for_function("() => window.__bench.firstIdle !== null", timeout=120000)
    first_ms = page.evaluate("() => window.__bench.firstIdle")
    # warm the tiles around the start a little as a user would by looking, then measure steps
    settle = {k: [] for k in ("zoom_in", "pan", "zoom_out")}
    for _ in range(3):
        for k in ("zoom_in", "pan", "zoom_out"):
            settle[k].append(page.evaluate(SETTLE_JS, k))
    anim = page.evaluate(ANIMATE_JS, seconds)
    page.wait_for_function("() => document.getElementById('timeline').dataset.state === 'idle'", timeout=60000)
    cdp = ctx.new_cdp_session(page)
    cdp.send("HeapProfiler.collectGarbage")
    cdp.send("Performance.enable")
    heap = {m["name"]: m["value"] for m in cdp.send("Performance.getMetrics")["metrics"]}
    ctx.close()
    all_settle = [v for vs in settle.values() for v in vs]
    return {
        "first_render_ms": first_ms,
        "settle_p50_ms": statistics.median(all_settle), "settle_max_ms": max(all_settle),
        "frame_p50_ms": pct(anim["intervals"], 50), "frame_p95_ms": pct(anim["intervals"], 95),
        "render_p50_ms": pct(anim["costs"], 50), "render_p95_ms": pct(anim["costs"], 95),
        "settle_max_by_step_ms": {k: max(v) for k, v in settle.items()},
        "frames": len(anim["intervals"]), "tiles_cached": anim["tiles"], "tile_mb": anim["bytes"] / 1e6,
        "heap_mb": heap.get("JSHeapUsedSize", float("nan")) / 1e6,
        # tile ArrayBuffers live outside the V8 heap; what the page holds is both together
        "js_mem_mb": heap.get("JSHeapUsedSize", float("nan")) / 1e6 + anim["retained"] / 1e6,
    }


def screenshot(out: Path) -> int:
    """docs/screenshot.png: the A100 Kineto sample, its largest host-to-device copy selected with its chain."""
    sample = ROOT / "sample_traces" / "chrome" / "kineto" / "a100-rank0-memcpy.json.gz"
    from playwright.sync_api import sync_playwright

    store = Path(tempfile.mkdtemp(prefix="ui-shot-"))
    subprocess.run([sys.executable, "-m", "acceltrace.cli", "--store", str(store), "ingest", str(sample)],
                   cwd=ROOT, check=True, capture_output=True)
    server = BenchServer(store)
    try:
        tid = json.loads(urllib.request.urlopen(f"{server.url}/api/traces").read())["traces"][0]["id"]

        def sql(q):
            req = urllib.request.Request(f"{server.url}/api/traces/{tid}/query", data=json.dumps({"sql": q}).encode(),
                                         headers={"Content-Type": "application/json"})
            return json.loads(urllib.request.urlopen(req).read())["rows"]

        start = int(sql("SELECT value FROM trace_meta WHERE key = 'start_ns'")[0][0])
        copy_id, ts, dur = sql(f"""SELECT s.slice_id, s.ts - {start}, s.dur FROM slices s JOIN tracks t USING (track_id)
                                   WHERE t.lane = 'pcie' AND s.direction = 'h2d' ORDER BY s.bytes DESC, s.slice_id LIMIT 1""")[0]
        counts = sql("SELECT t.track_id, t.lane, count(*) FROM slices s JOIN tracks t USING (track_id) GROUP BY ALL")
        by_lane = {}
        for track_id, lane, n in sorted(counts, key=lambda r: -r[2]):
            by_lane.setdefault(lane, []).append(track_id)
        # the busiest CPU thread, both PCIe directions and the two busiest streams, pinned in lane order
        pins = by_lane.get("cpu", [])[:1] + by_lane.get("pcie", [])[:2] + by_lane.get("eu", [])[:2]
        pad = dur * 0.35
        frag = f"#s={int(ts - pad)}&e={int(ts + dur + pad)}&sel={copy_id}&pin={','.join(map(str, pins))}"
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=shutil.which("chromium") or "/usr/bin/chromium", args=LAUNCH_ARGS)
            page = browser.new_page(viewport={"width": 1600, "height": 900})
            page.goto(f"{server.url}/t/{tid}{frag}")
            page.wait_for_function(f"() => window.acceltrace && window.acceltrace.selected === {copy_id}", timeout=60000)
            page.wait_for_function("() => document.getElementById('timeline').dataset.state === 'idle'", timeout=60000)
            page.wait_for_timeout(300)
            page.screenshot(path=str(out))
            browser.close()
    finally:
        server.stop()
        shutil.rmtree(store, ignore_errors=True)
    print(f"wrote {out}")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1000000", help="comma-separated slice counts to generate (default 1000000)")
    ap.add_argument("--anchor", type=int, default=10_000, help="slices in the anchor trace")
    ap.add_argument("--store", type=Path, help="use this store (with --trace-id: that existing trace)")
    ap.add_argument("--trace-id", action="append", default=[], help="existing trace id(s) in --store")
    ap.add_argument("--seconds", type=float, default=5.0, help="length of the continuous pan/zoom")
    ap.add_argument("--json", action="store_true", help="also print one JSON line per trace")
    ap.add_argument("--screenshot", type=Path, metavar="PNG", help="only write the README screenshot (A100 sample)")
    args = ap.parse_args(argv)
    if args.screenshot:
        return screenshot(args.screenshot)
    from playwright.sync_api import sync_playwright

    tmp = None
    store = args.store
    if store is None:
        tmp = Path(tempfile.mkdtemp(prefix="bench-ui-"))
        store = tmp
    store.mkdir(parents=True, exist_ok=True)
    rows: list[tuple[str, str]] = []
    t0 = time.time()
    rows.append((f"anchor {args.anchor:,}", generate(store, args.anchor)))
    for tid in args.trace_id:
        rows.append((f"trace {tid[:8]}", tid))
    if not args.trace_id:
        for n in [int(s) for s in args.sizes.split(",") if s]:
            rows.append((f"synthetic {n:,}", generate(store, n)))
    print(f"# traces ready in {time.time() - t0:.0f} s (store {store})", file=sys.stderr)
    server = BenchServer(store)
    results = []
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=shutil.which("chromium") or "/usr/bin/chromium",
                                        args=LAUNCH_ARGS)
            # one unrecorded visit first: the browser's own start-up (fonts, first process) is not the page's cost
            measure(browser, server.url, rows[0][1], 0.5)
            for label, tid in rows:
                results.append((label, measure(browser, server.url, tid, args.seconds)))
            browser.close()
    finally:
        server.stop()
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    anchor = results[0][1]
    load1, load5, _ = os.getloadavg()
    print(f"# load average {load1:.1f} / {load5:.1f} (1 / 5 min) on {os.cpu_count()} CPUs: a loaded machine slows "
          f"the browser and the server alike; compare rows with the anchor of the same run")
    cols = [("first_render_ms", "first render ms", 1000), ("settle_p50_ms", "settle p50 ms", 300),
            ("settle_max_ms", "settle max ms", 300), ("frame_p50_ms", "frame p50 ms", 16.7),
            ("frame_p95_ms", "frame p95 ms", 16.7), ("render_p95_ms", "render() p95 ms", None),
            ("heap_mb", "JS heap MB", None), ("js_mem_mb", "heap+tiles MB", 300), ("tile_mb", "tiles fetched MB", None)]
    head = f"{'trace':<22}" + "".join(f"{c[1]:>18}" for c in cols)
    print(head)
    print(f"{'target':<22}" + "".join(f"{('<= ' + str(c[2])) if c[2] else '':>18}" for c in cols))
    for label, r in results:
        cells = []
        for key, _, _ in cols:
            ratio = r[key] / anchor[key] if anchor[key] else float("nan")
            cells.append(f"{r[key]:>9.1f} ({ratio:>4.1f}x)" if label != results[0][0] else f"{r[key]:>18.1f}")
        print(f"{label:<22}" + "".join(f"{c:>18}" for c in cells))
        if args.json:
            print(json.dumps({"trace": label, **r}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
