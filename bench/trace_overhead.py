"""Cost of tracing, side by side: C client, Python client, LTTng-UST, VizTracer; daemon drain; loss.

    .venv/bin/python bench/trace_overhead.py            # short default run (~1 min)
    .venv/bin/python bench/trace_overhead.py --events 2000000 --drain-mb 64

Every number comes from this run on this machine; per-event costs are CPU time of the traced
thread (this machine is shared and oversubscribed, so wall time would count other processes'
time slices); ratios compare against anchors measured in the same run (LTTng-UST for C, VizTracer for Python). LTTng-UST needs the Debian packages
liblttng-ust-dev and lttng-tools; VizTracer is looked for in /tmp/vtvenv (pip install viztracer).
Missing anchors print n/a with the reason.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from acceltrace.collect import client  # noqa: E402
from acceltrace.formats import record as R  # noqa: E402
from acceltrace.formats import ring as RG  # noqa: E402
from acceltrace.formats.atrace.reader import AtraceReader
from acceltrace.collect.traced.protocol import ctl  # noqa: E402

PY = sys.executable
VIZ_PY = Path(os.environ.get("VIZTRACER_PYTHON", "/tmp/vtvenv/bin/python"))


class Daemon:
    def __init__(self, tmp: Path, mode="discard", buffer_mb=64, tag="d"):
        self.sock, self.out = tmp / f"{tag}.sock", tmp / f"{tag}.atrace"
        self.proc = subprocess.Popen([PY, "-m", "acceltrace", "traced", "--socket", str(self.sock), "--out",
                                      str(self.out), "--buffer-mb", str(buffer_mb), "--mode", mode],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT)
        for _ in range(500):
            if self.sock.exists():
                return
            time.sleep(0.02)
        raise RuntimeError("daemon did not start")

    def stop(self) -> AtraceReader:
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(60)
        return AtraceReader.open(self.out)


def pow2(n: int) -> int:
    return 1 << (max(1024, n) - 1).bit_length()


# -- C -----------------------------------------------------------------------------------------------
def bench_c(tmp: Path, n: int) -> dict:
    cc = shutil.which("cc") or shutil.which("gcc")
    if not cc:
        return {"na": "no C compiler"}
    exe = tmp / "trace_bench"
    subprocess.run([cc, "-O2", "-pthread", "-I", str(ROOT / "collect/client"), str(ROOT / "bench/c/trace_bench.c"),
                    "-o", str(exe)], check=True)
    d = Daemon(tmp, buffer_mb=max(64, (pow2(2 * n + 2000) * 64 >> 20) + 2), tag="c")
    try:
        env = {**os.environ, "ACCELTRACE_SOCKET": str(d.sock), "ACCELTRACE_RING_RECORDS": str(pow2(2 * n + 2000))}
        out = subprocess.run([str(exe), str(n)], env=env, capture_output=True, text=True, check=True).stdout
    finally:
        r = d.stop()
    res = json.loads(out)
    res["lost"] = r.lost_events()[0]
    res["written"] = len(r.read_all()[0])
    return res


LTTNG_TP = """
#undef TRACEPOINT_PROVIDER
#define TRACEPOINT_PROVIDER acceltrace_bench
#undef TRACEPOINT_INCLUDE
#define TRACEPOINT_INCLUDE "./tp.h"
#if !defined(TP_H) || defined(TRACEPOINT_HEADER_MULTI_READ)
#define TP_H
#include <lttng/tracepoint.h>
TRACEPOINT_EVENT(acceltrace_bench, span,
    TP_ARGS(int64_t, ts, int64_t, dur, uint64_t, corr, uint32_t, name),
    TP_FIELDS(ctf_integer(int64_t, ts, ts) ctf_integer(int64_t, dur, dur)
              ctf_integer(uint64_t, corr, corr) ctf_integer(uint32_t, name, name)))
#endif
#include <lttng/tracepoint-event.h>
"""
LTTNG_MAIN = """
#define TRACEPOINT_DEFINE
#define TRACEPOINT_CREATE_PROBES
#include "tp.h"
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <x86intrin.h>
static inline int64_t now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1000000000LL + t.tv_nsec; }
static inline int64_t cpu_ns(void) { struct timespec t; clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t); return t.tv_sec * 1000000000LL + t.tv_nsec; }
int main(int argc, char **argv) {
    long n = atol(argv[1]);
    for (long i = 0; i < 1000; i++) tracepoint(acceltrace_bench, span, now(), 1, 0, 1);
    volatile unsigned long sink = 0;
    int64_t t0 = cpu_ns();
    /* the span's own timestamps come from the TSC, as in our C client: only the recording differs */
    for (long i = 0; i < n; i++) { int64_t a = __rdtsc(); sink += i; tracepoint(acceltrace_bench, span, a, __rdtsc() - a, i + 1, 1); }
    int64_t t1 = cpu_ns();
    printf("{\\"ns_per_span\\": %.2f}\\n", (double)(t1 - t0) / n);
    return 0;
}
"""


def bench_lttng(tmp: Path, n: int) -> dict:
    if not (list(Path("/usr/include").glob("lttng/tracepoint.h"))
            or list(Path("/usr/include").glob("*/lttng/tracepoint.h"))):
        return {"na": "liblttng-ust-dev is not installed (apt-get install -y liblttng-ust-dev lttng-tools)"}
    if not shutil.which("lttng"):
        return {"na": "lttng-tools is not installed"}
    d = tmp / "lttng"
    d.mkdir(exist_ok=True)
    (d / "tp.h").write_text(LTTNG_TP)
    (d / "main.c").write_text(LTTNG_MAIN)
    exe = d / "lt_bench"
    r = subprocess.run(["gcc", "-O2", "-I", str(d), str(d / "main.c"), "-o", str(exe), "-llttng-ust", "-ldl"],
                       capture_output=True, text=True, cwd=d)
    if r.returncode:
        return {"na": f"tracepoint provider does not compile: {r.stderr.strip()[:200]}"}
    home = d / "home"
    home.mkdir(exist_ok=True)
    env = {**os.environ, "LTTNG_HOME": str(home)}
    sessiond = subprocess.Popen(["lttng-sessiond", "--no-kernel"], env=env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
    try:
        time.sleep(1.5)
        session = f"atbench{os.getpid()}"
        for cmd in (["create", session, f"--output={d / 'trace'}"],
                    ["enable-channel", "-u", "ch", "--subbuf-size=4M", "--num-subbuf=8"],
                    ["enable-event", "-u", "acceltrace_bench:span", "-c", "ch"], ["start"]):
            c = subprocess.run(["lttng", *cmd], env=env, capture_output=True, text=True)
            if c.returncode:
                return {"na": f"lttng {' '.join(cmd[:2])} failed: {(c.stderr or c.stdout).strip()[:200]}"}
        out = subprocess.run([str(exe), str(n)], env=env, capture_output=True, text=True, timeout=300)
        subprocess.run(["lttng", "stop"], env=env, capture_output=True)
        stats = subprocess.run(["lttng", "list", session, "-u"], env=env, capture_output=True, text=True).stdout
        subprocess.run(["lttng", "destroy", session], env=env, capture_output=True)
        if out.returncode:
            return {"na": f"benchmark failed: {out.stderr.strip()[:200]}"}
        res = json.loads(out.stdout)
        lost = [ln.strip() for ln in stats.splitlines() if "Discarded" in ln or "Lost" in ln]
        res["lost_report"] = "; ".join(lost) or "none reported"
        return res
    finally:
        sessiond.send_signal(signal.SIGTERM)
        try:
            sessiond.wait(10)
        except subprocess.TimeoutExpired:
            sessiond.kill()


# -- Python --------------------------------------------------------------------------------------------
def bench_python(tmp: Path, n: int, threads: int, pure: bool = False) -> dict:
    """`with t.span("op")` through the daemon; pure=True forces the pure-Python path."""
    from acceltrace.collect.client import tracer

    d = Daemon(tmp, buffer_mb=max(64, (pow2(n + 1000) * 64 * threads >> 20) + 2), tag=f"py{threads}{pure}")
    old = os.environ.pop(tracer.PURE_PYTHON_ENV, None)
    if pure:
        os.environ[tracer.PURE_PYTHON_ENV] = "1"
    try:
        t = client.connect(d.sock, ring_records=pow2(n + 1000))
        compiled = t.compiled

        cpu = []

        def work():
            for _ in range(1000):
                with t.span("warm"):
                    pass
            barrier.wait()
            c0 = time.thread_time()
            for _ in range(n):
                with t.span("op"):
                    pass
            cpu.append(time.thread_time() - c0)

        barrier = threading.Barrier(threads + 1)
        ths = [threading.Thread(target=work) for _ in range(threads)]
        for th in ths:
            th.start()
        barrier.wait()
        t0 = time.perf_counter()
        for th in ths:
            th.join()
        elapsed = time.perf_counter() - t0
        t.close()
    finally:
        os.environ.pop(tracer.PURE_PYTHON_ENV, None)
        if old is not None:
            os.environ[tracer.PURE_PYTHON_ENV] = old
        r = d.stop()
    # the same loop with an empty context manager: what any `with` costs, tracing or not
    class Empty:
        def __enter__(self):
            return self

        def __exit__(self, *e):
            return False

    e = Empty()
    t0 = time.thread_time()
    for _ in range(n):
        with e:
            pass
    empty_ns = (time.thread_time() - t0) / n * 1e9
    total = n * threads
    # CPU seconds the traced threads spent per span (wall time on a shared machine counts others' work)
    return {"compiled": compiled, "ns_per_span": sum(cpu) / total * 1e9, "wall_ns_per_span": elapsed / total * 1e9,
            "empty_with_ns": empty_ns, "lost": r.lost_events()[0],
            "written": int((r.read_all()[0]["kind"] == R.COMPLETE).sum()), "expected": total + 1000 * threads}


def bench_python_bulk(tmp: Path, n: int, batch: int = 4096) -> dict:
    """t.write_records of RECORD_DTYPE batches (a device trace reader's path), CPU ns per event."""
    d = Daemon(tmp, buffer_mb=max(64, (pow2(n) * 64 >> 20) + 2), tag="bulk")
    try:
        t = client.connect(d.sock, ring_records=pow2(n))
        recs = np.zeros(batch, R.RECORD_DTYPE)
        recs["kind"], recs["name"], recs["pid"] = R.COMPLETE, t.intern("bulk"), 1
        recs["ts"] = np.arange(batch)
        c0 = time.thread_time()
        for _ in range(n // batch):
            t.write_records(recs)
        cpu = time.thread_time() - c0
        t.close()
    finally:
        r = d.stop()
    sent = n // batch * batch
    return {"ns_per_event": cpu / sent * 1e9, "sent": sent, "written": len(r.read_all()[0]), "lost": r.lost_events()[0]}


VIZ_SCRIPT = """
import json, sys, time
from viztracer import VizTracer
n = int(sys.argv[1])
def f():
    pass
t0 = time.thread_time()
for _ in range(n):
    f()
plain = time.thread_time() - t0
tr = VizTracer(tracer_entries=2 * n + 10000, verbose=0)
tr.start()
t0 = time.thread_time()
for _ in range(n):
    f()
traced = time.thread_time() - t0
tr.stop()
print(json.dumps({"ns_per_call": (traced - plain) / n * 1e9, "plain_call_ns": plain / n * 1e9}))
"""


def bench_viztracer(n: int) -> dict:
    if not VIZ_PY.exists():
        return {"na": f"{VIZ_PY} missing (python3 -m venv /tmp/vtvenv && /tmp/vtvenv/bin/pip install viztracer)"}
    r = subprocess.run([str(VIZ_PY), "-c", VIZ_SCRIPT, str(n)], capture_output=True, text=True, timeout=300)
    if r.returncode:
        return {"na": f"viztracer failed: {r.stderr.strip()[-200:]}"}
    return json.loads(r.stdout)


# -- daemon ---------------------------------------------------------------------------------------------
def bench_drain(tmp: Path, mb: int) -> dict:
    """Pre-filled rings (mb MiB in total, 4 producer threads) drained into the file once draining starts."""
    per_ring = pow2((mb << 20) // 64 // 4)
    d = Daemon(tmp, buffer_mb=mb + 1, tag="drain")
    try:
        t = client.connect(d.sock, ring_records=per_ring)
        ctl(d.sock, "stop")
        rings = []

        def grab():
            t.instant("fill")
            rings.append(t._writer())

        for _ in range(4):
            th = threading.Thread(target=grab)
            th.start()
            th.join()
        rec = np.frombuffer(R.encode(R.COMPLETE, t.intern("drained"), ts=1, dur=1), R.RECORD_DTYPE)
        for w in rings:  # fill every slot the fast way, then publish as the client would
            arr = np.frombuffer(w.mem, R.RECORD_DTYPE, count=w.cap, offset=RG.DATA_OFFSET)
            arr[:] = rec
            arr["corr"] = np.arange(w.cap)
            with w.lock:
                w.w = w.pub = w.cap
                w.idx[RG.W] = w.cap
        total = sum(w.cap for w in rings)
        st0 = ctl(d.sock, "status")
        cpu0, base = st0["cpu_s"], st0["events_written"]
        t0 = time.perf_counter()
        ctl(d.sock, "start")  # the daemon's own 20 ms loop drains; we watch the count (no fsync in the way)
        while (st := ctl(d.sock, "status"))["events_written"] < base + total:
            time.sleep(0.002)
        elapsed = time.perf_counter() - t0
        cpu_s = st["cpu_s"] - cpu0
        t.close()
    finally:
        r = d.stop()
    return {"events": total, "seconds": elapsed, "events_per_s": total / elapsed, "ring_mb": total * 64 >> 20,
            "events_per_cpu_s": total / max(cpu_s, 1e-9),
            "written": st["events_written"], "lost": r.lost_events()[0]}


def bench_overrun(tmp: Path, n: int, mode: str) -> dict:
    """A producer writing n events into a 1024-record ring while the daemon is not draining."""
    d = Daemon(tmp, mode=mode, buffer_mb=8, tag=f"over{mode}")
    try:
        t = client.connect(d.sock, ring_records=1024)
        ctl(d.sock, "stop")
        for j in range(n):
            t.complete("e", j, 1, corr=j + 1)
        t._sink.publish_all()
        ctl(d.sock, "start")
        t.close()
    finally:
        r = d.stop()
    written = int((r.read_all()[0]["kind"] == R.COMPLETE).sum())
    lost = r.lost_events()[0]
    return {"sent": n, "written": written, "lost": lost, "silent": n - written - lost}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=1_000_000, help="C and LTTng spans (default 1M)")
    ap.add_argument("--py-events", type=int, default=100_000, help="Python spans per thread (default 100k)")
    ap.add_argument("--drain-mb", type=int, default=64, help="MiB of pre-filled rings to drain (default 64)")
    ap.add_argument("--skip", action="append", default=[], help="skip a part: c, lttng, python, pure, pybulk, viz, drain, loss")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="acceltrace-bench-"))
    res = {}
    try:
        parts = [("c", lambda: bench_c(tmp, args.events)), ("lttng", lambda: bench_lttng(tmp, args.events)),
                 ("python1", lambda: bench_python(tmp, args.py_events, 1)),
                 ("python4", lambda: bench_python(tmp, args.py_events // 4, 4)),
                 ("pure_python1", lambda: bench_python(tmp, args.py_events, 1, pure=True)),
                 ("pure_python4", lambda: bench_python(tmp, args.py_events // 4, 4, pure=True)),
                 ("pybulk", lambda: bench_python_bulk(tmp, args.py_events * 10)),
                 ("viz", lambda: bench_viztracer(args.py_events)), ("drain", lambda: bench_drain(tmp, args.drain_mb)),
                 ("loss_discard", lambda: bench_overrun(tmp, 20000, "discard")),
                 ("loss_ring", lambda: bench_overrun(tmp, 20000, "ring"))]
        for key, fn in parts:
            if any(key.startswith(s) for s in args.skip):
                continue
            res[key] = fn()
            print(f"  {key}: {json.dumps(res[key])}", file=sys.stderr, flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    _table(res)
    return 0


def _fmt(v, unit=""):
    return f"{v:,.1f}{unit}" if isinstance(v, (int, float)) else str(v)


def _table(res: dict) -> None:
    rows = []
    c, lt = res.get("c", {}), res.get("lttng", {})
    if "ns_per_span" in c:
        rows.append(("C client, ns per event (a span: 2 clock reads + 1 record)", _fmt(c["ns_per_span"]), "<= 25", ""))
        rows.append(("  at_now() alone (a TSC read), ns", _fmt(c["ns_per_clock_read"]), "", ""))
        if "ns_per_record" in c:
            rows.append(("  the record alone (ring reservation + 64-byte store), ns", _fmt(c["ns_per_record"]), "", ""))
        rows.append(("  C events written / lost / sent", f"{c['written'] - 1000} / {c['lost']} / {2 * c['events']}", "", ""))
    if "ns_per_span" in lt:
        ratio = lt["ns_per_span"] / c["ns_per_span"] if "ns_per_span" in c else None
        rows.append(("LTTng-UST, ns per span (same loop, TSC timestamps)", _fmt(lt["ns_per_span"]), "anchor",
                     f"LTTng / ours = {ratio:.2f}x (target >= 3x)" if ratio else ""))
        rows.append(("  LTTng loss report", lt["lost_report"], "", ""))
    elif lt:
        rows.append(("LTTng-UST", "n/a", lt.get("na", ""), ""))
    viz = res.get("viz", {})
    for key, label in (("python1", "Python client, ns per span, 1 thread"),
                       ("python4", "Python client, ns per span, 4 threads"),
                       ("pure_python1", "Python client, pure-Python path, 1 thread"),
                       ("pure_python4", "Python client, pure-Python path, 4 threads")):
        p = res.get(key)
        if p:
            if key.startswith("python") and not p["compiled"]:
                label += " (extension NOT built: pure Python)"
            ratio = f"VizTracer / ours = {viz['ns_per_call'] / p['ns_per_span']:.2f}x" if "ns_per_call" in viz else ""
            target = "<= 300" if key.startswith("python") else "(fallback)"
            rows.append((label, _fmt(p["ns_per_span"]), target, ratio))
            rows.append(("  empty `with` block alone, ns; span / empty", _fmt(p["empty_with_ns"]),
                         "<= 1.5x" if key.startswith("python") else "",
                         f"{p['ns_per_span'] / p['empty_with_ns']:.2f}x"))
            rows.append(("  written / lost / expected", f"{p['written']} / {p['lost']} / {p['expected']}", "", ""))
    pb = res.get("pybulk")
    if pb:
        rows.append(("Python bulk path (t.write_records, 4096-record arrays), ns per event",
                     _fmt(pb["ns_per_event"]), "", f"{pb['written']} written, {pb['lost']} lost of {pb['sent']}"))
    if "ns_per_call" in viz:
        rows.append(("VizTracer, ns per traced call (anchor)", _fmt(viz["ns_per_call"]), "anchor", ""))
    elif viz:
        rows.append(("VizTracer", "n/a", viz.get("na", ""), ""))
    dr = res.get("drain")
    if dr:
        rows.append((f"daemon drain of {dr['ring_mb']} MiB pre-filled rings, events/s (wall)",
                     _fmt(dr["events_per_s"]), ">= 10,000,000", f"{dr['written']} written, {dr['lost']} lost"))
        rows.append(("  events per daemon CPU second (CRC + write, incl. status polls)", _fmt(dr["events_per_cpu_s"]),
                     "", ""))
    for key in ("loss_discard", "loss_ring"):
        lo = res.get(key)
        if lo:
            rows.append((f"overrun ({key[5:]} mode): sent / written / counted lost / silent",
                         f"{lo['sent']} / {lo['written']} / {lo['lost']} / {lo['silent']}", "silent = 0", ""))
    w = max(len(r[0]) for r in rows) if rows else 10
    print(f"{'measure':<{w}}  {'value':>16}  {'target/anchor':<16}  ratio")
    for r in rows:
        print(f"{r[0]:<{w}}  {r[1]:>16}  {r[2]:<16}  {r[3]}")


if __name__ == "__main__":
    sys.exit(main())
