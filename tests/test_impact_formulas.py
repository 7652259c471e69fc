"""Impact formulas against hand-computed cases (docs/analysis.md, issue 13 "impact that claims a
saving must be a saving"), and annotations never counted as device work."""

import pytest

from acceltrace.analysis.runner import run_passes
from acceltrace.ingest.builder import TraceBuilder
from acceltrace.store.catalog import Store
from analysis_traces import T0, US, TraceSpec

MIB = 1 << 20


@pytest.fixture
def store(tmp_path):
    return Store(tmp_path / "store")


def run(store, tid, passes):
    rep = run_passes(store, tid, passes=passes)
    assert [(s.pass_id, s.reason) for s in rep.statuses if s.status == "failed"] == []
    return [f for f in rep.findings if f["pass"] in passes]


def test_pageable_copy_saves_its_time_minus_the_same_bytes_at_the_pinned_rate(store):
    # the case: 73.5 MiB pageable at 2.5 GB/s; the trace's own best pinned copy is the reference
    t = TraceSpec(link=None)
    nbytes = int(73.5 * MIB)
    dma_us = nbytes / 2.5e9 * 1e6  # 30827.1 us
    t.kernel(0, 100)
    page = t.copy(200, dma_us, nbytes, host_mem="pageable", call_ts_us=150)
    pinned_us = 5200.0  # 64 MiB in 5.2 ms: B = 12.905 GB/s, and L = 5.2 ms - 64 MiB / B = 0
    t.copy(200 + dma_us + 100, pinned_us, 64 * MIB, host_mem="pinned")
    t.kernel(200 + dma_us + 100 + pinned_us + 10, 100)
    rows = run(store, t.build(store), ["pageable_memory"])
    assert len(rows) == 1 and rows[0]["slice_id"] == page
    b = 64 * MIB / (pinned_us * 1e-6)
    by_hand_ns = round(dma_us * US) - nbytes / b * 1e9  # 30.827 ms - 5.972 ms = 24.855 ms
    assert by_hand_ns == pytest.approx(24.855e6, rel=1e-3)
    assert rows[0]["exclusive_ns"] == pytest.approx(by_hand_ns, abs=2)
    assert rows[0]["threshold"] == pytest.approx(b / 1e9)
    msg = rows[0]["message"]
    assert msg.startswith("pageable H2D copy of 73.5 MiB (1 DMA chunk): 30.83 ms of DMA at 2.50 GB/s, in a call of 30.88 ms")
    assert "from pinned memory the DMA would take about 5.97 ms (reference: best pinned copy, 12.91 GB/s)" in msg
    assert "saving up to 24.86 ms" in msg


def test_pageable_copy_without_a_reference_bandwidth_claims_no_saving(store):
    t = TraceSpec(link=None)
    t.kernel(0, 100)
    t.copy(200, 3000, 8 * MIB, host_mem="pageable", call_ts_us=150)
    t.kernel(3300, 100)
    rows = run(store, t.build(store), ["pageable_memory"])
    assert [(f["exclusive_ns"], f["severity"]) for f in rows] == [(0, "info")]
    assert "no pinned reference bandwidth in this trace, so no saving is claimed" in rows[0]["message"]


def test_launch_gap_message_splits_the_idle_time_into_late_submission_and_launch_latency(store):
    t = TraceSpec()
    t.kernel(0, 100, ready_us=-5)
    t.kernel(100, 100, ready_us=50)
    t.kernel(250, 100, ready_us=240)  # ran dry at 200, launch call returned at 240, started at 250
    rows = run(store, t.build(store), ["launch_gaps"])
    assert len(rows) == 1
    f = rows[0]
    assert f["exclusive_ns"] == 50 * US and f["value"] == 50 * US
    assert ("idle for 50.0 us before k on dev0 matrix 0: the call that submitted it returned 40.0 us after"
            " the device ran out of work, and the work started 10.0 us after that (launch latency)") in f["message"]
    assert "all 50.0 us idle is the saving" in f["message"]


def _with_annotation(store, annotation: bool) -> str:
    """Two kernels 0-100 and 300-400 us on dev0 (the second submitted late, at 290 us), and
    optionally a device annotation range 0-400 us (a CUDA-graph capture marker) on the annotation lane."""
    tid, tmp = store.begin("ann", 0, None)
    b = TraceBuilder(tmp)
    cpu = b.track("cpu", "main", group_name="host")
    eu = b.track("eu", "stream 7", group_name="dev0", device="dev0")
    rows = [(cpu, 0, 5, "launch", 1), (eu, 10, 90, "k1", 1), (cpu, 285, 5, "launch", 2), (eu, 300, 100, "k2", 2)]
    if annotation:
        ann = b.track("annotation", "stream 7 annotations", group_name="dev0", device="dev0")
        rows.append((ann, 0, 400, "capture_32_FULL", None))
    first = b.add_slices({"track_id": [r[0] for r in rows], "ts": [T0 + r[1] * US for r in rows],
                          "dur": [r[2] * US for r in rows], "name": [r[3] for r in rows],
                          "corr_id": [r[4] for r in rows]})
    b.add_flows([first, first + 2], [first + 1, first + 3], ["launch", "launch"])
    store.publish(tid, tmp, "test", b.finish("test", "ann"))
    return tid


def test_a_device_annotation_is_not_device_work_for_any_pass(store):
    plain = run(store, _with_annotation(store, False), ["launch_gaps"])
    marked = run(store, _with_annotation(store, True), ["launch_gaps"])
    # the 200 us gap (100 -> 300 us) is found whether or not a marker spans it
    assert [(f["ts"] - T0, f["dur"], f["exclusive_ns"]) for f in plain] == [(100 * US, 200 * US, 200 * US)]
    assert [(f["ts"] - T0, f["dur"], f["exclusive_ns"]) for f in marked] == [(100 * US, 200 * US, 200 * US)]
