"""Trace comparison (diff/): synthetic pairs with known changes checked exactly, the real before/after
Kineto pair, a device-model run with and without an injected issue, the CLI and the API."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from acceltrace.analysis.runner import after_publish
from acceltrace.diff.compare import STEP_SELF_NAME, Noise, compare
from acceltrace.diff.steps import StepsError, parse_spec
from acceltrace.ingest.pipeline import ingest_paths
from acceltrace.store.catalog import Store

from diff_traces import COPY, GEMM_A_US, GEMM_B_US, STEP_A_US, STEP_B_US, STEPS, write_pair

ROOT = Path(__file__).resolve().parent.parent
REAL = ROOT / "sample_traces" / "chrome" / "kineto" / "diff"
US = 1000


def _ingest(store: Store, path: Path) -> str:
    (r,) = ingest_paths(store, [path], after_publish=after_publish)
    assert r.error is None, r.error
    return r.id


@pytest.fixture(scope="module")
def pairs(tmp_path_factory):
    """One store with the synthetic pair, the real pair and a device-model pair, all analysed."""
    from acceltrace.sim import ground_truth, scenarios
    from acceltrace.sim.run import run_plan
    from acceltrace.sim.session import write_run

    root = tmp_path_factory.mktemp("diff")
    store = Store(root / "store")
    syn_a, syn_b = write_pair(root / "syn")
    ids = {"syn_a": _ingest(store, syn_a), "syn_b": _ingest(store, syn_b),
           "real_a": _ingest(store, REAL / "control.json.gz"), "real_b": _ingest(store, REAL / "test.json.gz")}
    # the same seed and plan with and without its one injected issue (the ground truth's counterfactual)
    plan = scenarios.build("pageable-memory", 3)
    with_issue, without = run_plan(plan), run_plan(plan.remove("pageable_memory"))
    for key, result in (("sim_a", with_issue), ("sim_b", without)):
        write_run(result, ground_truth.document(result, "pageable-memory", 3, []), root / key, 3)
        ids[key] = _ingest(store, root / key)
    ids["impact_ns"] = int(round(with_issue.duration_ns - without.duration_ns))
    return store, ids, (syn_a, syn_b)


def _row(doc, lane, name):
    (r,) = [r for r in doc["rows"] if r["lane"] == lane and r["name"] == name]
    return r


# -- synthetic pair: every injected change, exactly ----------------------------------------------------
def test_a_kernel_made_twice_as_slow_is_increased_with_ratio_two(pairs):
    store, ids, _ = pairs
    r = _row(compare(store, ids["syn_a"], ids["syn_b"]), "kernel", "gemm_kernel")
    assert (r["count_a"], r["count_b"]) == (STEPS, STEPS)
    assert (r["total_a_ns"], r["total_b_ns"]) == (STEPS * GEMM_A_US * US, STEPS * GEMM_B_US * US)
    assert r["delta_ns"] == STEPS * (GEMM_B_US - GEMM_A_US) * US and r["ratio"] == 2.0
    assert (r["mean_a_ns"], r["p50_b_ns"], r["p95_b_ns"]) == (GEMM_A_US * US, GEMM_B_US * US, GEMM_B_US * US)
    assert r["status"] == "increased" and r["device"] == "0"


def test_an_added_op_and_a_removed_copy_have_their_status(pairs):
    store, ids, _ = pairs
    doc = compare(store, ids["syn_a"], ids["syn_b"])
    added = _row(doc, "cpu_op", "aten::dropout")
    assert (added["status"], added["count_a"], added["count_b"], added["total_b_ns"]) == ("added", 0, STEPS, STEPS * 50 * US)
    removed = _row(doc, "copy", COPY)
    assert (removed["status"], removed["count_a"], removed["count_b"], removed["delta_ns"]) == \
        ("removed", STEPS, 0, -STEPS * 100 * US)
    assert _row(doc, "runtime", "cudaMemcpyAsync")["status"] == "removed"
    for lane, name in (("kernel", "relu_kernel"), ("cpu_op", "aten::relu"), ("runtime", "cudaLaunchKernel")):
        assert _row(doc, lane, name)["status"] == "unchanged" and _row(doc, lane, name)["delta_ns"] == 0
    # rows come biggest change first
    deltas = [abs(r["delta_ns"]) for r in doc["rows"]]
    assert deltas == sorted(deltas, reverse=True)


def test_the_headline_contributors_add_up_to_the_step_time_delta(pairs):
    store, ids, _ = pairs
    h = compare(store, ids["syn_a"], ids["syn_b"])["headline"]
    assert h["basis"] == "step"
    assert (h["a_ns"], h["b_ns"]) == (STEPS * STEP_A_US * US, STEPS * STEP_B_US * US)
    assert (h["steps"], h["a_mean_ns"], h["b_mean_ns"]) == (STEPS, STEP_A_US * US, STEP_B_US * US)
    got = {c["name"]: c["delta_ns"] for c in h["contributors"]}
    # B adds dropout (+50 us a step), drops the memcpy call (-20 us) and idles the rest (+70 us)
    assert got == {"aten::dropout": STEPS * 50 * US, "cudaMemcpyAsync": -STEPS * 20 * US,
                   STEP_SELF_NAME: STEPS * 70 * US}
    assert h["unexplained_ns"] == h["other_names_ns"] == h["unpartitioned_ns"] == 0
    assert sum(got.values()) == h["delta_ns"]


def test_kernel_deltas_are_attributed_to_the_launching_op(pairs):
    store, ids, _ = pairs
    att = {o["op"]: o for o in compare(store, ids["syn_a"], ids["syn_b"])["attribution"]}
    lin = att["aten::linear"]
    assert lin["device_delta_ns"] == STEPS * (GEMM_B_US - GEMM_A_US) * US
    assert [(k["name"], k["delta_ns"]) for k in lin["kernels"]] == [("gemm_kernel", STEPS * 100 * US)]
    assert att["aten::relu"]["device_delta_ns"] == 0
    # a copy whose call has no enclosing op is attributed to the call itself
    assert att["cudaMemcpyAsync"]["op_lane"] == "runtime" and att["cudaMemcpyAsync"]["device_delta_ns"] == -STEPS * 100 * US


def test_the_noise_band_is_stated_and_can_be_overridden(pairs):
    store, ids, _ = pairs
    doc = compare(store, ids["syn_a"], ids["syn_b"], noise=Noise(pct=150.0, ns=0))
    assert doc["noise"] == {"pct": 150.0, "ns": 0}
    assert _row(doc, "kernel", "gemm_kernel")["status"] == "unchanged"  # +100 % is inside a 150 % band
    doc = compare(store, ids["syn_a"], ids["syn_b"], noise=Noise(pct=0.0, ns=400 * US))
    assert _row(doc, "kernel", "gemm_kernel")["status"] == "unchanged"  # +300 us is under 400 us


def test_a_step_selection_narrows_every_figure(pairs):
    store, ids, _ = pairs
    doc = compare(store, ids["syn_a"], ids["syn_b"], steps="1")
    assert doc["steps"]["selected"] == [1] and doc["steps"]["aligned"] == STEPS
    assert doc["headline"]["a_ns"] == STEP_A_US * US
    r = _row(doc, "kernel", "gemm_kernel")
    assert (r["count_a"], r["delta_ns"]) == (1, 100 * US)
    p = doc["steps"]["pairs"][1]
    assert p["a"]["name"] == "ProfilerStep#101" and p["b"]["start_ns"] == STEP_B_US * US + 300 * US
    # the frame of a row lies in the focus step, relative to each trace's start
    a0, a1 = r["frame_a_ns"]
    assert p["a"]["start_ns"] <= a0 < a1 <= p["a"]["start_ns"] + p["a"]["dur_ns"]


def test_names_lose_addresses_and_iteration_numbers_and_optionally_templates():
    import duckdb

    from acceltrace.diff.names import sql_expr

    con = duckdb.connect()
    norm = lambda name, strip: con.execute(f"SELECT {sql_expr('?', strip)}", [name]).fetchone()[0]
    assert norm("ProfilerStep#1009", False) == "ProfilerStep#N"
    assert norm("copy to 0x7f3aBC00 (lambda()#2)", False) == "copy to 0x? (lambda()#N)"
    k = "void at::native::elementwise_kernel<4, at::native::Add<float>, at::Array<char*, 3> >(int, at::Add<float>)"
    assert norm(k, False) == k
    assert norm(k, True) == "void at::native::elementwise_kernel<>(int, at::Add<>)"


def test_step_specs_parse_and_bad_ones_say_why():
    assert parse_spec(None, 4) == [0, 1, 2, 3] and parse_spec("all", 2) == [0, 1]
    assert parse_spec("0, 2-3", 5) == [0, 2, 3]
    with pytest.raises(StepsError, match="out of range: the traces have 3 aligned steps"):
        parse_spec("5", 3)
    with pytest.raises(StepsError, match=r"item 2 \('x'\)"):
        parse_spec("1,x", 3)
    with pytest.raises(StepsError, match="backwards"):
        parse_spec("3-1", 5)


def test_the_findings_diff_says_which_pass_was_fixed(pairs):
    store, ids, _ = pairs
    f = {x["pass"]: x for x in compare(store, ids["syn_a"], ids["syn_b"])["findings"]}
    assert f["pageable_memory"]["status"] == "fixed"
    assert f["pageable_memory"]["count_a"] > 0 and f["pageable_memory"]["count_b"] == 0


def test_a_repeated_user_annotation_serves_as_the_step_without_profiler_steps(pairs, tmp_path):
    store, _, _ = pairs
    ann_a, ann_b = write_pair(tmp_path, step_name="train_step", tag="annotated")
    doc = compare(store, _ingest(store, ann_a), _ingest(store, ann_b))
    assert (doc["steps"]["basis"], doc["steps"]["name"], doc["steps"]["aligned"]) == ("annotation", "train_step", STEPS)
    assert doc["headline"]["a_ns"] == STEPS * STEP_A_US * US
    assert _row(doc, "kernel", "gemm_kernel")["delta_ns"] == STEPS * (GEMM_B_US - GEMM_A_US) * US


def test_nvtx_ranges_on_the_annotation_lane_serve_as_steps(pairs):
    store, _, _ = pairs
    tid = _ingest(store, ROOT / "sample_traces" / "nsys" / "nsys-2022.2" / "a100-saxpy-nsys2022.sqlite")
    doc = compare(store, tid, tid)
    assert (doc["steps"]["basis"], doc["steps"]["name"], doc["steps"]["aligned"]) == ("annotation", "MPI_Send", 10)
    assert _row(doc, "annotation", "MPI_Send")["count_a"] == 10 and doc["headline"]["delta_ns"] == 0


def test_without_steps_in_common_the_whole_traces_are_compared_and_it_says_so(pairs):
    store, ids, _ = pairs
    doc = compare(store, ids["syn_a"], ids["sim_b"])
    assert doc["steps"]["basis"] == "trace" and doc["headline"]["basis"] == "makespan"
    assert any("only A has ProfilerStep steps" in n for n in doc["notes"])


def test_a_trace_never_analysed_is_left_out_of_the_findings_diff_with_a_note(pairs, tmp_path):
    store, ids, (_, syn_b) = pairs
    copy = tmp_path / "unanalysed.json"
    copy.write_bytes(syn_b.read_bytes())
    (r,) = ingest_paths(store, [copy])  # no after_publish: no findings side file
    doc = compare(store, ids["syn_a"], r.id)
    assert doc["b"]["analysed"] is False and any("B has no findings" in n for n in doc["notes"])
    assert all(f["count_b"] == 0 for f in doc["findings"])


def test_a_trace_compared_with_itself_has_no_change(pairs):
    store, ids, _ = pairs
    doc = compare(store, ids["syn_b"], ids["syn_b"])
    assert doc["headline"]["delta_ns"] == 0 and {r["status"] for r in doc["rows"]} == {"unchanged"}
    assert {f["status"] for f in doc["findings"]} <= {"unchanged"}


# -- the real pair -----------------------------------------------------------------------------------
def test_the_real_pair_aligns_six_profiler_steps_across_two_gpus(pairs):
    store, ids, _ = pairs
    doc = compare(store, ids["real_a"], ids["real_b"])
    st = doc["steps"]
    assert (st["basis"], st["aligned"], st["selected"]) == ("ProfilerStep", 6, [0, 1, 2, 3, 4, 5])
    assert [p["a"]["name"] for p in st["pairs"]] == [f"ProfilerStep#{n}" for n in range(1009, 1015)]
    assert (doc["a"]["devices"], doc["b"]["devices"]) == (["3"], ["1"])
    for side, key in (("a", "real_a"), ("b", "real_b")):
        con = store.connect(ids[key])
        (total,) = con.execute("SELECT sum(dur) FROM slices WHERE name LIKE 'ProfilerStep#%'").fetchone()
        con.close()
        assert doc["headline"][f"{side}_ns"] == total
    h = doc["headline"]
    assert h["delta_ns"] == h["b_ns"] - h["a_ns"] > 0
    assert h["unpartitioned_ns"] == 0  # the step thread's self times partition each step exactly
    assert sum(c["delta_ns"] for c in h["contributors"]) + h["unexplained_ns"] == h["delta_ns"]
    # GPU 3 is matched with GPU 1: a kernel both ran is one row, not an added and a removed one
    nccl = _row(doc, "kernel", "ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)")
    assert (nccl["device"], nccl["status"], nccl["count_a"], nccl["count_b"]) == ("3/1", "increased", 18, 21)
    # the A100's ampere kernels are gone on the V100, volta ones are new
    assert any(r["status"] == "removed" and r["name"].startswith("ampere_") for r in doc["rows"])
    assert any(r["status"] == "added" and r["name"].startswith("volta_") for r in doc["rows"])
    for r in doc["rows"]:
        assert r["delta_ns"] == r["total_b_ns"] - r["total_a_ns"]
        if r["count_a"] and r["count_b"]:
            inside = abs(r["delta_ns"]) < 10_000 or abs(r["delta_ns"]) < 0.05 * r["total_a_ns"]
            assert (r["status"] == "unchanged") == inside, r
    for o in doc["attribution"]:
        assert o["device_delta_ns"] == o["device_b_ns"] - o["device_a_ns"]


# -- the device model: with and without one injected inefficiency --------------------------------------
def test_the_device_model_fix_shows_as_the_makespan_delta_and_a_fixed_pass(pairs):
    store, ids, _ = pairs
    doc = compare(store, ids["sim_a"], ids["sim_b"])
    h = doc["headline"]
    assert h["basis"] == "makespan" and doc["steps"]["basis"] == "trace"
    for side, key in (("a", "sim_a"), ("b", "sim_b")):
        con = store.connect(ids[key])
        (span,) = con.execute("SELECT max(ts + dur) - min(ts) FROM slices").fetchone()
        con.close()
        assert h[f"{side}_ns"] == span
    # the run got faster by what the model says the issue cost (slices vs host program end: within 1 %)
    assert h["delta_ns"] < 0
    assert abs(-h["delta_ns"] - ids["impact_ns"]) <= 0.01 * ids["impact_ns"]
    assert h["unpartitioned_ns"] == 0 and h["contributors"][0]["name"] == "acMemcpyAsync"
    f = {x["pass"]: x for x in doc["findings"]}
    assert f["pageable_memory"]["status"] == "fixed" and f["pageable_memory"]["count_b"] == 0
    assert f["pageable_memory"]["impact_a_ns"] > 0


# -- interfaces ----------------------------------------------------------------------------------------
def test_the_cli_ingests_files_and_prints_the_contract_json(pairs, tmp_path):
    _, _, (syn_a, syn_b) = pairs
    run = lambda *a: subprocess.run([sys.executable, "-m", "acceltrace", "--store", str(tmp_path / "s"), "diff", *a],
                                    capture_output=True, text=True, timeout=120, cwd=ROOT)
    r = run(str(syn_a), str(syn_b), "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert {"a", "b", "headline", "rows", "findings"} <= set(doc)
    assert {"a_ns", "b_ns", "delta_ns"} <= set(doc["headline"])
    assert {"lane", "name", "device", "count_a", "count_b", "total_a_ns", "total_b_ns", "delta_ns", "ratio",
            "status"} <= set(doc["rows"][0])
    assert {"pass", "impact_a_ns", "impact_b_ns", "status"} <= set(doc["findings"][0])
    again = json.loads(run(str(syn_a), str(syn_b), "--json").stdout)  # files already in the store: not re-ingested
    assert (again["a"]["id"], again["b"]["id"]) == (doc["a"]["id"], doc["b"]["id"])
    text = run(doc["a"]["id"], doc["b"]["id"][:6])
    assert text.returncode == 0 and "step time" in text.stdout and "gemm_kernel" in text.stdout
    bad = run(doc["a"]["id"], doc["b"]["id"], "--steps", "9")
    assert bad.returncode == 2 and "out of range" in bad.stderr and "Traceback" not in bad.stderr
    missing = run("nope-not-a-trace", doc["b"]["id"])
    assert missing.returncode != 0 and "no ready trace" in missing.stderr


def test_the_api_returns_the_same_object_and_clear_errors(pairs):
    from fastapi.testclient import TestClient

    from acceltrace.server.app import create_app

    store, ids, _ = pairs
    with TestClient(create_app(store.root)) as c:
        r = c.get("/api/diff", params={"a": ids["syn_a"], "b": ids["syn_b"]})
        assert r.status_code == 200, r.text
        got, want = r.json(), compare(store, ids["syn_a"], ids["syn_b"])
        got.pop("elapsed_ms"), want.pop("elapsed_ms")
        assert got == json.loads(json.dumps(want))
        r = c.get("/api/diff", params={"a": ids["syn_a"], "b": "missing0000"})
        assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"
        r = c.get("/api/diff", params={"a": ids["syn_a"], "b": ids["syn_b"], "steps": "0-9"})
        assert r.status_code == 400 and "out of range" in r.json()["error"]["message"]
        page = c.get("/diff", params={"a": ids["syn_a"], "b": ids["syn_b"]}, headers={"accept": "text/html"})
        assert page.status_code == 200 and "diff.js" in page.text
