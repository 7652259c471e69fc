"""Live traces (issue 20): event-to-screen latency, the server's CPU while following, finalisation time.

    python bench/live.py [--rates 10000,1000000] [--seconds 8] [--final-events 2000000] [--no-browser]
                         [--via auto|daemon|file] [--screenshot DIR]

For each rate a producer writes through a real tracing daemon (`acceltrace traced`) to a real server
(`acceltrace serve`, following the daemon through ACCELTRACE_SOCKET), and Chromium follows the live
trace's page. The page's hook (window.acceltrace.live.drawn_head_ns: the newest event time drawn) is
recorded on every animation frame; an event at time e was on screen at the first frame whose
drawn_head_ns >= e, so its latency is that frame's wall time minus the wall time the producer stamped
on it (the same host clock). The marked events: on a 50 ms grid, the first event of the finished file
at or after each grid time (none within 5 ms: a span the daemon lost, no sample). The server's
per-delta stamps (GET /api/live/{id} live.stages) split each delta's newest event to screen into
stages. The server's CPU is its process's user+system time over the following window.
Finalisation: a growing file of --final-events events is closed and timed to the trace published and
analysed under the same id (wall and the server's CPU time), against the anchor measured in the same
run: a native `acceltrace ingest` of the very same file, with and without the analysis passes.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from acceltrace.formats import record as R  # noqa: E402
from acceltrace.formats.atrace.follower import AtraceTail  # noqa: E402
from bench._server import BenchServer  # noqa: E402

PY = sys.executable
TARGET_P95_S = 1.0

# `rate` events/s for `seconds` (or `total` events as fast as it goes when rate is 0), in 10 ms batches
# with timestamps spread over each batch's span and never in the future. Through the daemon with the
# Python client's per-event call (t.complete) up to BULK_ABOVE events/s, and its bulk path
# (t.write_records, one RECORD_DTYPE batch per 10 ms) above; with a file path instead of a socket,
# straight into a growing .atrace with the format's writer (the daemon's own writer).
PRODUCER = textwrap.dedent("""
    import sys, time
    import numpy as np
    from acceltrace.formats import record as R
    target, rate, seconds, total = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
    daemon = target.endswith(".sock")
    bulk = not daemon or rate > 50_000 or not rate
    if daemon:
        from acceltrace.collect import client
        t = client.connect(target)
        t.name_process("bench")
        names = np.asarray([t.intern(n) for n in ("step", "gemm", "copy", "wait")], np.uint32)
    else:
        from acceltrace.formats.atrace.writer import AtraceWriter
        w = AtraceWriter(target)
        names = np.asarray([w.intern(n) for n in ("step", "gemm", "copy", "wait")], np.uint32)
    texts = ("step", "gemm", "copy", "wait")
    sent, t_end = 0, time.monotonic() + seconds
    last = time.monotonic_ns()
    while (time.monotonic() < t_end) if rate else (sent < total):
        t0 = time.monotonic_ns()
        # what is due since the last batch (a loaded machine sleeps longer than asked: catch up)
        n = max(1, int(rate * (t0 - last) / 1e9)) if rate else min(50_000, total - sent)
        span = max(1, t0 - last) if rate else 10_000_000
        last = t0
        ts = t0 - span + (np.arange(n, dtype=np.int64) * span) // n
        dur = max(1, (span * 8 // 10) // n)
        if not bulk:
            for i, x in enumerate(ts.tolist()):
                t.complete(texts[i & 3], ts=x, dur=dur)
        else:
            recs = np.zeros(n, R.RECORD_DTYPE)
            recs["kind"], recs["ts"], recs["dur"], recs["tid"] = R.COMPLETE, ts, dur, np.arange(n) % 8
            recs["name"] = names[np.arange(n) % 4]
            if daemon:
                t.write_records(recs)
            else:
                recs["pid"] = 1
                w.add_records(recs)
                w.flush()
            if not rate and sent == 0:
                time.sleep(1.5)  # the server finds the file while it grows: a live capture
        sent += n
        if rate:
            dt = 0.01 - (time.monotonic_ns() - t0) / 1e9
            if dt > 0:
                time.sleep(dt)
    if daemon:
        t.flush(); t.close()
    else:
        w.close()
    print(sent)
""")

RECORDER = """() => { window.__frames = []; const tick = () => {
    const l = window.acceltrace && window.acceltrace.live;
    if (l && l.drawn_head_ns !== null)
      window.__frames.push([performance.timeOrigin + performance.now(), l.drawn_head_ns, l.head_ns]);
    requestAnimationFrame(tick); }; requestAnimationFrame(tick); }"""
READY_POLL_S = 0.2  # the bench's own requests are server CPU too: not too often
MARK_NEAR_NS = 5_000_000  # a marked time needs an event this close after it
STAGES = ("file", "queue", "build", "announce", "push", "draw")


def _json(url: str):
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.loads(r.read())


def _cpu_s(pid: int) -> float:
    f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def _peak_mb(pid: int) -> float:
    """The process's peak resident memory so far (VmHWM), MB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _daemon(tmp: Path):
    sock, out = tmp / "d.sock", tmp / "out.atrace"
    proc = subprocess.Popen([PY, "-m", "acceltrace", "traced", "--socket", str(sock), "--out", str(out),
                             "--buffer-mb", "64"], cwd=ROOT, stdout=open(tmp / "daemon.log", "wb"),
                            stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 30
    while not sock.exists():
        if time.monotonic() > deadline or proc.poll() is not None:
            raise RuntimeError((tmp / "daemon.log").read_text())
        time.sleep(0.02)
    return proc, sock, out


def _live_id(srv: BenchServer, timeout_s: float = 60, any_status: bool = False) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for r in _json(srv.url + "/api/traces")["traces"]:
            if any_status or (r["status"] == "live" and r["counts"].get("slices")):
                return r["id"]
        time.sleep(0.05)
    raise RuntimeError("no live trace appeared")


def _pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))] if xs else float("nan")


def _start(via: str, tmp: Path):
    """The source: a daemon (returns its process and socket) or just the path of a growing file."""
    out = tmp / "out.atrace"
    if via == "daemon":
        dproc, sock, out = _daemon(tmp)
        os.environ["ACCELTRACE_SOCKET"] = str(sock)
        os.environ.pop("ACCELTRACE_LIVE_FILE", None)
        return dproc, str(sock), out
    os.environ["ACCELTRACE_LIVE_FILE"] = str(out)
    os.environ.pop("ACCELTRACE_SOCKET", None)
    return None, str(out), out


def _producer(target: str, rate: float, seconds: float, total: int = 0) -> subprocess.Popen:
    return subprocess.Popen([PY, "-c", PRODUCER, target, str(rate), str(seconds), str(total)], cwd=ROOT,
                            stdout=subprocess.PIPE, env=dict(os.environ, PYTHONPATH=str(ROOT)))


def _event_times(path: Path) -> np.ndarray:
    """The sorted start times (abs ns) of the events in the finished file (read with the format's follower)."""
    tail, parts = AtraceTail(path), []
    while len(recs := tail.poll()[0]):
        parts.append(recs["ts"][recs["kind"] == R.COMPLETE])
    return np.sort(np.concatenate(parts)) if parts else np.zeros(0, np.int64)


def latencies(frames: list, events_rel: np.ndarray, start_abs: int, mono_to_wall_ms: float) -> dict:
    """Event to screen for marked events: every 50 ms from the first drawn frame on (after 1 s), the
    first event at or after that time, kept when one exists within MARK_NEAR_NS (time the daemon lost,
    which has no event, is not a sample). Its latency is the first frame whose drawn head reaches it,
    minus the time the producer stamped on it."""
    lat, lost_marks = [], 0
    first, last = frames[0][1], frames[-1][1]
    j = 0
    for g in range(int(first) + 1_000_000_000, int(last), 50_000_000):
        k = int(np.searchsorted(events_rel, g))
        if k == len(events_rel) or events_rel[k] - g > MARK_NEAR_NS:
            lost_marks += 1
            continue
        e = int(events_rel[k])
        while j < len(frames) and frames[j][1] < e:
            j += 1
        if j == len(frames):
            break
        lat.append((frames[j][0] - (start_abs + e) / 1e6 - mono_to_wall_ms) / 1000)
    return {"latency_p50_s": _pct(lat, 50), "latency_p95_s": _pct(lat, 95), "samples": len(lat),
            "marks_without_event": lost_marks}


def _collect_stages(srv: BenchServer, tid: str, seen: dict) -> None:
    """The server's per-delta stamps (GET /api/live/{id} keeps the newest 50): gathered as the run goes."""
    try:
        for st in _json(f"{srv.url}/api/live/{tid}")["live"].get("stages", []):
            seen[st["announced_ns"]] = st
    except (OSError, KeyError, ValueError):
        pass


def stage_breakdown(stages: list[dict], frames: list, start_abs: int, mono_to_wall_ms: float) -> dict:
    """Per delta, where the time from its newest event to the screen went, in s (median, p95 of each):
    file = the event's time to the server reading it (producer batch, ring, daemon drain, file,
    follower poll), queue = read to its build starting, build, announce = built to the push sent,
    push = sent to the page holding it (head_ns), draw = the page holding it to a frame drawing it
    (tile fetch, decode, draw)."""
    per = {k: [] for k in STAGES + ("total",)}
    fr = [((w - mono_to_wall_ms) * 1e6, d, h) for w, d, h in frames]  # monotonic ns
    for st in stages:
        ev = start_abs + st["hi_ns"]
        got = next((t for t, _, h in fr if h is not None and h >= st["hi_ns"]), None)
        drawn = next((t for t, d, _ in fr if d >= st["hi_ns"]), None)
        if got is None or drawn is None or not fr or st["announced_ns"] < fr[0][0]:
            continue  # pushed before the recorder started, or never drawn
        got = max(got, st["announced_ns"])
        marks = [ev, st["read_ns"], st["start_ns"], st["built_ns"], st["announced_ns"], got, max(drawn, got)]
        for k, a, b in zip(STAGES, marks, marks[1:]):
            per[k].append((b - a) / 1e9)
        per["total"].append((marks[-1] - ev) / 1e9)
    return {k: (_pct(v, 50), _pct(v, 95)) for k, v in per.items()} | {"deltas": len(per["total"])}


def _ready(srv: BenchServer, tid: str) -> str:
    while (status := _json(f"{srv.url}/api/traces/{tid}")["status"]) not in ("ready", "failed"):
        time.sleep(READY_POLL_S)
    return status


def _analysed(srv: BenchServer, tid: str) -> str:
    """Waits for the analysis passes of a ready trace (the findings the open page then shows)."""
    while (state := _json(f"{srv.url}/api/traces/{tid}/analysis")["state"]) not in ("done", "failed"):
        time.sleep(READY_POLL_S)
    return state


def follow(rate: float, seconds: float, browser: bool, via: str, tmp: Path, shot: Path | None = None) -> dict:
    """One capture at `rate` events/s followed by one page: latency, CPU, then finalisation."""
    dproc, target, out = _start(via, tmp)
    (tmp / "store").mkdir()
    srv = BenchServer(tmp / "store")
    res = {"rate": rate, "via": via}
    try:
        prod = _producer(target, rate, seconds)
        tid = _live_id(srv)
        start_abs = int(_json(f"{srv.url}/api/live/{tid}")["start_abs_ns"])
        mono_to_wall_ms = (time.time_ns() - time.monotonic_ns()) / 1e6
        frames, stages = [], {}
        cpu0, w0 = _cpu_s(srv.proc.pid), time.monotonic()
        if browser:
            from playwright.sync_api import sync_playwright

            with sync_playwright() as p:
                b = p.chromium.launch(executable_path="/usr/bin/chromium",
                                      args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"])
                page = b.new_page(viewport={"width": 1400, "height": 900})
                page.goto(f"{srv.url}/t/{tid}")
                page.wait_for_function("() => window.acceltrace && window.acceltrace.live", timeout=30_000)
                page.evaluate(RECORDER)
                while prod.poll() is None:
                    _collect_stages(srv, tid, stages)
                    time.sleep(0.8)
                cpu1, w1 = _cpu_s(srv.proc.pid), time.monotonic()
                time.sleep(2.0)  # the last events reach the screen
                frames = page.evaluate("() => window.__frames")
                if shot is not None:
                    page.screenshot(path=str(shot / f"live-{int(rate)}.png"))
                b.close()
        else:
            prod.wait()
            cpu1, w1 = _cpu_s(srv.proc.pid), time.monotonic()
        res["produced"] = int(prod.stdout.read().strip() or 0)
        try:
            meta = _json(f"{srv.url}/api/live/{tid}")
        except urllib.error.HTTPError:  # a file source is final once its producer closed it
            meta = {}
        res["server_cpu_cores"] = (cpu1 - cpu0) / (w1 - w0)
        res["server_peak_mb"] = _peak_mb(srv.proc.pid)
        if "live" in meta:
            res["segments"], res["events_seen_live"] = meta["live"]["segments"], meta["live"]["events"]
            res["build_ms"] = meta["live"]["build_ms"]
            res["delta_budget"] = meta["live"].get("delta_budget")
            res["not_shown"] = meta["counts"].get("not_shown")
            res["dropped_live"] = meta["counts"].get("dropped_live", 0)
            res["lost"] = meta["live"]["lost_events"]
            for st in meta["live"].get("stages", []):
                stages[st["announced_ns"]] = st
        res["frames"] = len(frames)
        t0 = time.monotonic()  # finalisation of this capture
        if dproc is not None:
            dproc.send_signal(signal.SIGTERM)
            dproc.wait(60)
        if _ready(srv, tid) == "ready":
            _analysed(srv, tid)
        res["finalise_s"] = time.monotonic() - t0  # to the findings
        if frames:
            # how far the drawn head and the pushed head moved while recorded (no sample is possible
            # when the drawn head stands still: the page never had every visible tile up to date)
            res["drawn_moved_s"] = (frames[-1][1] - frames[0][1]) / 1e9
            res["pushed_moved_s"] = ((frames[-1][2] or 0) - (frames[0][2] or 0)) / 1e9
            res.update(latencies(frames, _event_times(out) - start_abs, start_abs, mono_to_wall_ms))
            res["stages"] = stage_breakdown(sorted(stages.values(), key=lambda s: s["announced_ns"]), frames,
                                            start_abs, mono_to_wall_ms)
    finally:
        srv.stop()
        if dproc is not None and dproc.poll() is None:
            dproc.kill()
    return res


def finalisation(n_events: int, tmp: Path) -> dict:
    """A followed capture of n_events (a growing file, written as fast as the writer goes after a
    first batch), from the producer closing it to ready, against native ingest of the same file."""
    _, target, out = _start("file", tmp)
    (tmp / "store").mkdir()
    srv = BenchServer(tmp / "store")
    try:
        t0 = time.monotonic()
        prod = _producer(target, 0, 0, n_events)
        tid = _live_id(srv, 120, any_status=True)  # the row is made live; it may be finalising already
        prod.wait()
        produce_s = time.monotonic() - t0
        t1, cpu0 = time.monotonic(), _cpu_s(srv.proc.pid)
        status = _ready(srv, tid)
        ready_s = time.monotonic() - t1
        analysis = _analysed(srv, tid) if status == "ready" else "-"
        fin_s, fin_cpu = time.monotonic() - t1, _cpu_s(srv.proc.pid) - cpu0
    finally:
        srv.stop()
    native, native_cpu = {}, {}
    for label, analyse in (("ingest", "0"), ("ingest+analyze", "1")):
        store = tmp / f"native-{label}"
        t, ru = time.monotonic(), resource.getrusage(resource.RUSAGE_CHILDREN)
        subprocess.run([PY, "-m", "acceltrace", "--store", str(store), "ingest", str(out)], cwd=ROOT, check=True,
                       stdout=subprocess.DEVNULL,
                       env=dict(os.environ, PYTHONPATH=str(ROOT), ACCELTRACE_AUTO_ANALYZE=analyse))
        native[label] = time.monotonic() - t
        ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)  # CPU time: what a loaded machine does not change much
        native_cpu[label] = (ru1.ru_utime + ru1.ru_stime) - (ru.ru_utime + ru.ru_stime)
    return {"events": n_events, "file_mb": out.stat().st_size / 1e6, "produce_s": produce_s,
            "status": status, "ready_s": ready_s, "analysis": analysis, "finalise_s": fin_s,
            "finalise_cpu_s": fin_cpu, "native": native, "native_cpu": native_cpu}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rates", default="10000,1000000",
                    help="events/s; up to 50000 through the daemon (Python per-event calls), above through a growing file")
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--via", choices=("auto", "daemon", "file"), default="auto",
                    help="auto: the daemon (per-event calls up to 50 k/s, its bulk path above)")
    ap.add_argument("--final-events", type=int, default=2_000_000)
    ap.add_argument("--no-browser", action="store_true")
    ap.add_argument("--screenshot", type=Path, help="a folder: the page at the end of each rate's following")
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-live-") as d:
        for i, rate in enumerate(float(r) for r in args.rates.split(",") if r):
            tmp = Path(d) / f"follow{i}"
            tmp.mkdir()
            via = args.via if args.via != "auto" else "daemon"
            rows.append(follow(rate, args.seconds, not args.no_browser, via, tmp, args.screenshot))
            print("measured:", {k: v for k, v in rows[-1].items() if k != "file"}, flush=True)
        fin = None
        if args.final_events:
            tmp = Path(d) / "final"
            tmp.mkdir()
            fin = finalisation(args.final_events, tmp)
            print("measured:", fin, flush=True)
    print(f"\nmachine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at the end (other work on it counts)")
    print(f"\nLive following ({args.seconds:.0f} s per rate, one viewer; target: p95 <= {TARGET_P95_S} s, server CPU <= 1 core)")
    print(f"{'rate ev/s':>10} {'via':>6} {'produced':>10} {'seen live':>10} {'segments':>8} {'p50 s':>7} {'p95 s':>7} "
          f"{'samples':>7} {'server cores':>12} {'finalise s':>10}")
    for r in rows:
        print(f"{r['rate']:>10.0f} {r['via']:>6} {r['produced']:>10} {r.get('events_seen_live', -1):>10} {r.get('segments', -1):>8} "
              f"{r.get('latency_p50_s', float('nan')):>7.2f} {r.get('latency_p95_s', float('nan')):>7.2f} "
              f"{r.get('samples', 0):>7} {r['server_cpu_cores']:>12.2f} {r['finalise_s']:>10.2f}"
              + (f"  ({r['marks_without_event']} marked times fell in spans the daemon lost)"
                 if r.get("marks_without_event") else ""))
    print("\nWhere the time goes: per delta, its newest event to the screen, s (median / p95); "
          "file = producer, ring, daemon, file, follower")
    print(f"{'rate ev/s':>10} {'deltas':>6} " + " ".join(f"{k:>13}" for k in STAGES + ("total",)) + f" {'delta cap':>9}")
    for r in rows:
        st = r.get("stages")
        if st:
            print(f"{r['rate']:>10.0f} {st['deltas']:>6} "
                  + " ".join(f"{st[k][0]:>6.3f}/{st[k][1]:<6.3f}" for k in STAGES + ("total",))
                  + f" {r.get('delta_budget') or 0:>9}")
    for r in rows:
        seen = r.get("events_seen_live") or 0
        share = 1 - (r.get("not_shown") or 0) / seen if seen else float("nan")
        print(f"{r['rate']:>10.0f} ev/s: lost by the daemon {r.get('lost', 0)}, not drawn live {r.get('not_shown', 0)} "
              f"({share:.0%} of the events read were drawn live); drawn, then left the live view (head over its "
              f"bound, not sealed) {r.get('dropped_live', 0)}; server peak memory {r.get('server_peak_mb', 0):.0f} MB")
    if fin:
        n = fin["native"]
        print(f"\nFinalisation of a {fin['events']:,}-event capture ({fin['file_mb']:.0f} MB, produced in "
              f"{fin['produce_s']:.1f} s): file closed -> published (status {fin['status']}) {fin['ready_s']:.1f} s, "
              f"-> analysed (findings: {fin['analysis']}) {fin['finalise_s']:.1f} s; server CPU {fin['finalise_cpu_s']:.1f} s")
        print(f"  anchor, same file, same run: native ingest {n['ingest']:.1f} s, native ingest + analysis "
              f"{n['ingest+analyze']:.1f} s; ratios published / ingest = {fin['ready_s'] / n['ingest']:.2f}, "
              f"analysed / (ingest + analysis) = {fin['finalise_s'] / n['ingest+analyze']:.2f}")
        c = fin["native_cpu"]
        print(f"  CPU time (less sensitive to the machine's load): finalisation {fin['finalise_cpu_s']:.1f} s, native ingest "
              f"{c['ingest']:.1f} s, native ingest + analysis {c['ingest+analyze']:.1f} s; ratio "
              f"{fin['finalise_cpu_s'] / c['ingest+analyze']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
