"""The what-if step of a trace too big to replay at analysis: `acceltrace whatif ID` stores the impacts
it computes (the findings route, `analyze --json` and the analysis status show them afterwards), and
the server runs the same step after an upload's analysis, in its ingest process.

"Too big" here is whatif_max_nodes set low ($ACCELTRACE_ANALYSIS_PARAMS, the analysis after ingest),
so a small sample stands for a 10 M-event trace."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx

from acceltrace.analysis import whatif as W
from acceltrace.store.catalog import Store

ROOT = Path(__file__).resolve().parent.parent
RUN = ROOT / "sample_traces" / "run" / "acceltrace-sim-0.1" / "strided-access-seed2"
A100 = ROOT / "sample_traces" / "chrome" / "kineto" / "a100-rank0-memcpy.json.gz"
SMALL_CAP = "whatif_max_nodes=100"


def cli(store: Path, *args, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "acceltrace", "--store", str(store), *args], capture_output=True,
                          text=True, timeout=300, cwd=ROOT, env=dict(os.environ, **(env or {})))


def _findings(url: str, tid: str) -> list[dict]:
    r = httpx.get(f"{url}/api/traces/{tid}/findings", timeout=30)
    assert r.status_code == 200, r.text
    return r.json()["findings"]


def test_whatif_stores_the_impacts_and_the_findings_route_ui_and_analyze_show_them(tmp_path, live_server_factory,
                                                                                   browser):
    import _ui

    store = tmp_path / "s"
    r = cli(store, "ingest", str(RUN), env={"ACCELTRACE_ANALYSIS_PARAMS": SMALL_CAP})
    assert r.returncode == 0, r.stderr
    tid = Store(store).list()[0]["id"]
    assert W.needs_replay(Store(store), tid)  # analysed, not replayed: past the (lowered) cap
    server = live_server_factory(store)
    before = _findings(server.url, tid)
    assert before and all(f["impact_ns"] is None for f in before)
    assert "the what-if step" in before[0]["impact_basis"]

    with _ui.new_page(browser, server.url) as page:
        page.goto(f"/t/{tid}")
        page.wait_for_function("() => document.getElementById('timeline').dataset.analysis === 'done'", timeout=60000)
        page.click(".tabs button[data-tab='findings']")
        first = page.locator("#pane-findings ol.instances li").first
        first.wait_for()
        assert first.locator(".impact").inner_text().startswith("impact - ")  # not replayed yet
        assert "saves" not in page.locator("#pane-findings section.pass-group h4").first.inner_text().lower()

        r = cli(store, "whatif", tid, "--json")
        assert r.returncode == 0, r.stderr
        doc = json.loads(r.stdout)
        assert doc["stored"] is True and doc["all_fixed_saving_ns"] > 0
        assert not W.needs_replay(Store(store), tid)
        # the open page follows the side file's version and reloads its findings: no reload by hand
        page.wait_for_function("() => /all fixed saves/i.test(document.querySelector("
                               "'#pane-findings section.pass-group h4')?.innerText || '')", timeout=30000)
        text = page.locator("#pane-findings ol.instances li").first.locator(".impact").inner_text()
        assert not text.startswith("impact - ") and "exclusive" in text, text
        _ui.shot(page, "whatif-stored")
        assert page.errors == []
    after = _findings(server.url, tid)
    assert len(after) == len(before) and all(f["impact_ns"] is not None for f in after)
    assert {f["impact_basis"].split(";")[0] for f in after} <= {"replay", "pass share"}
    assert after == sorted(after, key=lambda f: -f["impact_ns"])  # the list sorts by impact_ns
    assert sum(f["impact_ns"] for f in after) > 0
    status = httpx.get(f"{server.url}/api/traces/{tid}/analysis", timeout=30).json()
    mai = next(p for p in status["passes"] if p["pass"] == "memory_access_inefficiency")
    saving = next(p["saving_ns"] for p in doc["passes"] if p["pass"] == "memory_access_inefficiency")
    assert mai["impact_ns"] == saving > 0

    # analysis again with the same parameters (still past the cap) keeps the impacts the what-if stored ...
    r = cli(store, "analyze", tid, "--json", "--param", SMALL_CAP)
    assert r.returncode == 0, r.stderr
    again = json.loads(r.stdout)
    key = lambda f: (f["pass"], f["slice_id"], f["exclusive_ns"])  # noqa: E731
    assert sorted((key(f), f["impact_ns"]) for f in again) == sorted(
        (key(f), f["impact_ns"]) for f in after)  # ts: absolute in one, relative in the other
    assert len(_findings(server.url, tid)) == len(after)
    # ... and with other parameters the findings may differ: nothing is carried over
    r = cli(store, "analyze", tid, "--json", "--param", SMALL_CAP, "--param", "mem_min_excess_ns=2000")
    assert r.returncode == 0, r.stderr
    assert all(f["impact_ns"] is None for f in json.loads(r.stdout))


def test_whatif_of_some_passes_prints_and_stores_nothing(tmp_path):
    store = tmp_path / "s"
    assert cli(store, "ingest", str(RUN), env={"ACCELTRACE_ANALYSIS_PARAMS": SMALL_CAP}).returncode == 0
    tid = Store(store).list()[0]["id"]
    r = cli(store, "whatif", tid, "--pass", "memory_access_inefficiency")
    assert r.returncode == 0, r.stderr
    assert "not stored (only some passes replayed)" in r.stdout
    assert W.needs_replay(Store(store), tid)


def test_a_bad_analysis_parameter_in_the_environment_is_a_clear_warning(tmp_path):
    store = tmp_path / "s"
    r = cli(store, "ingest", str(RUN), env={"ACCELTRACE_ANALYSIS_PARAMS": "whatif_max_nodes=lots"})
    assert r.returncode == 0, r.stderr  # the trace is ingested; its analysis step says why it did not run
    assert "$ACCELTRACE_ANALYSIS_PARAMS: parameter whatif_max_nodes: expected a number" in r.stdout + r.stderr


def test_the_server_replays_a_big_uploads_what_if_after_its_analysis(tmp_path, live_server_factory, monkeypatch):
    monkeypatch.setenv("ACCELTRACE_ANALYSIS_PARAMS", SMALL_CAP)  # the server's ingest processes inherit it
    store = tmp_path / "s"
    server = live_server_factory(store)
    r = httpx.post(f"{server.url}/api/traces", params={"name": A100.name}, content=A100.read_bytes(), timeout=120)
    assert r.status_code in (201, 202), r.text
    tid = r.json()["id"]
    deadline, got = time.monotonic() + 120, []
    while time.monotonic() < deadline:
        r = httpx.get(f"{server.url}/api/traces/{tid}/findings", timeout=30)
        if r.status_code == 200:  # 409 while it is ingesting
            got = r.json()["findings"]
            if got and all(f["impact_ns"] is not None for f in got):
                break
        time.sleep(0.25)
    assert got and all(f["impact_ns"] is not None for f in got), (got[:1], server.log()[-2000:])
    # replayed (a finding with nothing to fix has impact 0, basis none, as any replayed analysis gives it)
    assert "replay" in {f["impact_basis"].split(";")[0] for f in got}
    assert not any("whatif_max_nodes" in f["impact_basis"] for f in got)
    con = Store(store).connect(tid)
    ((nodes, replayed),) = con.execute("SELECT nodes, replayed_makespan_ns FROM whatif").fetchall()
    assert nodes > 100 and replayed is not None
    ((cap,),) = con.execute("SELECT value FROM analysis_params WHERE name = 'whatif_max_nodes'").fetchall()
    assert cap > 100  # the what-if step's run, not the analysis's

