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
