"""The analysis runner: statuses, parameters, the side file, the no-double-counting invariant, the CLI."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from acceltrace.analysis import params as P
from acceltrace.analysis.runner import SQL_DIR, AnalysisError, _exec_file, discover, run_passes
from analysis_traces import T0, TraceSpec
from acceltrace.store.link import link_peak_bytes_per_s
from acceltrace.store.catalog import Store

PASS_IDS = {
    "pcie_saturation", "small_transfers", "pageable_memory", "memory_access_inefficiency",
    "copy_compute_serialization", "launch_gaps", "sync_stalls", "redundant_transfers",
}


@pytest.fixture
def store(tmp_path):
    return Store(tmp_path / "store")


def test_every_pass_has_its_sql_file_and_a_documented_header():
    specs = discover()
    assert set(specs) == PASS_IDS
    for spec in specs.values():
        text = spec.path.read_text()
        for part in ("What it detects", "Why it matters", "What to do", "Impact", "Output columns"):
            assert part in text, f"{spec.path.name} lacks '{part}'"


def test_passes_without_their_data_report_not_applicable_with_a_reason(store):
    t = TraceSpec(link=None)
    t.cpu(0, 10, "python work")
    t.cpu(20, 10, "more python work")
    tid = t.build(store)
    rep = run_passes(store, tid)
    assert rep.findings == []
    st = {s.pass_id: s for s in rep.statuses}
    assert set(st) == PASS_IDS
    assert all(s.status == "not applicable" and s.reason for s in st.values()), st
    con = store.connect(tid)
    rows = con.execute("SELECT pass, status, reason FROM analysis_status ORDER BY pass").fetchall()
    assert len(rows) == 8 and all(r[1] == "not applicable" for r in rows)
    assert con.execute("SELECT count(*) FROM findings").fetchone() == (0,)


def mixed_trace(seed: int) -> TraceSpec:
    """Random overlapping trouble of every kind on two devices (for the invariant)."""
    rng = np.random.default_rng(seed)
    t = TraceSpec()
    clock = {"dev0": 0.0, "dev1": 0.0}
    for i in range(60):
        dev = "dev0" if rng.random() < 0.7 else "dev1"
        at = clock[dev] + float(rng.uniform(0, 80))
        kind = rng.integers(0, 5)
        if kind == 0:
            dur = float(rng.uniform(5, 200))
            t.kernel(at, dur, dev=dev, ready_us=at - float(rng.uniform(-30, 60)),
                     args={"bytes_requested": 10**6, "bytes_fetched": int(10**6 * rng.uniform(1, 16)),
                           "flops": 0})
        elif kind == 1:
            dur = float(rng.uniform(5, 400))
            t.copy(at, dur, int(rng.integers(1 << 10, 1 << 24)), dev=dev,
                   host_mem="pageable" if rng.random() < 0.5 else "pinned",
                   ready_us=at - float(rng.uniform(0, 100)), engine=int(rng.integers(0, 2)),
                   call_args={"host_buffer": int(rng.integers(0, 3)), "content_hash": "h"})
        elif kind == 2:
            for j in range(6):
                t.copy(at + 4 * j, 3.5, 4096, dev=dev)
            dur = 30.0
        elif kind == 3:
            dur = float(rng.uniform(10, 300))
            t.cpu(at, dur, "acDeviceSynchronize")
        else:
            dur = float(rng.uniform(5, 50))
            t.kernel(at, dur, dev=dev, ready_us=at - 1)
        clock[dev] = at + dur * float(rng.uniform(0.3, 1.0))
    return t


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_impacts_never_sum_to_more_than_the_run(store, seed):
    tid = mixed_trace(seed).build(store, f"mixed {seed}")
    rep = run_passes(store, tid, params={"launch_gap_min_ns": 1000, "sync_gap_min_ns": 1000})
    assert len({f["pass"] for f in rep.findings}) >= 4, rep.findings
    total = sum(f["exclusive_ns"] for f in rep.findings)
    assert 0 < total <= rep.run_ns
    # a finding's saving if fixed alone (a replay) is never negative nor more than the run
    for f in rep.findings:
        assert 0 <= f["exclusive_ns"] and 0 <= f["impact_ns"] <= rep.run_ns, f
        assert f["impact_basis"].split(";")[0] in ("replay", "pass share", "none"), f
    assert [f["impact_ns"] for f in rep.findings] == sorted((f["impact_ns"] for f in rep.findings), reverse=True)
    assert all(s.status in ("ran", "not applicable") for s in rep.statuses), [s.reason for s in rep.statuses]
    # each pass's status counts exactly its own findings and their exclusive shares; its impact is the
    # saving if all of them are fixed, at most the run's saving with everything fixed
    for s in rep.statuses:
        mine = [f for f in rep.findings if f["pass"] == s.pass_id]
        assert (s.n_findings, s.exclusive_ns) == (len(mine), sum(f["exclusive_ns"] for f in mine)), s
        assert 0 <= s.impact_ns <= rep.run_ns
    assert rep.whatif["replayed_makespan_ns"] == rep.run_ns


def test_parameters_have_defaults_and_checked_overrides():
    values = P.resolve({"launch_gap_min_ns": "5000"})
    assert values["launch_gap_min_ns"] == 5000 and values["sync_min_ns"] == P.PARAMS["sync_min_ns"].default
    with pytest.raises(P.ParamError, match="unknown parameter 'nope'"):
        P.resolve({"nope": 1})
    with pytest.raises(P.ParamError, match="expected a number"):
        P.resolve({"launch_gap_min_ns": "soon"})
    with pytest.raises(P.ParamError, match="expected >= 0"):
        P.resolve({"launch_gap_min_ns": -1})
    with pytest.raises(P.ParamError, match="NAME=VALUE"):
        P.parse_assignments(["launch_gap_min_ns"])


def test_every_parameter_is_used_by_some_sql_file():
    from acceltrace.analysis.runner import SQL_DIR

    text = "".join(p.read_text() for p in SQL_DIR.glob("*.sql"))
    # the what-if replay's parameters are read by the runner (analysis/impact.py), not by SQL
    runner_text = (SQL_DIR / "impact.py").read_text()
    unused = [name for name in P.PARAMS if "${" + name + "}" not in text and f'values["{name}"]' not in runner_text]
    assert unused == []


def test_sql_link_peak_agrees_with_the_python_definition_for_every_generation(store):
    for gen, width, mps in [(1, 1, 128), (2, 4, 256), (3, 8, 512), (4, 16, 256), (5, 16, 128), (6, 16, 256)]:
        t = TraceSpec(link=(gen, width, mps))
        t.copy(10, 100, 1 << 20)
        tid = t.build(store, f"gen{gen}")
        con = store.connect(tid, sides=())
        try:
            _exec_file(con, SQL_DIR / "_common.sql", P.resolve())
            rows = con.execute("SELECT dev, link_peak_Bps FROM _link_peak").fetchall()
        finally:
            con.close()
        assert len(rows) == 1 and rows[0][0] == "dev0", rows
        assert rows[0][1] == pytest.approx(link_peak_bytes_per_s(gen, width, mps), rel=1e-12), (gen, width, mps)


def test_unknown_pass_is_refused(store):
    t = TraceSpec()
    t.kernel(0, 10)
    tid = t.build(store)
    with pytest.raises(AnalysisError, match="unknown pass 'nope'"):
        run_passes(store, tid, passes=["nope"])


def test_selected_passes_only_and_the_rest_marked_not_selected(store):
    t = TraceSpec()
    t.kernel(0, 100, ready_us=-5)
    t.kernel(200, 100, ready_us=190)
    tid = t.build(store)
    rep = run_passes(store, tid, passes=["launch_gaps"])
    assert {f["pass"] for f in rep.findings} == {"launch_gaps"}
    st = {s.pass_id: s.status for s in rep.statuses}
    assert st["launch_gaps"] == "ran" and st["sync_stalls"] == "not selected"


def test_findings_are_stored_in_the_side_file_and_queryable(store):
    t = TraceSpec()
    t.kernel(0, 100, ready_us=-5)
    t.kernel(200, 100, ready_us=190)
    tid = t.build(store)
    rep = run_passes(store, tid)
    con = store.connect(tid)
    cols = [d[0] for d in con.execute("SELECT * FROM findings").description]
    assert cols == ["pass", "severity", "ts", "dur", "track_id", "slice_id", "metric", "value", "threshold",
                    "impact_ns", "exclusive_ns", "impact_basis", "message"]
    got = con.execute("SELECT pass, ts, impact_ns FROM findings").fetchall()
    assert got == [(f["pass"], f["ts"], f["impact_ns"]) for f in rep.findings]
    assert got == [("launch_gaps", T0 + 100_000, 100_000)]
    params = dict(con.execute("SELECT name, value FROM analysis_params").fetchall())
    assert params["launch_gap_min_ns"] == P.PARAMS["launch_gap_min_ns"].default


def cli(store_dir, *args):
    env = dict(os.environ, ACCELTRACE_STORE=str(store_dir))
    return subprocess.run([sys.executable, "-m", "acceltrace", *args], capture_output=True, text=True, env=env,
                          timeout=120)


def test_analyze_command_prints_a_table_json_and_refuses_bad_parameters(store):
    t = TraceSpec()
    t.kernel(0, 100, ready_us=-5)
    t.kernel(200, 100, ready_us=190)
    tid = t.build(store)
    r = cli(store.root, "analyze", tid)
    assert r.returncode == 0, r.stderr
    assert "launch_gaps" in r.stdout and "not applicable" in r.stdout and "1 findings" in r.stdout
    # times are shown from the trace's start (the first call, 8 us before the first kernel)
    assert " 0.108 ms " in r.stdout, r.stdout
    r = cli(store.root, "analyze", tid, "--json", "--param", "launch_gap_min_ns=200000")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == []
    r = cli(store.root, "analyze", tid, "--json", "--pass", "launch_gaps")
    rows = json.loads(r.stdout)
    assert [(f["pass"], f["impact_ns"]) for f in rows] == [("launch_gaps", 100_000)]
    r = cli(store.root, "analyze", tid, "--param", "launch_gap_min_ns=-3")
    assert r.returncode == 2 and "launch_gap_min_ns" in r.stderr and "Traceback" not in r.stderr
    r = cli(store.root, "analyze", "no-such-trace")
    assert r.returncode == 1 and "no ready trace" in r.stderr
    r = cli(store.root, "query", tid, "SELECT pass, status FROM analysis_status WHERE pass = 'launch_gaps'")
    assert r.returncode == 0 and "launch_gaps,ran" in r.stdout, r.stderr


def test_docs_describe_every_pass_and_every_parameter():
    from pathlib import Path

    doc = (Path(__file__).parent.parent / "docs" / "analysis.md").read_text()
    for pid in PASS_IDS:
        assert f"### {pid}" in doc
    for name in P.PARAMS:
        assert f"| {name} |" in doc, name


def test_ingest_runs_the_passes_unless_turned_off(tmp_path, monkeypatch):
    import gzip

    from acceltrace.analysis.runner import after_publish
    from acceltrace.ingest.pipeline import ingest_paths

    events = [
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaMemcpyAsync", "pid": 1, "tid": 1, "ts": 10, "dur": 300,
         "args": {"correlation": 5}},
        {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD (Pageable -> Device)", "pid": 0, "tid": 7,
         "ts": 20, "dur": 280, "args": {"correlation": 5, "bytes": 8388608, "device": 0, "stream": 7}},
    ]
    path = tmp_path / "t.json.gz"
    with gzip.open(path, "wt") as fh:
        json.dump({"traceEvents": events}, fh)
    store = Store(tmp_path / "store")
    [res] = ingest_paths(store, [path], after_publish=after_publish)
    assert res.error is None, res.error
    assert store.side_path(res.id, "findings").exists()
    con = store.connect(res.id)
    assert con.execute("SELECT count(*) FROM findings WHERE pass = 'pageable_memory'").fetchone() == (1,)
    monkeypatch.setenv("ACCELTRACE_AUTO_ANALYZE", "0")
    [res2] = ingest_paths(store, [path], name="again", after_publish=after_publish)
    assert res2.error is None and not store.side_path(res2.id, "findings").exists()
