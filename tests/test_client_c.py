"""The header-only C client, compiled with the system compiler and run against the daemon."""

import os
import shutil
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest

from acceltrace.formats import record as R
from acceltrace.ingest.native.atrace import ingest_atrace
from acceltrace.ingest.builder import TraceBuilder
from test_traced import _records, _start, _stop

ROOT = Path(__file__).resolve().parent.parent
CC = shutil.which("cc") or shutil.which("gcc")
pytestmark = pytest.mark.skipif(CC is None, reason="no C compiler on this machine")


def _build(tmp_path, *defines) -> Path:
    exe = tmp_path / "at_producer"
    subprocess.run([CC, "-O2", "-Wall", "-Wextra", "-Werror", "-pthread", *defines, "-I", str(ROOT / "collect/client"),
                    str(ROOT / "tests/c/at_producer.c"), "-o", str(exe)], check=True, capture_output=True, text=True)
    return exe


def test_c_client_writes_the_same_records_from_several_threads(tmp_path):
    exe = _build(tmp_path)
    proc, sock, out = _start(tmp_path, buffer_mb=64)
    before_ns = time.monotonic_ns()
    try:
        r = subprocess.run([str(exe), "20000", "4"], env={**os.environ, "ACCELTRACE_SOCKET": str(sock)},
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
    finally:
        after_ns = time.monotonic_ns()
        _stop(proc)
    rd, recs, streams = _records(out)
    names = rd.strings[int(streams[0])]
    ops = recs[recs["kind"] == R.COMPLETE]
    spans = ops[ops["lane"] == R.LANE_CODES["cpu"]]
    # a C producer can outrun the 20 ms drain; whatever the ring refused is counted, exactly
    assert len(spans) + rd.trailer["lost_events"] == 80000
    assert {names[n] for n in np.unique(spans["name"])} == {'c "quoted" op'}
    assert len(np.unique(spans["tid"])) == 4 and len(np.unique(spans["corr"])) == len(spans)
    assert (spans["flags"] & R.FLAG_HAS_CORR).all() and (spans["dur"] >= 0).all()
    (cnt,) = recs[recs["kind"] == R.COUNTER]
    assert R.counter_values(np.array([cnt]))[0] == 1.5e9 and names[cnt["cat"]] == "B/s"
    (dma,) = ops[ops["lane"] == R.LANE_CODES["pcie"]]
    assert (dma["bytes"], dma["direction"], dma["mem"], dma["device"], dma["tid"]) == (1 << 20, 1, 2, 0, 0)
    # timestamps (TSC ticks on x86-64) become host CLOCK_MONOTONIC ns at ingest, inside the run's window
    b = TraceBuilder(tmp_path / "c.duckdb")
    ingest_atrace(out, b)
    lo, hi = b.con.execute("SELECT min(ts), max(ts + dur) FROM _slices_staging").fetchone()
    assert before_ns <= lo <= hi <= after_ns
    b.abort()


def test_c_client_without_a_daemon_says_so(tmp_path):
    exe = _build(tmp_path)
    env = {k: v for k, v in os.environ.items() if k != "ACCELTRACE_SOCKET"}
    r = subprocess.run([str(exe), "10", "1"], env=env, capture_output=True, text=True, timeout=30)
    assert r.returncode == 3 and "no daemon" in r.stderr


def test_c_client_gives_up_on_a_daemon_that_never_answers(tmp_path):
    # e.g. a daemon stopped with Ctrl-Z: the kernel still accepts connections, nobody replies
    import socket
    import time

    exe = _build(tmp_path, "-DAT_REPLY_TIMEOUT_S=1")
    path = tmp_path / "silent.sock"
    silent = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    silent.bind(str(path))
    silent.listen(4)
    try:
        t0 = time.monotonic()
        r = subprocess.run([str(exe), "10", "1"], env=dict(os.environ, ACCELTRACE_SOCKET=str(path)),
                           capture_output=True, text=True, timeout=20)
        assert r.returncode == 3 and "no daemon" in r.stderr
        assert time.monotonic() - t0 < 10
    finally:
        silent.close()


def test_c_client_child_after_fork_writes_its_own_stream(tmp_path):
    exe = tmp_path / "at_fork"
    subprocess.run([CC, "-O2", "-Wall", "-Wextra", "-Werror", "-pthread", "-I", str(ROOT / "collect/client"),
                    str(ROOT / "tests/c/at_fork.c"), "-o", str(exe)], check=True, capture_output=True, text=True)
    proc, sock, out = _start(tmp_path)
    try:
        r = subprocess.run([str(exe)], env={**os.environ, "ACCELTRACE_SOCKET": str(sock)},
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
    finally:
        _stop(proc)
    rd, recs, streams = _records(out)
    spans = recs["kind"] == R.COMPLETE
    got = {}
    for s in np.unique(streams[spans]):
        names = rd.strings[int(s)]
        mine = recs[spans & (streams == s)]
        got[names[int(mine["name"][0])]] = sorted(mine["corr"].tolist())
        assert len({names[int(n)] for n in mine["name"]}) == 1
    assert got == {"parent": list(range(1, 21)), "child": list(range(1, 21))}


def test_header_compiles_as_cpp_and_in_two_translation_units(tmp_path):
    cxx = shutil.which("c++") or shutil.which("g++")
    inc = str(ROOT / "collect/client")
    (tmp_path / "a.c").write_text('#include "acceltrace.h"\nint use_a(void) { return (int)at_intern("a"); }\n')
    (tmp_path / "b.c").write_text('#include "acceltrace.h"\nint use_a(void);\n'
                                  'int main(void) { return at_init("/nonexistent") == -1 && use_a() > 0 ? 0 : 1; }\n')
    subprocess.run([CC, "-Wall", "-Werror", "-pthread", "-I", inc, str(tmp_path / "a.c"), str(tmp_path / "b.c"),
                    "-o", str(tmp_path / "two")], check=True, capture_output=True, text=True)
    assert subprocess.run([str(tmp_path / "two")]).returncode == 0
    if cxx:
        src = tmp_path / "c.cpp"
        src.write_text('#include "acceltrace.h"\nint main() { return at_init(nullptr) == -1 ? 0 : 0; }\n')
        r = subprocess.run([cxx, "-std=c++11", "-Wall", "-Werror", "-pthread", "-I", inc, str(src), "-o",
                            str(tmp_path / "cpp")], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
