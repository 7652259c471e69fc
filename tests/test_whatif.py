"""What-if replay: the untransformed graph gives the trace back, and fixes save what a hand
computation says they save."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from acceltrace.analysis import params as P
from acceltrace.analysis import replay as R
from acceltrace.analysis import runner
from acceltrace.analysis import transform as T
from acceltrace.analysis import whatif as W
from acceltrace.ingest.pipeline import ingest_paths
from acceltrace.store.catalog import Store

ROOT = Path(__file__).resolve().parent.parent
RUNS = ROOT / "sample_traces" / "run" / "acceltrace-sim-0.1"
A100 = ROOT / "sample_traces" / "chrome" / "kineto" / "a100-rank0-memcpy.json.gz"


def _graph(store, tid):
    con = store.connect(tid, sides=())
    runner._exec_file(con, runner.SQL_DIR / "_common.sql", P.resolve(None))
    return con, R.build(con)


def graph_of_events(tmp_path, events):
    """A Chrome trace of these events, ingested: its connection and its graph."""
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": events}))
    store = Store(tmp_path / "s")
    (res,) = ingest_paths(store, [path])
    assert res.error is None, res.error
    return _graph(store, res.id)


@pytest.mark.parametrize("path, explained", [(RUNS / "pcie-saturation-seed5", 0.99), (A100, 0.85)],
                         ids=["sim", "a100"])
def test_the_untransformed_replay_gives_every_node_its_time_back(tmp_path, path, explained):
    store = Store(tmp_path / "s")
    (res,) = ingest_paths(store, [path])
    assert res.error is None, res.error
    con, g = _graph(store, res.id)
    s = R.replay(g)
    assert len(g.ts) > 100
    assert np.array_equal(s.start, g.ts) and np.array_equal(s.end, g.ts + g.dur)
    rep = W.whatif(store, res.id, per_pass=2)
    assert rep["replayed_makespan_ns"] == rep["makespan_ns"]
    # the edges alone (no unexplained waits kept) explain this much of the run (bench/whatif.py)
    assert explained * rep["makespan_ns"] <= rep["graph"]["edges_only_makespan_ns"] <= rep["makespan_ns"]
    assert rep["all_fixed_saving_ns"] >= max(p["saving_ns"] for p in rep["passes"]) >= 0


# one thread: launch k1 (10 us), a blocking pageable copy call (its DMA 100 us, from pinned memory
# it would take 20 us), then launch k2; k2 cannot start before the copy call returns
EVENTS = [
    {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 0, "dur": 2,
     "args": {"correlation": 1}},
    {"ph": "X", "cat": "kernel", "name": "k1", "pid": 0, "tid": 7, "ts": 5, "dur": 10,
     "args": {"correlation": 1, "device": 0, "stream": 7}},
    {"ph": "X", "cat": "cuda_runtime", "name": "cudaMemcpy", "pid": 1, "tid": 1, "ts": 20, "dur": 102,
     "args": {"correlation": 2}},
    {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD (Pageable -> Device)", "pid": 0, "tid": 8, "ts": 21,
     "dur": 100, "args": {"correlation": 2, "bytes": 100_000_000, "device": 0, "stream": 8}},
    {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 125, "dur": 2,
     "args": {"correlation": 3}},
    {"ph": "X", "cat": "kernel", "name": "k2", "pid": 0, "tid": 7, "ts": 130, "dur": 10,
     "args": {"correlation": 3, "device": 0, "stream": 7}},
]


def test_a_fixed_pageable_copy_saves_its_excess_and_its_call_no_longer_blocks(tmp_path):
    con, g = graph_of_events(tmp_path, EVENTS)
    base = R.replay(g)
    h = g.copy()
    dma = g.index[con.execute("SELECT slice_id FROM slices WHERE name LIKE 'Memcpy%'").fetchone()[0]]
    call = g.index[con.execute("SELECT slice_id FROM slices WHERE name = 'cudaMemcpy'").fetchone()[0]]
    assert ((g.src == dma) & (g.dst == call) & (g.ekind == R.WAIT)).any()  # the call waits for its DMA
    fix = T.Fix("pageable_memory", int(g.slice_id[dma]), 21_000, 100_000, 80_000)
    assert T.apply(h, fix)
    s = R.replay(h)
    assert s.end[dma] - s.start[dma] == 20_000
    # by hand: the call now returns 1 us after it started its DMA (its own time after the wait,
    # 122 - 121 us), k2's launch follows 3 us later (the thread's own gap), k2 2 us after its launch
    # plus the 3 us it waited in the trace: k2 runs 29-39 us; the DMA runs 21-41 us and ends the run
    k2 = g.index[con.execute("SELECT slice_id FROM slices WHERE name = 'k2'").fetchone()[0]]
    assert (s.start[call], s.end[call]) == (20_000, 21_000)
    assert (s.start[k2], s.end[k2]) == (29_000, 39_000)
    assert base.makespan == 140_000 and s.makespan == 41_000


def test_whatif_command_prints_the_contract_keys(tmp_path):
    store = Store(tmp_path / "s")
    (res,) = ingest_paths(store, [RUNS / "strided-access-seed2"])
    r = subprocess.run([sys.executable, "-m", "acceltrace", "--store", str(store.root), "whatif", res.id, "--json"],
                       capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert {"makespan_ns", "replayed_makespan_ns", "passes", "all_fixed_saving_ns"} <= set(doc)
    assert doc["replayed_makespan_ns"] == doc["makespan_ns"]
    assert all({"pass", "findings", "saving_ns"} <= set(p) for p in doc["passes"])
    mai = next(p for p in doc["passes"] if p["pass"] == "memory_access_inefficiency")
    assert mai["findings"] > 0 and mai["saving_ns"] > 0
    r = subprocess.run([sys.executable, "-m", "acceltrace", "--store", str(store.root), "whatif", res.id],
                       capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert r.returncode == 0 and "critical path:" in r.stdout and "all fixed" in r.stdout, r.stdout + r.stderr


def test_a_graph_over_the_node_limit_keeps_its_critical_path_and_says_why_it_has_no_impacts(tmp_path):
    store = Store(tmp_path / "s")
    (res,) = ingest_paths(store, [RUNS / "strided-access-seed2"])
    con = store.connect(res.id, sides=())
    (n_dev,) = con.execute("SELECT count(*) FROM slices JOIN tracks USING (track_id) WHERE lane IN ('eu', 'pcie')").fetchone()
    con.close()
    limit = n_dev + 1  # the device slices fit, the graph with its host nodes does not
    rep = runner.run_passes(store, res.id, params={"whatif_max_nodes": limit})
    assert rep.whatif["nodes"] > limit
    assert rep.findings and all(f["impact_ns"] is None for f in rep.findings)
    assert f"exceed whatif_max_nodes ({limit:,})" in rep.findings[0]["impact_basis"]
    assert all(s.impact_ns is None for s in rep.statuses if s.status == "ran" and s.n_findings)
    assert rep.whatif["all_fixed_saving_ns"] is None and rep.whatif["replayed_makespan_ns"] == rep.run_ns
    assert rep.critical_path and sum(b - a for a, b, *_ in rep.critical_path) <= rep.run_ns
    con = store.connect(res.id)
    (n,) = con.execute("SELECT count(*) FROM critical_path").fetchone()
    assert n == len(rep.critical_path)


def test_critical_path_segments_tile_the_path_and_the_route_merges_them_per_bucket(tmp_path):
    from acceltrace.store import queries

    store = Store(tmp_path / "s")
    (res,) = ingest_paths(store, [RUNS / "strided-access-seed2"])
    rep = runner.run_passes(store, res.id)
    path = rep.critical_path
    assert all(a < b for a, b, *_ in path) and all(p[1] <= q[0] for p, q in zip(path, path[1:]))
    assert {t for _, _, t, *_ in path} <= set(R.SEGMENT_TYPES)
    con = store.connect(res.id)
    whole = queries.critical_path(con, 0, 1 << 62)
    assert whole["segments_total"] == len(path) and not whole["merged"]
    assert whole["path_ns"] == sum(b - a for a, b, *_ in path) == sum(whole["by_type_ns"].values())
    few = queries.critical_path(con, 0, 1 << 62, max_segments=10)
    assert few["merged"] and len(few["segments"]) <= 10 and sum(s["merged"] for s in few["segments"]) == len(path)


def test_a_trace_whose_device_slices_exceed_the_node_limit_builds_no_graph_at_analysis(tmp_path):
    # at 10 M events the graph's build alone took minutes and GBs: past the cap it is not built
    store = Store(tmp_path / "s")
    (res,) = ingest_paths(store, [RUNS / "strided-access-seed2"])
    rep = runner.run_passes(store, res.id, params={"whatif_max_nodes": 100})
    assert rep.findings and all(f["impact_ns"] is None for f in rep.findings)
    assert "exceed whatif_max_nodes (100): the graph is not built" in rep.findings[0]["impact_basis"]
    assert rep.whatif["all_fixed_saving_ns"] is None and rep.whatif["makespan_ns"] == rep.run_ns
    assert rep.whatif["nodes"] > 100 and rep.critical_path == []
    assert [s.pass_id for s in rep.statuses if s.status == "failed"] == []
    con = store.connect(res.id)
    assert con.execute("SELECT count(*) FROM critical_path").fetchone() == (0,)
    assert con.execute("SELECT makespan_ns, replayed_makespan_ns FROM whatif").fetchone() == (rep.run_ns, None)


@pytest.mark.parametrize("seed, devices", [(41, 4), (43, 1)])
def test_a_saturated_link_fix_saves_what_the_model_saves_without_the_saturation(tmp_path, seed, devices):
    """Behind a shared uplink (4 devices, seed 41) the fixed transfers run at their unloaded time on their
    own link, as the model's counterfactual without the uplink does; on a device's own link (1 device,
    seed 43) on a link twice as fast, as its counterfactual does. Seeds not used while writing it."""
    out = tmp_path / "run"
    subprocess.run([sys.executable, "-m", "acceltrace", "sim", "pcie-saturation", "--out", str(out), "--seed",
                    str(seed)], check=True, capture_output=True, cwd=ROOT)
    doc = json.loads((out / "ground_truth.json").read_text())
    assert doc["config"]["devices"] == devices
    truth = sum(i["impact_ns"] for i in doc["issues"] if i["kind"] == "pcie_saturation")
    store = Store(tmp_path / "s")
    (res,) = ingest_paths(store, [out], after_publish=runner.after_publish)
    assert res.error is None, res.error
    rep = W.whatif(store, res.id, per_pass=0)
    got = next(p["saving_ns"] for p in rep["passes"] if p["pass"] == "pcie_saturation")
    assert truth > 0 and abs(got / truth - 1) <= 0.10, (got, truth)


def test_what_ifs_replayed_two_at_a_time_save_what_they_save_one_at_a_time(tmp_path, monkeypatch):
    """A big graph replays its passes' what-ifs on two threads (analysis/impact.py): the same savings,
    per pass and all fixed, as one at a time (forced here on a small run)."""
    from acceltrace.analysis import impact

    store = Store(tmp_path / "s")
    (res,) = ingest_paths(store, [RUNS / "llm-inference-seed2"])
    one = W.whatif(store, res.id, keep=False)
    monkeypatch.setattr(impact, "PARALLEL_FROM_NODES", 0)
    two = W.whatif(store, res.id, keep=False)
    assert [p for p in one["passes"] if p["saving_ns"] > 0] and one["all_fixed_saving_ns"] > 0  # two jobs at once
    assert two["passes"] == one["passes"] and two["all_fixed_saving_ns"] == one["all_fixed_saving_ns"]
    assert two["findings"] == one["findings"]
