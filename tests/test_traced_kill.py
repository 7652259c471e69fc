"""Kill tests of the tracing path: every event a producer emitted is in the file or in a lost count, exactly.

Each producer numbers its events (corr = producer << 32 | seq) and, before emitting event seq,
stores seq into a small shared file the test reads after the kill: `attempted`. The one event
inside emit at the moment of the kill was never returned to the program, so it may or may not
be in the file: per producer, events in the file + lost == attempted or attempted - 1, and no
event is in the file twice.
"""

import os
import random
import shutil
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from _client_paths import client_path  # noqa: F401  (both client paths)

from acceltrace.collect.traced import recover
from acceltrace.collect.traced.protocol import ctl
from acceltrace.formats.atrace.reader import AtraceReader

PY = sys.executable
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CC = shutil.which("cc") or shutil.which("gcc")


def _daemon(sock, out, mode="discard", buffer_mb=8):
    proc = subprocess.Popen([PY, "-m", "acceltrace", "traced", "--socket", str(sock), "--out", str(out),
                             "--buffer-mb", str(buffer_mb), "--mode", mode],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:  # answering, not just a socket file (a killed daemon leaves its socket behind)
            if ctl(sock, "status", timeout_s=1.0)["ok"]:
                return proc
        except OSError:
            pass
        if proc.poll() is not None:
            raise AssertionError(proc.stdout.read())
        time.sleep(0.01)
    proc.kill()
    raise AssertionError("daemon did not start")


def _stop(proc):
    proc.send_signal(signal.SIGTERM)
    log, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0, log
    return log


PRODUCER = """
    import sys, os, time, mmap
    import numpy as np
    from acceltrace.collect import client
    sock, ctl_path, k, ring_records, cap = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
    t = client.connect(sock, ring_records=ring_records or None)
    f = open(ctl_path, "r+b")
    ctl = np.frombuffer(mmap.mmap(f.fileno(), 64), dtype=np.int64)
    span = t.span
    base = k << 32
    j = 0
    ctl[2] = os.getpid()
    while not ctl[1] and j < cap:
        j += 1
        ctl[0] = j  # attempted: stored before the event is emitted
        with span("e", corr=base | j):
            pass
        if j % 2000 == 0:
            time.sleep(0.001)  # leave the (small, shared) test machine's CPUs to the daemon now and then
    try:
        t.close()
    except client.ClientError as e:
        print("close:", e, file=sys.stderr)
"""


def _producer(sock, ctl_path, k, ring_records=0, cap=1 << 30):
    with open(ctl_path, "wb") as f:
        f.write(b"\0" * 64)
    p = subprocess.Popen([PY, "-c", textwrap.dedent(PRODUCER), str(sock), str(ctl_path), str(k), str(ring_records),
                          str(cap)])
    return p


def _ctl(path):
    return np.fromfile(path, dtype=np.int64, count=8)


def _wait_for(cond, timeout=20.0, what="condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.005)
    raise AssertionError(f"timed out waiting for {what}")


def _account(out):
    """Per producer index k: (seqs in the file, lost) with lost keyed through the trailer's pid."""
    r = AtraceReader.open(out)
    recs, streams = r.read_all()
    total_lost, per_stream = r.lost_events()
    return r, recs, streams, total_lost, per_stream


def _check_exact(k, seqs, lost, attempted):
    assert len(np.unique(seqs)) == len(seqs), f"producer {k}: an event is in the file twice"
    assert seqs.min(initial=1) >= 1 and seqs.max(initial=0) <= attempted
    got = len(seqs) + lost
    assert attempted - 1 <= got <= attempted, (
        f"producer {k}: emitted {attempted}, in the file {len(seqs)}, counted lost {lost}: "
        f"{attempted - got} events neither written nor counted")


@pytest.mark.parametrize("trial", [0])
def test_sigkilled_discard_mode_producer_every_event_written_or_counted(tmp_path, trial):
    sock, out = tmp_path / "d.sock", tmp_path / "out.atrace"
    proc = _daemon(sock, out, mode="discard")
    ctl_path = tmp_path / "ctl0"
    # a small ring: the producer outruns the 20 ms drain, so some events are dropped (and counted) too
    victim = _producer(sock, ctl_path, 0, ring_records=1024)
    _wait_for(lambda: _ctl(ctl_path)[0] > 20000 + trial * 7919, what="the producer to emit")
    time.sleep(random.random() * 0.05)
    victim.send_signal(signal.SIGKILL)
    assert victim.wait(10) == -9
    attempted = int(_ctl(ctl_path)[0])
    _stop(proc)
    r, recs, streams, total_lost, per_stream = _account(out)
    assert r.trailer is not None
    seqs = recs["corr"].astype(np.int64) & 0xFFFFFFFF
    _check_exact(0, seqs, total_lost, attempted)
    assert not os.path.exists(recover.ring_dir_path(out)) and not list(tmp_path.glob("out.atrace.state*"))


def _c_producer(exe, sock, ctl_path, k):
    with open(ctl_path, "wb") as f:
        f.write(b"\0" * 64)
    return subprocess.Popen([str(exe), str(ctl_path), str(k)], env={**os.environ, "ACCELTRACE_SOCKET": str(sock)})


@pytest.mark.parametrize("mode", ["discard", "ring"])
def test_sigkilled_daemon_restarted_on_the_same_socket_loses_nothing_uncounted(tmp_path, mode, client_path):
    sock, out = tmp_path / "d.sock", tmp_path / "out.atrace"
    n = 3
    ctls = [tmp_path / f"ctl{k}" for k in range(n)]
    exe = None
    if client_path == "compiled" and CC:
        # with the compiled Python path, the third producer is the C client (it does not reconnect:
        # the restarted daemon drains its ring anyway, and retires it once it has exited)
        exe = tmp_path / "at_killable"
        subprocess.run([CC, "-O2", "-Wall", "-Werror", "-pthread", "-I", os.path.join(ROOT, "collect/client"),
                        os.path.join(ROOT, "tests/c/at_killable.c"), "-o", str(exe)], check=True)
    proc = _daemon(sock, out, mode=mode)
    ps = [_producer(sock, ctls[k], k + 1) if exe is None or k < n - 1 else _c_producer(exe, sock, ctls[k], k + 1)
          for k in range(n)]
    _wait_for(lambda: all(_ctl(c)[0] > 10000 for c in ctls), what="every producer to emit")
    time.sleep(random.random() * 0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)
    time.sleep(0.2)  # the producers keep tracing into their rings meanwhile
    proc = _daemon(sock, out, mode=mode)
    time.sleep(0.3)
    for c in ctls:  # stop the producers
        with open(c, "r+b") as f:
            f.seek(8)
            f.write(np.int64(1).tobytes())
    assert all(p.wait(30) == 0 for p in ps)
    attempted = {k + 1: int(_ctl(c)[0]) for k, c in enumerate(ctls)}
    pids = {int(_ctl(c)[2]): k + 1 for k, c in enumerate(ctls)}
    log = _stop(proc)
    r, recs, streams, total_lost, per_stream = _account(out)
    assert r.trailer is not None, log
    lost_by_k = {k: 0 for k in attempted}
    for p in r.trailer["producers"]:
        lost_by_k[pids[p["pid"]]] += p["lost"]
    assert sum(lost_by_k.values()) == total_lost
    for k, att in attempted.items():
        mine = recs[(recs["corr"].astype(np.int64) >> 32) == k]
        _check_exact(k, mine["corr"].astype(np.int64) & 0xFFFFFFFF, lost_by_k[k], att)
    # the restarted daemon left no state and no ring memory behind
    assert not list(tmp_path.glob("out.atrace.state*"))
    assert not os.path.exists(recover.ring_dir_path(out))
    assert "resuming" in log
