"""The what-if in the browser: the findings list shows each finding's impact (saving if fixed alone) and
exclusive share, sorted by impact; the Path tab's toggle draws the critical path over the timeline and its
table gives the time per segment type as the API does (issue 18)."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

import _ui

ROOT = Path(__file__).resolve().parent.parent
RUN = ROOT / "sample_traces" / "run" / "acceltrace-sim-0.1" / "strided-access-seed2"
SHOTS = ROOT / "test-output" / "ui"
pytestmark = pytest.mark.timeout(180)


def _get(url: str):
    with urllib.request.urlopen(url, timeout=30) as r:
        return json.loads(r.read())


@pytest.fixture(scope="module")
def server(tmp_path_factory, live_server_factory):
    """`acceltrace serve` on a store holding one device-model run, ingested (and analysed) first."""
    store = tmp_path_factory.mktemp("whatif-ui") / "store"
    out = subprocess.run([sys.executable, "-m", "acceltrace", "--store", str(store), "ingest", "--json", str(RUN)],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    live = live_server_factory(store)
    yield live.url
    live.stop()


@pytest.fixture(scope="module")
def trace_id(server):
    return next(t["id"] for t in _get(f"{server}/api/traces")["traces"] if t["status"] == "ready")


@pytest.fixture(scope="module")
def page(server, browser):
    with _ui.new_page(browser, server) as pg:
        yield pg


def _open(page, trace_id):
    page.goto(f"/t/{trace_id}")
    page.wait_for_function("() => document.getElementById('timeline').dataset.analysis === 'done'", timeout=60000)


def _ms(ns: int) -> str:
    return f"{ns / 1e6:.3f}"


def test_findings_list_shows_impact_and_exclusive_sorted_by_impact(page, server, trace_id):
    findings = _get(f"{server}/api/traces/{trace_id}/findings")["findings"]
    assert findings and all(f["impact_ns"] is not None and f["exclusive_ns"] is not None for f in findings)
    impacts = [f["impact_ns"] for f in findings]
    assert impacts == sorted(impacts, reverse=True)
    _open(page, trace_id)
    page.click(".tabs button[data-tab='findings']")
    first = page.locator("#pane-findings ol.instances li").first
    first.wait_for()
    text = first.locator(".impact").inner_text()
    assert "impact" in text and "exclusive" in text, text
    # the group's worst instance is its biggest impact: the trace's biggest impact leads the first pass
    top = findings[0]
    head = page.locator(f"#pane-findings section.pass-group[data-pass='{top['pass']}'] h4").inner_text().lower()
    assert "all fixed saves" in head and "exclusive" in head, head
    status = {p["pass"]: p for p in _get(f"{server}/api/traces/{trace_id}/analysis")["passes"]}
    assert status[top["pass"]]["impact_ns"] > 0
    assert page.errors == []


def test_path_toggle_draws_the_critical_path_and_the_panel_breaks_it_down(page, server, trace_id):
    doc = _get(f"{server}/api/traces/{trace_id}/critical_path")
    assert doc["analysed"] and doc["segments_total"] > 0 and doc["path_ns"] > 0
    _open(page, trace_id)
    page.click(".tabs button[data-tab='path']")
    page.locator("#pane-path table.critical-path tbody tr").first.wait_for()
    rows = page.evaluate("""() => Object.fromEntries([...document.querySelectorAll('#pane-path table.critical-path tbody tr')]
        .map(tr => [tr.dataset.type, tr.children[1].innerText]))""")
    biggest = max(doc["by_type_ns"], key=doc["by_type_ns"].get)
    assert biggest in rows and rows[biggest].strip() != "0 ns"
    assert page.evaluate("() => window.acceltrace.criticalPath.drawn") == 0
    before = page.locator("#timeline canvas.tracks").screenshot()
    page.check("#critical-path-toggle")
    page.wait_for_function("() => window.acceltrace.criticalPath.drawn > 0", timeout=15000)
    after = page.locator("#timeline canvas.tracks").screenshot()
    assert after != before  # the chain is on the canvas
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / "critical-path.png"))
    page.uncheck("#critical-path-toggle")
    page.wait_for_function("() => window.acceltrace.criticalPath.drawn === 0")
    assert page.errors == []
