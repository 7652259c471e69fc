"""Tile latency at every level for synthetic traces of 1M and 10M slices (100M with --sizes 100M).

For each size: generate the trace into a store (ingest + LOD time), start a real server,
then per level request TILES_PER_LEVEL random (group, index) tiles once each (cold: the
first request for that tile since the server started, computed from the LOD tables) and
again (repeated: answered from the server's tile cache), and print p50/p95, the largest tile, the
server's peak RSS, and the single-track time next to Perfetto's published per-track mipmap
query (160-220 us).

    python -m bench.tiles                      # 1M and 10M
    python -m bench.tiles --sizes 100M         # long on 2 cores
    python -m bench.tiles --sizes 1M --reuse   # keep the generated traces in bench/out/store
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import time
from pathlib import Path

import httpx
import numpy as np

from bench._server import BenchServer
from bench.gen_synthetic import build_trace
from acceltrace.server.tile_cache import GZIP_LEVEL
from acceltrace.store.catalog import Store

PERFETTO_TRACK_QUERY_US = (160, 220)  # published, google/perfetto commit 7c1d844
OUT = Path(__file__).resolve().parent / "out"


def _size(s: str) -> int:
    s = s.strip().upper()
    mult = {"K": 1_000, "M": 1_000_000, "G": 1_000_000_000}.get(s[-1], 1)
    return int(float(s.rstrip("KMG")) * mult)


def _pct(xs, p):
    return float(np.percentile(np.array(xs) * 1000, p)) if xs else float("nan")


def run_size(store: Store, n: int, tiles_per_level: int, reuse: bool, seed: int) -> dict:
    name = f"bench-{n}"
    existing = [r for r in store.list("ready") if r["name"] == name] if reuse else []
    if existing:
        tid, ingest_s = existing[0]["id"], float("nan")
    else:
        t0 = time.perf_counter()
        tid, info = build_trace(store, n, name=name, seed=seed)
        ingest_s = time.perf_counter() - t0
    for f in store.traces_dir.glob(f"{tid}.tile.*"):  # cold must mean cold: no tile on disk (tiles/disk.py)
        f.unlink()
    server = BenchServer(store.root)
    rows = []
    try:
        with httpx.Client(base_url=server.url, timeout=120) as c:
            t = time.perf_counter()
            meta = c.get(f"/api/traces/{tid}").json()
            groups = [g for g in meta["groups"] if g["lane"] != "counter"]
            # each worker opens the trace once (DuckDB, group counts, names): on fresh connections, a
            # tile past the trace's end (no query, nothing measured below); timed apart from the tiles
            past = f"/api/traces/{tid}/tiles/0/{1 << 40}?group={groups[0]['id']}"
            c.get(past)
            open_s = time.perf_counter() - t
            for _ in range(8):
                with httpx.Client(base_url=server.url, timeout=120) as fresh:
                    fresh.get(past)
            rng = np.random.default_rng(seed)
            single = []
            for level in range(0, meta["max_level"] + 1):
                n_tiles = max(1, -(-meta["duration_ns"] // (1024 << level)))
                picks = [(groups[int(rng.integers(len(groups)))]["id"], int(rng.integers(n_tiles)))
                         for _ in range(tiles_per_level)]
                cold, warm, sizes = [], [], []
                for g, i in picks:
                    url = f"/api/traces/{tid}/tiles/{level}/{i}?group={g}"
                    t = time.perf_counter()
                    r = c.get(url)
                    cold.append(time.perf_counter() - t)
                    assert r.status_code == 200, r.text
                    sizes.append(len(r.content))
                    t = time.perf_counter()
                    c.get(url)
                    warm.append(time.perf_counter() - t)
                ntr = {g["id"]: len(g["track_ids"]) for g in groups}
                single.extend(w / ntr[g] for w, (g, _) in zip(cold, picks))
                c_warm = curl_times(server.url, [f"/api/traces/{tid}/tiles/{level}/{i}?group={g}" for g, i in picks])
                rows.append((level, _pct(cold, 50), _pct(cold, 95), _pct(warm, 50), _pct(warm, 95), max(sizes),
                             _pct(c_warm, 50), _pct(c_warm, 95)))
            rss = server.rss_bytes()
    finally:
        server.stop()
    lod_s = (meta["levels"] or {}).get("lod_build_ms", float("nan")) / 1000
    return {"n": n, "slices": meta["counts"]["slices"], "ingest_s": ingest_s, "lod_s": lod_s, "rows": rows, "rss": rss,
            "open_ms": open_s * 1000,
            "per_track_us": float(np.median(single)) * 1e6, "db_bytes": store.get(tid)["db_bytes"]}


def curl_times(base: str, paths: list[str]) -> list[float]:
    """Seconds per request (curl's own time_total) of a C client asking for these tiles on one
    connection as a browser does (Accept-Encoding: gzip), keeping the bytes as sent: the server's
    answer without a Python client's decoding (httpx inflates a 1.2 MB gzip tile in ~4 ms, most of
    its repeat time at the coarse levels). [] without curl."""
    if not paths or shutil.which("curl") is None:
        return []
    args = ["curl", "-s", "-H", "Accept-Encoding: gzip", "-w", "%{time_total}\\n"]
    for p in paths:
        args += ["-o", "/dev/null", base + p]
    out = subprocess.run(args, capture_output=True, text=True, timeout=120).stdout
    return [float(x) for x in out.split()]


def cpu_per_tile(store: Store, trace_id: str, tiles_per_level: int, seed: int) -> list[tuple[int, float, float, float]]:
    """In-process, no HTTP: CPU ms (all threads) to compute one cold tile as the route does (its
    first depth page, from that page's own queries), median and p95 per level, and the median per
    track of its group (the figure beside Perfetto's per-track mipmap query).

    CPU time, unlike wall time, hardly depends on how many other jobs share the machine.
    """
    from acceltrace.tiles.layout import group_depths
    from acceltrace.tiles.query import LodInfo, build_page

    con = store.connect(trace_id, sides=())
    con.execute("SET threads = 2")
    info = LodInfo.load(con)
    names = [r[0] for r in con.execute("SELECT name FROM lod_names ORDER BY name_id").fetchall()]
    counts = dict((g, (s, i, c)) for g, s, i, c in con.execute(
        "SELECT grp, slices, instants, counters FROM lod_group_counts").fetchall())
    n_tracks = dict(con.execute("SELECT grp, count(*) FROM lod_tracks GROUP BY grp").fetchall())
    groups = [g for g, (s, _, _) in counts.items() if s]
    depths = group_depths(con)
    rng = np.random.default_rng(seed)
    out = []
    for level in range(info.max_level + 1):
        n_tiles = max(1, -(-info.duration_ns // (1024 << level)))
        cpu, per_track = [], []
        for _ in range(tiles_per_level):
            g, i = groups[int(rng.integers(len(groups)))], int(rng.integers(n_tiles))
            empty = frozenset(k for k, v in zip(("instants", "counters"), counts[g][1:]) if not v)
            t = time.process_time()
            build_page(con, info, level, i, g, 0, f"g{g}", empty, names, depths.get(g, 0))  # as the route
            cpu.append(time.process_time() - t)
            per_track.append(cpu[-1] / n_tracks[g])
        out.append((level, _pct(cpu, 50), _pct(cpu, 95), _pct(per_track, 50)))
    con.close()
    return out


def tile_bytes(store: Store, trace_id: str, tiles_per_level: int, seed: int) -> list[tuple]:
    """In-process: bytes of every depth page of random (group, index) tiles per level, as sent
    (identity) and as the server's gzip twin (what a browser asking for gzip gets), next to the unpaged tile (every
    depth of the group in one tile, as before depth pages). Rows: (level, pages, mean, max, mean gz,
    max gz, max unpaged)."""
    from acceltrace.server.tile_cache import gzip_bytes
    from acceltrace.tiles import layout
    from acceltrace.tiles.query import LodInfo, build_pages, build_tile

    con = store.connect(trace_id, sides=())
    con.execute("SET threads = 2")
    info = LodInfo.load(con)
    names = layout.name_dictionary(con, 1 << 20)
    counts = layout.group_counts(con)
    depths = layout.group_depths(con)
    groups = [g for g, (s, _, _) in counts.items() if s]
    rng = np.random.default_rng(seed)
    out = []
    for level in range(info.max_level + 1):
        n_tiles = max(1, -(-info.duration_ns // (1024 << level)))
        sizes, gz, unpaged = [], [], []
        for _ in range(tiles_per_level):
            g, i = groups[int(rng.integers(len(groups)))], int(rng.integers(n_tiles))
            empty = frozenset(k for k, v in zip(("instants", "counters"), counts[g][1:]) if not v)
            for body in build_pages(con, info, level, i, g, f"g{g}", empty, names, depths.get(g, 0)).values():
                sizes.append(len(body))
                gz.append(len(gzip_bytes(body)))  # the server's own twin (server/tile_cache.py)
            unpaged.append(len(build_tile(con, info, level, i, g, f"g{g}", empty, names, page=None)))
        out.append((level, len(sizes), float(np.mean(sizes)), max(sizes), float(np.mean(gz)), max(gz), max(unpaged)))
    con.close()
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1M,10M", help="comma-separated slice counts (e.g. 1M,10M,100M)")
    ap.add_argument("--tiles-per-level", type=int, default=20)
    ap.add_argument("--store", type=Path, default=OUT / "store")
    ap.add_argument("--reuse", action="store_true", help="reuse traces of the same size already in --store")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--cpu", action="store_true", help="also measure CPU per cold tile in-process (no HTTP)")
    args = ap.parse_args(argv)
    if not args.reuse and args.store.exists():
        shutil.rmtree(args.store)
    store = Store(args.store)
    for s in args.sizes.split(","):
        res = run_size(store, _size(s), args.tiles_per_level, args.reuse, args.seed)
        print(f"\n## {res['slices']:,} slices: ingest+LOD {res['ingest_s']:.1f} s (LOD {res['lod_s']:.1f} s),"
              f" file {res['db_bytes'] / 1e6:.0f} MB,"
              f" server peak RSS {res['rss'] / 1e6:.0f} MB; a worker's first open of it {res['open_ms']:.0f} ms"
              " (metadata + first tile; each worker opens it before the tiles below)")
        print("(rep: the same tile again, from the server's cache, by the Python client, which inflates gzip,"
              " and by curl, which keeps the bytes as sent)")
        print(f"{'level':>5} {'cold p50 ms':>12} {'cold p95 ms':>12} {'rep p50 ms':>11} {'rep p95 ms':>11}"
              f" {'curl rep p50':>13} {'curl rep p95':>13} {'max tile B':>11}")
        for level, c50, c95, w50, w95, mx, cw50, cw95 in res["rows"]:
            print(f"{level:>5} {c50:>12.1f} {c95:>12.1f} {w50:>11.1f} {w95:>11.1f} {cw50:>13.2f} {cw95:>13.2f}"
                  f" {mx:>11,}")
        worst_cold = max(r[2] for r in res["rows"])
        worst_rep, worst_curl = max(r[4] for r in res["rows"]), max(r[7] for r in res["rows"])
        print(f"worst cold p95 {worst_cold:.1f} ms (target <= 50); worst repeat p95 {worst_rep:.1f}"
              f" ms Python client, {worst_curl:.2f} ms curl (target <= 5);"
              f" largest tile {max(r[5] for r in res['rows']):,} B")
        lo, hi = PERFETTO_TRACK_QUERY_US
        print(f"single track (cold tile / tracks in group, median): {res['per_track_us']:.0f} us vs Perfetto "
              f"{lo}-{hi} us per track (published) -> ratio {res['per_track_us'] / ((lo + hi) / 2):.1f}x")
        tid = next(r["id"] for r in store.list("ready") if r["name"] == f"bench-{_size(s)}")
        rows = tile_bytes(store, tid, args.tiles_per_level, args.seed)
        print(f"tile bytes (every depth page of {args.tiles_per_level} random tiles per level; gz: the server's"
              f" gzip twin, zlib level {GZIP_LEVEL};"
              " unpaged: all depths of the group in one tile):")
        print(f"{'level':>5} {'pages':>6} {'mean B':>10} {'max B':>10} {'mean gz B':>10} {'max gz B':>10}"
              f" {'max unpaged B':>14}")
        for level, n, mean, mx, mgz, xgz, unp in rows:
            print(f"{level:>5} {n:>6} {mean:>10,.0f} {mx:>10,} {mgz:>10,.0f} {xgz:>10,} {unp:>14,}")
        total = sum(r[1] for r in rows)
        print(f"all levels: {total} pages, mean {sum(r[1] * r[2] for r in rows) / total:,.0f} B, max"
              f" {max(r[3] for r in rows):,} B; gzip mean {sum(r[1] * r[4] for r in rows) / total:,.0f} B, max"
              f" {max(r[5] for r in rows):,} B; unpaged max {max(r[6] for r in rows):,} B")
        if args.cpu:
            tid = next(r["id"] for r in store.list("ready") if r["name"] == f"bench-{_size(s)}")
            rows = cpu_per_tile(store, tid, args.tiles_per_level, args.seed)
            print("CPU per cold tile (its first depth page, as the route builds it), in-process (ms, median / p95): "
                  + "  ".join(f"L{lv} {m:.1f}/{p:.1f}" for lv, m, p, _ in rows))
            per_track = float(np.median([t for *_, t in rows])) * 1000
            print(f"single track in-process (CPU per cold tile / tracks in group, median of the levels' medians):"
                  f" {per_track:.0f} us -> {per_track / ((lo + hi) / 2):.1f}x Perfetto")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
