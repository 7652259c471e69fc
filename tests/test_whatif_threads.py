"""A thread's driver calls in its host chain (analysis/threads.py), and a blocking copy call that two
clocks put back before its DMA's end: on a real PyTorch 2.11 trace of an H200 and by hand."""

from __future__ import annotations

from pathlib import Path

import duckdb
import numpy as np
import pytest

from acceltrace.analysis import replay as R
from acceltrace.analysis import transform as T
from acceltrace.analysis import whatif as W
from acceltrace.analysis.threads import THREAD_OF_TRACK_SQL, chain_edges
from acceltrace.ingest.pipeline import ingest_paths
from acceltrace.store.catalog import Store
from test_whatif import _graph, graph_of_events

H200 = Path(__file__).resolve().parent.parent / "sample_traces" / "chrome" / "kineto" / "h200-copies-bf16-matmul.json.gz"


@pytest.fixture(scope="module")
def h200(tmp_path_factory):
    store = Store(tmp_path_factory.mktemp("h200"))
    (res,) = ingest_paths(store, [H200])
    assert res.error is None, res.error
    return store, res.id


def test_cublas_kernels_launched_by_the_driver_follow_their_thread_not_an_unexplained_wait(h200):
    """cuBLAS launches its matmul kernels with cuLaunchKernelEx, which Kineto writes on the thread's
    `(driver)` track. As a chain of its own, each iteration's first driver call waited 16-17 ms for
    nothing the graph knew (the thread's pageable copies before it): 67 ms of the 88 ms run unexplained."""
    store, tid = h200
    con, g = _graph(store, tid)
    s = R.replay(g)
    assert np.array_equal(s.start, g.ts) and np.array_equal(s.end, g.ts + g.dur)  # the trace, given back
    assert g.slack.sum() < 1_000_000  # under 1 ms of the run unexplained (67 ms before)
    driver = np.flatnonzero(g.lane == R.DRIVER)
    assert len(driver) == 20 and (g.thread[driver] >= 0).all()
    cpu_track = con.execute("SELECT track_id FROM tracks WHERE lane = 'cpu' AND name LIKE 'thread 1077%'").fetchall()
    assert set(g.thread[driver].tolist()) == {cpu_track[0][0]}
    # each driver call follows a call of its thread, the program's time between them kept
    into = np.isin(g.dst, driver) & (g.ekind == R.AFTER_END)
    assert set(g.dst[into].tolist()) == set(driver.tolist())
    assert (g.lane[g.src[into]] == R.CPU).sum() >= 5


def test_fixing_the_h200_pageable_copies_saves_what_their_dma_excess_costs_the_thread(h200):
    """The five 64 MiB pageable host-to-device copies ran their DMA for 8-9 ms each (7.4-8.4 GB/s) where
    the pinned ones took 1.2 ms (55 GB/s), inside calls of 9.2-10.2 ms that held the thread; the five
    device-to-host ones 4.3-4.5 ms against 1.2. Before, each fix saved 0.001 ms (the driver calls' slack
    kept the rest of the iteration in place) and all ten 3.5 ms."""
    store, tid = h200
    rep = W.whatif(store, tid, keep=False)
    assert rep["replayed_makespan_ns"] == rep["makespan_ns"]
    pageable = {p["pass"]: p for p in rep["passes"]}["pageable_memory"]
    assert pageable["findings"] == 10
    assert 45e6 <= pageable["saving_ns"] <= rep["makespan_ns"] - 20e6  # ~55.8 ms of 88: the pinned copies stay
    found = sorted((f for f in rep["findings"] if f["pass"] == "pageable_memory"), key=lambda f: -f["impact_ns"])
    h2d, d2h = found[:5], found[5:]
    assert all(6e6 <= f["impact_ns"] <= 9.5e6 for f in h2d)  # 7.2-8.2 ms each
    assert all(2.5e6 <= f["impact_ns"] <= 4.5e6 for f in d2h)  # 3.4-3.7 ms each
    for f in found:  # its saving covers its own share of the critical path
        assert f["impact_ns"] >= 0.95 * f["exclusive_ns"]


def test_a_driver_call_nested_in_a_runtime_call_does_not_hold_up_the_next_call():
    """Nsight writes the driver calls a runtime call makes inside it: the next runtime call follows the
    runtime call, with its gap, not the nested driver call's end."""
    # one thread (key 5): A 0-10, its nested driver call d 2-5, then B at 12; a driver queue (key 9) 0-1, 4-5
    key = np.array([5, 5, 5, 9, 9])
    thread = np.array([5, 5, 5, -1, -1])
    ts, dur = np.array([0, 2, 12, 0, 4]), np.array([10, 3, 1, 1, 1])
    (ea, eb, ew), (sa, sb, sw) = chain_edges(key, thread, ts, dur)
    assert sorted(zip(ea.tolist(), eb.tolist(), ew.tolist())) == [(0, 2, 2), (3, 4, 0)]  # a queue keeps no gap
    assert list(zip(sa.tolist(), sb.tolist(), sw.tolist())) == [(0, 1, 2)]


def test_a_threads_driver_track_joins_its_first_cpu_track_and_a_driver_queue_stays_apart():
    con = duckdb.connect()
    con.execute("""CREATE TABLE tracks AS SELECT * FROM (VALUES
        (1, 'cpu', 'p', 'thread 7', NULL, '1', '7', 2),
        (2, 'driver', 'p', 'thread 7 (driver)', NULL, '1', '7', 3),
        (3, 'cpu', 'p', 'thread 7 scheduling', NULL, '1', '7', 9),
        (4, 'driver', 'dev0', 'dev0 queue 0', 'dev0', '1', NULL, 4),
        (5, 'driver', 'p', 'thread 8 (driver)', NULL, '1', '8', 5),
        (6, 'eu', 'dev0', 'stream 7', 'dev0', '0', '7', 6))
        t(track_id, lane, group_name, name, device, process, thread, sort_key)""")
    got = dict(con.execute(THREAD_OF_TRACK_SQL).fetchall())
    assert got == {1: 1, 2: 1, 3: 3, 4: -1, 5: -1, 6: -1}


# one thread: a blocking pageable copy call that returned 13 us before its DMA's recorded end (the GPU's
# clock against the CPU's, as on the H200 trace), then a kernel launch
SKEWED = [
    {"ph": "X", "cat": "cuda_runtime", "name": "cudaMemcpyAsync", "pid": 1, "tid": 1, "ts": 20, "dur": 987,
     "args": {"correlation": 2}},
    {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD (Pageable -> Device)", "pid": 0, "tid": 8, "ts": 120,
     "dur": 900, "args": {"correlation": 2, "bytes": 64 << 20, "device": 0, "stream": 8}},
    {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 1030, "dur": 5,
     "args": {"correlation": 3}},
    {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1040, "dur": 10,
     "args": {"correlation": 3, "device": 0, "stream": 7}},
]


def test_a_copy_call_that_returned_just_before_its_dmas_end_still_waited_for_it(tmp_path):
    con, g = graph_of_events(tmp_path, SKEWED)
    one = lambda sql: g.index[con.execute(sql).fetchall()[0][0]]  # noqa: E731
    dma, call = one("SELECT slice_id FROM slices WHERE name LIKE 'Memcpy%'"), one(
        "SELECT slice_id FROM slices WHERE name = 'cudaMemcpyAsync'")
    wait = (g.src == dma) & (g.dst == call) & (g.ekind == R.WAIT)
    assert wait.sum() == 1 and g.weight[wait][0] == -13_000  # it waited; the clocks' 13 us kept
    s = R.replay(g)
    assert np.array_equal(s.start, g.ts) and np.array_equal(s.end, g.ts + g.dur)
    h = g.copy()
    assert T.apply(h, T.Fix("pageable_memory", int(g.slice_id[dma]), 120_000, 900_000, 700_000))
    # by hand: the call no longer waits (its own time after the wait: none) and returns at 20 us, the launch
    # follows the thread's 23 us gap (43 us), its kernel 10 us later (53-63 us), the DMA runs 120-320 us and
    # ends the run: 300 us of the 1030. (Not seen as a wait, the call's 987 us were the thread's own time:
    # the fix saved nothing.)
    fixed = R.replay(h)
    k = one("SELECT slice_id FROM slices WHERE name = 'k'")
    assert (fixed.start[k], fixed.end[dma], fixed.makespan, s.makespan) == (53_000, 320_000, 300_000, 1_030_000)
