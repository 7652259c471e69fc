"""Launch gaps' what-if: the late submissions come the gap's length sooner because the thread's own
time before them shrinks by it (taken from the gaps closest before the late call, never past a call
that waited for the device), and every device's gaps are findings, so the pass's all-fixed replay
saves what the device model saves without the per-kernel host work."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from acceltrace.analysis import replay as R
from acceltrace.analysis import runner
from acceltrace.analysis import host_time as H
from acceltrace.analysis import transform as T
from acceltrace.analysis import whatif as W
from acceltrace.ingest.pipeline import ingest_paths
from acceltrace.store.catalog import Store

ROOT = Path(__file__).resolve().parent.parent
US = 1000


def _thread_and_queue(wait_at: int | None = None) -> R.Graph:
    """Calls c0..c3 (1 us each) on one thread, 100 us of the program's own work between them; call i
    launches kernel k_i (10 us) on one queue, 1 us after the call starts. In the trace: c_i at 101*i us,
    k_i at 101*i + 1 us, so each kernel waits 91 us for its launch and the run ends at 314 us.
    wait_at: that call also waits for the kernel before it (a synchronising call)."""
    calls, kernels = np.arange(4), np.arange(4, 8)
    ts = np.r_[calls * 101 * US, calls * 101 * US + US]
    dur = np.r_[np.full(4, US), np.full(4, 10 * US)]
    src = np.r_[calls[:-1], calls, kernels[:-1]]
    dst = np.r_[calls[1:], kernels, kernels[1:]]
    ekind = np.r_[np.full(3, R.AFTER_END), np.full(4, R.AFTER_START), np.full(3, R.AFTER_END)].astype(np.int8)
    weight = np.r_[np.full(3, 100 * US), np.full(4, US), np.zeros(3, np.int64)]
    if wait_at is not None:
        src, dst = np.r_[src, kernels[wait_at - 1]], np.r_[dst, calls[wait_at]]
        ekind, weight = np.r_[ekind, np.int8(R.WAIT)].astype(np.int8), np.r_[weight, 0]
    n = 8
    g = R.Graph(np.arange(n, dtype=np.int64), np.r_[np.zeros(4), np.ones(4)].astype(np.int8),
                np.r_[np.full(4, R.CPU), np.full(4, R.EU)].astype(np.int8), ts.astype(np.int64),
                dur.astype(np.int64), dur.astype(np.int64), np.zeros(n, np.int64), src.astype(np.int64),
                dst.astype(np.int64), ekind, weight.astype(np.int64), index=R.NodeIndex(np.arange(n, dtype=np.int64)),
                track=np.r_[np.ones(4), np.full(4, 2)].astype(np.int64), device=np.r_[np.full(4, -1), np.zeros(4)])
    s = R.replay(g)
    assert np.array_equal(s.start, g.ts) and s.makespan == 314 * US  # the graph gives the trace back
    return g


def _fixed_makespan(g: R.Graph, local_ns: int) -> int:
    # the finding: the device idle from k2's end (213 us) until k3 (304 us); its local estimate is given
    h = g.copy()
    assert T.apply(h, T.Fix("launch_gaps", 7, 213 * US, 91 * US, local_ns))
    return R.replay(h).makespan


def test_a_late_launch_comes_sooner_by_the_gap_taken_from_the_threads_own_time_before_it():
    g = _thread_and_queue()
    # 150 us asked before c3: the 100 us gap c2 -> c3 and 50 us of c1 -> c2; c2 starts at 152 us, k2 runs
    # 153-163 us, and k3 (submitted early enough: after k2 on its queue) 163-173 us. Cutting only the gap
    # right before c3 (clamped at its 100 us) would leave k2 at 203 us and the run at 223 us.
    assert _fixed_makespan(g, 150 * US) == 173 * US
    # an estimate the last gap covers: c3 starts 50 us sooner (253-254 us, the run's end now), k2 runs as
    # traced (203-213 us), k3 right after it (213-223 us)
    assert _fixed_makespan(g, 50 * US) == 254 * US
    assert np.array_equal(R.replay(g).start, g.ts)  # the transformation edited its copy only


def test_the_host_time_cut_stops_at_a_call_that_waited_for_the_device():
    # c2 waits for k1: host time before c2 moves nothing after it, so only the gap c2 -> c3 can give
    assert _fixed_makespan(_thread_and_queue(wait_at=2), 150 * US) == 223 * US
    # a wait at c1 leaves the gaps after it: c1 -> c2 and c2 -> c3 give the 150 us as without it
    assert _fixed_makespan(_thread_and_queue(wait_at=1), 150 * US) == 173 * US


def test_demands_of_several_late_calls_on_one_thread_each_met_before_their_own_call():
    g = _thread_and_queue()
    order, pos, chain, _start = H.host_chains(g)
    h = g.copy()
    # 60 us before c2 and 120 us before c3: c3's takes the whole gap c2 -> c3 and 20 us of c1 -> c2;
    # c2's then 60 us more from c1 -> c2 (80 in all), never from after c2
    assert H.cut_host_time(h, np.array([2, 3]), np.array([60 * US, 120 * US])) == 180 * US
    into = {int(g.dst[e]): int(h.weight[e]) for e in chain}
    assert into == {1: 100 * US, 2: 20 * US, 3: 0}
    # more than the thread has: what it has is cut, the rest dropped
    h = g.copy()
    assert H.cut_host_time(h, np.array([3]), np.array([500 * US])) == 300 * US


def test_segmented_suffix_max_matches_a_loop():
    rng = np.random.default_rng(3)
    x = rng.integers(-10**6, 10**6, 500)
    seg = np.sort(rng.integers(0, 40, 500))
    want = np.array([x[i:][seg[i:] == seg[i]].max() for i in range(len(x))])
    assert np.array_equal(H.segment_suffix_max(x, seg), want)


@pytest.mark.parametrize("seed, devices", [(45, 2), (46, 1)])
def test_fixed_launch_gaps_save_what_the_model_saves_without_the_host_work(tmp_path, seed, devices):
    """The model's counterfactual drops the host work before every launch; the pass's findings all
    fixed (replayed) save the same within 10 %, also with two devices (the one that finished first has
    its gaps as findings too, with no exclusive share). Seeds not used while writing the fix."""
    out = tmp_path / "run"
    subprocess.run([sys.executable, "-m", "acceltrace", "sim", "launch-gaps", "--out", str(out), "--seed",
                    str(seed)], check=True, capture_output=True, cwd=ROOT, timeout=120)
    doc = json.loads((out / "ground_truth.json").read_text())
    assert doc["config"]["devices"] == devices
    truth = sum(i["impact_ns"] for i in doc["issues"] if i["kind"] == "launch_gaps")
    store = Store(tmp_path / "s")
    (res,) = ingest_paths(store, [out], after_publish=runner.after_publish)
    assert res.error is None, res.error
    rep = W.whatif(store, res.id, passes=["launch_gaps"], per_pass=0)
    got = next(p["saving_ns"] for p in rep["passes"] if p["pass"] == "launch_gaps")
    assert truth > 0 and abs(got / truth - 1) <= 0.10, (got, truth)
    con = store.connect(res.id)
    per_dev = con.execute("""SELECT t.device, count(*), sum(f.exclusive_ns) FROM findings f JOIN tracks t
                             USING (track_id) WHERE f.pass = 'launch_gaps' GROUP BY t.device ORDER BY 1""").fetchall()
    assert len(per_dev) == devices and all(n > 0 for _d, n, _e in per_dev)


def test_host_chain_order_equals_the_lexsort():
    """host_time's order of CPU nodes (identity check, packed key, lexsort fallback) is lexsort's."""
    import numpy as np

    from acceltrace.analysis.host_time import _by_track_time

    rng = np.random.default_rng(7)
    for n in (0, 1, 2, 1000, 50_000):
        tr, ts = rng.integers(0, 9, n), rng.integers(-10**6, 10**9, n)
        for t in (ts, ts * 10**9):  # the second does not pack into int64: the lexsort
            assert (_by_track_time(tr, t) == np.lexsort((np.arange(n), t, tr))).all()
        o = np.lexsort((ts, tr))
        assert (_by_track_time(tr[o], ts[o]) == np.arange(n)).all()
