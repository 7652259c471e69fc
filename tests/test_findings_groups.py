"""The routes the trace page reads for findings, pass statuses and deep tracks (issue 13), checked
against the stored files read with plain DuckDB SQL and Python: /findings/groups, /analysis, /depths,
and store.queries.findings_grouped's cap ("showing N of M")."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import duckdb
import pytest

ROOT = Path(__file__).resolve().parent.parent
A100 = ROOT / "sample_traces" / "chrome" / "kineto" / "a100-rank0-memcpy.json.gz"


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    from fastapi.testclient import TestClient

    from acceltrace.server.app import create_app

    store = tmp_path_factory.mktemp("groups-store")
    out = subprocess.run([sys.executable, "-m", "acceltrace", "--store", str(store), "ingest", "--json", str(A100)],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    tid = json.loads(out.stdout.strip().splitlines()[-1])["id"]
    with TestClient(create_app(store), raise_server_exceptions=False) as client:
        yield client, store, tid


def _raw(store: Path, tid: str):
    con = duckdb.connect(str(store / "traces" / f"{tid}.duckdb"), read_only=True)
    con.execute(f"ATTACH '{store / 'traces' / f'{tid}.findings.duckdb'}' AS fx (READ_ONLY)")
    return con


def test_groups_add_up_to_the_raw_findings(served):
    client, store, tid = served
    con = _raw(store, tid)
    start = int(con.execute("SELECT value FROM trace_meta WHERE key = 'start_ns'").fetchone()[0])
    rows = con.execute("SELECT f.pass, f.impact_ns, f.severity, f.ts, s.name FROM fx.findings f"
                       " LEFT JOIN slices s ON s.slice_id = f.slice_id").fetchall()
    con.close()
    assert rows, "the A100 sample is expected to have findings"
    want: dict = defaultdict(lambda: defaultdict(list))
    for p, impact, sev, ts, name in rows:
        want[p][name or "(no slice)"].append((impact or 0, sev, ts))
    doc = client.get(f"/api/traces/{tid}/findings/groups").json()
    assert doc["analysed"] is True
    got = doc["passes"]
    totals = {p: sum(i for g in gs.values() for i, _, _ in g) for p, gs in want.items()}
    assert [p["pass"] for p in got] == sorted(want, key=lambda p: (-totals[p], p))
    rank = {"error": 3, "warning": 2, "info": 1}
    for p in got:
        groups = want[p["pass"]]
        assert p["count"] == sum(len(g) for g in groups.values())
        assert p["impact_ns"] == totals[p["pass"]]
        assert p["groups_total"] == len(groups)
        impacts = [g["impact_ns"] for g in p["groups"]]
        assert impacts == sorted(impacts, reverse=True)
        for g in p["groups"]:
            inst = groups[g["name"]]
            assert g["count"] == len(inst) and g["impact_ns"] == sum(i for i, _, _ in inst)
            assert g["severity"] == max((s for _, s, _ in inst), key=lambda s: rank.get(s, 0))
            worst = sorted((i for i, _, _ in inst), reverse=True)[:5]
            assert [w["impact_ns"] or 0 for w in g["worst"]] == worst
            for w in g["worst"]:
                assert w["name"] == g["name"] and w["pass"] == p["pass"]
                assert w["ts"] is None or any(w["ts"] == t - start for _, _, t in inst)


def test_a_cap_on_groups_keeps_the_biggest_and_counts_all(served):
    from acceltrace.store import queries
    from acceltrace.store.catalog import Store

    _, store, tid = served
    con = Store(store).connect(tid)
    full = queries.findings_grouped(con)
    capped = queries.findings_grouped(con, groups_max=1, worst_max=2)
    con.close()
    for f, c in zip(full, capped):
        assert c["pass"] == f["pass"] and c["groups_total"] == f["groups_total"] and c["count"] == f["count"]
        assert [g["name"] for g in c["groups"]] == [f["groups"][0]["name"]]
        assert len(c["groups"][0]["worst"]) == min(2, f["groups"][0]["count"])
    assert any(c["groups_total"] > len(c["groups"]) for c in capped), "no pass has more than one group to cap"


def test_analysis_status_is_the_findings_files_and_pending_without_one(served):
    client, store, tid = served
    con = _raw(store, tid)
    want = {r[0]: (r[1], r[2], r[3]) for r in con.execute(
        "SELECT pass, status, reason, n_findings FROM fx.analysis_status").fetchall()}
    con.close()
    a = client.get(f"/api/traces/{tid}/analysis").json()
    assert a["state"] == "done" and a["version"]
    assert {p["pass"]: (p["status"], p["reason"], p["n_findings"]) for p in a["passes"]} == want
    side = store / "traces" / f"{tid}.findings.duckdb"
    moved = side.with_suffix(".away")
    shutil.move(side, moved)
    try:
        b = client.get(f"/api/traces/{tid}/analysis").json()
        assert b == {"state": "pending", "version": None, "passes": []}
        assert client.get(f"/api/traces/{tid}/findings/groups").json() == {"passes": [], "analysed": False}
    finally:
        shutil.move(moved, side)
    assert client.get(f"/api/traces/{tid}/analysis").json()["version"] == a["version"]


def test_depths_are_the_stored_slices_per_depth_and_the_deepest_launch(served):
    client, store, tid = served
    con = _raw(store, tid)
    per = defaultdict(dict)
    for t, d, n in con.execute("SELECT track_id, depth, count(*) FROM slices GROUP BY 1, 2").fetchall():
        per[t][d] = n
    launch = dict(con.execute("SELECT s.track_id, max(s.depth) FROM flows f JOIN slices s ON s.slice_id = f.src_slice"
                              " WHERE f.kind = 'launch' GROUP BY 1").fetchall())
    con.close()
    doc = client.get(f"/api/traces/{tid}/depths").json()
    assert {t["track_id"] for t in doc["tracks"]} == set(per)
    for t in doc["tracks"]:
        d = per[t["track_id"]]
        assert t["max_depth"] == max(d)
        assert t["counts"] == [d.get(i, 0) for i in range(max(d) + 1)]
        assert t["launch_depth"] == launch.get(t["track_id"])
    assert any(t["launch_depth"] is not None for t in doc["tracks"])
