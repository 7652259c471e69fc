"""Call trees and the op-to-device rollup against sums computed here from the raw rows."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient

from acceltrace.ingest.pipeline import ingest_paths
from acceltrace.server.app import create_app
from acceltrace.store.catalog import Store

US = 1000  # the Chrome trace is in us; the store in ns

# one thread: step > [linear > (addmm > cudaLaunchKernel k1), relu > cudaLaunchKernel k2], step > memcpy call
EVENTS = [
    {"ph": "X", "cat": "user_annotation", "name": "step", "pid": 1, "tid": 1, "ts": 0, "dur": 100},
    {"ph": "X", "cat": "cpu_op", "name": "aten::linear", "pid": 1, "tid": 1, "ts": 10, "dur": 40},
    {"ph": "X", "cat": "cpu_op", "name": "aten::addmm", "pid": 1, "tid": 1, "ts": 12, "dur": 30},
    {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 20, "dur": 5,
     "args": {"correlation": 1}},
    {"ph": "X", "cat": "cpu_op", "name": "aten::relu", "pid": 1, "tid": 1, "ts": 60, "dur": 20},
    {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 65, "dur": 5,
     "args": {"correlation": 2}},
    {"ph": "X", "cat": "cuda_runtime", "name": "cudaMemcpyAsync", "pid": 1, "tid": 1, "ts": 85, "dur": 10,
     "args": {"correlation": 3}},
    {"ph": "X", "cat": "kernel", "name": "k1", "pid": 0, "tid": 7, "ts": 30, "dur": 50,
     "args": {"correlation": 1, "device": 0, "stream": 7}},
    {"ph": "X", "cat": "kernel", "name": "k2", "pid": 0, "tid": 7, "ts": 80, "dur": 12,
     "args": {"correlation": 2, "device": 0, "stream": 7}},
    {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD (Pinned -> Device)", "pid": 0, "tid": 8, "ts": 90,
     "dur": 8, "args": {"correlation": 3, "bytes": 4096, "device": 0, "stream": 8}},
]


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    d = tmp_path_factory.mktemp("views")
    path = d / "t.json"
    path.write_text(json.dumps({"traceEvents": EVENTS}))
    store = Store(d / "store")
    (res,) = ingest_paths(store, [path])
    assert res.error is None, res.error
    with TestClient(create_app(store.root)) as c:
        c.trace_id = res.id
        yield c


def _walk(node, path=()):
    yield path + (node["name"],), node
    for ch in node["children"]:
        yield from _walk(ch, path + (node["name"],))


def test_top_down_tree_totals_and_self_times(client):
    r = client.get(f"/api/traces/{client.trace_id}/tree")
    assert r.status_code == 200, r.text
    nodes = {p[1:]: n for p, n in _walk(r.json()) if len(p) > 1}
    assert nodes[("step",)]["total_ns"] == 100 * US and nodes[("step",)]["self_ns"] == (100 - 40 - 20 - 10) * US
    assert nodes[("step", "aten::linear")]["self_ns"] == 10 * US
    assert nodes[("step", "aten::linear", "aten::addmm", "cudaLaunchKernel")]["total_ns"] == 5 * US
    assert nodes[("step", "aten::relu", "cudaLaunchKernel")]["count"] == 1
    # self times of all nodes add up to the root's total
    assert sum(n["self_ns"] for p, n in _walk(r.json()) if len(p) > 1) == r.json()["total_ns"] == 100 * US


def test_the_range_clips_and_bottom_up_starts_from_each_frames_self_time(client):
    r = client.get(f"/api/traces/{client.trace_id}/tree", params={"start_ns": 15 * US, "end_ns": 70 * US,
                                                                  "mode": "bottom-up"})
    assert r.status_code == 200, r.text
    top = {c["name"]: c for c in r.json()["children"]}
    # cudaLaunchKernel frames: [20,25) and [65,70) -> 10 us of self time
    assert top["cudaLaunchKernel"]["self_ns"] == 10 * US and top["cudaLaunchKernel"]["count"] == 2
    callers = {c["name"] for c in top["cudaLaunchKernel"]["children"]}
    assert callers == {"aten::addmm", "aten::relu"}
    # all roots of the bottom-up tree = all self time in the range = the clipped depth-0 time
    assert sum(c["self_ns"] for c in r.json()["children"]) == 55 * US


def test_rollup_credits_every_enclosing_op_with_what_it_launched(client):
    r = client.get(f"/api/traces/{client.trace_id}/rollup")
    assert r.status_code == 200, r.text
    rows = {row["name"]: row for row in r.json()["rows"]}
    assert rows["step"]["device_ns"] == (50 + 12) * US and rows["step"]["copy_ns"] == 8 * US
    assert rows["step"]["bytes"] == 4096
    assert rows["aten::linear"]["device_ns"] == 50 * US and rows["aten::addmm"]["device_ns"] == 50 * US
    assert rows["aten::relu"]["device_ns"] == 12 * US and rows["aten::relu"]["copy_ns"] == 0
    assert rows["cudaLaunchKernel"]["count"] == 2 and rows["cudaLaunchKernel"]["device_ns"] == 62 * US
    assert {"name", "count", "host_ns", "device_ns", "copy_ns", "bytes"} <= set(rows["step"])


def test_rollup_on_a_real_trace_equals_the_correlated_kernels_sum(tmp_path):
    # a launch call is credited with exactly the kernels of its correlation id; computed here by a
    # plain join (no ancestor walk), each kernel once
    from pathlib import Path

    sample = Path(__file__).resolve().parent.parent / "sample_traces" / "chrome" / "kineto" / "a100-rank0-memcpy.json.gz"
    store = Store(tmp_path / "s")
    (res,) = ingest_paths(store, [sample])
    assert res.error is None, res.error
    con = store.connect(res.id)
    with TestClient(create_app(store.root)) as c:
        rows = {r["name"]: r for r in c.get(f"/api/traces/{res.id}/rollup").json()["rows"]}
    want = dict(con.execute("""
        WITH calls AS (
            SELECT s.name, s.corr_id FROM slices s JOIN tracks t USING (track_id)
            WHERE t.lane = 'cpu' AND s.corr_id IS NOT NULL AND s.dur > 0
            QUALIFY row_number() OVER (PARTITION BY s.corr_id ORDER BY s.ts) = 1
        )
        SELECT c.name, sum(k.dur) FROM calls c
        JOIN slices k ON k.corr_id = c.corr_id JOIN tracks kt ON kt.track_id = k.track_id
        WHERE kt.lane = 'eu' AND k.dur > 0
        GROUP BY c.name""").fetchall())
    launches = {n: v for n, v in want.items() if "aunch" in n}
    assert launches, want
    for name, dev in launches.items():
        assert rows[name]["device_ns"] == dev, (name, rows[name], dev)
    total_kernel = sum(want.values())
    assert all(0 <= r["device_ns"] <= total_kernel and r["host_ns"] > 0 for r in rows.values())


def test_tree_p95_is_the_nearest_rank_percentile_of_each_nodes_slices(client):
    # bottom-up cudaLaunchKernel: two 5 us frames; top-down roots: one slice each
    r = client.get(f"/api/traces/{client.trace_id}/tree", params={"mode": "bottom-up"})
    top = {c["name"]: c for c in r.json()["children"]}
    assert top["cudaLaunchKernel"]["p95_ns"] == 5 * US and top["aten::relu"]["p95_ns"] == 15 * US  # 20 - 5 of its launch
    r = client.get(f"/api/traces/{client.trace_id}/tree")
    step = r.json()["children"][0]
    assert step["name"] == "step" and step["p95_ns"] == 100 * US and r.json()["p95_ns"] is None


def test_the_track_filter_keeps_only_those_tracks(client):
    whole = client.get(f"/api/traces/{client.trace_id}/tree").json()
    tracks = client.get(f"/api/traces/{client.trace_id}").json()["tracks"]
    cpu = [t["track_id"] for t in tracks if t["lane"] == "cpu"]
    other = [t["track_id"] for t in tracks if t["lane"] != "cpu"]
    assert client.get(f"/api/traces/{client.trace_id}/tree", params={"track": cpu}).json()["total_ns"] == \
        whole["total_ns"] > 0
    assert client.get(f"/api/traces/{client.trace_id}/tree", params={"track": other[:1]}).json()["total_ns"] == 0


def test_device_tree_puts_each_kernel_under_the_op_that_launched_it(client):
    r = client.get(f"/api/traces/{client.trace_id}/tree", params={"source": "device"})
    assert r.status_code == 200, r.text
    tree = r.json()
    nodes = {p[1:]: n for p, n in _walk(tree) if len(p) > 1}
    chain = ("step", "aten::linear", "aten::addmm", "cudaLaunchKernel", "k1")
    assert nodes[chain]["total_ns"] == nodes[chain]["self_ns"] == 50 * US and nodes[chain]["lane"] == "eu"
    assert nodes[chain[:-1]]["total_ns"] == 50 * US and nodes[chain[:-1]]["self_ns"] == 0
    assert nodes[("step", "cudaMemcpyAsync", "Memcpy HtoD (Pinned -> Device)")]["lane"] == "pcie"
    assert nodes[("step",)]["total_ns"] == tree["total_ns"] == (50 + 12 + 8) * US
    # self time lives only at the leaves, and the leaves' self times sum to the root's total
    assert sum(n["self_ns"] for p, n in _walk(tree) if len(p) > 1) == tree["total_ns"]
    # the node's longest slice links to the timeline: k1's own slice
    k1 = client.get(f"/api/traces/{client.trace_id}/slices/{nodes[chain]['slice_id']}").json()["slice"]
    assert k1["name"] == "k1"
    # bottom-up: the kernel first, then the calls that launched it
    bu = client.get(f"/api/traces/{client.trace_id}/tree", params={"source": "device", "mode": "bottom-up"}).json()
    k1_bu = next(c for c in bu["children"] if c["name"] == "k1")
    assert k1_bu["self_ns"] == 50 * US and [c["name"] for c in k1_bu["children"]] == ["cudaLaunchKernel"]
    assert k1_bu["p95_ns"] == 50 * US


def test_device_tree_of_a_window_keeps_work_launched_before_it(client):
    # k2 runs [80, 92) us, launched at 65 us: a window [75, 95) holds k2, k1's last 5 us and the
    # memcpy's first 5 us
    r = client.get(f"/api/traces/{client.trace_id}/tree", params={"source": "device", "start_ns": 75 * US,
                                                                  "end_ns": 95 * US})
    nodes = {p[1:]: n for p, n in _walk(r.json()) if len(p) > 1}
    assert nodes[("step", "aten::relu", "cudaLaunchKernel", "k2")]["total_ns"] == 12 * US
    assert nodes[("step", "cudaMemcpyAsync", "Memcpy HtoD (Pinned -> Device)")]["total_ns"] == 5 * US
    assert nodes[("step", "aten::linear", "aten::addmm", "cudaLaunchKernel", "k1")]["total_ns"] == 5 * US
    assert r.json()["total_ns"] == 22 * US


def test_a_driver_lane_launch_sits_under_the_cpu_op_it_ran_inside(tmp_path):
    events = [
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 0, "dur": 50},
        {"ph": "X", "cat": "cuda_driver", "name": "cuLaunchKernelEx", "pid": 1, "tid": 1, "ts": 10, "dur": 5,
         "args": {"correlation": 9}},
        {"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": 20, "dur": 30,
         "args": {"correlation": 9, "device": 0, "stream": 7}},
        {"ph": "X", "cat": "kernel", "name": "orphan", "pid": 0, "tid": 7, "ts": 60, "dur": 4,
         "args": {"correlation": 77, "device": 0, "stream": 7}},
    ]
    path = tmp_path / "d.json"
    path.write_text(json.dumps({"traceEvents": events}))
    store = Store(tmp_path / "s")
    (res,) = ingest_paths(store, [path])
    assert res.error is None, res.error
    with TestClient(create_app(store.root)) as c:
        tree = c.get(f"/api/traces/{res.id}/tree", params={"source": "device"}).json()
        rows = {r["name"]: r for r in c.get(f"/api/traces/{res.id}/rollup").json()["rows"]}
    nodes = {p[1:]: n for p, n in _walk(tree) if len(p) > 1}
    assert nodes[("aten::mm", "cuLaunchKernelEx", "gemm")]["total_ns"] == 30 * US
    assert nodes[("aten::mm", "cuLaunchKernelEx")]["lane"] == "driver"
    assert nodes[("(no launching call)", "orphan")]["total_ns"] == 4 * US
    assert rows["aten::mm"]["device_ns"] == 30 * US and rows["cuLaunchKernelEx"]["host_ns"] == 5 * US


def test_the_precomputed_whole_trace_equals_the_trees_computed_from_the_slices(tmp_path):
    from pathlib import Path

    from acceltrace.store import aggregates

    sample = Path(__file__).resolve().parent.parent / "sample_traces" / "chrome" / "kineto" / "b200-eager-rank0.json.gz"
    store = Store(tmp_path / "s")
    (res,) = ingest_paths(store, [sample])
    assert res.error is None, res.error
    # the precompute is a side file written after publication, never in the published trace itself
    assert store.side_path(res.id, aggregates.VIEWS_SIDE).exists()
    bare = store.connect(res.id, sides=())
    assert bare.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name LIKE 'agg_%'").fetchone() == (0,)
    bare.close()
    with TestClient(create_app(store.root), base_url="http://127.0.0.1") as c:
        kinds = {t["name"]: t["kind"] for t in c.get(f"/api/traces/{res.id}/tables").json()["tables"]}
        api_tree = c.get(f"/api/traces/{res.id}/tree", params={"source": "device"}).json()
    assert kinds["agg_tree"] == "views precompute" and kinds["slices"] == "stored"
    con = store.connect(res.id)
    (t0, t1) = con.execute("SELECT min(ts), max(ts + dur) + 1 FROM slices").fetchone()
    assert api_tree["total_ns"] == aggregates.call_tree(con, t0, t1, source="device")["total_ns"]

    def strip(n):
        return (n["name"], n["count"], n["total_ns"], n["self_ns"], n["p95_ns"], tuple(map(strip, n["children"])))

    for source in aggregates.SOURCES:
        for mode in aggregates.MODES:
            pre = aggregates.call_tree(con, t0, t1, mode=mode, source=source)
            live = aggregates.call_tree(con, t0, t1, mode=mode, source=source, precomputed=False)
            assert pre["total_ns"] == live["total_ns"] > 0 and strip(pre) == strip(live), (source, mode)
    assert aggregates.rollup(con, t0, t1) == aggregates.rollup(con, t0, t1, precomputed=False)
    # the device tree's total is every kernel, memset and copy of the trace, by plain SQL
    (want,) = con.execute("SELECT sum(s.dur) FROM slices s JOIN tracks t USING (track_id)"
                          " WHERE t.lane IN ('eu', 'pcie') AND s.dur > 0").fetchone()
    assert aggregates.call_tree(con, t0, t1, source="device")["total_ns"] == want
    # a trace stored before the precompute (no agg_* tables) answers the same from its slices
    want_tree = strip(aggregates.call_tree(con, t0, t1, source="device"))
    # a window reads the launching calls from agg_launch; without it (below) from the slices
    w0, w1 = t0 + (t1 - t0) // 3, t0 + (t1 - t0) // 2
    want_window = (strip(aggregates.call_tree(con, w0, w1, source="device", mode="bottom-up")),
                   aggregates.rollup(con, w0, w1))
    con.close()
    # the trace without its views side file: what a trace stored before the precompute (or whose
    # side file is still being written) answers
    old = store.connect(res.id, sides=())
    assert not old.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name LIKE 'agg_%'").fetchone()[0]
    assert strip(aggregates.call_tree(old, t0, t1, source="device")) == want_tree
    assert (strip(aggregates.call_tree(old, w0, w1, source="device", mode="bottom-up")),
            aggregates.rollup(old, w0, w1)) == want_window
    old.close()


def test_a_failed_precompute_still_publishes_the_trace_and_its_views_compute_from_the_slices(tmp_path, monkeypatch):
    import duckdb

    from acceltrace.store import aggregates

    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": EVENTS}))

    def out_of_memory(*a, **k):
        raise duckdb.OutOfMemoryException("Out of Memory Error: failed to pin block (test)")

    monkeypatch.setattr(aggregates, "_build_tables", out_of_memory)
    store = Store(tmp_path / "s")
    (res,) = ingest_paths(store, [path])
    assert res.error is None, res.error
    con = store.connect(res.id)
    info = dict(con.execute("SELECT key, value FROM agg_info").fetchall())
    assert info["version"] == "none" and "Out of Memory" in info["error"]
    assert not con.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name IN ('agg_tree', 'agg_rollup')"
                           ).fetchone()[0]
    con.close()
    monkeypatch.undo()
    with TestClient(create_app(store.root), base_url="http://127.0.0.1") as c:
        tree = c.get(f"/api/traces/{res.id}/tree").json()
        rows = {r["name"]: r for r in c.get(f"/api/traces/{res.id}/rollup").json()["rows"]}
    assert tree["total_ns"] == 100 * US and rows["step"]["device_ns"] == (50 + 12) * US


def test_the_depth_by_depth_path_walk_of_big_traces_gives_the_recursive_walks_trees(client, monkeypatch):
    from acceltrace.store import frames

    def trees():
        return [client.get(f"/api/traces/{client.trace_id}/tree", params={"mode": m, "source": s, "start_ns": 1}).json()
                for m in ("top-down", "bottom-up") for s in ("cpu", "device")]

    recursive = trees()
    monkeypatch.setattr(frames, "WALK_CTE_MAX_ROWS", 0)  # as for a trace of more CPU slices than that
    assert trees() == recursive


def test_a_device_local_copy_counts_as_a_copy_with_its_bytes_in_the_rollup(tmp_path):
    # a DtoD memcpy runs on the device's stream (an eu track), not on a link: still a copy, not a kernel
    events = EVENTS + [
        {"ph": "X", "cat": "cpu_op", "name": "aten::copy_", "pid": 1, "tid": 1, "ts": 200, "dur": 20},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaMemcpyAsync", "pid": 1, "tid": 1, "ts": 205, "dur": 4,
         "args": {"correlation": 9}},
        {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy DtoD (Device -> Device)", "pid": 0, "tid": 7, "ts": 210,
         "dur": 6, "args": {"correlation": 9, "bytes": 8000, "device": 0, "stream": 7}},
    ]
    path = tmp_path / "dtod.json"
    path.write_text(json.dumps({"traceEvents": events}))
    store = Store(tmp_path / "s")
    (res,) = ingest_paths(store, [path])
    assert res.error is None, res.error
    con = store.connect(res.id, sides=())
    (lane, direction) = con.execute("SELECT t.lane, s.direction FROM slices s JOIN tracks t USING (track_id)"
                                    " WHERE s.name LIKE 'Memcpy DtoD%'").fetchone()
    con.close()
    assert lane == "eu" and direction == "d2d"
    with TestClient(create_app(store.root), base_url="http://127.0.0.1") as c:
        whole = {r["name"]: r for r in c.get(f"/api/traces/{res.id}/rollup").json()["rows"]}
        window = {r["name"]: r for r in c.get(f"/api/traces/{res.id}/rollup",
                                               params={"start_ns": 150 * US, "end_ns": 300 * US}).json()["rows"]}
    for rows in (whole, window):  # the precomputed whole trace and a window computed from the slices
        op = rows["aten::copy_"]
        assert (op["copy_ns"], op["bytes"], op["copies"], op["device_ns"], op["kernels"]) == (6 * US, 8000, 1, 0, 0)
    assert whole["cudaMemcpyAsync"]["copies"] == 2 and whole["cudaMemcpyAsync"]["bytes"] == 4096 + 8000
