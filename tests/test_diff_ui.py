"""Browser tests of the comparison page (/diff): real Chromium against `acceltrace serve` on loopback, on the
real before/after Kineto pair. Screenshots land in test-output/ui/."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
SHOTS = ROOT / "test-output" / "ui"
REAL = ROOT / "sample_traces" / "chrome" / "kineto" / "diff"
NAMES_PX = 230  # web/static/timeline/layout.js
ROW = "## sparse_data_dist ##"  # a user annotation both runs have, 2.8x slower in B
KERNEL = "ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)"  # on a GPU stream, below the CPU tracks

pytestmark = pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"chromium not found at {CHROMIUM}")


@pytest.fixture(scope="module")
def server(tmp_path_factory, live_server_factory):
    store = tmp_path_factory.mktemp("diff-ui-store")
    ids = []
    for f in ("control.json.gz", "test.json.gz"):
        out = subprocess.run([sys.executable, "-m", "acceltrace", "--store", str(store), "ingest", "--json", str(REAL / f)],
                             cwd=ROOT, capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr[-3000:]
        ids.append(json.loads(out.stdout.splitlines()[0])["id"])
    live = live_server_factory(store)
    yield live.url, ids[0], ids[1]
    live.stop()


@pytest.fixture
def page(browser, server):
    ctx = browser.new_context(viewport={"width": 1600, "height": 900}, base_url=server[0])
    pg = ctx.new_page()
    pg.errors = []
    pg.on("pageerror", lambda e: pg.errors.append(str(e)))
    yield pg
    ctx.close()


def wait_both_idle(page, timeout_ms: int = 20000) -> None:
    js = """() => window.acceltraceDiff && ['a', 'b'].every(s => document.getElementById('timeline-' + s).dataset.state === 'idle')"""
    page.wait_for_function(js, timeout=timeout_ms)
    page.evaluate("() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))")
    page.wait_for_function(js, timeout=timeout_ms)


def open_diff(page, server) -> None:
    url, a, b = server
    page.goto(f"/diff?a={a}&b={b}")
    wait_both_idle(page)


def shared(page) -> dict:
    return page.evaluate("() => window.acceltraceDiff.shared")


def coloured(page, side: str) -> float:
    """Share of clearly coloured pixels in a timeline's tracks area (slices drawn, not chrome)."""
    return page.evaluate("""(side) => {
        const c = document.querySelector('#timeline-' + side + ' canvas.tracks'); const d = window.devicePixelRatio || 1;
        const x0 = Math.round(240 * d), y0 = Math.round(30 * d), w = c.width - x0, h = c.height - y0;
        const px = c.getContext('2d').getImageData(x0, y0, w, h).data; let n = 0;
        for (let i = 0; i < px.length; i += 4) if (Math.max(px[i], px[i+1], px[i+2]) - Math.min(px[i], px[i+1], px[i+2]) > 50) n++;
        return n / (w * h); }""", side)


def _duration(page, side: str) -> int:
    return page.evaluate("(s) => window.acceltraceDiff.doc[s].duration_ns", side)


def shot(page, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{name}.png"))


def test_the_diff_page_draws_both_timelines_aligned_at_the_step(page, server):
    open_diff(page, server)
    assert coloured(page, "a") > 0.02 and coloured(page, "b") > 0.02
    s = shared(page)
    assert s["a"] == pytest.approx(s["b"], abs=1)  # one shared window
    doc = page.evaluate("() => window.acceltraceDiff.doc")
    step = doc["steps"]["pairs"][0]
    # aligned at the step start: shared time 0 is each trace's first ProfilerStep
    assert s["a"][0] < 0 < s["a"][1] and s["a"][1] >= max(step["a"]["dur_ns"], step["b"]["dur_ns"])
    assert page.locator(".delta-table tbody tr").count() > 100
    # the page matches names with the server's rules
    assert page.evaluate("() => window.acceltraceDiff.state.norm('ProfilerStep#12 at 0x7f3a')") == "ProfilerStep#N at 0x?"
    assert "464.9 ms" in page.locator("#diff-headline h3").inner_text()
    shot(page, "diff-page")
    assert not page.errors, page.errors


def test_linked_zoom_and_pan_move_both_timelines(page, server):
    open_diff(page, server)
    before = shared(page)
    box = page.locator("#timeline-b canvas.tracks").bounding_box()
    page.mouse.move(box["x"] + NAMES_PX + 300, box["y"] + 200)
    for _ in range(5):
        page.mouse.wheel(0, -300)  # zoom in over B
    wait_both_idle(page)
    s = shared(page)
    span = lambda w: w[1] - w[0]
    assert span(s["b"]) < 0.7 * span(before["b"])
    assert s["a"] == pytest.approx(s["b"], abs=1)  # A followed B
    page.locator("#timeline-a canvas.tracks").focus()
    page.keyboard.press("d")  # pan with the keyboard on A
    wait_both_idle(page)
    p = shared(page)
    assert p["a"][0] > s["a"][0] and p["a"] == pytest.approx(p["b"], abs=1)
    # a window as long as the longer trace (B): the shorter A still shows the same shared window
    page.evaluate("(d) => window.acceltraceDiff.showShared(-d * 0.05, d)", _duration(page, "b"))
    wait_both_idle(page)
    w = shared(page)
    assert w["a"] == pytest.approx(w["b"], abs=1) and w["a"][1] - w["a"][0] >= _duration(page, "b")
    assert not page.errors, page.errors


def test_a_row_click_frames_its_slices_in_both_and_highlights_them(page, server):
    open_diff(page, server)
    row = page.locator(".delta-table tbody tr", has_text=ROW).first
    row.click()
    wait_both_idle(page)
    doc = page.evaluate("() => window.acceltraceDiff.doc")
    r = next(x for x in doc["rows"] if x["name"] == ROW)
    off = {p: doc["steps"]["pairs"][0][p]["start_ns"] for p in "ab"}
    s = shared(page)
    assert s["a"] == pytest.approx(s["b"], abs=1)
    for side in "ab":
        f0, f1 = (v - off[side] for v in r[f"frame_{side}_ns"])
        assert s[side][0] <= f0 and f1 <= s[side][1], (side, s, f0, f1)
    # the framed window is about the union of the two occurrences, not the whole step
    assert s["a"][1] - s["a"][0] < 0.7 * doc["steps"]["pairs"][0]["b"]["dur_ns"]
    counts = page.evaluate("() => [window.acceltraceDiff.overlays.a.count, window.acceltraceDiff.overlays.b.count]")
    assert counts[0] >= 1 and counts[1] >= 1
    assert "selected" in (row.get_attribute("class") or "")
    shot(page, "diff-row-framed")
    # a kernel's row: each timeline also scrolls its GPU stream (below the CPU tracks) into sight
    page.locator(".delta-table tbody tr", has_text=KERNEL).first.click()
    wait_both_idle(page)
    k = next(x for x in doc["rows"] if x["name"] == KERNEL)
    for side in "ab":
        on_screen = page.evaluate("(s) => window.acceltraceDiff.timelines[s].visibleRows()"
                                  ".filter(r => r.row.kind === 'track').map(r => r.row.track.track_id)", side)
        assert k[f"track_{side}"] in on_screen, (side, k[f"track_{side}"], on_screen)
    assert not page.errors, page.errors


def test_hovering_a_slice_in_one_timeline_highlights_its_match_in_the_other(page, server):
    open_diff(page, server)
    page.locator(".delta-table tbody tr", has_text=ROW).first.click()
    wait_both_idle(page)
    page.mouse.move(5, 5)  # off the table (a hovered row highlights too)
    page.locator("#timeline-a canvas.tracks").focus()
    page.keyboard.press("Escape")  # drop the row's sticky highlight: only the hover highlights now
    page.evaluate("() => window.acceltraceDiff.overlays.b.draw()")
    assert page.evaluate("() => window.acceltraceDiff.overlays.b.count") == 0
    # where A draws the row's first slice: its track row and depth from the API, x from the view
    url, a, _ = server
    req = urllib.request.Request(f"{url}/api/traces/{a}/query", data=json.dumps(
        {"sql": f"SELECT track_id, depth, ts - (SELECT value::BIGINT FROM trace_meta WHERE key = 'start_ns'), dur "
                f"FROM slices WHERE name = '{ROW}' ORDER BY ts LIMIT 1"}).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as resp:
        track, depth, ts, dur = json.loads(resp.read())["rows"][0]
    pos = page.evaluate("""([track, depth, mid]) => { const tl = window.acceltraceDiff.timelines.a;
        return [tl.view.x_of(mid), tl.rowMidY(track, depth)]; }""", [track, depth, ts + dur / 2])
    box = page.locator("#timeline-a canvas.tracks").bounding_box()
    page.mouse.move(box["x"] + NAMES_PX + pos[0], box["y"] + pos[1]["y"])
    page.wait_for_function("() => window.acceltraceDiff.overlays.b.count > 0", timeout=5000)
    assert page.evaluate("() => window.acceltraceDiff.state.highlight") == ROW
    shot(page, "diff-hover")
    assert not page.errors, page.errors


def test_the_trace_list_opens_a_comparison_of_two_ticked_traces(page, server):
    url, a, b = server
    page.goto("/")
    page.locator(f"#traces input.pick[value='{a}']").check()
    assert page.locator("#compare").is_disabled()
    page.locator(f"#traces input.pick[value='{b}']").check()
    page.locator("#compare").click()
    page.wait_for_url(f"**/diff?a={a}&b={b}*")
    wait_both_idle(page)
    assert not page.errors, page.errors
