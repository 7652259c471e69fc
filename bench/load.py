"""Load test (issue 15): concurrent viewers panning a big trace on `acceltrace serve --workers N`,
next to a bare uvicorn app serving the very same tile bytes from memory, same clients, same run.

1. A store with a synthetic trace (bench/gen_synthetic.py; --slices, default 10M).
2. Panning sessions: each viewer picks a group and a level and pans right one tile at a time,
   fetching the tile in view and its neighbours (the UI's padded window); the URLs they fetch
   are recorded to bench/out/load-urls.txt (the wrk script replays them).
3. Cold and warm single-viewer latency on a fresh server with no tile cache (memory or disk).
4. 50 viewers (--clients) with wrk (Debian's package; skipped with a message when absent) and
   with the Python client (httpx, asyncio), against acceltrace and against the bare app.
   Core use of each server (CPU seconds of all its processes / wall time) is printed.
5. Viewers' tile p95 while a big Chrome trace (bench/gen_chrome.py, --upload-events) is
   uploaded and ingested, against the same viewers without it.

    python -m bench.load                           # 10M slices, 50 viewers, 2 workers
    python -m bench.load --slices 1M --seconds 8 --no-upload
    python -m bench.load --reuse                   # keep the generated trace in bench/out/load-store
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import numpy as np

from bench._server import ROOT, free_port
from bench.gen_synthetic import build_trace
from bench.tiles import OUT, _size
from acceltrace.store.catalog import Store

WRK_SCRIPT = Path(__file__).resolve().parent / "wrk_tiles.lua"
# what Chromium sends with a fetch(): every client here (wrk's script too) asks for tiles this way
BROWSER_ACCEPT_ENCODING = "gzip, deflate, br, zstd"
BROWSER_HEADERS = {"Accept-Encoding": BROWSER_ACCEPT_ENCODING, "Accept": "*/*"}
BARE_APP = """
import pickle, sys
from starlette.applications import Starlette
from starlette.responses import Response
from starlette.routing import Route
TILES = pickle.load(open(sys.argv[1], "rb"))  # url -> (identity bytes, gzip bytes or None)
async def tile(request):
    got = TILES.get(request.url.path + "?" + request.url.query)
    if got is None:
        return Response(b"not recorded", status_code=404)
    plain, gz = got
    headers = {"ETag": '"bare"', "Cache-Control": "public, max-age=31536000, immutable", "Vary": "Accept-Encoding"}
    if gz is not None and "gzip" in request.headers.get("accept-encoding", ""):
        headers["Content-Encoding"] = "gzip"
        return Response(gz, media_type="application/octet-stream", headers=headers)
    return Response(plain, media_type="application/octet-stream", headers=headers)
app = Starlette(routes=[Route("/api/traces/{tid}/tiles/{level}/{index}", tile)])
"""


# -- servers ------------------------------------------------------------------------------
class Proc:
    """A server process tree on loopback; CPU seconds of the parent and all its descendants."""

    def __init__(self, cmd: list[str], port: int, log: Path, env: dict | None = None):
        self.url = f"http://127.0.0.1:{port}"
        self.log = log
        self.proc = subprocess.Popen(cmd, cwd=ROOT, stdout=open(log, "wb"), stderr=subprocess.STDOUT,
                                     env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})})
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            try:
                httpx.get(self.url + "/api/traces/x/tiles/0/0", timeout=2)
                return
            except httpx.HTTPError:
                if self.proc.poll() is not None:
                    raise RuntimeError(log.read_text())
                time.sleep(0.2)
        raise RuntimeError(f"server did not start: {log.read_text()}")

    def pids(self) -> list[int]:
        kids: dict[int, list[int]] = {}
        for d in Path("/proc").iterdir():
            if d.name.isdigit():
                try:
                    ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
                except (OSError, IndexError):
                    continue
                kids.setdefault(ppid, []).append(int(d.name))
        out, todo = [], [self.proc.pid]
        while todo:
            p = todo.pop()
            out.append(p)
            todo.extend(kids.get(p, []))
        return out

    def cpu_s(self) -> float:
        tick = os.sysconf("SC_CLK_TCK")
        total = 0.0
        for p in self.pids():
            try:
                f = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
                total += (int(f[11]) + int(f[12])) / tick  # utime, stime
            except (OSError, IndexError):
                pass
        return total

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def start_acceltrace(store: Path, workers: int, log_name: str) -> Proc:
    port = free_port()
    return Proc([sys.executable, "-m", "acceltrace", "--store", str(store), "serve", "--port", str(port),
                 "--workers", str(workers)], port, store / log_name)


def start_bare(tiles_pickle: Path, workers: int, log: Path) -> Proc:
    port = free_port()
    app_dir = tiles_pickle.parent
    (app_dir / "bare_app.py").write_text(BARE_APP)
    code = ("import sys, uvicorn; sys.path.insert(0, %r); sys.argv[1:] = [%r]; "
            "uvicorn.run('bare_app:app', host='127.0.0.1', port=%d, workers=%d, log_level='warning', "
            "access_log=False)") % (str(app_dir), str(tiles_pickle), port, workers)
    # the workers import bare_app themselves: pass the pickle path through argv of the parent
    return Proc([sys.executable, "-c", code], port, log, env={"PYTHONPATH": str(app_dir)})


# -- panning sessions -----------------------------------------------------------------------
def panning_urls(tid: str, meta: dict, viewers: int, steps: int, seed: int) -> list[list[str]]:
    """Per viewer, the tile URLs a user panning right fetches (view + both neighbours per step), every
    depth page of the group (a screen of this trace's 13-deep tracks shows rows of all of them)."""
    groups = [g["id"] for g in meta["groups"]]
    top = meta["max_level"]
    per_page = (meta.get("levels") or {}).get("depth_page")
    deepest: dict[str, int] = {}
    for t in meta["tracks"]:
        deepest[t["group"]] = max(deepest.get(t["group"], 0), t.get("max_depth") or 0)
    out = []
    for k in range(viewers):
        rng = np.random.default_rng(seed + k)
        level = int(rng.integers(max(0, top - 9), max(1, top - 1)))
        n_tiles = max(1, -(-meta["duration_ns"] // (1024 << level)))
        group = groups[int(rng.integers(len(groups)))]
        index = int(rng.integers(n_tiles))
        urls = []
        for _ in range(steps):
            for i in (index - 1, index, index + 1):
                if 0 <= i < n_tiles:
                    base = f"/api/traces/{tid}/tiles/{level}/{i}?group={group}"
                    if not per_page:
                        urls.append(base)
                        continue
                    for page in range(deepest.get(group, 0) // per_page + 1):
                        urls.append(base + (f"&page={page}" if page else ""))
            index = (index + 1) % n_tiles
        out.append(urls)
    return out


async def _viewer(c: httpx.AsyncClient, urls: list[str], deadline: float, lat: list, errors: list) -> None:
    i = 0
    while time.monotonic() < deadline:
        url = urls[i % len(urls)]
        i += 1
        t = time.perf_counter()
        try:
            r = await c.get(url)
            if r.status_code != 200:
                errors.append(f"{r.status_code} {url}")
        except httpx.HTTPError as e:
            errors.append(repr(e))
        lat.append(time.perf_counter() - t)


def python_client(url: str, sessions: list[list[str]], seconds: float) -> dict:
    async def run():
        limits = httpx.Limits(max_connections=len(sessions), max_keepalive_connections=len(sessions))
        async with httpx.AsyncClient(base_url=url, timeout=60, limits=limits, headers=BROWSER_HEADERS) as c:
            lat, errors = [], []
            t0 = time.perf_counter()
            deadline = time.monotonic() + seconds
            await asyncio.gather(*(_viewer(c, s, deadline, lat, errors) for s in sessions))
            return lat, errors, time.perf_counter() - t0

    lat, errors, wall = asyncio.run(run())
    ms = np.array(lat) * 1000
    return {"requests": len(lat), "rps": len(lat) / wall, "p50": float(np.percentile(ms, 50)),
            "p95": float(np.percentile(ms, 95)), "errors": len(errors), "first_error": errors[0] if errors else ""}


def wrk_client(url: str, urls_file: Path, clients: int, seconds: float) -> dict | None:
    wrk = shutil.which("wrk")
    if wrk is None:
        return None
    out = subprocess.run([wrk, "-t2", f"-c{clients}", f"-d{max(1, int(seconds))}s", "--timeout", "10s",
                          "-s", str(WRK_SCRIPT), url, "--", str(urls_file)],
                         capture_output=True, text=True, timeout=seconds + 60)
    line = [x for x in out.stdout.splitlines() if x.startswith("RESULT ")]
    if not line:
        raise RuntimeError(f"wrk said: {out.stdout}\n{out.stderr}")
    return json.loads(line[-1][len("RESULT "):])


def timed(server: Proc, fn, *args) -> tuple[dict | None, float]:
    c0, t0 = server.cpu_s(), time.monotonic()
    res = fn(*args)
    return res, (server.cpu_s() - c0) / (time.monotonic() - t0)


def cold_warm(url: str, urls: list[str], n: int) -> tuple[list[float], list[float]]:
    """One viewer: each of n distinct tiles (view positions: page 0 of a group's tile, what comes
    first) once (cold: nothing cached anywhere), then again (warm), asking as a browser does."""
    uniq = [u for u in dict.fromkeys(urls) if "&page=" not in u][:n]
    cold, warm = [], []
    with httpx.Client(base_url=url, timeout=60, headers=BROWSER_HEADERS) as c:
        for out in (cold, warm):
            for u in uniq:
                t = time.perf_counter()
                r = c.get(u)
                out.append((time.perf_counter() - t) * 1000)
                assert r.status_code == 200, r.text
    return cold, warm


def record_tiles(url: str, flat: list[str]) -> dict[str, tuple[bytes, bytes | None]]:
    """Every recorded URL's bytes as sent: identity, and gzip as a browser gets it once the server's
    twin exists (asked again until it does, or three rounds)."""
    tiles: dict[str, list] = {}
    with httpx.Client(base_url=url, timeout=60) as c:
        for u in dict.fromkeys(flat):
            tiles[u] = [c.get(u, headers={"Accept-Encoding": "identity"}).content, None]
        for _ in range(3):
            for u, got in tiles.items():
                if got[1] is not None:
                    continue
                with c.stream("GET", u, headers=BROWSER_HEADERS) as r:
                    raw = b"".join(r.iter_raw())
                    if r.headers.get("content-encoding") == "gzip":
                        got[1] = raw
            if all(g[1] is not None or len(g[0]) < 2048 for g in tiles.values()):
                break
            time.sleep(2)
    return {u: (p, g) for u, (p, g) in tiles.items()}


def warm_memory(url: str, flat: list[str], rounds: int = 8) -> None:
    """Every recorded tile asked for, as a browser asks, until every one that has a gzip twin comes
    gzip (each worker's memory then holds it, and no twin is still being compressed in the
    background when a measured run starts), at most `rounds` rounds."""
    todo = list(dict.fromkeys(flat))
    with httpx.Client(base_url=url, timeout=60, headers=BROWSER_HEADERS) as c:
        for _ in range(rounds):
            plain = []
            for u in todo:
                with c.stream("GET", u) as r:
                    size = len(b"".join(r.iter_raw()))
                    if r.headers.get("content-encoding") != "gzip" and size >= 2048:
                        plain.append(u)
            if not plain:
                break
            todo = list(dict.fromkeys(flat))  # another full round: the other worker's memory too
            time.sleep(1)


def clear_tile_cache(store: Store, tid: str) -> None:
    for p in store.traces_dir.glob(f"{tid}.tile.*"):
        p.unlink()


def upload_and_ingest(url: str, path: Path, done: threading.Event, out: dict) -> None:
    """Upload `path` from a process of its own (the Python viewers must not share its GIL), then
    wait for the ingest to finish."""
    t0 = time.monotonic()
    code = ("import httpx, sys; f = open(sys.argv[2], 'rb'); "
            "r = httpx.post(sys.argv[1] + '/api/traces', params={'name': sys.argv[3]}, content=f, timeout=600); "
            "print(r.text)")
    up = subprocess.run([sys.executable, "-c", code, url, str(path), path.name], capture_output=True, text=True,
                        timeout=900)
    with httpx.Client(base_url=url, timeout=600) as c:
        try:
            tid = json.loads(up.stdout).get("id")
        except ValueError:
            tid, out["status"] = None, (up.stdout + up.stderr)[-300:]
        out["upload_s"] = time.monotonic() - t0
        while tid and c.get(f"/api/traces/{tid}").json().get("status") == "ingesting":
            time.sleep(0.5)
        out["ingest_s"] = time.monotonic() - t0
        if tid:
            out["status"] = c.get(f"/api/traces/{tid}").json().get("status")
    done.set()


RUNAWAY = "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) SELECT count(*) FROM r"


def query_storm(url: str, tid: str, n: int, stop: threading.Event, out: dict) -> None:
    """n clients (each its own loopback address, so the per-client limit does not shield the
    server) sending 10-second runaway queries back to back, honouring 429/503."""
    def one(k: int):
        transport = httpx.HTTPTransport(local_address=f"127.0.0.{2 + k % 250}")
        with httpx.Client(base_url=url, timeout=60, transport=transport) as c:
            while not stop.is_set():
                r = c.post(f"/api/traces/{tid}/query", json={"sql": RUNAWAY})
                code = r.json().get("error", {}).get("code", r.status_code) if r.status_code != 200 else 200
                out[code] = out.get(code, 0) + 1
                if r.status_code in (429, 503):
                    stop.wait(float(r.headers.get("retry-after", 1)))

    threads = [threading.Thread(target=one, args=(k,), daemon=True) for k in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def fmt(name: str, r: dict | None, cores: float, anchor: dict | None = None) -> str:
    if r is None:
        return f"  {name:<34} (wrk not installed: apt-get install wrk)"
    s = (f"  {name:<34} {r['rps']:8.0f} req/s  p50 {r['p50']:7.1f} ms  p95 {r['p95']:7.1f} ms  "
         f"cores {cores:4.2f}  errors {r['errors']}")
    if anchor:
        s += f"   = {r['rps'] / anchor['rps']:.2f}x throughput, {r['p95'] / max(anchor['p95'], 1e-9):.2f}x p95 of bare"
    return s


def viewers(args, server: Proc, tid: str, flat: list[str], sessions: list, urls_file: Path, work: Path) -> None:
    """Cold and warm single-viewer latency, then 50 viewers on acceltrace and on the bare app."""
    cold, warm = cold_warm(server.url, flat, args.cold_tiles)
    print(f"one viewer, {len(cold)} distinct tiles: cold p50 {np.percentile(cold, 50):.1f} ms p95 "
          f"{np.percentile(cold, 95):.1f} ms (target <= 50), warm p50 {np.percentile(warm, 50):.2f} ms p95 "
          f"{np.percentile(warm, 95):.2f} ms (target <= 5)")
    # every recorded tile once, so the bare app can serve the very same bytes
    import pickle

    tiles = record_tiles(server.url, flat)
    sizes = np.array([len(p) for p, _ in tiles.values()])
    wire = np.array([len(g if g is not None else p) for p, g in tiles.values()])
    print(f"{len(tiles)} distinct tiles recorded: mean {sizes.mean() / 1e3:.0f} kB, max {sizes.max() / 1e6:.2f} MB;"
          f" as sent with Accept-Encoding: {BROWSER_ACCEPT_ENCODING}: mean {wire.mean() / 1e3:.0f} kB, max"
          f" {wire.max() / 1e6:.2f} MB ({sum(g is not None for _, g in tiles.values())} gzip)")
    pkl = work / "tiles.pkl"
    pkl.write_bytes(pickle.dumps(tiles))
    rows = {}
    # every worker's memory holds the tiles the viewers pan over, as in a team's steady state (the
    # recording pass above reached one worker per tile): a wrk pass of its own first, shown apart
    if args.warmup:
        rows["acceltrace wrk, warm-up"] = timed(server, wrk_client, server.url, urls_file, args.clients, args.warmup)
    rows["acceltrace wrk"] = timed(server, wrk_client, server.url, urls_file, args.clients, args.seconds)
    rows["acceltrace python"] = timed(server, python_client, server.url, sessions, args.seconds)
    server.stop()
    bare = start_bare(pkl, args.workers, work / "bare.log")
    try:
        if args.warmup:  # the same for the bare app (its dict is warm; this warms the process itself)
            rows["bare wrk, warm-up"] = timed(bare, wrk_client, bare.url, urls_file, args.clients, args.warmup)
        rows["bare wrk"] = timed(bare, wrk_client, bare.url, urls_file, args.clients, args.seconds)
        rows["bare python"] = timed(bare, python_client, bare.url, sessions, args.seconds)
    finally:
        bare.stop()
    print(f"{args.clients} viewers panning (warm caches after the recording pass"
          + (f" and a {args.warmup:g} s wrk warm-up pass, shown first" if args.warmup else "") + "):")
    if args.warmup:
        b, a = rows["bare wrk, warm-up"], rows["acceltrace wrk, warm-up"]
        print(fmt("bare uvicorn app, wrk warm-up", b[0], b[1]))
        print(fmt("acceltrace serve, wrk warm-up", a[0], a[1], b[0]))
    for client in ("wrk", "python"):
        b = rows[f"bare {client}"]
        print(fmt(f"bare uvicorn app, {client}", b[0], b[1]))
        a = rows[f"acceltrace {client}"]
        print(fmt(f"acceltrace serve, {client}", a[0], a[1], b[0]))
    a, b = rows["acceltrace wrk"][0], rows["bare wrk"][0]
    if a and b:
        print(f"  targets (wrk): p95 <= 1.5x bare: {a['p95'] / b['p95']:.2f}x; throughput >= 0.8x: "
              f"{a['rps'] / b['rps']:.2f}x; p95 <= 100 ms: {a['p95']:.1f} ms")


def storm_main(url: str, tid: str, n: int, seconds: float) -> int:
    stop, codes = threading.Event(), {}
    th = threading.Thread(target=query_storm, args=(url, tid, n, stop, codes), daemon=True)
    th.start()
    time.sleep(seconds)
    stop.set()
    th.join(30)
    print(json.dumps({str(k): v for k, v in codes.items()}))
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--storm"]:
        return storm_main(argv[1], argv[2], int(argv[3]), float(argv[4]))
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--slices", default="10M")
    ap.add_argument("--clients", type=int, default=50)
    ap.add_argument("--workers", type=int, default=len(os.sched_getaffinity(0)))
    ap.add_argument("--steps", type=int, default=20, help="pan steps recorded per viewer (3 tiles each)")
    ap.add_argument("--seconds", type=float, default=15.0, help="length of each load run")
    ap.add_argument("--cold-tiles", type=int, default=60)
    ap.add_argument("--warmup", type=float, default=5.0,
                    help="seconds of an unmeasured wrk pass before each measured one (0: none)")
    ap.add_argument("--store", type=Path, default=OUT / "load-store")
    ap.add_argument("--reuse", action="store_true", help="reuse a trace of that size already in --store")
    ap.add_argument("--no-upload", action="store_true", help="skip the upload-during-load run")
    ap.add_argument("--upload-events", type=int, default=1_500_000, help="events of the uploaded Chrome trace")
    ap.add_argument("--queries", type=int, default=40, help="clients of the runaway-query run (0: skip it)")
    ap.add_argument("--only-queries", action="store_true", help="only the runaway-query run")
    ap.add_argument("--only-upload", action="store_true", help="only the upload-during-load run")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args(argv)
    n = _size(args.slices)
    if not args.reuse and args.store.exists():
        shutil.rmtree(args.store)
    store = Store(args.store)
    have = [r for r in store.list("ready") if r["name"] == f"bench-{n}"]
    tid = have[0]["id"] if have else build_trace(store, n, name=f"bench-{n}", seed=args.seed)[0]
    clear_tile_cache(store, tid)
    work = Path(tempfile.mkdtemp(prefix="acceltrace-load-"))
    print(f"load: {n:,}-slice trace, {args.clients} viewers, {args.workers} workers, {args.seconds:g} s per run, "
          f"{os.cpu_count()} CPUs shared by servers and clients")

    server = start_acceltrace(store.root, args.workers, "load-server.log")
    try:
        meta = httpx.get(f"{server.url}/api/traces/{tid}", timeout=60).json()
        sessions = panning_urls(tid, meta, args.clients, args.steps, args.seed)
        flat = [u for s in sessions for u in s]
        urls_file = OUT / "load-urls.txt"
        urls_file.write_text("\n".join(flat) + "\n")
        if not (args.only_queries or args.only_upload):
            viewers(args, server, tid, flat, sessions, urls_file, work)
    finally:
        server.stop()

    if args.queries and not args.only_upload:
        server = start_acceltrace(store.root, args.workers, "load-query-server.log")
        try:
            python_client(server.url, sessions, 3)  # warm this server's memory cache
            quiet, qcores = timed(server, python_client, server.url, sessions, args.seconds)
            # the query clients run in a process of their own: they must not share the viewers' GIL
            storm = subprocess.Popen([sys.executable, "-m", "bench.load", "--storm", server.url, tid,
                                      str(args.queries), str(args.seconds + 4)], cwd=ROOT, stdout=subprocess.PIPE,
                                     text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
            time.sleep(3)
            busy, bcores = timed(server, python_client, server.url, sessions, args.seconds)
            codes = json.loads(storm.communicate(timeout=120)[0].strip().splitlines()[-1])
        finally:
            server.stop()
        print(f"viewers while {args.queries} clients send 10 s runaway queries back to back (answers: {codes}):")
        print(fmt("without queries, python", quiet, qcores))
        print(fmt("during the queries, python", busy, bcores))
        print(f"  tile throughput {busy['rps'] / quiet['rps']:.2f}x, p95 {busy['p95'] / quiet['p95']:.2f}x of without")

    if not args.no_upload:
        big = OUT / f"upload-{args.upload_events}.json"
        if not big.exists():
            subprocess.run([sys.executable, str(ROOT / "bench/gen_chrome.py"), "--events", str(args.upload_events),
                            "--out", str(big)], check=True, cwd=ROOT)
        for r in store.list():  # an earlier run's upload: the same bytes would be found, not ingested
            if r["name"] != f"bench-{n}":
                store.remove(r["id"])
        server = start_acceltrace(store.root, args.workers, "load-upload-server.log")
        try:
            warm_memory(server.url, flat)  # every tile once per worker's memory, as the viewers had it
            quiet = {"wrk": timed(server, wrk_client, server.url, urls_file, args.clients, args.seconds),
                     "python": timed(server, python_client, server.url, sessions, args.seconds)}
            done, info = threading.Event(), {}
            th = threading.Thread(target=upload_and_ingest, args=(server.url, big, done, info), daemon=True)
            t_up = time.monotonic()
            th.start()
            busy = {"wrk": timed(server, wrk_client, server.url, urls_file, args.clients, args.seconds),
                    "python": timed(server, python_client, server.url, sessions, args.seconds)}
            window_s = time.monotonic() - t_up
            done.wait(900)
            # the same runs again once the ingest is done: the machine's load drifts (other jobs),
            # so "without" is the mean of before and after, and the drift is printed
            after = {"wrk": timed(server, wrk_client, server.url, urls_file, args.clients, args.seconds),
                     "python": timed(server, python_client, server.url, sessions, args.seconds)}
        finally:
            server.stop()
        print(f"viewers during an upload + ingest of {big.stat().st_size / 1e6:.0f} MB "
              f"({args.upload_events:,} events; upload {info.get('upload_s', 0):.1f} s, "
              f"ingest done after {info.get('ingest_s', 0):.1f} s, {info.get('status')}; both measured runs"
              f" within the first {window_s:.0f} s):")
        for client in ("wrk", "python"):
            if quiet[client][0] is None:
                continue
            print(fmt(f"before the upload, {client}", *quiet[client]))
            print(fmt(f"during upload + ingest, {client}", *busy[client]))
            print(fmt(f"after the ingest, {client}", *after[client]))
            q, b, a = quiet[client][0], busy[client][0], after[client][0]
            base = (q["p95"] + a["p95"]) / 2
            print(f"  target ({client}): p95 rises <= 25 %: {100 * (b['p95'] / base - 1):+.0f} % against the mean of"
                  f" before and after (before -> after drift {100 * (a['p95'] / q['p95'] - 1):+.0f} %)")
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
