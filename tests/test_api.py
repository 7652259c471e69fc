"""The HTTP API: catalog, metadata, slice details, search, aggregation, summary, findings, pages, errors."""

from __future__ import annotations

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
                    " 400, 'link saturated')", [start + 1234])

    store.write_side(tid, "findings", build)
    f = api.get(f"/api/traces/{tid}/findings").json()["findings"]
    assert len(f) == 1 and f[0]["ts"] == 1234 and f[0]["pass"] == "pcie_saturation" and f[0]["impact_ns"] == 400


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
