"""Browser tests of track control on the timeline (issue 16): filter, hide and show, reorder by drag,
collapse to a depth, resize the names column and the side panel, and the URL restoring all of it.

Real Chromium (Playwright) against `acceltrace serve` on loopback, on the real A100 Kineto sample
(15 tracks: a process with six threads, five streams and two PCIe tracks of GPU 0). What is drawn is
read through the documented hooks (window.acceltrace.tracks, timeline.visibleRows()) and the canvas
pixels; the expected tracks come from SQL on the trace, not from the page. Screenshots land in
test-output/ui/.
"""

from __future__ import annotations

import pytest

import _ui

DEFAULT_NAMES_PX = 230  # web/static/timeline/layout.js NAMES_DEFAULT_PX
EU_ACCENT = (0xB3, 0x47, 0x9E)  # web/static/lib/util.js LANE_ACCENT.eu: the stripe left of an EU track's name


def _sql(server, trace_id, sql):
    return _ui.sql(server, trace_id, sql)


@pytest.fixture(scope="module")
def server(a100_server):
    return a100_server


@pytest.fixture(scope="module")
def trace_id(server):
    return _ui.first_ready(server)


@pytest.fixture
def page(browser, server):
    with _ui.new_page(browser, server, timeout_ms=15000) as pg:
        yield pg


shot = _ui.shot
wait_idle = _ui.wait_idle


def open_trace(page, trace_id, fragment=""):
    page.goto(f"/t/{trace_id}{fragment}")
    wait_idle(page)


def tracks(page):
    return page.evaluate("() => window.acceltrace.tracks")


def drawn_track_ids(page):
    """Track ids of the rows the last frame drew, top to bottom (timeline.visibleRows(), what frame.js draws)."""
    return page.evaluate("() => window.acceltrace.timeline.visibleRows().filter(r => r.row.kind === 'track').map(r => r.row.track.track_id)")


def wait_hash(page, part):
    page.wait_for_function("(s) => location.hash.includes(s)", arg=part)


def pixel(page, x, y):
    return tuple(page.evaluate("""([x, y]) => {
        const c = document.querySelector('#timeline canvas.tracks'), d = window.devicePixelRatio || 1;
        return Array.from(c.getContext('2d').getImageData(Math.round(x * d), Math.round(y * d), 1, 1).data.slice(0, 3)); }""", [x, y]))


def canvas_box(page):
    return page.evaluate("() => { const r = document.querySelector('#timeline canvas.tracks').getBoundingClientRect(); return [r.left, r.top]; }")


def row_of(page, track_id):
    return next(t for t in tracks(page) if t["id"] == track_id)


def open_menu(page, track_id):
    """Click the ⋮ button of a track's row in the names column."""
    r = row_of(page, track_id)
    assert r["shown"], r
    left, top = canvas_box(page)
    names = page.evaluate("() => window.acceltrace.names_px")
    page.mouse.click(left + names - 30, top + r["y"] + 9)
    page.locator("#track-pop .menu-item").first.wait_for()


def test_filter_by_lane_device_and_process_matches_sql_and_draws_only_those(page, server, trace_id):
    open_trace(page, trace_id)
    assert all(t["shown"] for t in tracks(page))
    assert page.locator("#track-count").is_hidden()  # nothing hidden: no badge
    eu = {r[0] for r in _sql(server, trace_id, "SELECT track_id FROM tracks WHERE lane = 'eu'")}
    page.fill("#track-filter", "lane:eu")
    wait_hash(page, "f=lane:eu")
    wait_idle(page)
    shot(page, "tracks-filter-eu")
    assert {t["id"] for t in tracks(page) if t["shown"]} == eu
    assert set(drawn_track_ids(page)) == eu
    assert page.locator("#track-count").inner_text() == f"{len(eu)} of 15"
    # every drawn track row carries the EU lane's stripe at the names column's left edge
    for t in tracks(page):
        if t["shown"]:
            assert pixel(page, 1, t["y"] + t["h"] / 2) == EU_ACCENT, t
    # device and process keys, a negation and a quoted name, each against SQL
    cases = {
        "dev:0": "SELECT track_id FROM tracks WHERE device = 0",
        "proc:4515 -thread:4515": "SELECT track_id FROM tracks WHERE process = '4515' AND thread IS DISTINCT FROM '4515'",
        'lane:pcie,eu "stream 2"': "SELECT track_id FROM tracks WHERE lane IN ('pcie', 'eu') AND name ILIKE '%stream 2%'",
    }
    for text, sql in cases.items():
        want = {r[0] for r in _sql(server, trace_id, sql)}
        assert want, sql
        page.fill("#track-filter", text)
        page.wait_for_function("(n) => window.acceltrace.tracks.filter(t => t.shown).length === n", arg=len(want))
        wait_idle(page)
        assert {t["id"] for t in tracks(page) if t["shown"]} == want, text
        assert set(drawn_track_ids(page)) == want, text
    # a filter that matches nothing says so; clearing it brings every track back
    page.fill("#track-filter", "no-such-track-anywhere")
    page.wait_for_function("() => document.getElementById('track-filter').classList.contains('no-match')")
    assert page.locator("#track-count").inner_text() == "0 of 15"
    page.fill("#track-filter", "")
    page.wait_for_function("() => window.acceltrace.tracks.every(t => t.shown)")
    assert not page.errors, page.errors


def test_hide_from_the_track_menu_counts_it_and_show_all_brings_it_back(page, trace_id):
    open_trace(page, trace_id)
    before = [t["id"] for t in tracks(page)]
    victim = next(t for t in tracks(page) if t["name"] == "stream 7")
    open_menu(page, victim["id"])
    shot(page, "tracks-menu")
    page.click("#track-pop [data-act=hide]")
    wait_hash(page, f"hide={victim['id']}")
    wait_idle(page)
    t = row_of(page, victim["id"])
    assert t["hidden"] and not t["shown"] and t["y"] is None
    assert victim["id"] not in drawn_track_ids(page)
    assert page.locator("#track-count").inner_text() == "14 of 15 · 1 hidden"
    # hide a second one, then list the hidden tracks: each has its own "show"
    second = next(t for t in tracks(page) if t["name"] == "PCIe HtoD")
    open_menu(page, second["id"])
    page.click("#track-pop [data-act=hide]")
    page.wait_for_function("() => window.acceltrace.tracks.filter(t => t.hidden).length === 2")
    page.click("#track-count")
    page.locator("#track-pop .hidden-list li").nth(1).wait_for()
    shot(page, "tracks-hidden-list")
    assert page.locator("#track-pop .hidden-list li").count() == 2
    page.click(f"#track-pop button.show-track[data-track='{second['id']}']")
    page.wait_for_function("(id) => window.acceltrace.tracks.find(t => t.id === id).shown", arg=second["id"])
    assert page.locator("#track-pop .hidden-list li").count() == 1  # the open list follows
    page.click("#show-all-tracks")
    page.wait_for_function("() => window.acceltrace.tracks.every(t => t.shown && !t.hidden)")
    page.wait_for_function("() => !location.hash.includes('hide=')")
    assert [t["id"] for t in tracks(page)] == before
    assert page.locator("#track-count").is_hidden()
    assert not page.errors, page.errors


def test_track_actions_are_in_the_palette_and_keys(page, trace_id):
    open_trace(page, trace_id)
    victim = next(t for t in tracks(page) if t["name"] == "stream 7")
    open_menu(page, victim["id"])
    page.click("#track-pop [data-act=hide]")
    wait_hash(page, f"hide={victim['id']}")
    # the palette's "Show all hidden tracks" brings it back, and the URL follows
    page.keyboard.press("Control+k")
    page.wait_for_function("() => window.acceltrace.nav.palette.open")
    page.keyboard.type("show all hidden")
    assert page.evaluate("() => window.acceltrace.nav.palette.items")[0] == "tracks-show-all"
    page.keyboard.press("Enter")
    page.wait_for_function("() => window.acceltrace.tracks.every(t => t.shown && !t.hidden)")
    page.wait_for_function("() => !location.hash.includes('hide=')")
    # T puts the caret in the track filter; what is typed there filters (not W/A/S/D)
    page.keyboard.press("t")
    assert page.evaluate("() => document.activeElement.id") == "track-filter"
    page.keyboard.type("PCIe")
    page.wait_for_function("() => window.acceltrace.tracks.filter(t => t.shown).every(t => t.name.includes('PCIe'))")
    page.keyboard.press("Escape")
    page.wait_for_function("() => window.acceltrace.tracks.every(t => t.shown)")
    help_rows = page.evaluate("() => [...document.querySelectorAll('#help-keys tr')].map(r => r.dataset.action)")
    assert {"tracks-filter", "m-track-drag", "m-track-menu"} <= set(help_rows)
    assert not page.errors, page.errors


def test_dragging_a_track_name_reorders_it_within_its_group(page, trace_id):
    open_trace(page, trace_id)
    cpu = [t for t in tracks(page) if t["group"] == "pyper:trainer:0:0 (4515)"]
    assert len(cpu) >= 3
    others_before = [t["id"] for t in tracks(page) if t["group"] != cpu[0]["group"]]
    first, third = cpu[0], cpu[2]
    left, top = canvas_box(page)
    page.mouse.move(left + 60, top + first["y"] + 8)
    page.mouse.down()
    page.mouse.move(left + 60, top + first["y"] + 30, steps=4)
    target_y = third["y"] + third["h"] * 0.75  # the lower half of the third row: after it
    page.mouse.move(left + 60, top + target_y, steps=6)
    shot(page, "tracks-dragging")
    page.mouse.up()
    page.wait_for_function("() => location.hash.includes('ord=')")
    wait_idle(page)
    after = [t["id"] for t in tracks(page) if t["group"] == first["group"]]
    want = [cpu[1]["id"], cpu[2]["id"], first["id"]] + [t["id"] for t in cpu[3:]]
    assert after == want
    drawn = [i for i in drawn_track_ids(page) if i in set(want)]
    assert drawn == want[:len(drawn)] and len(drawn) >= 3
    # the tracks of other groups did not move
    assert [t["id"] for t in tracks(page) if t["group"] != first["group"]] == others_before
    assert f"ord={','.join(map(str, want))}" in page.url
    # a drag onto another group's rows keeps the track in its own group
    stream = next(t for t in tracks(page) if t["lane"] == "eu")
    eu_before = [t["id"] for t in tracks(page) if t["lane"] == "eu"]
    moved = row_of(page, want[0])
    page.mouse.move(left + 60, top + moved["y"] + 8)
    page.mouse.down()
    page.mouse.move(left + 60, top + stream["y"] + 8, steps=8)
    page.mouse.up()
    wait_idle(page)
    ids = [t["id"] for t in tracks(page)]
    assert ids.index(want[0]) > ids.index(want[-1])  # dropped below its group's rows: to the group's end
    assert row_of(page, want[0])["group"] == first["group"]
    assert [t["id"] for t in tracks(page) if t["lane"] == "eu"] == eu_before
    assert not page.errors, page.errors


def test_collapse_a_thread_to_a_chosen_depth_from_its_menu(page, server, trace_id):
    (tid, max_depth), = _sql(server, trace_id, """SELECT track_id, max(depth) FROM slices JOIN tracks USING (track_id)
        WHERE lane = 'cpu' GROUP BY track_id ORDER BY max(depth) DESC LIMIT 1""")
    assert max_depth >= 5
    open_trace(page, trace_id)
    full = row_of(page, tid)
    open_menu(page, tid)
    page.fill("#track-depths", "3")
    page.click("#track-pop [data-act=depths]")
    wait_hash(page, f"dep={tid}:3")
    wait_idle(page)
    t = row_of(page, tid)
    assert t["depths"] == 3
    # three depth rows plus the fold row (18 px each) and the 3 px pads: the row really shrank
    assert t["h"] == 4 * 18 + 6 < full["h"], (t, full)
    shot(page, "tracks-collapsed")
    # a bad depth is refused in place, not applied
    open_menu(page, tid)
    page.fill("#track-depths", "0")
    page.click("#track-pop [data-act=depths]")
    assert page.locator("#track-pop").is_visible()
    assert row_of(page, tid)["depths"] == 3
    page.click("#track-pop .pop-title")  # focus off the field: Esc closes the menu, and only the menu
    page.evaluate("(id) => window.acceltrace.select(id)", _sql(server, trace_id, f"SELECT min(slice_id) FROM slices WHERE track_id = {tid}")[0][0])
    page.wait_for_function("() => window.acceltrace.selected !== null")
    page.keyboard.press("Escape")
    page.wait_for_function("() => document.getElementById('track-pop').hidden")
    assert page.evaluate("() => window.acceltrace.selected") is not None
    assert not page.errors, page.errors


def test_names_column_and_side_panel_resize_by_drag(page, trace_id):
    open_trace(page, trace_id)
    assert page.evaluate("() => window.acceltrace.names_px") == DEFAULT_NAMES_PX
    view_w = page.evaluate("() => window.acceltrace.timeline.view.width_css_px")
    h = page.locator("#names-resize").bounding_box()
    page.mouse.move(h["x"] + 3, h["y"] + 300)
    page.mouse.down()
    page.mouse.move(h["x"] + 103, h["y"] + 300, steps=5)
    page.mouse.up()
    wait_hash(page, "nw=330")
    wait_idle(page)
    assert page.evaluate("() => window.acceltrace.names_px") == 330
    assert page.evaluate("() => window.acceltrace.timeline.view.width_css_px") == view_w - 100
    # the names column's border is drawn at the new width, and the filter bar follows it
    first = next(t for t in tracks(page) if t["shown"])
    assert pixel(page, 329, first["y"] + 5) == (0xD5, 0xD8, 0xDE)
    assert page.locator("#track-bar").bounding_box()["width"] == 330
    side = page.locator("#side").bounding_box()["width"]
    s = page.locator("#side-resize").bounding_box()
    page.mouse.move(s["x"] + 2, s["y"] + 300)
    page.mouse.down()
    page.mouse.move(s["x"] - 118, s["y"] + 300, steps=5)
    page.mouse.up()
    wait_hash(page, f"pw={round(side + 120)}")
    assert abs(page.locator("#side").bounding_box()["width"] - (side + 120)) <= 1
    shot(page, "tracks-resized")
    assert not page.errors, page.errors


def test_the_url_restores_filter_hidden_order_depths_and_widths(page, browser, server, trace_id):
    open_trace(page, trace_id)
    cpu = [t for t in tracks(page) if t["group"] == "pyper:trainer:0:0 (4515)"]
    deep = max(cpu, key=lambda t: t["depths"])
    hidden = next(t for t in tracks(page) if t["name"] == "PCIe DtoH")
    order = [cpu[1]["id"], cpu[0]["id"]] + [t["id"] for t in cpu[2:]]
    # build the state through the page, then read the URL it wrote
    page.evaluate("""([order, hide, deep]) => { const tl = window.acceltrace.timeline;
        tl.layout.setOrder(order); tl.layout.hideTrack(hide); tl.setDepths(deep, 2); }""", [order, hidden["id"], deep["id"]])
    page.fill("#track-filter", "-thread:228591168")
    wait_hash(page, "f=")
    h = page.locator("#names-resize").bounding_box()
    page.mouse.move(h["x"] + 3, h["y"] + 300)
    page.mouse.down()
    page.mouse.move(h["x"] + 63, h["y"] + 300, steps=4)
    page.mouse.up()
    s = page.locator("#side-resize").bounding_box()
    page.mouse.move(s["x"] + 2, s["y"] + 300)
    page.mouse.down()
    page.mouse.move(s["x"] - 80, s["y"] + 300, steps=4)
    page.mouse.up()
    side = page.locator("#side").bounding_box()["width"]
    wait_hash(page, f"pw={round(side)}")
    wait_idle(page)
    url = page.url
    for key in ("f=", "hide=", "ord=", "dep=", "nw=290", "pw="):
        assert key in url, (key, url)
    state = tracks(page)
    # a teammate opens the same URL in a fresh browser context (no localStorage): the same tracks, in the same order
    ctx = browser.new_context(viewport={"width": 1500, "height": 900}, base_url=server)
    other = ctx.new_page()
    try:
        other.goto(url)
        wait_idle(other)
        shot(other, "tracks-restored")
        again = tracks(other)
        assert [(t["id"], t["hidden"], t["filtered"], t["shown"], t["depths"], t["y"]) for t in again] == \
               [(t["id"], t["hidden"], t["filtered"], t["shown"], t["depths"], t["y"]) for t in state]
        assert other.locator("#track-filter").input_value() == "-thread:228591168"
        assert other.evaluate("() => window.acceltrace.names_px") == 290
        assert abs(other.locator("#side").bounding_box()["width"] - side) <= 1
        assert other.locator("#track-count").inner_text() == "13 of 15 · 1 hidden"
        assert drawn_track_ids(other) == [t["id"] for t in state if t["shown"] and t["id"] in set(drawn_track_ids(other))]
    finally:
        ctx.close()
    assert not page.errors, page.errors


def test_going_to_a_slice_on_a_hidden_or_filtered_out_track_shows_that_track(page, server, trace_id):
    (kernel, track), = _sql(server, trace_id, """SELECT s.slice_id, s.track_id FROM slices s JOIN tracks t USING (track_id)
        WHERE t.lane = 'eu' ORDER BY s.dur DESC, s.slice_id LIMIT 1""")
    open_trace(page, trace_id, f"#s=0&e=1000000000&hide={track}")
    assert row_of(page, track)["hidden"]
    page.evaluate("(id) => window.acceltrace.select(id)", kernel)
    page.wait_for_function("(id) => window.acceltrace.selected === id", arg=kernel)
    page.wait_for_function("(id) => window.acceltrace.tracks.find(t => t.id === id).shown", arg=track)
    page.wait_for_function("() => !location.hash.includes('hide=')")
    assert page.locator("#track-count").is_hidden()
    # filtered out: let through the filter (the filter stays), counted as shown
    page.fill("#track-filter", "lane:cpu")
    page.wait_for_function("(id) => !window.acceltrace.tracks.find(t => t.id === id).shown", arg=track)
    shown_before = sum(t["shown"] for t in tracks(page))
    page.evaluate("(id) => window.acceltrace.select(id)", kernel)
    page.wait_for_function("(id) => window.acceltrace.tracks.find(t => t.id === id).shown", arg=track)
    wait_idle(page)
    assert sum(t["shown"] for t in tracks(page)) == shown_before + 1
    assert track in drawn_track_ids(page)
    assert page.locator("#track-filter").input_value() == "lane:cpu"
    assert not page.errors, page.errors


def test_a_replaced_layout_keeps_the_users_track_choices(page, trace_id):
    """A live trace's new tracks replace the layout (timeline/follow.js does so): filter, hidden, order and depths carry over."""
    open_trace(page, trace_id)
    cpu = [t for t in tracks(page) if t["group"] == "pyper:trainer:0:0 (4515)"]
    deep = max(cpu, key=lambda t: t["depths"])
    hide = next(t for t in tracks(page) if t["name"] == "stream 27")
    page.evaluate("""([a, b, hide, deep]) => { const l = window.acceltrace.timeline.layout;
        l.moveTrack(a, b); l.hideTrack(hide); l.setDepths(deep, 4); l.setFilter('-"stream 84"'); window.acceltrace.timeline.relayout(); }""",
                  [cpu[-1]["id"], cpu[0]["id"], hide["id"], deep["id"]])
    before = tracks(page)
    page.evaluate("""() => { const tl = window.acceltrace.timeline, Old = tl.layout;
        tl.layout = new Old.constructor(tl.meta.tracks); tl.relayout(); window.__replaced = tl.layout !== Old; }""")
    assert page.evaluate("() => window.__replaced")
    wait_idle(page)
    after = tracks(page)
    assert [(t["id"], t["hidden"], t["filtered"], t["depths"]) for t in after] == [(t["id"], t["hidden"], t["filtered"], t["depths"]) for t in before]
    assert page.locator("#track-count").inner_text() == "13 of 15 · 1 hidden"
    assert not page.errors, page.errors


def test_filter_language_on_merged_job_tracks_and_names_with_colons(page, trace_id):
    """track_filter.js on hand-made tracks of a merged job (devices "rank 2/0"), as the page runs it."""
    open_trace(page, trace_id)
    got = page.evaluate("""async () => {
        const { parseTrackFilter, trackMatches } = await import('/static/timeline/track_filter.js');
        const T = (id, lane, group_name, name, device, process, thread) => ({ track_id: id, lane, group_name, name, device, process, thread });
        const tracks = [T(1, 'eu', 'rank 2', 'GPU 0 / stream 7', 'rank 2/0', '2', '7'), T(2, 'eu', 'rank 3', 'GPU 0 / stream 7', 'rank 3/0', '3', '7'),
                        T(3, 'cpu', 'rank 2', 'python3 (59813) / thread 59813', null, '59813', '59813'), T(4, 'pcie', 'rank 12', 'GPU 1 / PCIe HtoD', 'rank 12/1', '12', null),
                        T(5, 'cpu', 'trace', 'aten::mm worker', null, null, null)];
        const run = (text) => tracks.filter((t) => trackMatches(parseTrackFilter(text), t)).map((t) => t.track_id);
        return Object.fromEntries(['dev:0', 'rank:2', 'rank:1', 'rank:12 lane:device', 'aten::mm', '-lane:host', 'lane:exec,pci',
                                   'proc:59813', 'thread:7 -rank:3', '"stream 7" rank:3', 'DEVICE:1', 'lane:', '-'].map((q) => [q, run(q)]));
    }""")
    assert got == {
        "dev:0": [1, 2], "rank:2": [1, 3], "rank:1": [], "rank:12 lane:device": [4], "aten::mm": [5], "-lane:host": [1, 2, 4],
        "lane:exec,pci": [1, 2, 4], "proc:59813": [3], "thread:7 -rank:3": [1], '"stream 7" rank:3': [2], "DEVICE:1": [4],
        "lane:": [1, 2, 3, 4, 5], "-": [1, 2, 3, 4, 5],
    }, got
