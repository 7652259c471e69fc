"""Browser tests that the page tells the truth on real traces (issue 13): every depth of a 88-level vLLM
Python stack is drawn and reachable, a kernel's arrow starts at its launch call below depth 48 (MI300X
xDiT trace), findings appear when the passes finish without a reload (after an upload too), the Info tab
shows each pass's status as the findings file has it, and a file accepted with warnings says so.

Real Chromium (Debian's) via Playwright against `acceltrace serve` on loopback, one server and one
browser for the module. Expected values come from the stored DuckDB files read with plain SQL here, or
from the raw trace file. Screenshots land in test-output/ui/.
"""

from __future__ import annotations

import gzip
import json
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import duckdb
import pytest

import _ui

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
KINETO = ROOT / "sample_traces" / "chrome" / "kineto"
VLLM = KINETO / "vllm-decode-graph-capture.json.gz"
XDIT = KINETO / "xdit-sd35-diffusion.json.gz"
A100 = KINETO / "a100-rank0-memcpy.json.gz"
FLOW_RGB = (0xD9, 0x48, 0x0F)  # timeline/frame.js THEME.flow

pytestmark = pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"chromium not found at {CHROMIUM} (make test-setup installs it)")



def _get_json(url: str):
    with urllib.request.urlopen(url, timeout=20) as r:
        return json.loads(r.read())


def _cli(store: Path, *args: str, timeout: int = 300) -> str:
    out = subprocess.run([sys.executable, "-m", "acceltrace", "--store", str(store), *args], cwd=ROOT,
                         capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


@pytest.fixture(scope="module")
def env(tmp_path_factory, live_server_factory):
    """A store with the vLLM and xDiT traces (ingested and analysed by the CLI), served on loopback."""
    for p in (VLLM, XDIT, A100):
        assert p.exists(), f"missing sample trace {p}"
    store = tmp_path_factory.mktemp("ui-truth-store")
    ids = {}
    for p in (VLLM, XDIT):
        ids[p.name] = json.loads(_cli(store, "ingest", "--json", str(p)).strip().splitlines()[-1])["id"]
    live = live_server_factory(store)
    yield {"url": live.url, "store": store, "ids": ids}
    live.stop()


def _db(env, trace_id: str) -> duckdb.DuckDBPyConnection:
    return duckdb.connect(str(env["store"] / "traces" / f"{trace_id}.duckdb"), read_only=True)


@pytest.fixture
def page(browser, env):
    ctx = browser.new_context(viewport={"width": 1500, "height": 900}, base_url=env["url"])
    pg = ctx.new_page()
    errors: list[str] = []
    pg.on("pageerror", lambda e: errors.append(str(e)))
    pg.errors = errors
    yield pg
    assert not errors, errors
    ctx.close()


shot = _ui.shot


def wait_idle(page, timeout_ms: int = 20000) -> None:
    _ui.wait_idle(page, timeout_ms)


def open_trace(page, trace_id: str, fragment: str = "") -> None:
    page.goto(f"/t/{trace_id}{fragment}")
    wait_idle(page)
    # the depth facts arrive after the first frame: wait until the deep tracks have them
    page.wait_for_function("() => window.acceltrace.timeline.layout.tracks.some(t => t.depth_slices !== undefined)"
                           " || window.acceltrace.timeline.layout.tracks.every(t => t.lane === 'counter')")
    wait_idle(page)


def pixels(page, x0: float, y0: float, x1: float, y1: float) -> list[tuple[int, int, int]]:
    """The canvas pixels (r, g, b) in a css-px box."""
    flat = page.evaluate("""([x0, y0, x1, y1]) => {
        const c = document.querySelector('#timeline canvas.tracks'); const d = window.devicePixelRatio || 1;
        const w = Math.max(1, Math.round((x1 - x0) * d)), h = Math.max(1, Math.round((y1 - y0) * d));
        return Array.from(c.getContext('2d').getImageData(Math.round(x0 * d), Math.round(y0 * d), w, h).data);
    }""", [x0, y0, x1, y1])
    return [tuple(flat[i:i + 3]) for i in range(0, len(flat), 4)]


def painted(px) -> float:
    """Share of pixels that are not the white background or a faint grid line."""
    return sum(1 for p in px if min(p) < 225) / max(1, len(px))


def deepest_track(con) -> tuple[int, int]:
    return con.execute("SELECT track_id, max(depth) FROM slices GROUP BY 1 ORDER BY 2 DESC, 1 LIMIT 1").fetchone()


# -- depth ---------------------------------------------------------------------------------------------
def test_every_depth_of_the_vllm_stack_is_drawn_and_selectable(page, env):
    """vLLM decode: 88 Python levels. By default the track shows its launch calls (and all above) and folds
    the rest into one row that is drawn, labelled and counted; a slice at the deepest stored depth, once
    selected, unfolds the track: it is outlined on its own row, hover finds it there, and the number of
    depths drawn equals the maximum depth stored + 1."""
    tid = env["ids"][VLLM.name]
    con = _db(env, tid)
    track, max_depth = deepest_track(con)
    assert max_depth > 48, "the vLLM trace is expected to have Python stacks deeper than 48 levels"
    launch_depth = con.execute(
        "SELECT max(s.depth) FROM flows f JOIN slices s ON s.slice_id = f.src_slice WHERE f.kind = 'launch'"
        " AND s.track_id = ?", [track]).fetchone()[0]
    deep_count = con.execute("SELECT count(*) FROM slices WHERE track_id = ? AND depth >= 34", [track]).fetchone()[0]
    start = int(con.execute("SELECT value FROM trace_meta WHERE key = 'start_ns'").fetchone()[0])
    sid, ts, dur = con.execute("SELECT slice_id, ts, dur FROM slices WHERE track_id = ? AND depth = ? ORDER BY dur DESC, slice_id"
                               " LIMIT 1", [track, max_depth]).fetchone()
    open_trace(page, tid)
    t = page.evaluate("(id) => { const t = window.acceltrace.timeline.layout.byId.get(id);"
                      " return {shown: t.shown_rows, max: t.max_depth, launch: t.launch_depth, counts: t.depth_slices}; }", track)
    assert t["max"] == max_depth and t["launch"] == launch_depth
    assert sum(t["counts"]) == con.execute("SELECT count(*) FROM slices WHERE track_id = ?", [track]).fetchone()[0]
    # the default shows the launch calls and every op above them (at least 24 depths), folds the rest
    assert t["shown"] == max(launch_depth + 2, 24) < max_depth + 1
    assert sum(t["counts"][t["shown"]:]) == con.execute(
        "SELECT count(*) FROM slices WHERE track_id = ? AND depth >= ?", [track, t["shown"]]).fetchone()[0]
    assert deep_count > 0
    # the fold row is drawn (coverage of what it holds) and the names column says what is folded
    page.evaluate("(id) => window.acceltrace.timeline.revealTrack(id)", track)
    wait_idle(page)
    fold = page.evaluate("""(id) => { const tl = window.acceltrace.timeline, t = tl.layout.byId.get(id);
        const m = tl.rowMidY(id, t.max_depth); return {y: m.y, exact: m.exact, row: m.row}; }""", track)
    assert fold["row"] == t["shown"] and not fold["exact"]
    assert painted(pixels(page, 232, fold["y"] - 4, 1100, fold["y"] + 4)) > 0.02, "the fold row draws nothing"
    controls = page.evaluate("() => window.acceltrace.timeline.nameControls.map(c => ({what: c.what, id: c.track_id}))")
    assert {"what": "unfold", "id": track} in controls and {"what": "all", "id": track} in controls
    shot(page, "vllm-deep-folded")

    # select the deepest slice: the track unfolds to it, it is outlined on its own row, hover finds it
    page.evaluate("(id) => window.acceltrace.select(id)", sid)
    page.wait_for_function("(id) => window.acceltrace.selected === id", arg=sid)
    wait_idle(page)
    got = page.evaluate("""(id) => { const tl = window.acceltrace.timeline, t = tl.layout.byId.get(id);
        return {shown: t.shown_rows, h: tl.layout.rows.find(r => r.track && r.track.track_id === id).h}; }""", track)
    assert got["shown"] == max_depth + 1, "the depths drawn are not every stored depth"
    assert got["h"] == (max_depth + 1) * 18 + 6
    mid = page.evaluate("""([id, d, ts, dur]) => { const tl = window.acceltrace.timeline; const m = tl.rowMidY(id, d);
        return {y: m.y, exact: m.exact, x: 230 + tl.view.x_of(ts + dur / 2)}; }""", [track, max_depth, ts - start, dur])
    assert mid["exact"]
    hit = page.evaluate("""async ([x, y]) => { const { hitTest } = await import('/static/timeline/hit.js');
        const h = hitTest(window.acceltrace.timeline, x, y); return h && {kind: h.kind, id: h.id, depth: h.depth}; }""",
                        [mid["x"], mid["y"]])
    assert hit == {"kind": "slice", "id": sid, "depth": max_depth}
    # the selection outline (near-black) is on that row
    dark = [p for p in pixels(page, 232, mid["y"] - 10, 1100, mid["y"] + 10) if max(p) < 60]
    assert dark, "the selection outline is not drawn on the deepest row"
    assert f"dep={track}:{max_depth + 1}" in page.url
    shot(page, "vllm-deepest-selected")
    con.close()


def test_depth_controls_choose_the_depth_and_the_url_keeps_it(page, env):
    """The names column's − / all change what a deep track shows; the URL's dep= restores it."""
    tid = env["ids"][VLLM.name]
    con = _db(env, tid)
    track, max_depth = deepest_track(con)
    con.close()
    open_trace(page, tid)
    page.evaluate("(id) => window.acceltrace.timeline.revealTrack(id)", track)
    wait_idle(page)
    box = page.locator("#timeline canvas.tracks").bounding_box()

    def click_control(what):
        c = page.evaluate("([id, what]) => window.acceltrace.timeline.nameControls.find(c => c.track_id === id && c.what === what)",
                          [track, what])
        assert c, f"no '{what}' control drawn for track {track}"
        page.mouse.click(box["x"] + (c["x0"] + c["x1"]) / 2, box["y"] + (c["y0"] + c["y1"]) / 2)
        wait_idle(page)

    shown = page.evaluate("(id) => window.acceltrace.timeline.layout.byId.get(id).shown_rows", track)
    click_control("less")
    assert page.evaluate("(id) => window.acceltrace.timeline.layout.byId.get(id).shown_rows", track) == shown - 8
    click_control("all")
    assert page.evaluate("(id) => window.acceltrace.timeline.layout.byId.get(id).shown_rows", track) == max_depth + 1
    page.wait_for_function("(s) => location.hash.includes(s)", arg=f"dep={track}:{max_depth + 1}")
    url = page.url
    shot(page, "vllm-all-depths")
    page.goto("about:blank")
    page.goto(url)
    wait_idle(page)
    assert page.evaluate("(id) => window.acceltrace.timeline.layout.byId.get(id).shown_rows", track) == max_depth + 1


def test_a_kernel_arrow_starts_at_its_launch_call_below_depth_48(page, env):
    """xDiT on MI300X: kernels launched by hipLaunchKernel at depth > 48. Selecting one draws its arrow from
    that launch call's own row (not an ancestor's), with the arrow's pixels at the launch's end."""
    tid = env["ids"][XDIT.name]
    con = _db(env, tid)
    start = int(con.execute("SELECT value FROM trace_meta WHERE key = 'start_ns'").fetchone()[0])
    row = con.execute("""
        SELECT k.slice_id, a.slice_id, a.track_id, a.depth, a.ts, a.dur, k.ts, k.dur
        FROM flows f JOIN slices a ON a.slice_id = f.src_slice JOIN slices k ON k.slice_id = f.dst_slice
        WHERE f.kind = 'launch' AND a.depth > 48 ORDER BY a.depth DESC, k.dur DESC, k.slice_id LIMIT 1""").fetchone()
    con.close()
    assert row, "the xDiT trace is expected to have launch calls deeper than 48 levels"
    kid, lid, ltrack, ldepth, lts, ldur, kts, kdur = row
    open_trace(page, tid)
    page.evaluate("(id) => window.acceltrace.select(id)", kid)
    page.wait_for_function("(id) => window.acceltrace.selected === id", arg=kid)
    # frame launch and kernel together, launch track in sight
    a, b = lts - start, kts + kdur - start
    page.evaluate("([a, b, id, d]) => { const tl = window.acceltrace.timeline; tl.view.set(a - (b - a) * 0.2, b + (b - a) * 0.2);"
                  " tl.revealTrack(id, d); }", [a, b, ltrack, ldepth])
    wait_idle(page)
    shot(page, "xdit-deep-launch-arrow")
    assert [lid, kid] in page.evaluate("() => window.acceltrace.flows")
    p = page.evaluate("""([id, d, ts, dur, kts]) => { const tl = window.acceltrace.timeline; const m = tl.rowMidY(id, d);
        return {y: m.y, exact: m.exact, row: m.row, shown: tl.layout.byId.get(id).shown_rows,
                x: 230 + tl.view.x_of(ts + Math.min(dur, Math.max(0, kts - ts)))}; }""", [ltrack, ldepth, lts - start, ldur, kts - start])
    assert p["exact"] and p["row"] == ldepth and p["shown"] > ldepth
    orange = [q for q in pixels(page, p["x"] - 1, p["y"] - 3, p["x"] + 12, p["y"] + 3)
              if abs(q[0] - FLOW_RGB[0]) < 60 and abs(q[1] - FLOW_RGB[1]) < 60 and abs(q[2] - FLOW_RGB[2]) < 60]
    assert orange, f"no arrow pixels where the launch at depth {ldepth} ends"


# -- findings and the info panel -----------------------------------------------------------------------
def test_findings_appear_when_the_passes_finish_without_a_reload(page, env):
    """A trace whose passes have not run yet says so; `acceltrace analyze` while the page is open makes the
    findings appear in it (same document: a marker set before survives), grouped, with the overlay on."""
    tid = env["ids"][XDIT.name]
    side = env["store"] / "traces" / f"{tid}.findings.duckdb"
    saved = side.with_suffix(".saved")
    shutil.move(side, saved)
    try:
        open_trace(page, tid)
        page.click(".tabs button[data-tab='findings']")
        page.wait_for_selector("#pane-findings .analysis-pending")
        page.evaluate("() => { window.__sameDocument = 1; }")
        assert page.evaluate("() => window.acceltrace.timeline.findings.length") == 0
        _cli(env["store"], "analyze", tid)
        page.wait_for_function("() => window.acceltrace.timeline.findings.length > 0", timeout=30000)
        assert page.evaluate("() => window.__sameDocument") == 1, "the page reloaded"
        raw = duckdb.connect(str(side), read_only=True)
        n = raw.execute("SELECT count(*) FROM findings").fetchone()[0]
        top = raw.execute("SELECT pass FROM findings GROUP BY 1 ORDER BY sum(impact_ns) DESC, 1 LIMIT 1").fetchone()[0]
        raw.close()
        assert page.evaluate("() => window.acceltrace.timeline.findings.length") == n
        page.wait_for_selector(f"#pane-findings section.pass-group[data-pass='{top}']")
        assert top in page.evaluate("() => [...window.acceltrace.timeline.overlays]")
        assert page.locator("#findings-count").inner_text() == str(n)
        # a fresh page shades the top passes by impact only, and at whole-trace zoom thousands of narrow
        # findings are drawn as per-bucket blocks, far fewer than the findings
        assert len(page.evaluate("() => [...window.acceltrace.timeline.overlays]")) <= 3
        page.evaluate("() => window.acceltrace.timeline.view.reset()")
        wait_idle(page)
        drawn = page.evaluate("() => window.acceltrace.timeline.findingsDrawn")
        assert drawn["findings"] > 1000 and 0 < drawn["buckets"] + drawn["exact"] < drawn["findings"] / 4, drawn
        shot(page, "findings-appeared")
    finally:
        saved.unlink(missing_ok=True)


def test_info_panel_shows_each_pass_status_as_the_findings_file_has_it(page, env):
    tid = env["ids"][VLLM.name]
    raw = duckdb.connect(str(env["store"] / "traces" / f"{tid}.findings.duckdb"), read_only=True)
    want = {p: (s, r) for p, s, r in raw.execute("SELECT pass, status, reason FROM analysis_status").fetchall()}
    raw.close()
    assert any(s == "not applicable" for s, _ in want.values()) and any(s == "ran" for s, _ in want.values())
    con = _db(env, tid)
    props = json.loads(con.execute("SELECT value FROM trace_meta WHERE key = 'device_properties'").fetchone()[0])
    profiler = con.execute("SELECT value FROM trace_meta WHERE key = 'profiler'").fetchone()[0]
    con.close()
    open_trace(page, tid)
    page.click(".tabs button[data-tab='info']")
    page.wait_for_selector("#pane-info table.passes-status tbody tr")
    rows = page.evaluate("""() => [...document.querySelectorAll('#pane-info table.passes-status tbody tr')].map(tr =>
        ({pass: tr.dataset.pass, status: tr.dataset.status, text: tr.innerText}))""")
    assert {r["pass"]: r["status"] for r in rows} == {p: s for p, (s, _) in want.items()}
    for r in rows:
        reason = want[r["pass"]][1]
        if reason:
            assert reason in r["text"], (r, reason)
    text = page.locator("#pane-info").inner_text()
    assert profiler in text
    assert str(props[0]["totalGlobalMem"]) in text.replace(",", "")
    shot(page, "info-panel")


def test_a_dropped_trace_shows_its_findings_without_a_reload(page, env):
    """Drop the A100 trace on the list page: it opens on its timeline, and its findings show up there
    (however long the passes take) with no navigation after the trace page loaded."""
    _ui.list_page_ready(page)
    _ui.drop_file(page, A100.name, A100.read_bytes())
    page.wait_for_url("**/t/*", timeout=90000)
    wait_idle(page, timeout_ms=30000)
    navigations = []
    page.on("framenavigated", lambda f: navigations.append(f.url) if f == page.main_frame else None)
    page.evaluate("() => { window.__sameDocument = 1; }")
    page.wait_for_function("() => window.acceltrace.timeline.findings.length > 0", timeout=60000)
    tid = page.url.split("/t/")[1].split("#")[0]
    raw = duckdb.connect(str(env["store"] / "traces" / f"{tid}.findings.duckdb"), read_only=True)
    n = raw.execute("SELECT count(*) FROM findings").fetchone()[0]
    raw.close()
    assert page.evaluate("() => window.acceltrace.timeline.findings.length") == n
    assert page.evaluate("() => window.__sameDocument") == 1
    assert all("/t/" + tid in u for u in navigations), navigations  # fragment updates only
    page.click(".tabs button[data-tab='findings']")
    page.wait_for_selector("#pane-findings section.pass-group")
    shot(page, "dropped-trace-findings")


def test_a_file_accepted_with_warnings_says_so_in_the_page(page, env):
    """A Kineto file cut off mid-event loads up to its last whole event; the page says it has warnings
    (a badge in the top bar) and the Info tab lists them."""
    events = [{"name": f"op{i}", "ph": "X", "ts": 10 * i, "dur": 5, "pid": 1, "tid": 1} for i in range(20)]
    text = json.dumps({"traceEvents": events})
    cut = text[: text.rindex('{"name"') + 25].encode()  # the last event is cut mid-way
    req = urllib.request.Request(f"{env['url']}/api/traces?name=cut-off.json", data=gzip.compress(cut), method="POST",
                                 headers={"Content-Type": "application/octet-stream"})
    with urllib.request.urlopen(req, timeout=60) as r:
        doc = json.loads(r.read())
    tid = doc["id"]
    deadline = time.monotonic() + 30
    while _get_json(f"{env['url']}/api/traces/{tid}")["status"] != "ready" and time.monotonic() < deadline:
        time.sleep(0.2)
    meta = _get_json(f"{env['url']}/api/traces/{tid}")
    assert meta["warning_count"] >= 1 and meta["counts"]["slices"] == 19
    open_trace(page, tid)
    badge = page.locator("#ingest-warnings")
    assert badge.is_visible()
    assert f"{meta['warning_count']} ingest warning" in badge.inner_text()
    badge.click()
    page.wait_for_selector("#pane-info ul.warnings li")
    listed = page.evaluate("() => [...document.querySelectorAll('#pane-info ul.warnings li')].map(li => li.textContent)")
    assert listed == meta["warnings"]
    shot(page, "cut-off-warnings")


def test_search_lands_on_a_slice_deep_in_the_fold(page, env):
    """Searching a name that only occurs below depth 70 selects its first hit: the track unfolds down to
    it and the selection is drawn on that slice's own row."""
    tid = env["ids"][VLLM.name]
    con = _db(env, tid)
    track, _ = deepest_track(con)
    name, depth_min = con.execute(
        "SELECT name, min(depth) FROM slices WHERE track_id = ? GROUP BY 1 HAVING min(depth) > 70"
        " ORDER BY count(*), name LIMIT 1", [track]).fetchone()
    con.close()
    open_trace(page, tid)
    page.fill("#search", name)
    page.press("#search", "Enter")
    page.wait_for_function("() => window.acceltrace.selected !== null", timeout=15000)
    wait_idle(page)
    sel = page.evaluate("() => { const s = window.acceltrace.timeline.selected; return {id: s.id, track: s.track_id, depth: s.depth, name: s.name}; }")
    assert sel["name"] == name and sel["depth"] >= depth_min > 70
    got = page.evaluate("""([id, d]) => { const tl = window.acceltrace.timeline; const m = tl.rowMidY(id, d);
        return {exact: m.exact, shown: tl.layout.byId.get(id).shown_rows, y: m.y, h: tl.height_css_px}; }""",
                        [sel["track"], sel["depth"]])
    assert got["exact"] and got["shown"] > sel["depth"]
    assert 0 < got["y"] < got["h"], "the selected row is not on screen"
    dark = [p for p in pixels(page, 232, got["y"] - 10, 1100, got["y"] + 10) if max(p) < 60]
    assert dark, "the selection outline is not on the searched slice's row"
    shot(page, "vllm-search-deep")


def test_long_names_are_short_labels_with_the_full_name_in_details_and_a_resizable_panel(page, env):
    """The longest kernel name of the xDiT trace (a templated C++ signature): the Details title is its
    label (no return type, template or argument list) and stays a few lines high; the full name is in
    the details' full-name box and the title's tooltip. API version suffixes leave labels. The side
    panel's edge resizes it and the timeline follows."""
    tid = env["ids"][XDIT.name]
    con = _db(env, tid)
    sid, name = con.execute("SELECT s.slice_id, s.name FROM slices s JOIN tracks t USING (track_id) WHERE t.lane = 'eu'"
                            " ORDER BY length(s.name) DESC, s.slice_id LIMIT 1").fetchone()
    con.close()
    assert len(name) > 150 and "<" in name and "(" in name
    open_trace(page, tid)
    page.evaluate("(id) => window.acceltrace.select(id)", sid)
    page.wait_for_selector("#pane-details h3.sel-name")
    title = page.locator("#pane-details h3.sel-name")
    label = title.inner_text()
    assert len(label) < len(name) / 2 and not label.endswith(")") and label.split("<")[0] in name
    assert title.get_attribute("title") == name
    assert title.bounding_box()["height"] < 70
    assert page.locator("#pane-details details.full-name pre").text_content() == name
    labels = page.evaluate("""async (names) => { const { displayName } = await import('/static/lib/util.js');
        return names.map(displayName); }""", ["cudaLaunchKernel_v7000", "cuMemcpyHtoDAsync_v2", "hipLaunchKernel"])
    assert labels == ["cudaLaunchKernel", "cuMemcpyHtoDAsync_v2", "hipLaunchKernel"]
    shot(page, "long-name-details")
    # resize the side panel from its edge: wider panel, narrower timeline
    side0 = page.locator("#side").bounding_box()["width"]
    tl0 = page.evaluate("() => window.acceltrace.timeline.width_css_px")
    edge = page.locator("#side-resize").bounding_box()
    page.mouse.move(edge["x"] + 2, edge["y"] + 200)
    page.mouse.down()
    page.mouse.move(edge["x"] - 200, edge["y"] + 200, steps=5)
    page.mouse.up()
    wait_idle(page)
    side1 = page.locator("#side").bounding_box()["width"]
    assert abs(side1 - side0 - 200) <= 4
    assert abs(page.evaluate("() => window.acceltrace.timeline.width_css_px") - (tl0 - 200)) <= 6
    page.evaluate("() => localStorage.removeItem('acceltrace.side_w')")
