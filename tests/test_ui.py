"""Browser tests of the timeline UI: Debian's Chromium driven by Playwright against a real server on loopback.

One server (a temp store with real sample traces) and one browser per module keep the suite short.
Screenshots land in test-output/ui/ (git-ignored) for a human to look at.
"""

from __future__ import annotations

import gzip
import json
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

import _ui

from acceltrace.store.link import link_peak_bytes_per_s

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
A100 = ROOT / "sample_traces" / "chrome" / "kineto" / "a100-rank0-memcpy.json.gz"
NSYS = ROOT / "sample_traces" / "nsys" / "nsys-2022.2" / "a100-saxpy-nsys2022.sqlite"
NAMES_PX = 230  # web/static/timeline/layout.js NAMES_PX: the names column left of the tracks area

pytestmark = pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"chromium not found at {CHROMIUM} (make test-setup installs it)")



def _get_json(url: str):
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.loads(r.read())


def _post_json(url: str, body: dict):
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return json.loads(r.read())
    except urllib.error.HTTPError as e:
        raise AssertionError(f"POST {url} -> {e.code}: {e.read()[:500]!r}") from None


@pytest.fixture(scope="module")
def server(tmp_path_factory, live_server_factory):
    """`acceltrace serve` (tests/conftest.py) on a store holding the A100 Kineto trace; yields its base URL."""
    assert A100.exists(), f"missing sample trace {A100}"
    store = tmp_path_factory.mktemp("ui-store")
    # ingest first (with the analysis passes that run after publishing), then serve: the server starts fast
    out = subprocess.run([sys.executable, "-m", "acceltrace", "--store", str(store), "ingest", "--json", str(A100)],
                         cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    live = live_server_factory(store)
    yield live.url
    live.stop()


@pytest.fixture(scope="module")
def trace_id(server):
    return next(t["id"] for t in _get_json(f"{server}/api/traces")["traces"] if t["status"] == "ready")


@pytest.fixture
def page(browser, server):
    ctx = browser.new_context(viewport={"width": 1500, "height": 900}, base_url=server,
                              permissions=["clipboard-read", "clipboard-write"])
    pg = ctx.new_page()
    errors: list[str] = []
    pg.on("pageerror", lambda e: errors.append(str(e)))
    pg.errors = errors
    yield pg
    ctx.close()


shot = _ui.shot
wait_idle = _ui.wait_idle  # everything visible drawn, and so across two frames


def open_trace(page, trace_id: str, fragment: str = "") -> None:
    page.goto(f"/t/{trace_id}{fragment}")
    wait_idle(page)


def view(page) -> dict:
    return page.evaluate("() => window.acceltrace.view")


def coloured_fraction(page, x0: int, y0: int, x1: int, y1: int) -> float:
    """Share of canvas pixels in a css-px box that are clearly coloured (slices), not white/grey chrome."""
    return page.evaluate("""([x0, y0, x1, y1]) => {
        const c = document.querySelector('#timeline canvas'); const d = window.devicePixelRatio || 1;
        const w = Math.max(1, Math.round((x1 - x0) * d)), h = Math.max(1, Math.round((y1 - y0) * d));
        const px = c.getContext('2d').getImageData(Math.round(x0 * d), Math.round(y0 * d), w, h).data;
        let n = 0;
        for (let i = 0; i < px.length; i += 4) {
            const r = px[i], g = px[i + 1], b = px[i + 2];
            if (Math.max(r, g, b) - Math.min(r, g, b) > 50) n++;
        }
        return n / (w * h);
    }""", [x0, y0, x1, y1])


def lane_rows(page) -> list[dict]:
    """Visible track rows: lane, track id and css-px y range (from the documented timeline hook)."""
    return page.evaluate("""() => window.acceltrace.timeline.visibleRows()
        .filter(r => r.row.kind === 'track')
        .map(r => ({lane: r.row.track.lane, track_id: r.row.track.track_id, y: r.y, h: r.row.h}))""")


def query(server, trace_id, sql):
    return _post_json(f"{server}/api/traces/{trace_id}/query", {"sql": sql})["rows"]


def launched_kernel(server, trace_id):
    """The longest kernel with a launch flow from a CPU-lane API call: (kernel, launch) slice rows."""
    rows = query(server, trace_id, """
        SELECT k.slice_id, k.name, a.slice_id, a.name
        FROM flows f JOIN slices k ON k.slice_id = f.dst_slice JOIN tracks kt ON kt.track_id = k.track_id
             JOIN slices a ON a.slice_id = f.src_slice JOIN tracks ct ON ct.track_id = a.track_id
        WHERE kt.lane = 'eu' AND ct.lane = 'cpu' AND f.kind IN ('launch', 'submit') AND k.category = 'kernel'
        ORDER BY k.dur DESC, k.slice_id LIMIT 1""")
    assert rows, "the sample trace has no kernel with a launch flow"
    return rows[0]


# -- tests ---------------------------------------------------------------------------------------------------

def test_index_lists_traces_and_links_to_the_timeline(page, trace_id):
    page.goto("/")
    link = page.locator(f"#traces a[href='/t/{trace_id}']")
    link.wait_for()
    link.click()
    page.wait_for_url(f"**/t/{trace_id}*")
    wait_idle(page)
    assert not page.errors, page.errors


def test_lanes_are_drawn_on_the_canvas(page, server, trace_id):
    open_trace(page, trace_id)
    shot(page, "whole-trace")
    busiest = query(server, trace_id, """
        SELECT lane, arg_max(track_id, n) FROM (
            SELECT t.lane, t.track_id, count(*) AS n FROM slices s JOIN tracks t USING (track_id) GROUP BY ALL)
        GROUP BY lane ORDER BY lane""")
    lanes = dict(busiest)
    assert {"cpu", "pcie", "eu"} <= set(lanes), lanes
    width = page.evaluate("() => window.innerWidth")
    for lane in ("cpu", "pcie", "eu"):
        page.evaluate("(id) => window.acceltrace.timeline.revealTrack(id)", lanes[lane])
        wait_idle(page)
        r = next(r for r in lane_rows(page) if r["track_id"] == lanes[lane])
        frac = coloured_fraction(page, NAMES_PX + 1, r["y"] + 2, width - 400, r["y"] + r["h"] - 2)
        assert frac > 0.005, f"{lane} track {r} is nearly blank ({frac:.4f} coloured)"
        if lane == "eu":
            shot(page, "whole-trace-eu")
    assert not page.errors, page.errors


def test_w_zooms_in_about_the_view(page, trace_id):
    open_trace(page, trace_id)
    before = view(page)
    page.locator("#timeline canvas.tracks").hover(position={"x": 700, "y": 300})
    page.keyboard.down("w")
    page.wait_for_timeout(300)
    page.keyboard.up("w")
    wait_idle(page)
    after = view(page)
    assert after["end_ns"] - after["start_ns"] < 0.7 * (before["end_ns"] - before["start_ns"]), (before, after)
    assert after["start_ns"] >= before["start_ns"] and after["end_ns"] <= before["end_ns"]
    page.keyboard.press("s")
    wait_idle(page)
    assert view(page)["end_ns"] - view(page)["start_ns"] > after["end_ns"] - after["start_ns"]


def test_dragging_pans_the_view(page, trace_id):
    open_trace(page, trace_id, f"#s=0&e={10_000_000}")
    before = view(page)
    page.mouse.move(900, 400)
    page.mouse.down()
    page.mouse.move(800, 400, steps=5)
    page.mouse.move(600, 400, steps=5)
    page.mouse.up()
    wait_idle(page)
    after = view(page)
    span = before["end_ns"] - before["start_ns"]
    tracks_px = page.evaluate("() => window.acceltrace.timeline.view.width_css_px")
    moved = after["start_ns"] - before["start_ns"]
    assert abs(moved - 300 / tracks_px * span) < 0.02 * span, (before, after)
    assert abs((after["end_ns"] - after["start_ns"]) - span) < 1e-6 * span
    assert page.evaluate("() => window.acceltrace.selected") is None  # a drag is not a click


def test_clicking_a_kernel_shows_details_and_an_arrow_from_its_launch(page, server, trace_id):
    kernel_id, kernel_name, launch_id, launch_name = launched_kernel(server, trace_id)
    open_trace(page, trace_id)
    page.evaluate("(id) => window.acceltrace.select(id)", kernel_id)
    page.wait_for_function("(id) => window.acceltrace.selected === id", arg=kernel_id)
    wait_idle(page)
    page.keyboard.press("Escape")
    wait_idle(page)
    assert page.evaluate("() => window.acceltrace.selected") is None
    # where the kernel is drawn now, from the view and the row layout
    x, y = page.evaluate("""(id) => {
        const tl = window.acceltrace.timeline, box = tl.canvas.getBoundingClientRect();
        for (const r of tl.visibleRows()) {
            if (r.row.kind !== 'track') continue;
            for (const p of tl.piecesFor(r.row.track.track_id)) {
                const tt = p.tt;
                for (let i = 0; i < tt.n; i++) if (tt.id[i] === id) {
                    const mid = tt.ts[i] + tt.dur[i] / 2;
                    return [box.left + 230 + tl.view.x_of(mid), box.top + tl.rowMidY(r.row.track.track_id, tt.depth[i]).y];
                }
            }
        }
        return [null, null];
    }""", kernel_id)
    assert x is not None, "the framed kernel is not in any loaded tile"
    page.mouse.click(x, y)
    page.wait_for_function("(id) => window.acceltrace.selected === id", arg=kernel_id)
    wait_idle(page)
    shot(page, "kernel-selected")
    details = page.locator("#pane-details").inner_text()
    assert kernel_name[:40] in details
    assert launch_name in details  # the chain lists the launching API call
    flows = page.evaluate("() => window.acceltrace.flows")
    assert [launch_id, kernel_id] in flows, flows
    # the arrow really is on the canvas: its colour near the kernel's start
    arrow = page.evaluate("""(id) => {
        const tl = window.acceltrace.timeline; const s = tl.chain.slices.find(s => s.id === id);
        const x = 230 + tl.view.x_of(s.ts), y = tl.rowMidY(s.track_id, tl.selected.depth).y;
        const d = window.devicePixelRatio || 1; const c = document.querySelector('#timeline canvas');
        const px = c.getContext('2d').getImageData(Math.round((x - 9) * d), Math.round((y - 5) * d), Math.round(10 * d), Math.round(10 * d)).data;
        let n = 0; for (let i = 0; i < px.length; i += 4) if (px[i] > 180 && px[i+1] < 120 && px[i+2] < 60) n++;
        return n; }""", kernel_id)
    assert arrow > 3, "no arrow-coloured pixels at the kernel's start"
    # a link in the panel jumps to the launching call
    page.locator(f"#pane-details a[data-slice-id='{launch_id}']").first.click()
    page.wait_for_function("(id) => window.acceltrace.selected === id", arg=launch_id)
    assert not page.errors, page.errors


def test_search_finds_and_selects_a_slice(page, server, trace_id):
    kernel_id, kernel_name, _, _ = launched_kernel(server, trace_id)
    q = kernel_name[:30]
    hits = _get_json(f"{server}/api/traces/{trace_id}/search?q={urllib.request.quote(q)}&limit=2")["results"]
    assert hits
    open_trace(page, trace_id)
    page.fill("#search", q)
    page.press("#search", "Enter")
    page.wait_for_function("(id) => window.acceltrace.selected === id", arg=hits[0]["id"])
    wait_idle(page)
    v = view(page)
    assert v["start_ns"] <= hits[0]["ts"] + hits[0]["dur"] and hits[0]["ts"] <= v["end_ns"], (v, hits[0])
    if len(hits) > 1:
        page.click("#search-next")
        page.wait_for_function("(id) => window.acceltrace.selected === id", arg=hits[1]["id"])
    assert "/" in page.locator("#search-count").inner_text()


def test_copied_url_restores_the_view_in_a_new_page(page, browser, server, trace_id):
    kernel_id, *_ = launched_kernel(server, trace_id)
    open_trace(page, trace_id)
    page.evaluate("(id) => window.acceltrace.select(id)", kernel_id)
    page.wait_for_function("(id) => window.acceltrace.selected === id", arg=kernel_id)
    wait_idle(page)
    pin = lane_rows(page)[-1]["track_id"]
    page.evaluate("(id) => { const tl = window.acceltrace.timeline; tl.layout.togglePin(id); tl.relayout(); }", pin)
    wait_idle(page)
    page.click("#copy-link")
    page.wait_for_function("() => document.getElementById('copy-link').textContent === 'Copied'")
    url = page.evaluate("() => navigator.clipboard.readText()")
    assert f"/t/{trace_id}#" in url, url
    v = view(page)
    other = browser.new_context(viewport={"width": 1500, "height": 900})
    p2 = other.new_page()
    p2.goto(url)
    wait_idle(p2)
    p2.wait_for_function("(id) => window.acceltrace.selected === id", arg=kernel_id)
    v2 = view(p2)
    assert abs(v2["start_ns"] - v["start_ns"]) <= 1 and abs(v2["end_ns"] - v["end_ns"]) <= 1, (v, v2)
    assert p2.evaluate("() => window.acceltrace.timeline.layout.pinned") == [pin]
    shot(p2, "restored-view")
    other.close()


def test_drag_and_drop_upload_of_a_real_trace_opens_its_page(page, trace_id):
    _ui.list_page_ready(page)
    _ui.drop_file(page, NSYS.name, NSYS.read_bytes())
    page.wait_for_url("**/t/*", timeout=60000)
    assert trace_id not in page.url
    wait_idle(page, timeout_ms=30000)
    rows = lane_rows(page)
    assert rows, "the uploaded trace shows no tracks"
    shot(page, "uploaded-nsys")
    assert not page.errors, page.errors


def test_broken_file_shows_an_error_without_breaking_the_page(page, trace_id):
    open_trace(page, trace_id)
    path = page.evaluate("() => location.pathname")
    _ui.drop_file(page, "broken.json", b"\x00\x01\x02 this is not a trace \xff\xfe")
    status = page.locator("#upload-status[data-state='error'] .upload-error")
    status.wait_for(timeout=30000)
    assert status.inner_text().strip(), "the error says nothing"
    shot(page, "broken-upload")
    assert page.evaluate("() => location.pathname") == path  # still on the same trace's page
    before = view(page)
    page.keyboard.press("d")
    wait_idle(page)
    assert view(page)["start_ns"] > before["start_ns"]
    assert not page.errors, page.errors


def test_names_from_a_trace_are_shown_as_text_not_markup(page):
    evil = '<img src=x onerror="window.__pwned=1">'
    events = [{"ph": "X", "name": evil, "pid": 1, "tid": 1, "ts": 1000 + i, "dur": 5, "cat": "cpu_op"} for i in range(3)]
    data = gzip.compress(json.dumps({"traceEvents": events + [
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": evil}}]}).encode())
    _ui.list_page_ready(page)  # opened in place: the page's names come through the fetched HTML too
    _ui.drop_file(page, "evil.json.gz", data)
    page.wait_for_url("**/t/*", timeout=60000)
    wait_idle(page)
    page.fill("#search", "img src")
    page.press("#search", "Enter")
    page.wait_for_function("() => window.acceltrace.selected !== null")
    assert evil in page.locator("#pane-details h3").inner_text()
    assert page.evaluate("() => window.__pwned") is None
    assert page.locator("#pane-details img").count() == 0


def test_shift_drag_aggregates_the_area_per_name(page, server, trace_id):
    open_trace(page, trace_id)
    busiest_cpu = query(server, trace_id, """SELECT t.track_id FROM slices s JOIN tracks t USING (track_id)
        WHERE t.lane = 'cpu' GROUP BY ALL ORDER BY count(*) DESC LIMIT 1""")[0][0]
    page.evaluate("(id) => window.acceltrace.timeline.revealTrack(id)", busiest_cpu)
    wait_idle(page)
    r = next(r for r in lane_rows(page) if r["track_id"] == busiest_cpu)
    box = page.locator("#timeline canvas.tracks").bounding_box()
    y = box["y"] + r["y"] + 8
    page.keyboard.down("Shift")
    page.mouse.move(box["x"] + NAMES_PX + 100, y)
    page.mouse.down()
    page.mouse.move(box["x"] + NAMES_PX + 500, y + 20, steps=4)
    page.mouse.up()
    page.keyboard.up("Shift")
    rows = page.locator("#pane-area table.area-names tbody tr")
    rows.first.wait_for(timeout=15000)
    assert rows.count() >= 1
    first = rows.first.locator("td").all_inner_texts()
    # a name, its lane, its count, total and self time (clipped to the range)
    assert first[0] and first[1].strip() in ("CPU", "Driver", "PCIe", "Execution units", "Annotations"), first
    assert first[2].replace(",", "").isdigit() and first[3] and first[4], first
    assert page.locator("#pane-area th[title]").count() >= 2  # total and self say what they are
    shot(page, "area-selection")


def test_pinned_track_stays_on_top_while_tracks_scroll(page, trace_id):
    open_trace(page, trace_id)
    last = lane_rows(page)[-1]["track_id"]
    page.evaluate("(id) => { const tl = window.acceltrace.timeline; tl.layout.togglePin(id); tl.relayout(); }", last)
    wait_idle(page)
    pinned_y = next(r["y"] for r in lane_rows(page) if r["track_id"] == last)
    box = page.locator("#timeline canvas.tracks").bounding_box()
    page.mouse.move(box["x"] + 60, box["y"] + 400)  # over the names column: the wheel scrolls
    page.mouse.wheel(0, 300)
    wait_idle(page)
    assert page.evaluate("() => window.acceltrace.timeline.scrollY") > 0
    assert next(r["y"] for r in lane_rows(page) if r["track_id"] == last) == pinned_y
    # the URL follows the view after a short debounce: wait for it rather than race it
    page.wait_for_function("(want) => location.hash.includes(want)", arg=f"pin={last}", timeout=5000)
    assert f"pin={last}" in page.url


def test_findings_are_grouped_by_pass_and_name_and_toggle_their_overlay(page, server, trace_id):
    """Findings grouped by pass (biggest total impact first), then by slice name, counts and impacts as the
    raw findings add up; the worst finding leads its group; its pass's checkbox removes its overlay."""
    findings = _get_json(f"{server}/api/traces/{trace_id}/findings")["findings"]
    if not findings:
        pytest.skip("the analysis passes found nothing in this trace")
    ids = sorted({int(f["slice_id"]) for f in findings if f.get("slice_id") is not None})
    names = dict(query(server, trace_id, f"SELECT slice_id, name FROM slices WHERE slice_id IN ({','.join(map(str, ids))})")
                 if ids else [])
    by_pass: dict = {}
    for f in findings:
        key = names.get(f.get("slice_id"), "(no slice)")
        g = by_pass.setdefault(f["pass"], {}).setdefault(key, [0, 0, 0])
        g[0] += 1
        g[1] += f.get("impact_ns") or 0
        g[2] += f.get("exclusive_ns") or 0  # ties in impact (the saving if fixed alone) go by the exclusive share
    pass_impact = {p: (sum(v[1] for v in gs.values()), sum(v[2] for v in gs.values())) for p, gs in by_pass.items()}
    open_trace(page, trace_id)
    page.click(".tabs button[data-tab='findings']")
    sections = page.locator("#pane-findings section.pass-group")
    sections.first.wait_for()
    shown = [sections.nth(i).get_attribute("data-pass") for i in range(sections.count())]
    assert shown == sorted(by_pass, key=lambda p: (-pass_impact[p][0], -pass_impact[p][1], p))
    top = shown[0]
    groups = page.locator(f"#pane-findings section.pass-group[data-pass='{top}'] ol.findings > li.group")
    want = sorted(by_pass[top].items(), key=lambda kv: (-kv[1][1], -kv[1][2], -kv[1][0], kv[0]))
    assert groups.count() == min(len(want), 50)
    assert groups.first.get_attribute("data-name") == want[0][0]
    # the worst finding of the leading group leads it (the group with the largest total need not hold the
    # pass's single largest finding: each impact is the saving of fixing that finding alone)
    best = max((f for f in findings if f["pass"] == top and names.get(f.get("slice_id"), "(no slice)") == want[0][0]),
               key=lambda f: (f.get("impact_ns") or 0, f.get("exclusive_ns") or 0))
    assert best["message"][:30] in groups.first.inner_text()
    p = top
    box = page.locator(f"#pane-findings input[data-pass='{p}']")
    assert box.is_checked()
    page.wait_for_function("(p) => (new URLSearchParams(location.hash.slice(1)).get('ov') || '').split(',').includes(p)",
                           arg=p)
    box.uncheck()
    page.wait_for_function("(p) => !(new URLSearchParams(location.hash.slice(1)).get('ov') || '').split(',').includes(p)", arg=p)
    assert p not in page.evaluate("() => [...window.acceltrace.timeline.overlays]")


def test_tile_decoder_reads_what_the_server_put_in_a_tile(page, server, trace_id):
    """The browser's decoder against raw SQL: exact slices by id, merged slices by count, per track."""
    meta = _get_json(f"{server}/api/traces/{trace_id}")
    busiest = query(server, trace_id, """SELECT track_id FROM slices GROUP BY 1 ORDER BY count(*) DESC LIMIT 1""")[0][0]
    group = next(t["group"] for t in meta["tracks"] if t["track_id"] == busiest)
    level = max(meta["levels"]["min"], meta["levels"]["max"] - 4)
    index = 3
    open_trace(page, trace_id)
    # every depth page of the tile (docs/api.md "Depth pages"), as the timeline fetches them
    pages = max(t["max_depth"] for t in meta["tracks"] if t["group"] == group) // meta["levels"]["depth_page"] + 1
    got = page.evaluate("""async ([id, level, index, group, pages]) => {
        const { decodeTile } = await import('/static/tiles/decode.js');
        const out = {};
        for (let p = 0; p < pages; p++) {
          const r = await fetch(`/api/traces/${id}/tiles/${level}/${index}?group=${group}&page=${p}`);
          const t = decodeTile(await r.arrayBuffer(), level, index);
          for (const [tid, tt] of t.tracks) {
            const o = out[tid] || (out[tid] = {ids: [], merged: 0, t0: t.start_ns, t1: t.start_ns + t.span_ns});
            o.ids.push(...tt.id);
            o.merged += tt.m_count.reduce((a, b) => a + b, 0);
          }
        }
        for (const o of Object.values(out)) o.ids.sort((a, b) => a - b);
        return out; }""", [trace_id, level, index, group, pages])
    bucket = 2 ** level
    t0, t1 = index * 1024 * bucket, (index + 1) * 1024 * bucket
    start = int(query(server, trace_id, "SELECT value FROM trace_meta WHERE key = 'start_ns'")[0][0])
    tracks = [t["track_id"] for t in meta["tracks"] if t["group"] == group and t["lane"] != "counter"]
    rows = query(server, trace_id, f"""
        SELECT track_id, list(slice_id ORDER BY slice_id) FILTER (WHERE dur >= {bucket}),
               count(*) FILTER (WHERE dur > 0 AND dur < {bucket} AND ts - {start} >= {t0} AND ts - {start} < {t1})
        FROM slices WHERE track_id IN ({','.join(map(str, tracks))})
          AND ts - {start} < {t1} AND ts - {start} + greatest(dur, 1) > {t0}
        GROUP BY track_id""")
    # the query route answers lists as their text form
    want = {str(tid): (json.loads(ids) if isinstance(ids, str) else ids or [], merged)
            for tid, ids, merged in rows if ids or merged}
    assert want, "the chosen tile is empty; pick another"
    for tid, (ids, merged) in want.items():
        assert tid in got, f"track {tid} missing from the decoded tile"
        assert got[tid]["ids"] == ids, f"track {tid}: exact slices differ"
        assert got[tid]["merged"] == merged, f"track {tid}: {got[tid]['merged']} merged, SQL says {merged}"
        assert got[tid]["t0"] == t0 and got[tid]["t1"] == t1


def test_axis_ticks_and_link_peak_helpers(page, trace_id):
    open_trace(page, trace_id)
    r = page.evaluate("""async () => {
        const axis = await import('/static/timeline/axis.js'), pcie = await import('/static/tracks/pcie.js');
        return {
          deep: axis.ticks(5e9, 5.003e9, 900).ticks.map(t => t.label),
          whole: axis.ticks(0, 2.0e9, 900).ticks.map(t => t.label),
          tiny: axis.ticks(1000, 1300, 900).ticks.map(t => t.label),
          gen4: pcie.linkPeak({"": {link_gen: "4", link_width: "16", max_payload_bytes: "256",
                                    link_peak_bytes_per_s: %r}}, "dev0"),
          noPeak: pcie.linkPeak({"": {link_gen: "4", link_width: "16", max_payload_bytes: "256"}}, "dev0"),
          byDevice: pcie.linkPeak({"0": {link_peak_bytes_per_s: 1e9}, "1": {link_peak_bytes_per_s: 2e9}}, "dev1"),
          none: pcie.linkPeak({}, "dev0"),
        }; }""" % link_peak_bytes_per_s(4, 16, 256))
    assert r["deep"][:2] == ["5.0000 s", "5.0005 s"], r["deep"]
    assert r["whole"][:3] == ["0.0 s", "0.5 s", "1.0 s"], r["whole"]
    assert r["tiny"][0] == "1.00 us" and r["tiny"][1] == "1.05 us", r["tiny"]
    # the peak is the server's (store/link.py), never recomputed in the browser
    assert abs(r["gen4"]["gbps"] - 1.969 * 16 * 256 / 280) < 0.01 and r["gen4"]["label"] == "Gen4 x16, MPS 256"
    assert r["gen4"]["gbps"] == link_peak_bytes_per_s(4, 16, 256) / 1e9
    assert r["noPeak"] is None
    assert r["byDevice"]["gbps"] == 2.0
    assert r["none"] is None
