"""Load test: 50 concurrent clients panning across a 10M-slice trace on a real loopback server.

Each client picks a tile group and a level, then pans right one tile at a time, each step
fetching the tile in view and its neighbours (the UI's padded window), like a user dragging
the timeline. Bounded in requests and time; prints throughput, latency percentiles and errors.
The clients share the machine's CPUs with the server (on our 2-core machines that halves
what the server gets).

    python -m bench.load                                   # 10M slices, 50 clients
    python -m bench.load --slices 1M --clients 20 --steps 10
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import time
from pathlib import Path

import httpx
import numpy as np

from bench._server import BenchServer
from bench.gen_synthetic import build_trace
from bench.tiles import OUT, _size
from acceltrace.store.catalog import Store


async def client(c: httpx.AsyncClient, tid: str, meta: dict, rng: np.random.Generator, steps: int,
                 deadline: float, lat: list, errors: list) -> None:
    groups = [g["id"] for g in meta["groups"]]
    top = meta["max_level"]
    level = int(rng.integers(max(0, top - 9), top - 1))
    n_tiles = max(1, -(-meta["duration_ns"] // (1024 << level)))
    group = groups[int(rng.integers(len(groups)))]
    index = int(rng.integers(n_tiles))
    for _ in range(steps):
        if time.monotonic() > deadline:
            return
        for i in (index - 1, index, index + 1):
            if not 0 <= i < n_tiles:
                continue
            t = time.perf_counter()
            try:
                r = await c.get(f"/api/traces/{tid}/tiles/{level}/{i}?group={group}")
                if r.status_code != 200:
                    errors.append(f"{r.status_code} {r.text[:100]}")
            except httpx.HTTPError as e:
                errors.append(repr(e))
            lat.append(time.perf_counter() - t)
        index = (index + 1) % n_tiles


async def run(url: str, tid: str, clients: int, steps: int, max_s: float, seed: int) -> dict:
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(base_url=url, timeout=60, limits=limits) as c:
        meta = (await c.get(f"/api/traces/{tid}")).json()
        lat: list[float] = []
        errors: list[str] = []
        t0 = time.perf_counter()
        deadline = time.monotonic() + max_s
        await asyncio.gather(*(client(c, tid, meta, np.random.default_rng(seed + k), steps, deadline, lat, errors)
                               for k in range(clients)))
        wall = time.perf_counter() - t0
    ms = np.array(lat) * 1000
    return {"requests": len(lat), "wall_s": wall, "rps": len(lat) / wall, "p50": float(np.percentile(ms, 50)),
            "p95": float(np.percentile(ms, 95)), "p99": float(np.percentile(ms, 99)), "errors": errors}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--slices", default="10M")
    ap.add_argument("--clients", type=int, default=50)
    ap.add_argument("--steps", type=int, default=20, help="pan steps per client (3 tiles each)")
    ap.add_argument("--max-seconds", type=float, default=120.0)
    ap.add_argument("--store", type=Path, default=OUT / "store")
    ap.add_argument("--reuse", action="store_true", help="reuse a trace of that size already in --store")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args(argv)
    n = _size(args.slices)
    if not args.reuse and args.store.exists():
        shutil.rmtree(args.store)
    store = Store(args.store)
    existing = [r for r in store.list("ready") if r["name"] == f"bench-{n}"]
    tid = existing[0]["id"] if existing else build_trace(store, n, name=f"bench-{n}", seed=args.seed)[0]
    server = BenchServer(store.root)
    try:
        res = asyncio.run(run(server.url, tid, args.clients, args.steps, args.max_seconds, args.seed))
        rss = server.rss_bytes()
    finally:
        server.stop()
    print(f"{args.clients} clients panning a {n:,}-slice trace: {res['requests']} tile requests in "
          f"{res['wall_s']:.1f} s = {res['rps']:.0f} req/s; latency p50 {res['p50']:.1f} ms, p95 {res['p95']:.1f} ms "
          f"(target <= 100), p99 {res['p99']:.1f} ms; errors {len(res['errors'])}; server peak RSS {rss / 1e6:.0f} MB")
    for e in res["errors"][:5]:
        print("  error:", e)
    return 1 if res["errors"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
