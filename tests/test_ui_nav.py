"""Browser tests of the timeline's navigation (issue 16): bookmarks kept in the URL, the measure tool's
snapping to slice edges, stepping a correlation chain with [ and ], the command palette and the keyboard
help generated from the same action table.

Debian's Chromium driven by Playwright against `acceltrace serve` on loopback (tests/conftest.py), on the
real A100 Kineto sample; every number is checked against SQL written here (the /query endpoint), never
against what the page computed. Screenshots land in test-output/ui/nav-*.png.
"""

from __future__ import annotations

import urllib.parse

import pytest

import _ui

CHAIN_KINDS = "('submit', 'launch', 'dma', 'exec')"  # docs: the correlation chain never follows dependency flows


@pytest.fixture(scope="module")
def server(a100_server):
    return a100_server


@pytest.fixture(scope="module")
def trace(server):
    return _ui.trace_info(server)


def sql(server, trace, text):
    return _ui.sql(server, trace["id"], text)


@pytest.fixture
def page(browser, server):
    with _ui.new_page(browser, server) as pg:
        yield pg


def shot(page, name):
    _ui.shot(page, f"nav-{name}")


wait_idle = _ui.wait_idle


def open_trace(page, trace, fragment=""):
    page.goto(f"/t/{trace['id']}{fragment}")
    wait_idle(page)
    page.wait_for_function("() => window.acceltrace && window.acceltrace.nav")


def names_px(page):
    """The names column's width (resizable): the canvas width less the tracks area's."""
    return page.evaluate("() => { const t = window.acceltrace.timeline; return t.width_css_px - t.view.width_css_px; }")


def layer_pixels(page, x0, y0, x1, y1, rgb, tol=40):
    """How many pixels of the nav layer (bookmarks, measurement) in a css-px box are close to `rgb`."""
    return page.evaluate("""([x0, y0, x1, y1, rgb, tol]) => {
        const c = document.querySelector('#timeline canvas.nav-layer'); const d = window.devicePixelRatio || 1;
        const px = c.getContext('2d').getImageData(Math.round(x0 * d), Math.round(y0 * d),
                                                   Math.max(1, Math.round((x1 - x0) * d)), Math.max(1, Math.round((y1 - y0) * d))).data;
        let n = 0;
        for (let i = 0; i < px.length; i += 4)
            if (px[i + 3] > 200 && Math.abs(px[i] - rgb[0]) < tol && Math.abs(px[i + 1] - rgb[1]) < tol && Math.abs(px[i + 2] - rgb[2]) < tol) n++;
        return n;
    }""", [x0, y0, x1, y1, rgb, tol])


# -- bookmarks --------------------------------------------------------------------------------------------

def test_bookmarks_added_with_m_are_drawn_listed_and_restored_from_the_url(page, browser, trace):
    open_trace(page, trace)
    left = names_px(page)
    canvas = page.locator("#timeline canvas.tracks")
    notes = ["warm-up, step #1 & <b>x</b> 50%: ok", "second"]
    expected = []
    for x, note in zip((500, 900), notes):
        canvas.hover(position={"x": x, "y": 300})
        want = page.evaluate(f"() => window.acceltrace.timeline.view.ns_at({x - left})")
        page.keyboard.press("m")
        field = page.locator("#pane-bookmarks input.bm-note:focus")
        field.wait_for()
        field.fill(note)
        field.press("Enter")
        expected.append((want, note))
    marks = page.evaluate("() => window.acceltrace.nav.bookmarks")
    assert [b["note"] for b in marks] == notes, marks
    per_px = page.evaluate("() => window.acceltrace.timeline.view.ns_per_px")
    for b, (want, _) in zip(marks, expected):
        assert abs(b["ns"] - want) <= per_px, (b, want, per_px)
    # drawn: a violet flag in the axis band at each bookmark's x
    for b in marks:
        x = left + page.evaluate(f"() => window.acceltrace.timeline.view.x_of({b['ns']})")
        assert layer_pixels(page, x, 2, x + 12, 20, (124, 58, 237)) > 20, f"no flag drawn at x={x}"
    # the note is text, never markup
    assert page.locator("#pane-bookmarks b").count() == 0
    shot(page, "bookmarks")
    page.wait_for_function("() => location.hash.includes('bm=')")
    page.wait_for_timeout(250)  # the URL is written 150 ms after the last change
    url = page.url

    other = browser.new_context(viewport={"width": 1500, "height": 900})
    p2 = other.new_page()
    p2.goto(url)
    wait_idle(p2)
    p2.wait_for_function("() => window.acceltrace && window.acceltrace.nav && window.acceltrace.nav.bookmarks.length === 2")
    assert p2.evaluate("() => window.acceltrace.nav.bookmarks") == marks
    p2.locator(".tabs button[data-tab=bookmarks]").click()
    assert p2.locator("#pane-bookmarks input.bm-note").evaluate_all("(xs) => xs.map((x) => x.value)") == notes
    # a click on a bookmark's time centres the (zoomed-in) view on it
    p2.evaluate(f"() => window.acceltrace.timeline.view.set(0, {trace['duration'] // 50})")
    p2.locator("#pane-bookmarks .bm-time").nth(1).click()
    v = p2.evaluate("() => window.acceltrace.view")
    assert abs((v["start_ns"] + v["end_ns"]) / 2 - marks[1]["ns"]) <= 1, (v, marks[1])
    # delete the first: the list, the canvas and the URL follow
    p2.locator("#pane-bookmarks .bm-del").first.click()
    assert [b["note"] for b in p2.evaluate("() => window.acceltrace.nav.bookmarks")] == ["second"]
    p2.wait_for_function("() => location.hash.includes('bm=') && !location.hash.includes('warm-up')")
    other.close()
    assert not page.errors, page.errors


def test_a_malformed_bookmark_list_in_the_url_keeps_its_valid_entries(page, trace):
    # not a number, a broken %-escape, an empty entry, a note with every separator encoded
    note = "a,b:c&d#e%f <i>g</i>"
    frag = "#s=0&e=%d&bm=abc:x,%d:%%E0%%A4%%A,,%d:%s" % (
        trace["duration"], trace["duration"] // 3, trace["duration"] // 2, urllib.parse.quote(note, safe=""))
    open_trace(page, trace, frag)
    marks = page.evaluate("() => window.acceltrace.nav.bookmarks")
    assert marks == [{"ns": trace["duration"] // 3, "note": "%E0%A4%A"}, {"ns": trace["duration"] // 2, "note": note}], marks
    page.locator(".tabs button[data-tab=bookmarks]").click()
    assert page.locator("#pane-bookmarks i").count() == 0
    assert page.locator("#pane-bookmarks input.bm-note").nth(1).input_value() == note
    assert not page.errors, page.errors


# -- measure ----------------------------------------------------------------------------------------------

def test_measure_drag_snaps_to_the_slice_edges_the_store_has(page, server, trace):
    kid, ts_abs, dur, track_id = sql(server, trace, """
        SELECT s.slice_id, s.ts, s.dur, s.track_id FROM slices s JOIN tracks t USING (track_id)
        WHERE t.lane = 'eu' AND s.depth = 0 ORDER BY s.dur DESC, s.slice_id LIMIT 1""")[0]
    ts = ts_abs - trace["start"]
    open_trace(page, trace)
    page.evaluate("(id) => window.acceltrace.select(id)", kid)
    page.wait_for_function("(id) => window.acceltrace.selected === id", arg=kid)
    wait_idle(page)
    left = names_px(page)
    x_of = lambda ns: left + page.evaluate(f"() => window.acceltrace.timeline.view.x_of({ns})")  # noqa: E731
    y = page.evaluate(f"() => window.acceltrace.timeline.rowMidY({track_id}, 0).y")
    xa, xb = x_of(ts), x_of(ts + dur)
    assert xb - xa > 100, (xa, xb)
    page.keyboard.press("r")
    assert page.evaluate("() => window.acceltrace.nav.measureMode") is True
    box = page.locator("#timeline canvas.tracks").bounding_box()
    # grab 4 px inside each edge: the ends land on the edges themselves
    page.mouse.move(box["x"] + xa + 4, box["y"] + y)
    page.mouse.down()
    page.mouse.move(box["x"] + (xa + xb) / 2, box["y"] + y, steps=3)
    page.mouse.move(box["x"] + xb - 4, box["y"] + y, steps=3)
    page.mouse.up()
    m = page.evaluate("() => window.acceltrace.nav.measure")
    assert m is not None
    assert m["snapped"] == [True, True], m
    assert m["start_ns"] == ts and m["end_ns"] == ts + dur and m["dur_ns"] == dur, (m, ts, dur)
    assert m["edges"] == ["start", "end"] and m["slice_ids"] == [kid, kid], m
    # the drag measured rather than panned or selected something else
    assert page.evaluate("() => window.acceltrace.selected") == kid
    wait_idle(page)
    # drawn: the teal lines at both ends and the duration label between them
    assert layer_pixels(page, xa - 2, y + 20, xa + 3, y + 60, (15, 118, 110)) > 10
    assert layer_pixels(page, (xa + xb) / 2 - 40, y - 22, (xa + xb) / 2 + 40, y - 2, (15, 118, 110)) > 200
    shot(page, "measure")
    # away from any edge the end is the pointer's own time, marked as not snapped
    page.mouse.move(box["x"] + xa + 4, box["y"] + y)
    page.mouse.down()
    page.mouse.move(box["x"] + (xa + xb) / 2, box["y"] + y, steps=2)
    page.mouse.up()
    m2 = page.evaluate("() => window.acceltrace.nav.measure")
    assert m2["snapped"] == [True, False] and m2["start_ns"] == ts and ts < m2["end_ns"] < ts + dur, m2
    page.keyboard.press("Escape")
    assert page.evaluate("() => [window.acceltrace.nav.measure, window.acceltrace.nav.measureMode]") == [None, False]
    assert page.evaluate("() => window.acceltrace.selected") == kid  # the first Esc leaves the selection alone
    assert not page.errors, page.errors


# -- flows ------------------------------------------------------------------------------------------------

def test_brackets_step_along_the_correlation_chain_in_time_order(page, server, trace):
    # the launch call with the most launches (at most 10: its chain is small enough to walk here)
    src = sql(server, trace, f"""
        SELECT src_slice FROM flows WHERE kind IN {CHAIN_KINDS} AND dst_slice IS NOT NULL
        GROUP BY src_slice HAVING count(*) BETWEEN 2 AND 10 ORDER BY count(*) DESC, src_slice LIMIT 1""")[0][0]
    chain = [r[0] for r in sql(server, trace, f"""
        WITH RECURSIVE c(sid) AS (SELECT {int(src)}::BIGINT UNION
            SELECT CASE WHEN f.src_slice = c.sid THEN f.dst_slice ELSE f.src_slice END FROM c JOIN flows f
            ON (f.src_slice = c.sid OR f.dst_slice = c.sid) WHERE f.kind IN {CHAIN_KINDS}
            AND f.src_slice IS NOT NULL AND f.dst_slice IS NOT NULL)
        SELECT s.slice_id FROM slices s WHERE s.slice_id IN (SELECT sid FROM c) ORDER BY s.ts, s.slice_id""")]
    assert len(chain) >= 3, chain
    touching = sql(server, trace, f"SELECT count(*) FROM flows WHERE src_slice = {int(src)} OR dst_slice = {int(src)}")[0][0]
    open_trace(page, trace)
    start = chain.index(src)
    page.evaluate("(id) => window.acceltrace.select(id)", src)
    page.wait_for_function("(id) => window.acceltrace.selected === id", arg=src)
    # the Details tab lists every flow touching the slice, and where it is in the chain
    assert page.locator("#pane-details table.flows tbody tr").count() == touching
    assert f"link {start + 1} of {len(chain)}" in page.locator("#pane-details .flow-nav").inner_text()
    shot(page, "flows-details")
    page.locator("#timeline canvas.tracks").focus()
    path = [src]
    for key, d in (("]", 1), ("]", 1), ("[", -1)):
        want_i = chain.index(path[-1]) + d
        if not 0 <= want_i < len(chain):
            continue
        want = chain[want_i]
        page.keyboard.press(key)
        page.wait_for_function("(id) => window.acceltrace.selected === id", arg=want, timeout=10000)
        path.append(want)
        ts, dur = sql(server, trace, f"SELECT ts - {trace['start']}, dur FROM slices WHERE slice_id = {int(want)}")[0]
        v = page.evaluate("() => window.acceltrace.view")
        assert v["start_ns"] <= ts and ts + dur <= v["end_ns"], (v, ts, dur)  # centred on it (or framed when wider)
    assert len(path) >= 3, path
    wait_idle(page)
    shot(page, "flows-stepped")
    # at the chain's first link, [ does nothing
    page.evaluate("(id) => window.acceltrace.select(id)", chain[0])
    page.wait_for_function("(id) => window.acceltrace.selected === id", arg=chain[0])
    page.keyboard.press("[")
    page.wait_for_timeout(200)
    assert page.evaluate("() => window.acceltrace.selected") == chain[0]
    # the Details tab's buttons step the same way
    assert page.locator("#pane-details .flow-step").first.is_disabled()
    page.locator("#pane-details .flow-step").last.click()
    page.wait_for_function("(id) => window.acceltrace.selected === id", arg=chain[1])
    assert not page.errors, page.errors


# -- palette and help -------------------------------------------------------------------------------------

def test_palette_filters_fuzzily_and_runs_the_chosen_action(page, trace):
    open_trace(page, trace, f"#s={trace['duration'] // 3}&e={trace['duration'] // 2}")
    # the findings loaded (the palette has one overlay toggle per pass)
    page.wait_for_function("() => Number(document.getElementById('timeline').dataset.findings) > 0", timeout=20000)
    page.keyboard.press("Control+k")
    page.wait_for_function("() => window.acceltrace.nav.palette.open")
    runnable = [a["id"] for a in page.evaluate("() => window.acceltrace.nav.actions") if not a["mouse"]]
    assert page.evaluate("() => window.acceltrace.nav.palette.items") == runnable  # every action, table order
    page.keyboard.type("zm fit")
    items = page.evaluate("() => window.acceltrace.nav.palette.items")
    assert items and items[0] == "zoom-fit", items
    shot(page, "palette")
    page.keyboard.press("Enter")
    page.wait_for_function(f"() => window.acceltrace.view.start_ns === 0 && window.acceltrace.view.end_ns === {trace['duration']}")
    assert page.evaluate("() => window.acceltrace.nav.palette.open") is False
    # "/" opens it too; Esc closes it without running anything
    page.keyboard.press("/")
    page.wait_for_function("() => window.acceltrace.nav.palette.open")
    page.keyboard.type("measure mode")
    assert page.evaluate("() => window.acceltrace.nav.palette.items")[0] == "measure"
    page.keyboard.press("Escape")
    assert page.evaluate("() => [window.acceltrace.nav.palette.open, window.acceltrace.nav.measureMode]") == [False, False]
    # an analysis pass's overlay, toggled from the palette: the timeline and the URL follow
    page.keyboard.press("Control+k")
    page.keyboard.type("toggle overlay")
    first = page.evaluate("() => window.acceltrace.nav.palette.items")[0]
    assert first.startswith("overlay-"), first
    p = first[len("overlay-"):]
    was = page.evaluate("(p) => window.acceltrace.timeline.overlays.has(p)", p)
    page.keyboard.press("Enter")
    assert page.evaluate("(p) => window.acceltrace.timeline.overlays.has(p)", p) is (not was)
    if was:
        page.wait_for_function("(p) => !(new URLSearchParams(location.hash.slice(1)).get('ov') || '').split(',').includes(p)", arg=p)
    else:
        page.wait_for_function("(p) => (new URLSearchParams(location.hash.slice(1)).get('ov') || '').split(',').includes(p)", arg=p)
    # the Findings tab's checkbox of that pass says the same
    assert page.evaluate("(p) => [...document.querySelectorAll('#pane-findings input[type=checkbox]')]"
                         ".find((c) => c.dataset.pass === p).checked", p) is (not was)
    page.keyboard.press("/")
    page.keyboard.type("qqqzzz")
    assert page.evaluate("() => window.acceltrace.nav.palette.items") == []
    assert "No command matches" in page.locator("#palette").inner_text()
    assert not page.errors, page.errors


def test_help_lists_every_shortcut_of_the_action_table(page, trace):
    open_trace(page, trace)
    page.keyboard.press("?")
    help_box = page.locator("#help")
    help_box.wait_for(state="visible")
    rows = page.locator("#help-keys tr").evaluate_all(
        "(trs) => trs.map((tr) => [tr.dataset.action, tr.querySelector('th').textContent, tr.querySelector('td').textContent])")
    shown = {r[0]: r[1] for r in rows}
    actions = page.evaluate("() => window.acceltrace.nav.actions")
    with_keys = [a for a in actions if a["keys"] or a["mouse"]]
    assert set(shown) == {a["id"] for a in with_keys}
    labels = {"Escape": "Esc"}
    for a in with_keys:
        if a["keys"]:
            assert shown[a["id"]] == " / ".join(labels.get(k, k) for k in a["keys"]), (a, shown[a["id"]])
    for k in ("M", "R", "[", "]", "Ctrl+K / /", "?", "W", "F", "Esc"):
        assert k in shown.values(), (k, sorted(shown.values()))
    shot(page, "help")
    page.keyboard.press("?")
    help_box.wait_for(state="hidden")
    # ? from the palette's own list runs the same action
    page.keyboard.press("Control+k")
    page.keyboard.type("keyboard help")
    page.keyboard.press("Enter")
    help_box.wait_for(state="visible")
    page.keyboard.press("Escape")
    help_box.wait_for(state="hidden")
    assert not page.errors, page.errors


def test_a_wheel_zoom_or_key_pan_hides_the_tooltip_of_what_was_under_the_cursor(page, trace):
    """The tooltip names the item under the cursor; a wheel zoom moves the view under a still mouse, so the
    tooltip must go (it used to stay, naming a block of another zoom level) and come back on the next move."""
    open_trace(page, trace)
    box = page.locator("#timeline canvas.tracks").bounding_box()
    left = names_px(page)
    tip_shown = "() => { const t = document.getElementById('tooltip'); return !!t && !t.hidden; }"
    at = None
    for y in range(120, int(box["height"]) - 20, 18):  # find a drawn item: hover along rows until a tooltip shows
        for x in (0.2, 0.4, 0.5, 0.6, 0.8):
            px, py = box["x"] + left + x * (box["width"] - left), box["y"] + y
            page.mouse.move(px, py)
            if page.evaluate(tip_shown):
                at = (px, py)
                break
        if at:
            break
    assert at, "no item under any probed point showed a tooltip"
    page.mouse.wheel(0, -400)
    assert not page.evaluate(tip_shown), "the tooltip outlived the zoom"
    page.wait_for_timeout(300)
    assert not page.evaluate(tip_shown)
    page.mouse.move(at[0] + 1, at[1])  # the next move hovers again, in the new view
    page.wait_for_function(tip_shown, timeout=5000)
    page.keyboard.down("d")  # a key pan moves the view as well (any view change does: timeline/input.js)
    page.wait_for_timeout(150)
    page.keyboard.up("d")
    assert not page.evaluate(tip_shown), "the tooltip outlived a key pan"
