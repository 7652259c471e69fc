"""The HTTP API: catalog, metadata, slice details, search, aggregation, summary, findings, pages, errors."""

from __future__ import annotations

import json
import re

import pytest
from fastapi.routing import APIRoute

from acceltrace.store.catalog import Store

LANE_ORDER = ["cpu", "driver", "pcie", "eu", "counter"]


def test_catalog_lists_ready_traces_with_counts(api, trace_store):
    r = api.get("/api/traces")
    assert r.status_code == 200, r.text
    rows = {t["id"]: t for t in r.json()["traces"]}
    chain = rows[trace_store.ids["chain"]]
    assert chain["status"] == "ready" and chain["name"] == "chain" and chain["format"] == "test"
    assert chain["counts"]["slices"] == 61 and chain["counts"]["flows"] == 5
    assert {"created", "db_bytes", "source_bytes", "progress", "error"} <= set(chain)


def test_metadata_has_relative_times_tracks_in_ui_order_and_groups(api, trace_store):
    r = api.get(f"/api/traces/{trace_store.ids['chain']}")
    assert r.status_code == 200, r.text
    m = r.json()
    assert m["start_abs_ns"] == "1700000000000000000"
    assert m["duration_ns"] == 10_020_000
    lanes = [t["lane"] for t in m["tracks"]]
    assert lanes == sorted(lanes, key=LANE_ORDER.index) == ["cpu", "driver", "pcie", "eu", "counter"]
    eu = next(t for t in m["tracks"] if t["lane"] == "eu")
    assert eu["max_depth"] == 1 and eu["group_name"] == "device 0"
    assert {t["track_id"] for t in m["tracks"]} == {tid for g in m["groups"] for tid in g["track_ids"]}
    assert all(t["group"] in {g["id"] for g in m["groups"]} for t in m["tracks"])
    assert m["levels"]["max"] == m["max_level"] and m["min_level"] == 0
    assert (1024 << m["max_level"]) >= m["duration_ns"]
    assert m["lost_events"] == 0 and m["dropped_events"] == 0 and m["warning_count"] == 0
    assert m["counts"]["counters"] == 5


def test_large_lane_groups_are_split_into_tile_groups_of_at_most_16(api, trace_store):
    m = api.get(f"/api/traces/{trace_store.ids['synthetic']}").json()
    assert all(len(g["track_ids"]) <= 16 for g in m["groups"])
    assert any("(1/" in g["name"] for g in m["groups"])


def test_link_peak_comes_from_link_meta(api):
    from acceltrace.server.metadata import link_peaks

    peaks = link_peaks({"link_gen": "4", "link_width": "16", "max_payload_bytes": "256"})
    assert 28e9 < peaks[""]["link_peak_bytes_per_s"] < 29.5e9  # ~92 % of 31.5 GB/s


def test_unknown_trace_is_404_in_the_error_shape(api):
    r = api.get("/api/traces/AAAAAAAAAAAAAAAAAAAAAA")
    assert r.status_code == 404, r.text
    assert r.json()["error"]["code"] == "not_found"


def test_slice_details_follow_the_correlation_chain_both_ways(api, trace_store):
    ids = trace_store.chain
    r = api.get(f"/api/traces/{trace_store.ids['chain']}/slices/{ids['dma']}")
    assert r.status_code == 200, r.text
    d = r.json()
    assert d["slice"]["name"] == "Memcpy HtoD" and d["slice"]["ts"] == 3000 and d["slice"]["bytes"] == 1 << 20
    assert d["slice"]["track"]["lane"] == "pcie"
    chain = {s["id"]: s for s in d["chain"]["slices"]}
    assert set(chain) == {ids["dma"], ids["submit_copy"], ids["memcpy_api"]}
    assert chain[ids["memcpy_api"]]["hops"] == 2
    assert {(f["src_slice"], f["dst_slice"]) for f in d["chain"]["flows"]} == {
        (ids["memcpy_api"], ids["submit_copy"]), (ids["submit_copy"], ids["dma"])}
    assert [f["kind"] for f in d["flows"]["in"]] == ["dma"] and d["flows"]["out"] == []


def test_slice_chain_never_follows_dependency_flows(api, trace_store):
    ids = trace_store.chain
    d = api.get(f"/api/traces/{trace_store.ids['chain']}/slices/{ids['kernel']}").json()
    chain_ids = {s["id"] for s in d["chain"]["slices"]}
    assert chain_ids == {ids["kernel"], ids["submit_kernel"], ids["launch_api"]}
    assert ids["other_api"] not in chain_ids
    assert [f["kind"] for f in d["flows"]["out"]] == ["dependency"]  # listed as a direct flow, not followed
    # ... and its far end named, as the chain's slices are (the details show "CPU: other_api @ 40 us, 1 us")
    assert d["flow_ends"] == [{"id": ids["other_api"], "slice_id": ids["other_api"], "track_id": d["flow_ends"][0]["track_id"],
                               "lane": "cpu", "ts": 40_000, "dur": 1000, "depth": 0, "name": "other_api"}]
    # a far end on the chain is named there, not twice
    d = api.get(f"/api/traces/{trace_store.ids['chain']}/slices/{ids['dma']}").json()
    assert d["flow_ends"] == []


def test_slice_args_are_parsed_json(api, trace_store):
    d = api.get(f"/api/traces/{trace_store.ids['chain']}/slices/{trace_store.chain['memcpy_api']}").json()
    assert d["slice"]["args"] == {"stream": 7}


def test_unknown_slice_is_404(api, trace_store):
    r = api.get(f"/api/traces/{trace_store.ids['chain']}/slices/999999")
    assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"


def test_search_is_case_insensitive_substring_in_time_order_and_paginated(api, trace_store):
    base = f"/api/traces/{trace_store.ids['chain']}/search"
    r = api.get(base, params={"q": "TINY", "limit": 20})
    assert r.status_code == 200, r.text
    d = r.json()
    assert d["total"] == 50 and len(d["results"]) == 20 and d["next_offset"] == 20 and d["has_more"]
    ts = [x["ts"] for x in d["results"]]
    assert ts == sorted(ts) and ts[0] == 20_100
    last = api.get(base, params={"q": "tiny", "offset": 40, "limit": 20}).json()
    assert len(last["results"]) == 10 and last["next_offset"] is None
    assert api.get(base, params={"q": "cuda*Async"}).json()["total"] == 1  # glob over the whole name
    assert api.get(base, params={"q": "%"}).json()["total"] == 0  # LIKE wildcards are literal
    after = api.get(base, params={"q": "tiny", "after_ns": 21_000, "limit": 1}).json()
    assert after["results"][0]["ts"] >= 21_000


def test_search_without_query_is_422(api, trace_store):
    r = api.get(f"/api/traces/{trace_store.ids['chain']}/search")
    assert r.status_code == 422 and r.json()["error"]["code"] == "validation_error"


def test_area_aggregation_by_name_transfers_and_counters(api, trace_store):
    tid = trace_store.ids["chain"]
    r = api.get(f"/api/traces/{tid}/aggregate", params={"start_ns": 0, "end_ns": 10_000})
    assert r.status_code == 200, r.text
    d = r.json()
    names = {n["name"]: n for n in d["names"]}
    assert names["Memcpy HtoD"]["count"] == 1 and names["Memcpy HtoD"]["total_ns"] == 4000
    assert d["transfers"] == [{"direction": "h2d", "host_mem": "pinned", "count": 1, "bytes": 1 << 20,
                               "busy_ns": 4000, "gbps": pytest.approx((1 << 20) / 4000)}]
    assert d["counters"][0]["count"] == 4 and d["counters"][0]["max"] == 12.5
    track = next(t for t in api.get(f"/api/traces/{tid}").json()["tracks"] if t["lane"] == "eu")["track_id"]
    p = api.post(f"/api/traces/{tid}/aggregate", json={"start_ns": 0, "end_ns": 10_000, "tracks": [track]}).json()
    assert {n["name"] for n in p["names"]} == {"gemm_kernel"}
    g = api.get(f"/api/traces/{tid}/aggregate", params={"start_ns": 0, "end_ns": 10_000, "track_ids": f"{track}"})
    assert {n["name"] for n in g.json()["names"]} == {"gemm_kernel"}


def test_area_aggregation_refuses_an_empty_range(api, trace_store):
    r = api.get(f"/api/traces/{trace_store.ids['chain']}/aggregate", params={"start_ns": 5, "end_ns": 5})
    assert r.status_code == 400 and r.json()["error"]["code"] == "bad_request"


def test_summary_has_top_names_copies_and_busy_fraction(api, trace_store):
    r = api.get(f"/api/traces/{trace_store.ids['chain']}/summary")
    assert r.status_code == 200, r.text
    s = r.json()
    assert set(s["lanes"]) == {"cpu", "driver", "pcie", "eu"}
    top_eu = s["lanes"]["eu"]["top"]
    assert top_eu[0]["name"] == "long_kernel" and top_eu[0]["p95_ns"] == 10_000_000
    tiny = next(t for t in top_eu if t["name"] == "tiny")
    assert tiny["count"] == 50 and tiny["total_ns"] == 1000 and tiny["p50_ns"] == 20
    busy = s["lanes"]["eu"]["busy"]
    assert len(busy["fraction"]) == 100 and busy["fraction"][50] == pytest.approx(1.0)
    assert s["copies"][0]["bytes"] == 1 << 20
    assert Store(trace_store.root, sweep=False).side_path(trace_store.ids["chain"], "summary").exists()


def test_findings_are_empty_before_analysis_and_listed_after(api, trace_store):
    from acceltrace.store.schema import FINDINGS, create_sql

    tid = trace_store.ids["synthetic"]
    r = api.get(f"/api/traces/{tid}/findings")
    assert r.status_code == 200 and r.json() == {"findings": []}
    store = Store(trace_store.root, sweep=False)
    start = int(api.get(f"/api/traces/{tid}").json()["start_abs_ns"])

    def build(con):
        con.execute(create_sql("findings", FINDINGS))
        con.execute("INSERT INTO findings VALUES ('pcie_saturation', 'warning', ?, 100, 1, 5, 'util', 0.97, 0.9,"
                    " 400, 300, 'replay', 'link saturated')", [start + 1234])

    store.write_side(tid, "findings", build)
    f = api.get(f"/api/traces/{tid}/findings").json()["findings"]
    assert len(f) == 1 and f[0]["ts"] == 1234 and f[0]["pass"] == "pcie_saturation" and f[0]["impact_ns"] == 400
    assert (f[0]["exclusive_ns"], f[0]["impact_basis"]) == (300, "replay")


def test_pages_render_the_list_and_the_trace(api, trace_store):
    r = api.get("/")
    assert r.status_code == 200, r.text
    assert "text/html" in r.headers["content-type"]
    r = api.get(f"/t/{trace_store.ids['chain']}")
    assert r.status_code == 200, r.text
    assert trace_store.ids["chain"] in r.text


def test_unknown_trace_page_is_404(api):
    r = api.get("/t/no-such-trace-id")
    assert r.status_code == 404
    assert r.json()["error"]["code"] == "not_found"
    r = api.get("/t/no-such-trace-id", headers={"Accept": "text/html"})
    assert r.status_code == 404 and "text/html" in r.headers["content-type"]


def _concrete(path: str, trace_id: str) -> str:
    return re.sub(r"\{(\w+)\}", lambda m: {"trace_id": trace_id, "slice_id": "1", "level": "3",
                                           "index": "0"}.get(m.group(1), "x"), path)


def _api_routes():
    from acceltrace.server.app import ROUTERS

    return [r for router in ROUTERS for r in router.routes if isinstance(r, APIRoute)]


def test_every_route_answers_errors_in_one_json_shape(api):
    """Unknown trace ids (404), wrong methods (405), bad input (422) and unknown paths, on every route."""
    checked = 0
    for route in _api_routes():
        for method in route.methods:
            if "{trace_id}" in route.path:
                url = _concrete(route.path, "AAAAAAAAAAAAAAAAAAAAAA")
                kw = {"json": {"sql": "select 1", "start_ns": 0, "end_ns": 1}} if method == "POST" else {}
                params = {"q": "x", "start_ns": 0, "end_ns": 1}
                r = api.request(method, url, params=params, **kw)
                assert r.status_code in (404, 422), (method, url, r.text)
                body = r.json()
                assert set(body) == {"error"} and set(body["error"]) == {"code", "message"}, (url, body)
                checked += 1
        other = "PATCH"
        r = api.request(other, _concrete(route.path, "AAAAAAAAAAAAAAAAAAAAAA"))
        assert r.status_code == 405, (route.path, r.text)
        assert r.json()["error"]["code"] == "method_not_allowed"
    assert checked >= 10
    for url in ("/api/nothing-here", "/static/does-not-exist.js"):
        r = api.get(url)
        assert r.status_code == 404 and r.json()["error"]["code"] == "not_found", r.text
    r = api.post("/api/traces/AAAAAAAAAAAAAAAAAAAAAA/query", content=b"not json",
                 headers={"Content-Type": "application/json"})
    assert r.status_code in (404, 422) and "error" in r.json()


def test_openapi_documents_every_route(api):
    r = api.get("/openapi.json")
    assert r.status_code == 200, r.text
    spec = r.json()
    ours = [(p, m) for p, ops in spec["paths"].items() for m in ops]
    assert len(ours) >= 14
    for path, ops in spec["paths"].items():
        for method, op in ops.items():
            assert op.get("summary") and op.get("description"), f"{method.upper()} {path} undocumented"
    for route in _api_routes():
        assert route.path in spec["paths"], route.path


def test_docs_api_md_mentions_every_api_route(api):
    from pathlib import Path

    doc = (Path(__file__).resolve().parent.parent / "docs" / "api.md").read_text()
    from acceltrace.server.routers import analysis, slices, tiles, traces

    for route in [r for m in (analysis, slices, tiles, traces) for r in m.router.routes]:
        if route.path.startswith("/api/"):
            tail = route.path.split("{trace_id}")[-1].split("/{")[0] or "/api/traces"
            assert tail in doc, f"docs/api.md does not mention {route.path}"


# -- the named queries behind the routes (store/queries.py, tiles/layout.py) ---------------------------
@pytest.fixture
def chain_con(trace_store):
    con = Store(trace_store.root, sweep=False).connect(trace_store.ids["chain"])
    yield con
    con.close()


def _chain_by_bfs(flows: list[tuple], start: int, max_hops: int) -> dict[int, int]:
    """Slice id -> fewest hops from start over the chain flow kinds, both ways (plain Python)."""
    from acceltrace.store.schema import CHAIN_FLOW_KINDS

    edges: dict[int, set[int]] = {}
    for src, dst, kind in flows:
        if kind in CHAIN_FLOW_KINDS and src is not None and dst is not None:
            edges.setdefault(src, set()).add(dst)
            edges.setdefault(dst, set()).add(src)
    hops, frontier = {start: 0}, [start]
    for n in range(1, max_hops + 1):
        frontier = [b for a in frontier for b in edges.get(a, ()) if b not in hops]
        hops.update((b, n) for b in frontier)
    return hops


def test_correlation_chain_matches_a_breadth_first_walk_from_every_slice(chain_con, trace_store):
    from acceltrace.store.queries import correlation_chain

    flows = chain_con.execute("SELECT src_slice, dst_slice, kind FROM flows").fetchall()
    rows = {r[0]: r for r in chain_con.execute(
        "SELECT s.slice_id, s.track_id, t.lane, s.ts, s.dur, s.depth, s.name FROM slices s JOIN tracks t USING (track_id)"
    ).fetchall()}
    for sid in rows:
        for max_hops in (1, 32):
            want = _chain_by_bfs(flows, sid, max_hops)
            got = correlation_chain(chain_con, sid, max_hops=max_hops)
            assert {s["slice_id"]: s["hops"] for s in got.slices} == want and not got.truncated, sid
            assert [s["ts"] for s in got.slices] == sorted(rows[i][3] for i in want)
            assert all(tuple(s.values())[:7] == rows[s["slice_id"]] for s in got.slices)
            assert sorted((f["src_slice"], f["dst_slice"]) for f in got.flows) == sorted(
                (a, b) for a, b, k in flows if k != "dependency" and a in want and b in want and len(want) > 1)
    ids = trace_store.chain
    assert set(_chain_by_bfs(flows, ids["dma"], 32)) == {ids["dma"], ids["submit_copy"], ids["memcpy_api"]}
    cut = correlation_chain(chain_con, ids["dma"], max_slices=2)
    assert cut.truncated and [s["hops"] for s in cut.slices] == [1, 0]  # the two nearest, by ts
    assert correlation_chain(chain_con, 999_999).slices == []


def test_slice_queries_read_one_slice_its_track_and_its_flows(chain_con, trace_store):
    from acceltrace.store import queries

    ids = trace_store.chain
    s = queries.slice_row(chain_con, ids["memcpy_api"])
    assert s["name"] == "cudaMemcpyAsync" and s["args"] == {"stream": 7} and s["dur"] == 3000
    assert queries.slice_row(chain_con, 999_999) is None
    assert queries.track_row(chain_con, s["track_id"])["lane"] == "cpu"
    assert [(f["kind"], f["dst_slice"]) for f in queries.flows_touching(chain_con, ids["kernel"])] == [
        ("exec", ids["kernel"]), ("dependency", ids["other_api"])]


def test_args_too_long_to_send_whole_come_cut_with_their_length_and_whole_on_their_own(api, trace_store, monkeypatch):
    """A profiler can put a 100 MB blob in one event's args: sent whole with the details (and drawn) it
    crashed the browser tab. Past ARGS_INLINE_MAX characters the details carry its start and its length;
    .../args gives all of it, exactly as stored."""
    from acceltrace.store import queries

    tid, sid = trace_store.ids["chain"], trace_store.chain["memcpy_api"]
    whole = api.get(f"/api/traces/{tid}/slices/{sid}/args")
    assert whole.status_code == 200 and whole.headers["content-type"].startswith("application/json")
    assert json.loads(whole.content) == {"stream": 7}
    d = api.get(f"/api/traces/{tid}/slices/{sid}").json()["slice"]
    assert d["args"] == {"stream": 7} and "args_chars" not in d
    monkeypatch.setattr(queries, "ARGS_INLINE_MAX", 5)
    d = api.get(f"/api/traces/{tid}/slices/{sid}").json()["slice"]
    assert d["args_chars"] == len(whole.text) and d["args"] == whole.text[:5]
    assert api.get(f"/api/traces/{tid}/slices/{sid}/args").content == whole.content
    assert api.get(f"/api/traces/{tid}/slices/999999/args").status_code == 404


@pytest.mark.parametrize("text", ["tiny", "TINY", "kernel", "cuda*", "*Async", "?ini*", "%", "_", "a"])
def test_search_slices_matches_a_python_filter_with_and_without_the_name_dictionary(chain_con, text):
    from fnmatch import fnmatchcase

    from acceltrace.store.queries import search_slices
    from acceltrace.tiles.layout import NAMES_TABLE

    every = chain_con.execute("SELECT slice_id, track_id, ts, dur, depth, name FROM slices").fetchall()
    glob = "*" in text or "?" in text
    hits = sorted((r for r in every if (fnmatchcase(r[5].lower(), text.lower()) if glob
                                        else text.lower() in r[5].lower())), key=lambda r: (r[2], r[0]))
    t = sorted(r[2] for r in every)[len(every) // 2]
    for names in (NAMES_TABLE, None):
        page = search_slices(chain_con, text, offset=1, limit=5, names=names)
        assert page.total == len(hits) and [tuple(r.values()) for r in page.rows] == hits[1:6]
        late = search_slices(chain_con, text, before_ns=t, limit=3, names=names)
        assert [r["slice_id"] for r in late.rows] == [r[0] for r in reversed([h for h in hits if h[2] < t])][:3]


def test_track_layout_without_lod_tables_has_the_same_tracks_and_depths(chain_con):
    from acceltrace.tiles import layout

    with_lod = layout.tracks_in_ui_order(chain_con)
    without = layout.tracks_in_ui_order(chain_con, lod=False)
    strip = lambda ts: [{k: v for k, v in t.items() if k != "grp"} for t in ts]  # noqa: E731
    assert strip(with_lod) == strip(without) and {t["grp"] for t in without} == {0}
    assert layout.tile_groups(chain_con, lod=False) == [layout.ALL_TRACKS_GROUP]
    groups = layout.tile_groups(chain_con)
    assert {t["grp"] for t in with_lod} <= {g["grp"] for g in groups} == set(layout.group_counts(chain_con))
    names = layout.name_dictionary(chain_con, 1000)
    assert sorted(names) == sorted({r[0] for r in chain_con.execute("SELECT name FROM slices").fetchall()})
    assert layout.name_dictionary(chain_con, len(names) - 1) is None


# -- routers do HTTP only ---------------------------------------------------------------------------------
_SQL = re.compile(r"\b(SELECT|FROM|WHERE|JOIN|GROUP BY|ORDER BY|INSERT INTO|UNION|WITH RECURSIVE)\s")
_PRODUCT = ("acceltrace", "ingest", "server", "collect", "analysis", "sim", "store", "formats", "tiles", "export")


def test_routers_and_the_metadata_document_hold_no_sql():
    import ast
    from pathlib import Path

    server = Path(__file__).resolve().parent.parent / "server"
    found = []
    for path in [*sorted((server / "routers").glob("*.py")), server / "metadata.py", server / "deps.py"]:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and _SQL.search(node.value):
                found.append(f"{path.relative_to(server.parent)}:{node.lineno}: {node.value[:60]!r}")
    assert not found, "SQL belongs in a named query of store/ or tiles/:\n" + "\n".join(found)


def test_lod_table_names_appear_only_under_tiles(chain_con):
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    tables = [t for (t,) in chain_con.execute(
        "SELECT table_name FROM duckdb_tables() WHERE database_name = 'trace' AND table_name LIKE 'lod%'").fetchall()]
    assert {"lod_slices", "lod_merged", "lod_groups", "lod_tracks", "lod_names"} <= set(tables)
    word = re.compile(r"\b(" + "|".join(map(re.escape, tables)) + r")\b")
    found = [f"{p.relative_to(root)}: {m.group(0)}" for part in _PRODUCT if part != "tiles"
             for p in sorted((root / part).rglob("*.py")) for m in [word.search(p.read_text())] if m]
    assert not found, "level-of-detail tables are tiles/' business:\n" + "\n".join(found)
