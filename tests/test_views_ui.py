"""Browser tests of the aggregate views page (/t/{id}/views): flame graph, call trees, rollup, events
table and SQL page, on a real Kineto trace, each number checked against SQL written here.

Debian's Chromium driven by Playwright against `acceltrace serve` on loopback (tests/conftest.py);
screenshots land in test-output/ui/views-*.png.
"""

from __future__ import annotations

import csv
import io
import urllib.parse

import pytest

import _ui


@pytest.fixture(scope="module")
def server(a100_server):
    return a100_server


@pytest.fixture(scope="module")
def trace(server):
    return _ui.trace_info(server)


def sql(server, trace, text):
    return _ui.sql(server, trace["id"], text)


@pytest.fixture(scope="module")
def rng(trace):
    """A range in the middle of the trace (relative ns) and its absolute bounds."""
    a, b = trace["duration"] // 4, trace["duration"] * 3 // 5
    return {"start_ns": a, "end_ns": b, "t0": trace["start"] + a, "t1": trace["start"] + b}


@pytest.fixture
def page(browser, server):
    with _ui.new_page(browser, server, 1400, 860) as pg:
        yield pg
        assert not pg.errors, pg.errors


def shot(page, name):
    _ui.shot(page, f"views-{name}")


def open_view(page, trace, view, wait, **params):
    q = urllib.parse.urlencode({"view": view, **params}, doseq=True)
    page.goto(f"/t/{trace['id']}/views?{q}")
    wait_ready(page, wait)


def wait_ready(page, view, also="", arg=None):
    """Until the view's hooks say ready (and `also`, a JS condition on `p` = arg): guarded, since a new page's
    wait can run before its module has set window.acceltrace."""
    page.wait_for_function(f"(p) => window.acceltrace && window.acceltrace.{view} && window.acceltrace.{view}.ready"
                           + (f" && ({also})" if also else ""), arg=arg, timeout=20000)


def clipped_cpu_total(server, trace, rng, depth0_only=True, name=None):
    """Clipped time in the range of the CPU slices (depth 0: the tree's roots), by plain SQL."""
    where = " AND s.depth = 0" if depth0_only else ""
    if name is not None:
        where += " AND s.name = '" + name.replace("'", "''") + "'"
    (row,) = sql(server, trace, f"""
        SELECT coalesce(sum(least(s.ts + s.dur, {rng['t1']}) - greatest(s.ts, {rng['t0']})), 0)
        FROM slices s JOIN tracks t USING (track_id)
        WHERE t.lane = 'cpu' AND s.dur > 0 AND s.ts < {rng['t1']} AND s.ts + s.dur > {rng['t0']}{where}""")
    return int(row[0])


# -- flame graph ---------------------------------------------------------------------------------------
def test_flame_graph_self_times_sum_to_the_range_total_and_zoom_lives_in_the_url(page, server, trace, rng):
    open_view(page, trace, "flame", "flame", start_ns=rng["start_ns"], end_ns=rng["end_ns"])
    f = page.evaluate("() => window.acceltrace.flame")
    total = clipped_cpu_total(server, trace, rng)
    assert total > 0
    assert not f["truncated"]
    assert f["root_total_ns"] == total
    assert sum(r["self_ns"] for r in f["rects"]) == total  # every node's self time, root to leaves
    # the drawn widths are proportional to total time: depth-1 nodes tile the width
    width = page.evaluate("() => document.getElementById('flame-canvas').getBoundingClientRect().width")
    assert abs(sum(r["w"] for r in f["rects"] if r["depth"] == 1) - width) < 1.0
    # the canvas is really drawn (coloured pixels under the biggest node)
    big = max((r for r in f["rects"] if r["depth"] == 1), key=lambda r: r["w"])
    box = page.locator("#flame-canvas").bounding_box()
    px = page.evaluate("""([x, y]) => { const c = document.getElementById('flame-canvas'); const d = devicePixelRatio;
        const p = c.getContext('2d').getImageData(Math.round(x * d), Math.round(y * d), 1, 1).data;
        return [p[0], p[1], p[2], p[3]]; }""", [big["x"] + 2, big["y"] + 9])
    assert px[3] == 255 and max(px[:3]) - min(px[:3]) > 30, px
    # hover: name, total, self, count in a tooltip
    page.mouse.move(box["x"] + big["x"] + big["w"] / 2, box["y"] + big["y"] + 9)
    tip = page.locator("#view-tooltip")
    assert tip.is_visible() and big["name"] in tip.inner_text() and "self" in tip.inner_text()
    # the timeline link frames the range
    href = page.locator("#timeline-link").get_attribute("href")
    assert href == f"/t/{trace['id']}#s={rng['start_ns']}&e={rng['end_ns']}"
    shot(page, "flame")
    # click zooms into the node: it spans the width, the URL names it, a reload restores it
    page.mouse.click(box["x"] + big["x"] + big["w"] / 2, box["y"] + big["y"] + 9)
    page.wait_for_function("(p) => window.acceltrace.flame.focus === p", arg=big["path"])
    z = page.evaluate("() => window.acceltrace.flame")
    assert z["focus_total_ns"] == big["total_ns"] and abs(z["rects"][0]["w"] - width) < 0.5
    assert f"focus={big['path']}" in page.url
    page.reload()
    wait_ready(page, "flame", "window.acceltrace.flame.focus === p", arg=big["path"])
    assert page.locator("#flame-crumbs a").count() == 2
    shot(page, "flame-zoomed")
    page.locator("#flame-crumbs a").first.click()
    page.wait_for_function("() => window.acceltrace.flame.focus === ''")


# -- call trees ----------------------------------------------------------------------------------------
def test_top_down_and_bottom_up_trees_match_sql_and_restore_from_the_url(page, server, trace, rng):
    open_view(page, trace, "tree", "tree", start_ns=rng["start_ns"], end_ns=rng["end_ns"])
    root = page.evaluate("() => window.acceltrace.tree.root")
    total = clipped_cpu_total(server, trace, rng)
    assert sum(c["total_ns"] for c in root["children"]) == total
    top = root["children"][0]
    assert top["total_ns"] == clipped_cpu_total(server, trace, rng, name=top["name"])
    # the table shows the roots, biggest total first, with mean = total / count
    first = page.locator("#tree-table tbody tr").first
    assert top["name"] in first.locator("td.name").inner_text()
    assert int(first.locator("td").nth(1).get_attribute("data-ns")) == top["total_ns"]
    # sort by count: the visible root rows are in descending count order
    page.locator("#tree-table th[data-key='count']").click()
    counts = [int(t.replace(",", "")) for t in page.locator("#tree-table tbody tr td:nth-child(4)").all_inner_texts()]
    assert counts == sorted(counts, reverse=True)
    # bottom-up with a search: every frame named X, its self time = SQL self time of X
    page.select_option("#tree-mode", "bottom-up")
    page.wait_for_function("() => window.acceltrace.tree.ready && window.acceltrace.tree.mode === 'bottom-up'")
    bu = page.evaluate("() => window.acceltrace.tree.root")
    assert sum(c["self_ns"] for c in bu["children"]) == total  # all self time in the range
    # p95 of a frame's self time (nearest rank), from the raw slices: clipped time minus clipped children
    launch = next(c for c in bu["children"] if c["name"] == "cudaLaunchKernel")
    t0, t1 = rng["t0"], rng["t1"]
    ((p95, n),) = sql(server, trace, f"""
        WITH r AS (SELECT s.slice_id, s.track_id, s.ts, s.dur, s.depth, s.name,
                          least(s.ts + s.dur, {t1}) - greatest(s.ts, {t0}) AS c
                   FROM slices s JOIN tracks t USING (track_id)
                   WHERE t.lane = 'cpu' AND s.dur > 0 AND s.ts < {t1} AND s.ts + s.dur > {t0})
        SELECT quantile_disc(p.c - coalesce((SELECT sum(k.c) FROM r k WHERE k.track_id = p.track_id
                   AND k.depth = p.depth + 1 AND k.ts >= p.ts AND k.ts < p.ts + p.dur), 0), 0.95), count(*)
        FROM r p WHERE p.name = 'cudaLaunchKernel'""")
    assert launch["count"] == n and launch["p95_ns"] == p95
    page.fill("#tree-search", "cudaLaunchKernel")
    page.wait_for_function("() => document.querySelectorAll('#tree-table tr.match').length > 0")
    assert "mode=bottom-up" in page.url and "q=cudaLaunchKernel" in page.url
    shot(page, "tree-bottom-up")
    page.reload()
    wait_ready(page, "tree")
    assert page.input_value("#tree-mode") == "bottom-up" and page.input_value("#tree-search") == "cudaLaunchKernel"
    assert page.locator("#tree-table tr.match").count() > 0
    assert all("cudalaunchkernel" in t.lower() for t in page.locator("#tree-table tr.match td.name").all_inner_texts())


# -- rollup --------------------------------------------------------------------------------------------
def test_rollup_device_time_equals_the_correlated_kernels_sum(page, server, trace):
    open_view(page, trace, "rollup", "rollup")
    rows = {r["name"]: r for r in page.evaluate("() => window.acceltrace.rollup.rows")}
    want = dict(sql(server, trace, """
        WITH calls AS (
            SELECT s.name, s.corr_id FROM slices s JOIN tracks t USING (track_id)
            WHERE t.lane = 'cpu' AND s.corr_id IS NOT NULL AND s.dur > 0
            QUALIFY row_number() OVER (PARTITION BY s.corr_id ORDER BY s.ts) = 1)
        SELECT c.name, sum(k.dur) FROM calls c JOIN slices k ON k.corr_id = c.corr_id
        JOIN tracks kt ON kt.track_id = k.track_id WHERE kt.lane = 'eu' AND k.dur > 0 GROUP BY c.name"""))
    launches = {n: v for n, v in want.items() if "aunch" in n}
    assert launches
    for name, dev in launches.items():
        assert rows[name]["device_ns"] == dev, name
    # the table: device time descending; a click on Host sorts by host time
    names = page.locator("#rollup-table tbody tr").evaluate_all("trs => trs.map(t => t.dataset.name)")
    assert [rows[n]["device_ns"] for n in names] == sorted((rows[n]["device_ns"] for n in names), reverse=True)
    page.locator("#rollup-table th[data-key='host_ns']").click()
    names = page.locator("#rollup-table tbody tr").evaluate_all("trs => trs.map(t => t.dataset.name)")
    assert [rows[n]["host_ns"] for n in names] == sorted((rows[n]["host_ns"] for n in names), reverse=True)
    shot(page, "rollup")


# -- events table --------------------------------------------------------------------------------------
def test_events_table_is_virtualised_sorted_filtered_and_exports_csv(page, server, trace, rng):
    open_view(page, trace, "events", "events", start_ns=rng["start_ns"], end_ns=rng["end_ns"])
    cond = f"s.ts < {rng['t1']} AND s.ts + s.dur >= {rng['t0']}"
    ((n,),) = sql(server, trace, f"SELECT count(*) FROM slices s WHERE {cond}")
    ev = page.evaluate("() => window.acceltrace.events")
    assert ev["total"] == n and n > 1000
    assert page.locator("#events-table tbody tr").count() < 60  # only the rows in view exist
    # scroll to the middle: the rows shown are the SQL rows at that offset
    page.locator("#events-scroll").evaluate("e => { e.scrollTop = e.scrollHeight / 2; }")
    page.wait_for_function("() => window.acceltrace.events.ready && window.acceltrace.events.first > 100")
    ev = page.evaluate("() => window.acceltrace.events")
    ids = [r[0] for r in sql(server, trace, f"SELECT s.slice_id FROM slices s WHERE {cond} ORDER BY s.ts, s.slice_id "
                                            f"LIMIT {len(ev['shown'])} OFFSET {ev['first']}")]
    assert ev["shown"] == ids
    # sort by duration, longest first
    page.locator("#events-table th[data-key='dur']").click()  # a numeric column sorts descending first
    page.wait_for_function("() => window.acceltrace.events.ready && window.acceltrace.events.sort.desc")
    ev = page.evaluate("() => window.acceltrace.events")
    ids = [r[0] for r in sql(server, trace, f"SELECT s.slice_id FROM slices s WHERE {cond} "
                                            f"ORDER BY s.dur DESC, s.ts, s.slice_id LIMIT {len(ev['shown'])}")]
    assert ev["first"] == 0 and ev["shown"] == ids
    # filter by name
    page.fill("#events-search", "memcpy")
    page.wait_for_function(f"() => window.acceltrace.events.ready && window.acceltrace.events.total < {n}")
    ((m,),) = sql(server, trace, f"SELECT count(*) FROM slices s WHERE {cond} AND s.name ILIKE '%memcpy%'")
    assert page.evaluate("() => window.acceltrace.events.total") == m > 0
    shot(page, "events")
    # CSV export: the same rows, in the same order
    href = page.locator("#events-csv").get_attribute("href")
    r = page.request.get(href)
    assert r.ok and r.headers["x-acceltrace-truncated"] == "false"
    rows = list(csv.DictReader(io.StringIO(r.text())))
    assert len(rows) == m and all("memcpy" in x["name"].lower() for x in rows)
    assert list(rows[0]) == ["slice_id", "track_id", "lane", "track", "ts", "dur", "depth", "name", "category", "bytes", "args"]
    durs = [int(x["dur"]) for x in rows]
    assert durs == sorted(durs, reverse=True)
    ((ts0,),) = sql(server, trace, f"SELECT ts - {trace['start']} FROM slices WHERE slice_id = {rows[0]['slice_id']}")
    assert int(rows[0]["ts"]) == ts0  # relative ns
    # a row click opens the slice on the timeline
    first_id = page.evaluate("() => window.acceltrace.events.shown[0]")
    page.locator("#events-table tbody tr").first.click()
    page.wait_for_url(f"**/t/{trace['id']}#*sel={first_id}*")


# -- SQL page ------------------------------------------------------------------------------------------
def test_query_page_runs_sql_keeps_history_refuses_writes_and_a_row_opens_the_slice(page, server, trace):
    page.goto(f"/t/{trace['id']}/views?view=query")
    text = "SELECT slice_id, name, dur FROM slices ORDER BY dur DESC, slice_id LIMIT 7"
    page.fill("#query-sql", text)
    page.click("#query-run")
    page.wait_for_function("() => window.acceltrace.query.ready")
    q = page.evaluate("() => window.acceltrace.query")
    assert q["error"] is None and q["rows"] == sql(server, trace, text)
    assert page.locator("#query-table tbody tr").count() == 7
    shot(page, "query")
    # the history keeps it across a reload; the URL restores the open query
    page.reload()
    wait_ready(page, "query")
    assert page.input_value("#query-sql") == text
    assert page.locator("#query-history option").nth(1).get_attribute("title") == text
    # the endpoint's refusals, shown as text
    page.fill("#query-sql", "DROP TABLE slices")
    page.click("#query-run")
    page.wait_for_function("() => window.acceltrace.query.ready && window.acceltrace.query.error")
    assert page.evaluate("() => window.acceltrace.query.error.code") == "query_refused"
    assert "query_refused" in page.locator("#query-results").inner_text()
    # a row with a slice_id jumps to that slice on the timeline
    page.fill("#query-sql", text)
    page.click("#query-run")
    page.wait_for_function("() => window.acceltrace.query.ready && !window.acceltrace.query.error")
    sid = page.evaluate("() => window.acceltrace.query.rows[2][0]")
    page.locator("#query-table tbody tr").nth(2).click()
    page.wait_for_url(f"**/t/{trace['id']}#*sel={sid}*")
    page.wait_for_function("(id) => window.acceltrace && window.acceltrace.selected === id", arg=sid, timeout=20000)


def test_the_trace_pages_views_button_opens_the_visible_range(page, trace, rng):
    page.goto(f"/t/{trace['id']}#s={rng['start_ns']}&e={rng['end_ns']}")
    page.wait_for_function("() => document.getElementById('timeline').dataset.state === 'idle'", timeout=20000)
    frag = dict(urllib.parse.parse_qsl(page.evaluate("() => location.hash.slice(1)")))
    page.click("#open-views")
    page.wait_for_url(f"**/t/{trace['id']}/views?view=flame&start_ns={frag['s']}&end_ns={frag['e']}")
    wait_ready(page, "flame")
    assert page.locator("#timeline-link").get_attribute("href") == f"/t/{trace['id']}#s={frag['s']}&e={frag['e']}"


# -- device work by launching op, links back, trace info, the area's way in ---------------------------------
def test_device_flame_graph_sums_to_the_ranges_device_time_and_links_to_the_longest_slice(page, server, trace, rng):
    open_view(page, trace, "flame", "flame", start_ns=rng["start_ns"], end_ns=rng["end_ns"], source="device")
    f = page.evaluate("() => window.acceltrace.flame")
    (row,) = sql(server, trace, f"""
        SELECT sum(least(s.ts + s.dur, {rng['t1']}) - greatest(s.ts, {rng['t0']}))
        FROM slices s JOIN tracks t USING (track_id)
        WHERE t.lane IN ('eu', 'pcie') AND s.dur > 0 AND s.ts < {rng['t1']} AND s.ts + s.dur > {rng['t0']}""")
    assert f["source"] == "device" and not f["truncated"]
    assert f["root_total_ns"] == int(row[0]) > 0
    # self time lives on the kernels and copies only, and sums to the range's device time
    assert sum(r["self_ns"] for r in f["rects"]) == f["root_total_ns"]
    assert {r["lane"] for r in f["rects"] if r["self_ns"] > 0} <= {"eu", "pcie"}
    # a kernel sits under the runtime call that launched it (correlation id), under that call's op
    leaf = max((r for r in f["rects"] if r["lane"] == "eu"), key=lambda r: r["w"])
    parent = next(r for r in f["rects"] if r["path"] == leaf["path"].rsplit(".", 1)[0])
    assert "aunch" in parent["name"], parent
    shot(page, "flame-device")
    # zoom into the kernel: its longest slice opens on the timeline, selected
    page.goto(f"/t/{trace['id']}/views?" + urllib.parse.urlencode(
        {"view": "flame", "start_ns": rng["start_ns"], "end_ns": rng["end_ns"], "source": "device", "focus": leaf["path"]}))
    wait_ready(page, "flame", "window.acceltrace.flame.focus === p", arg=leaf["path"])
    assert page.input_value("#flame-source") == "device"  # the URL restored the source
    sid = page.evaluate("() => window.acceltrace.flame.focus_slice_id")
    ((name, longest),) = sql(server, trace, f"SELECT name, dur FROM slices WHERE slice_id = {sid}")
    assert name == leaf["name"] and longest >= leaf["total_ns"] / max(leaf["count"], 1)
    assert page.locator("#flame-slices").get_attribute("href").count("view=events") == 1
    page.click("#flame-longest")
    page.wait_for_url(f"**/t/{trace['id']}#*sel={sid}*")
    page.wait_for_function("(id) => window.acceltrace && window.acceltrace.selected === id", arg=sid, timeout=20000)


def test_device_call_tree_bottom_up_starts_from_the_kernels(page, server, trace):
    open_view(page, trace, "tree", "tree", source="device", mode="bottom-up")
    root = page.evaluate("() => window.acceltrace.tree.root")
    want = dict(sql(server, trace, """SELECT s.name, sum(s.dur) FROM slices s JOIN tracks t USING (track_id)
        WHERE t.lane IN ('eu', 'pcie') AND s.dur > 0 GROUP BY s.name"""))
    got = {c["name"]: c["self_ns"] for c in root["children"] if not c.get("truncated")}
    assert got and all(got[n] == want[n] for n in got)
    assert sum(c["self_ns"] for c in root["children"]) == sum(want.values())
    assert page.input_value("#tree-source") == "device" and page.input_value("#tree-mode") == "bottom-up"
    assert page.locator("#tree-table tbody tr a.slice-link").count() > 0
    shot(page, "tree-device-bottom-up")


def test_trace_info_view_lists_devices_versions_passes_and_tables_with_row_counts(page, server, trace):
    open_view(page, trace, "info", "info")
    tables = {t["name"]: t for t in page.evaluate("() => window.acceltrace.info.tables")}
    for name in ("slices", "tracks", "flows", "trace_meta", "agg_rollup", "findings"):
        ((n,),) = sql(server, trace, f"SELECT count(*) FROM {name}")
        assert tables[name]["rows"] == n, name
        assert page.locator(f"#info-tables-table tr[data-table='{name}']").get_attribute("data-rows") == str(n)
    assert tables["findings"]["kind"] == "analysis" and tables["slices"]["kind"] == "stored"
    about = page.locator("#info-about").inner_text()
    assert "Devices" in about and "A100" in about and "Versions" in about and "dropped events" in about
    page.wait_for_function("() => document.querySelectorAll('#info-about table.passes-status tr[data-pass]').length > 0"
                           " || document.querySelector('#info-about .analysis-pending')", timeout=20000)
    shot(page, "info")
    # a table's name opens its first rows in the SQL view
    page.locator("#info-tables-table tr[data-table='tracks'] a").click()
    page.wait_for_url(f"**/t/{trace['id']}/views?view=query*")
    # a new page: its module may not have run yet when the URL changes
    wait_ready(page, "query")
    assert len(page.evaluate("() => window.acceltrace.query.rows")) == tables["tracks"]["rows"]


def test_an_area_on_the_timeline_opens_in_the_views_with_its_range_and_tracks(page, server, trace, rng):
    page.goto(f"/t/{trace['id']}#s={rng['start_ns']}&e={rng['end_ns']}")
    idle = "() => document.getElementById('timeline').dataset.state === 'idle'"
    page.wait_for_function(idle, timeout=20000)
    ((busiest,),) = sql(server, trace, f"""SELECT s.track_id FROM slices s JOIN tracks t USING (track_id)
        WHERE t.lane = 'cpu' AND s.depth = 0 AND s.dur > 0 AND s.ts < {rng['t1']} AND s.ts + s.dur > {rng['t0']}
        GROUP BY ALL ORDER BY sum(s.dur) DESC LIMIT 1""")
    page.evaluate("(id) => window.acceltrace.timeline.revealTrack(id)", busiest)
    page.wait_for_function(idle, timeout=20000)
    rows = page.evaluate("""() => window.acceltrace.timeline.visibleRows().filter(r => r.row.kind === 'track')
        .map(r => ({lane: r.row.track.lane, track_id: r.row.track.track_id, y: r.y}))""")
    cpu = next(r for r in rows if r["track_id"] == busiest)
    box = page.locator("#timeline canvas.tracks").bounding_box()
    y = box["y"] + cpu["y"] + 8
    page.keyboard.down("Shift")
    page.mouse.move(box["x"] + 230 + 100, y)
    page.mouse.down()
    page.mouse.move(box["x"] + 230 + 600, y + 4, steps=4)
    page.mouse.up()
    page.keyboard.up("Shift")
    link = page.locator("#area-open-views")
    link.wait_for(timeout=15000)
    q = urllib.parse.parse_qs(urllib.parse.urlparse(link.get_attribute("href")).query)
    assert q["view"] == ["flame"] and [int(t) for t in q["track"]] == [cpu["track_id"]]
    a, b = int(q["start_ns"][0]), int(q["end_ns"][0])
    assert rng["start_ns"] <= a < b <= rng["end_ns"]
    link.click()
    page.wait_for_url(f"**/t/{trace['id']}/views?*")
    wait_ready(page, "flame")
    assert page.input_value("#track-select") == str(cpu["track_id"])
    # the flame graph is of that track in that range: its total is the track's clipped depth-0 time
    t0, t1 = trace["start"] + a, trace["start"] + b
    ((want,),) = sql(server, trace, f"""SELECT coalesce(sum(least(ts + dur, {t1}) - greatest(ts, {t0})), 0) FROM slices
        WHERE track_id = {cpu['track_id']} AND depth = 0 AND dur > 0 AND ts < {t1} AND ts + dur > {t0}""")
    assert page.evaluate("() => window.acceltrace.flame.root_total_ns") == want > 0
    shot(page, "flame-of-an-area")
