"""Navigation benchmark (issue 16): what a pointer move costs while measuring, and the command palette's filter.

In headless Chromium on each trace, at the whole-trace view and zoomed in 64x over its middle, it times
(synchronous handler time, the page's performance.now()):

- a plain hover move over the tracks (the anchor, same run and page: hit test, tooltip, cursor layer);
- a move while dragging a measurement (the same, plus snapping to slice edges on the track under the
  pointer and a repaint of the nav layer), and the ratio of the two;
- one full timeline frame (update + render of every visible track), for scale;
- the palette's fuzzy filter of the whole action table for one typed query.

The issue names no number for these; the bar is one frame at 60 Hz (16.7 ms) per pointer move.

    python bench/ui_nav.py                       # the A100 Kineto sample and a 1 M-slice synthetic trace
    python bench/ui_nav.py --sizes 0             # the sample only
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench._server import BenchServer  # noqa: E402 (needs ROOT on sys.path)
from bench.ui import LAUNCH_ARGS, generate, pct  # noqa: E402

SAMPLE = ROOT / "sample_traces" / "chrome" / "kineto" / "a100-rank0-memcpy.json.gz"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
MOVES = 300

# Dispatches MOVES synthetic pointer moves across the tracks area at the row of the busiest visible slice track,
# once hovering and once inside a measuring drag; returns per-move ms lists and a full frame's ms.
MOVES_JS = """async (moves) => {
  const tl = window.acceltrace.timeline, cv = tl.canvas, r = cv.getBoundingClientRect();
  const left = tl.width_css_px - tl.view.width_css_px;
  const rows = tl.visibleRows().filter((x) => x.row.kind === 'track' && x.row.track.lane !== 'counter' && !x.pinned);
  let best = rows[0], most = -1;
  for (const x of rows) {
    const n = tl.piecesFor(x.row.track.track_id).reduce((a, p) => a + p.tt.n, 0);
    if (n > most) { most = n; best = x; }
  }
  const y = r.top + best.y + 10;
  const xs = Array.from({length: moves}, (_, i) => r.left + left + 5 + (i * 7919) % Math.max(1, tl.view.width_css_px - 10));
  const ev = (type, x, target) => target.dispatchEvent(new MouseEvent(type, {clientX: x, clientY: y, bubbles: true, button: 0}));
  const time = (fn) => { const t0 = performance.now(); fn(); return performance.now() - t0; };
  const hover = xs.map((x) => time(() => ev('mousemove', x, window)));
  window.acceltrace.nav.run('measure');
  ev('mousedown', xs[0], cv);
  const measuring = xs.map((x) => time(() => ev('mousemove', x, window)));
  ev('mouseup', xs[xs.length - 1], window);
  window.acceltrace.nav.run('measure');
  window.acceltrace.nav.run('measure-clear');
  const frames = Array.from({length: 20}, () => time(() => tl.frame()));
  return {hover, measuring, frames, slices_on_row: most, track: best.row.track.name};
}"""

FILTER_JS = """(queries) => {
  const t0 = performance.now();
  window.acceltrace.nav.run('palette');
  const input = document.querySelector('#palette input');
  for (const q of queries) { input.value = q; input.dispatchEvent(new Event('input')); }
  const ms = (performance.now() - t0) / queries.length;
  input.dispatchEvent(new KeyboardEvent('keydown', {key: 'Escape', bubbles: true}));
  return ms;
}"""


def wait_idle(page) -> None:
    page.wait_for_function("() => document.getElementById('timeline').dataset.state === 'idle'", timeout=60000)


def run_trace(browser, base: str, trace_id: str) -> list[tuple]:
    ctx = browser.new_context(viewport={"width": 1500, "height": 900}, base_url=base)
    page = ctx.new_page()
    page.goto(f"/t/{trace_id}")
    wait_idle(page)
    page.wait_for_function("() => window.acceltrace && window.acceltrace.nav")
    rows = []
    for label, zoom in (("whole trace", None), ("zoomed 64x", 64)):
        if zoom:
            page.evaluate("(z) => { const v = window.acceltrace.timeline.view, c = v.duration_ns / 2, h = v.duration_ns / z / 2;"
                          " v.set(c - h, c + h); }", zoom)
            wait_idle(page)
        r = page.evaluate(MOVES_JS, MOVES)
        rows.append((label, r))
    filter_ms = page.evaluate(FILTER_JS, ["zoom", "zm fit", "bookmark", "toggle overlay", "flow next", "qqq", "measure mode"])
    ctx.close()
    return rows, filter_ms


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="1000000", help="synthetic slice counts (comma-separated; 0: none)")
    args = ap.parse_args(argv)
    from playwright.sync_api import sync_playwright

    store = Path(tempfile.mkdtemp(prefix="bench-ui-nav-"))
    traces = []
    out = subprocess.run([sys.executable, "-m", "acceltrace", "--store", str(store), "ingest", "--json", str(SAMPLE)],
                         cwd=ROOT, capture_output=True, text=True, timeout=600)
    if out.returncode:
        raise SystemExit(out.stderr[-2000:])
    import json
    traces.append(("A100 Kineto sample", json.loads(out.stdout.splitlines()[-1])["id"]))
    for n in (int(x) for x in args.sizes.split(",") if x.strip() and int(x) > 0):
        traces.append((f"synthetic {n:,}", generate(store, n)))
    server = BenchServer(store)
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=LAUNCH_ARGS)
            print(f"{'trace':<22} {'view':<12} {'row slices':>10} {'hover p50/p95 ms':>17} {'measure p50/p95 ms':>19}"
                  f" {'ratio p95':>9} {'frame p50 ms':>12} {'palette ms':>10}")
            for name, tid in traces:
                rows, filter_ms = run_trace(browser, server.url, tid)
                for label, r in rows:
                    h50, h95 = pct(r["hover"], 50), pct(r["hover"], 95)
                    m50, m95 = pct(r["measuring"], 50), pct(r["measuring"], 95)
                    print(f"{name:<22} {label:<12} {r['slices_on_row']:>10,} {h50:>8.3f}/{h95:<8.3f} {m50:>9.3f}/{m95:<9.3f}"
                          f" {m95 / max(h95, 1e-3):>9.2f} {pct(r['frames'], 50):>12.2f} {filter_ms:>10.3f}")
            browser.close()
    finally:
        server.stop()
        shutil.rmtree(store, ignore_errors=True)
    print("bar: a pointer move (p95) within one 60 Hz frame, 16.7 ms; no target named by the issue")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
