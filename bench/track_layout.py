"""Track control benchmark: the timeline layout's cost per change, by number of tracks (issue 16).

Runs web/static/timeline/layout.js in Node (the same ES module the page loads) on synthetic tracks
(5 lanes, 97 groups, depths 1..20) and times, per N tracks: building the layout (sort into lanes and
groups), one rebuild of the row list, a filter change, hiding 100 tracks, one reorder by drag
(moveTrack) and restoring an order from the URL (setOrder). The anchor, measured in the same process:
making N plain row objects and sorting N numbers, the least any layout of N tracks must do. These
all run when something changes, never per frame.

    python bench/track_layout.py                 # N = 100, 1 000, 10 000
    python bench/track_layout.py --sizes 100000
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LAYOUT = ROOT / "web" / "static" / "timeline" / "layout.js"

SCRIPT = r"""
import { Layout } from %(layout)s;
const N = Number(process.argv[2]), reps = Math.max(3, Math.round(20000 / N));
const lanes = ["cpu", "driver", "pcie", "eu", "counter"];
const make = () => Array.from({ length: N }, (_, i) => ({ track_id: i, lane: lanes[i %% 5], group_name: `proc ${i %% 97}`,
  name: `thread ${i}`, device: i %% 8, process: String(i %% 97), thread: String(i), sort_key: i, max_depth: i %% 20 }));
const best = (f) => { let b = Infinity; for (let k = 0; k < reps; k++) { const t = performance.now(); f(k); b = Math.min(b, performance.now() - t); } return b; };
const out = {};
out.anchor = best(() => { const rows = []; for (let i = 0; i < N; i++) rows.push({ kind: "track", key: `track:${i}`, y: i * 18, h: 18 });
                          Float64Array.from(rows, (r, i) => (i * 7919) %% N).sort(); });
out.construct = best(() => new Layout(make()));
const l = new Layout(make());
out.build = best(() => l.build());
out.filter = best((k) => l.setFilter(k %% 2 ? "lane:cpu,eu -thread:5 proc:3" : "thread"));
out.hide100 = best(() => { l.setHidden(Array.from({ length: 100 }, (_, i) => (i * 7) %% N)); });
l.setFilter("");
out.move = best((k) => l.moveTrack(l.tracks[(k * 5 + 1) %% N].track_id, l.tracks[0].track_id));
const ord = [...l.userOrder];
out.setOrder = best(() => l.setOrder(ord));
console.log(JSON.stringify(out));
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="100,1000,10000", help="comma-separated track counts")
    args = ap.parse_args()
    node = shutil.which("node")
    if not node:
        print("node not found: this benchmark runs the layout module in Node", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "bench_layout.mjs"
        script.write_text(SCRIPT % {"layout": json.dumps(LAYOUT.as_uri())})
        cols = ["anchor", "construct", "build", "filter", "hide100", "move", "setOrder"]
        print(f"{'tracks':>8} " + " ".join(f"{c + ' ms':>13}" for c in cols) + f" {'build/anchor':>13}")
        for n in (int(x) for x in args.sizes.split(",")):
            r = subprocess.run([node, str(script), str(n)], capture_output=True, text=True, timeout=600)
            if r.returncode != 0:
                print(r.stderr[-2000:], file=sys.stderr)
                return 1
            m = json.loads(r.stdout.strip().splitlines()[-1])
            ratio = m["build"] / m["anchor"] if m["anchor"] > 0 else float("nan")
            print(f"{n:>8} " + " ".join(f"{m[c]:>13.3f}" for c in cols) + f" {ratio:>13.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
