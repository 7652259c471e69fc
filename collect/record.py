"""`acceltrace record [--counters SOURCE] [--rate HZ] [--out DIR] -- CMD ARGS...` (docs/tracing.md, "Recording").

Runs CMD with tracing on and the counter sampler beside it, into one run directory:

  run.atrace                the run itself: the command as a span on its process, its exit status,
                            and the clock alignment (metadata "record")
  run.actr                  the counters (SOURCE: nvml where a GPU answers, host otherwise), sampled
                            at HZ by a thread of this process while the command runs
  torch.<pid>.trace.json    one PyTorch profiler (Kineto) trace per Python process of the command that
                            imported torch, written by collect/record_boot/sitecustomize.py, which this
                            command puts first on the command's PYTHONPATH

Clocks: the sampler and run.atrace use CLOCK_MONOTONIC. Kineto writes its own time base (unix
time from its own conversion, which can be seconds off on a VM), so the bootstrap records
`acceltrace.sync <start|end> <monotonic ns>` marker ops at the profiler's start and end; after
the command exits, the offset between each marker's Kineto time and its monotonic time is
measured and run.atrace and run.actr are moved onto the Kineto time base (one offset; the
spread of the markers is reported as the alignment's residual), so the directory ingests
(`acceltrace ingest DIR`) as one trace with kernels, ops and counters on one timeline.
"""

from __future__ import annotations

import json
import mmap
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np

BOOT_DIR = Path(__file__).resolve().parent / "record_boot"
_MARKER = re.compile(rb'"name"\s*:\s*"acceltrace\.sync (start|end) (\d+)"')


def _err(msg: str) -> int:
    print(f"acceltrace record: {msg}", file=sys.stderr)
    return 2


def _open_counters(name: str | None):
    """The counter source: the one named, or nvml where it answers and host otherwise. None: no counters."""
    from acceltrace.collect.counters import source_class
    from acceltrace.collect.counters.base import SourceUnavailable

    if name == "none":
        return None, "no counters (--counters none)"
    if name is None:
        try:
            return source_class("nvml")(), "nvml"
        except Exception as e:  # no driver, no pynvml, a broken install: the host source still works
            return source_class("host")(), f"host (nvml unavailable: {e})"
    if name not in ("host", "nvml"):
        raise SourceUnavailable(f"--counters {name}: record samples real hardware: host or nvml (or none)")
    return source_class(name)(), name


def kineto_markers(path: Path) -> list[tuple[str, int, int]]:
    """(start|end, monotonic ns, Kineto ns) of every sync marker in one trace file.

    Kineto ns as acceltrace's Chrome importer computes them: ts (us) * 1000, plus
    baseTimeNanoseconds when the times are relative to it. Scans bytes for the markers and
    decodes only their event objects, so a large trace is not parsed here.
    """
    out = []
    dec = json.JSONDecoder()
    with open(path, "rb") as f:
        if os.fstat(f.fileno()).st_size == 0:
            return out
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
            base = None
            bm = re.search(rb'"baseTimeNanoseconds"\s*:\s*(\d+)', m)
            if bm:
                base = int(bm.group(1))
            for hit in _MARKER.finditer(m):
                start = m.rfind(b"{", 0, hit.start())
                if start < 0:
                    continue
                text = m[start: hit.end() + 4096].decode("utf-8", "replace")
                try:
                    ev, _ = dec.raw_decode(text)
                    ts_ns = int(round(float(ev["ts"]) * 1000))
                except (ValueError, KeyError, TypeError):
                    continue
                if base is not None and ts_ns < base:
                    ts_ns += base
                out.append((hit.group(1).decode(), int(hit.group(2)), ts_ns))
    return out


def _shift_actr(path: Path, offset_ns: int) -> None:
    """Rewrite run.actr with every host_ns moved by offset_ns (numpy over whole groups)."""
    from acceltrace.formats.actr.reader import read_actr_path
    from acceltrace.formats.actr.writer import ActrWriter

    d = read_actr_path(path)
    tmp = path.with_suffix(".actr.part")
    w = ActrWriter(tmp, d.header)
    for gid, s in d.samples.items():
        if len(s):
            w.append_many(gid, s["host_ns"] + offset_ns, s["dev_ticks"], s["enabled_ns"], s["running_ns"], s["raw"])
    for note in d.notes:
        w.note(note)
    tail = dict(d.tail or {"ended": "unknown"})
    for k in ("start_ns", "end_ns"):
        if isinstance(tail.get(k), int):
            tail[k] += offset_ns
    tail["host_clock_shift_ns"] = offset_ns
    w.close(tail)
    os.replace(tmp, path)


def record_command(args) -> int:
    cmd = list(args.cmd)
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    if not cmd:
        return _err("no command given: acceltrace record [options] -- CMD ARGS...")
    out = Path(args.out) if args.out else Path(f"acceltrace-record-{time.strftime('%Y%m%d-%H%M%S')}")
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        return _err(f"{out} exists and is not an empty directory; give another --out")
    from acceltrace.collect.counters.base import SourceUnavailable
    from acceltrace.collect.sampler import MAX_RATE_HZ, MIN_RATE_HZ, Sampler, SamplerError, WallClock

    if not MIN_RATE_HZ <= args.rate <= MAX_RATE_HZ:
        return _err(f"--rate {args.rate:g} is outside {MIN_RATE_HZ:g}..{MAX_RATE_HZ:g} Hz")
    try:
        src, src_label = _open_counters(args.counters)
    except SourceUnavailable as e:
        return _err(str(e))
    out.mkdir(parents=True, exist_ok=True)
    sampler = None
    if src is not None:
        try:
            sampler = Sampler(src, out / "run.actr", rate_hz=args.rate, clock=WallClock())
        except (SamplerError, OSError) as e:
            src.close()
            return _err(f"cannot set up the counter sampler: {e}")
    env = dict(os.environ)
    env["ACCELTRACE_RECORD_DIR"] = str(out.resolve())
    env["PYTHONPATH"] = os.pathsep.join([str(BOOT_DIR)] + [p for p in [env.get("PYTHONPATH")] if p])
    if args.no_torch:
        env["ACCELTRACE_RECORD_TORCH"] = "0"
    thread = None
    if sampler is not None:
        thread = threading.Thread(target=sampler.run, args=(None,), name="acceltrace-record-sampler", daemon=True)
        thread.start()
    t0 = time.monotonic_ns()
    try:
        proc = subprocess.Popen(cmd, env=env)
    except OSError as e:
        if sampler is not None:
            sampler.stop()
            thread.join()
            sampler.close("error")
        return _err(f"cannot run {cmd[0]}: {e.strerror or e}")

    def forward(signum, frame):
        try:
            proc.send_signal(signum)
        except ProcessLookupError:
            pass

    old = {s: signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        rc = proc.wait()
    finally:
        for s, h in old.items():
            signal.signal(s, h)
    t1 = time.monotonic_ns()
    if sampler is not None:
        sampler.stop()
        thread.join(10)
        sampler.close("completed")
    return _finish(out, cmd, proc.pid, rc, t0, t1, src_label, sampler, args)


def _finish(out: Path, cmd: list, pid: int, rc: int, t0: int, t1: int, src_label: str, sampler, args) -> int:
    from acceltrace.collect import client

    markers = []
    for p in sorted(out.glob("torch.*.trace.json")):
        markers += kineto_markers(p)
    offset, residual = 0, None
    if markers:
        diffs = np.array([k - m for _, m, k in markers], dtype=np.int64)
        offset = int(np.median(diffs))
        residual = int(np.abs(diffs - offset).max())
        if sampler is not None and (out / "run.actr").is_file():
            _shift_actr(out / "run.actr", offset)
    align = {"host_clock": "CLOCK_MONOTONIC" if not markers else "PyTorch profiler (Kineto) time base",
             "monotonic_to_trace_ns": offset, "sync_markers": len(markers), "residual_ns": residual}
    t = client.connect(file=out / "run.atrace", header={"host_clock": "monotonic" if not markers else "kineto"})
    t.metadata({"record": {"command": cmd, "exit_status": rc, "counters": src_label,
                           "rate_hz": args.rate if sampler is not None else None, "clock": align}})
    name = " ".join(cmd)[:200]
    t.name_process(f"{os.path.basename(cmd[0])} (recorded)", pid=pid)
    t.name_track("cpu", pid, "recorded command", pid=pid)
    t.complete(name, ts=t0 + offset, dur=t1 - t0, lane="cpu", pid=pid, tid=pid, exit_status=rc)
    t.close()
    n_torch = len(list(out.glob("torch.*.trace.json")))
    span = (t1 - t0) / 1e9
    msg = f"recorded {out}: {name!r} ran {span:.2f} s, exit status {rc}"
    if sampler is not None:
        st = sampler.stats
        msg += (f"; counters: {src_label}, {st.samples} samples at {args.rate:g} Hz, "
                f"{st.missed_deadlines} missed deadlines")
    msg += f"; {n_torch} PyTorch profiler trace(s)"
    if markers:
        msg += f", clocks aligned through {len(markers)} markers (residual {residual / 1e3:.1f} us)"
    print(msg, file=sys.stderr)
    print(f"ingest it with: acceltrace ingest {out}", file=sys.stderr)
    return rc if 0 <= rc < 256 else 1
