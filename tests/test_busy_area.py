"""Device busy, CPU busy and area totals against hand-computed numbers (docs/analysis.md "Busy")."""

import pytest

from acceltrace.ingest.builder import TraceBuilder
from acceltrace.store import queries, utilization
from acceltrace.store.catalog import Store

T0 = 1_000_000_000


@pytest.fixture
def con(tmp_path):
    store = Store(tmp_path / "store")
    tid, tmp = store.begin("busy", 0, None)
    b = TraceBuilder(tmp)
    s1 = b.track("eu", "stream 1", group_name="GPU 0", device="0")
    s2 = b.track("eu", "stream 2", group_name="GPU 0", device="0")
    h2d = b.track("pcie", "PCIe HtoD", group_name="GPU 0", device="0")
    ann = b.track("annotation", "stream 1 annotations", group_name="GPU 0", device="0")
    cpu = b.track("cpu", "thread 1", group_name="proc")
    rows = [
        # device 0: stream 1 [0, 100), stream 2 [50, 150) -> union [0, 150); a copy [300, 400); a marker [0, 1000)
        (s1, 0, 100, "k1", "kernel", 0), (s2, 50, 100, "k2", "kernel", 0), (h2d, 300, 100, "Memcpy HtoD", "gpu_memcpy", 0),
        (ann, 0, 1000, "capture_1", "gpu_user_annotation", 0),
        # thread 1: ProfilerStep [0, 1000) (an annotation) > op [100, 500) > call [200, 300); op [600, 700)
        (cpu, 0, 1000, "ProfilerStep#1", "user_annotation", 0), (cpu, 100, 400, "aten::mm", "cpu_op", 1),
        (cpu, 200, 100, "cudaLaunchKernel", "cuda_runtime", 2), (cpu, 600, 100, "aten::add", "cpu_op", 1),
    ]
    b.add_slices({"track_id": [r[0] for r in rows], "ts": [T0 + r[1] for r in rows], "dur": [r[2] for r in rows],
                  "name": [r[3] for r in rows], "category": [r[4] for r in rows], "depth": [r[5] for r in rows]})
    store.publish(tid, tmp, "test", b.finish("test", "busy"))
    return store.connect(tid)


def test_device_busy_is_the_union_of_its_work_without_annotations(con):
    b = utilization.busy(con, T0, T0 + 1000, buckets=10)
    # [0, 150) + [300, 400) = 250 ns of 1000; not the 0.3 mean of three tracks' fractions, not the marker's 1000
    assert [(d["device"], d["group_name"], d["busy_ns"], d["fraction"]) for d in b["devices"]] == [
        ("0", "GPU 0", 250, 0.25)]
    assert b["devices"][0]["series"] == [1.0, 0.5, 0, 1.0, 0, 0, 0, 0, 0, 0]
    assert "union" in b["definition"]["device"]


def test_cpu_busy_per_thread_counts_the_outermost_real_ops_only(con):
    b = utilization.busy(con, T0, T0 + 1000)
    # aten::mm [100, 500) (its child inside it) + aten::add [600, 700): 500 ns; the ProfilerStep annotation is not work
    assert [(t["name"], t["busy_ns"]) for t in b["threads"]] == [("thread 1", 500)]


def test_busy_is_clipped_to_the_range(con):
    b = utilization.busy(con, T0 + 120, T0 + 350)
    assert [(d["busy_ns"], d["fraction"]) for d in b["devices"]] == [(30 + 50, pytest.approx(80 / 230))]
    assert [t["busy_ns"] for t in b["threads"]] == [230]


def test_area_totals_are_clipped_with_self_time_and_the_lane_of_each_name(con):
    agg = queries.area_aggregate(con, T0 + 150, T0 + 650)
    names = {(n["lane"], n["name"]): n for n in agg["names"]}
    # aten::mm [100, 500) clipped to [150, 500) = 350, minus its child cudaLaunchKernel [200, 300) = 250 self
    assert (names[("cpu", "aten::mm")]["total_ns"], names[("cpu", "aten::mm")]["self_ns"]) == (350, 250)
    assert names[("cpu", "aten::mm")]["max_ns"] == 400  # whole-slice statistics stay whole
    # ProfilerStep [0, 1000) clipped to 500; its children aten::mm (350 inside) and aten::add (50 inside)
    assert (names[("cpu", "ProfilerStep#1")]["total_ns"], names[("cpu", "ProfilerStep#1")]["self_ns"]) == (500, 100)
    assert (names[("cpu", "aten::add")]["total_ns"], names[("cpu", "aten::add")]["self_ns"]) == (50, 50)
    assert names[("annotation", "capture_1")]["total_ns"] == 500
    assert ("eu", "k2") not in names  # k2 ends at 150: outside the range
    assert names[("pcie", "Memcpy HtoD")]["total_ns"] == 100
    assert [d["busy_ns"] for d in agg["busy"]["devices"]] == [100]
