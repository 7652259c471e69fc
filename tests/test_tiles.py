"""Tiles: what a tile reports equals a brute-force SQL over the raw slices, at any window and level."""

from __future__ import annotations

import duckdb
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from acceltrace.store.catalog import Store
from acceltrace.tiles.query import decode_tile


@pytest.fixture(scope="module")
def synth(trace_store, api):
    tid = trace_store.ids["synthetic"]
    meta = api.get(f"/api/traces/{tid}").json()
    con = duckdb.connect(str(Store(trace_store.root, sweep=False).trace_path(tid)), read_only=True)
    yield tid, meta, con
    con.close()


def _fetch_page(api, tid, level, index, group=None, page=None):
    q = [f"group={group}"] if group else []
    q += [f"page={page}"] if page is not None else []
    r = api.get(f"/api/traces/{tid}/tiles/{level}/{index}" + ("?" + "&".join(q) if q else ""))
    assert r.status_code == 200, r.text
    return decode_tile(r.content)


_NAME_COLS = (("slices", "name"), ("merged", "longest_name"), ("instants", "name"))


def _fetch(api, tid, level, index, group=None):
    """Every depth of a tile: its depth pages until one whose fold holds nothing deeper, the rows
    joined (name indices into one string table: the first page's, then the names new in later ones).
    Each page carries only its own depths; the fold of each covers every deeper row fetched after it."""
    header, d = _fetch_page(api, tid, level, index, group)
    strings = list(header["strings"])
    parts, folds = [d], [(header["fold_from"], d)]
    page = 0
    while len(d["fold"]["start"]) or len(d["fold_instants"]["ts"]):
        page += 1
        h, d = _fetch_page(api, tid, level, index, group, page)
        lo, hi = h["depths"]
        assert h["page"] == page and lo == header["depth_page"] * page
        for sec in ("slices", "merged", "instants"):
            assert ((d[sec]["depth"] >= lo) & (d[sec]["depth"] <= hi)).all()
        index_of = {n: i for i, n in enumerate(strings)}
        for n in h["strings"]:
            if n not in index_of:
                index_of[n] = len(strings)
                strings.append(n)
        remap = np.array([index_of[n] for n in h["strings"]] or [0], np.int64)
        for sec, col in _NAME_COLS:
            d[sec][col] = remap[d[sec][col].astype(np.int64)]
        parts.append(d)
        folds.append((h["fold_from"], d))
        assert page < 1000
    joined = {sec: {col: np.concatenate([p[sec][col] for p in parts if col in p[sec]])
                    for col in parts[0][sec]} for sec in ("slices", "merged", "instants", "counters")}
    for fold_from, fd in folds:  # what a fold says is covered is covered by the deeper rows, and back
        _check_fold(joined, fd, fold_from, header)
    return {**header, "strings": strings}, joined


def _check_fold(joined, fd, fold_from, header):
    sl, mg = joined["slices"], joined["merged"]
    f = fd["fold"]
    deep = sl["depth"] >= fold_from
    starts, ends = sl["ts"][deep], sl["ts"][deep] + sl["dur"][deep]
    mdeep = mg["depth"] >= fold_from
    b0 = header["t0_rel_ns"] + mg["bucket"][mdeep].astype(np.float64) * header["bucket_ns"]
    items = list(zip(sl["track"][deep], starts, ends)) + list(zip(mg["track"][mdeep], b0, b0 + header["bucket_ns"]))
    for t, a, e in items:  # every deeper slice lies inside one run of its track
        assert ((f["track"] == t) & (f["start"] <= a) & (f["end"] >= e)).any(), (t, a, e)
    total = {}
    for t, a, e in items:
        total.setdefault(int(t), []).append((a, e))
    for t, a, e in zip(f["track"], f["start"], f["end"]):  # and each run is the union of some of them
        ivs = sorted(x for x in total[int(t)] if x[0] >= a and x[1] <= e)
        assert ivs and ivs[0][0] == a and max(x[1] for x in ivs) == e


def _track_filter(meta, group):
    if group is None:
        return [t["track_id"] for t in meta["tracks"]]
    return next(g["track_ids"] for g in meta["groups"] if g["id"] == group)


def _expected(con, meta, level, index, tracks):
    start = int(meta["start_abs_ns"])
    bucket = 1 << level
    t0, t1 = index * 1024 * bucket, (index + 1) * 1024 * bucket
    tl = ",".join(map(str, tracks))
    long_ids = {r[0] for r in con.execute(
        f"SELECT slice_id FROM slices WHERE track_id IN ({tl}) AND dur >= {bucket}"
        f" AND ts - {start} < {t1} AND ts - {start} + dur > {t0}").fetchall()}
    merged = {(r[0], r[1], r[2]): r[3:] for r in con.execute(
        f"SELECT track_id, depth, (ts - {start}) // {bucket} - {index * 1024} AS b, count(*), sum(dur),"
        f" max(dur), arg_min(slice_id, (-dur, slice_id)) FROM slices WHERE track_id IN ({tl})"
        f" AND dur > 0 AND dur < {bucket} AND ts - {start} >= {t0} AND ts - {start} < {t1}"
        " GROUP BY ALL").fetchall()}
    instants = {(r[0], r[1], r[2]): r[3:] for r in con.execute(
        f"SELECT track_id, depth, (ts - {start}) // {bucket} - {index * 1024} AS b, count(*),"
        f" arg_min(slice_id, (ts, slice_id)) FROM slices WHERE track_id IN ({tl}) AND dur = 0"
        f" AND ts - {start} >= {t0} AND ts - {start} < {t1} GROUP BY ALL").fetchall()}
    counters = {(r[0], r[1]): r[2:] for r in con.execute(
        f"SELECT track_id, (ts - {start}) // {bucket} - {index * 1024} AS b, count(*), min(value), max(value)"
        f" FROM counters WHERE track_id IN ({tl}) AND ts - {start} >= {t0} AND ts - {start} < {t1}"
        " GROUP BY ALL").fetchall()}
    return long_ids, merged, instants, counters


def _check(api, con, meta, tid, level, index, group):
    header, d = _fetch(api, tid, level, index, group)
    assert header["level"] == level and header["index"] == index and header["bucket_ns"] == 1 << level
    long_ids, merged, instants, counters = _expected(con, meta, level, index, _track_filter(meta, group))
    assert set(d["slices"]["id"].astype(np.int64).tolist()) == long_ids
    assert len(d["slices"]["id"]) == len(long_ids)  # each long slice once
    m = d["merged"]
    got = {(int(t), int(dp), int(b)): (int(c), int(busy), int(ld), int(lid))
           for t, dp, b, c, busy, ld, lid in zip(m["track"], m["depth"], m["bucket"], m["count"], m["busy_ns"],
                                                  m["longest_dur"], m["longest_id"])}
    assert got == {k: tuple(int(x) for x in v) for k, v in merged.items()}
    i = d["instants"]
    got_i = {(int(t), int(dp), int(b)): (int(c), int(sid))
             for t, dp, b, c, sid in zip(i["track"], i["depth"], i["bucket"], i["count"], i["id"])}
    assert got_i == {k: (int(v[0]), int(v[1])) for k, v in instants.items()}
    c = d["counters"]
    got_c = {(int(t), int(b)): (int(n), float(lo), float(hi))
             for t, b, n, lo, hi in zip(c["track"], c["bucket"], c["count"], c["min"], c["max"])}
    assert got_c == {k: (int(v[0]), float(v[1]), float(v[2])) for k, v in counters.items()}
    # the string table resolves every name index
    for sec, col in (("slices", "name"), ("merged", "longest_name"), ("instants", "name")):
        if len(d[sec][col]):
            assert int(d[sec][col].max()) < len(header["strings"])
    return header, d


def test_synthetic_trace_exercises_both_raw_windows_and_the_pyramid(synth):
    _, meta, _ = synth
    assert 0 < meta["levels"]["pyramid_from"] < meta["levels"]["max"]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_tile_counts_and_busy_time_match_brute_force_sql(api, synth, data):
    tid, meta, con = synth
    level = data.draw(st.integers(0, meta["levels"]["max"]), label="level")
    n_tiles = max(1, -(-meta["duration_ns"] // (1024 << level)))
    index = data.draw(st.integers(0, n_tiles - 1), label="index")
    group = data.draw(st.sampled_from([None] + [g["id"] for g in meta["groups"]]), label="group")
    _check(api, con, meta, tid, level, index, group)


def test_long_slice_appears_in_every_tile_it_overlaps(api, trace_store):
    tid = trace_store.ids["chain"]
    long_id = trace_store.chain["long"]
    level = 10  # 1 us buckets, ~1 ms tiles: the 10 ms slice spans about ten tiles
    seen = []
    for index in range(0, 12):
        _, d = _fetch(api, tid, level, index)
        seen.append(long_id in d["slices"]["id"].astype(np.int64).tolist())
    assert seen[:10] == [True] * 10


def test_short_slices_merge_with_count_busy_and_longest(api, trace_store):
    tid = trace_store.ids["chain"]
    # level 12: 4096 ns buckets; the 50 "tiny" slices (20 ns, every 37 ns from 20.1 us) fall in buckets 4 and 5
    header, d = _fetch(api, tid, 12, 0)
    m = d["merged"]
    names = header["strings"]
    tiny = [(int(b), int(c), int(busy)) for b, c, busy, n in zip(m["bucket"], m["count"], m["busy_ns"],
                                                                   m["longest_name"]) if names[n] == "tiny"]
    assert sum(c for _, c, _ in tiny) == 50
    assert sum(busy for _, _, busy in tiny) == 50 * 20


def test_counter_buckets_give_min_max_first_last(api, trace_store):
    tid = trace_store.ids["chain"]
    header, d = _fetch(api, tid, 13, 0)  # 8192 ns buckets: samples at 0, 2500, 3000, 5000 share bucket 0
    c = d["counters"]
    rows = {int(b): (int(n), lo, hi, first, last) for b, n, lo, hi, first, last in
            zip(c["bucket"], c["count"], c["min"], c["max"], c["first"], c["last"])}
    assert rows[0] == (4, 0.0, 12.5, 0.0, 3.0)
    assert rows[3] == (1, 0.0, 0.0, 0.0, 0.0)


def test_tile_size_is_bounded_by_buckets_not_events(api, synth):
    tid, meta, _ = synth
    top = meta["levels"]["max"]
    header, d = _fetch(api, tid, top, 0)
    per_track_depth = {}
    for t, dp in zip(d["merged"]["track"], d["merged"]["depth"]):
        per_track_depth[(int(t), int(dp))] = per_track_depth.get((int(t), int(dp)), 0) + 1
    assert max(per_track_depth.values()) <= 1024
    assert int(d["merged"]["count"].astype(np.int64).sum()) > len(d["merged"]["count"])  # really merged


def test_tile_is_cacheable_with_strong_etag_and_304(api, trace_store):
    tid = trace_store.ids["synthetic"]
    r = api.get(f"/api/traces/{tid}/tiles/8/1?group=g0")
    assert r.status_code == 200, r.text
    etag = r.headers["etag"]
    assert etag.startswith('"') and not etag.startswith("W/")
    assert "immutable" in r.headers["cache-control"] and "max-age=31536000" in r.headers["cache-control"]
    r2 = api.get(f"/api/traces/{tid}/tiles/8/1?group=g0", headers={"If-None-Match": etag})
    assert r2.status_code == 304
    assert r2.content == b""
    r3 = api.get(f"/api/traces/{tid}/tiles/8/2?group=g0", headers={"If-None-Match": etag})
    assert r3.status_code == 200 and r3.headers["etag"] != etag


def test_tile_binary_layout_is_aligned_and_little_endian(api, trace_store):
    tid = trace_store.ids["chain"]
    r = api.get(f"/api/traces/{tid}/tiles/10/0")
    assert r.status_code == 200, r.text
    buf = r.content
    hlen = int.from_bytes(buf[:4], "little")
    body = 4 + hlen + (-(4 + hlen)) % 8
    header, _ = decode_tile(buf)
    for sec in header["sections"].values():
        for col in sec["columns"].values():
            assert col["offset"] % 8 == 0
            assert body + col["offset"] <= len(buf)


def test_tile_columns_use_narrow_types_and_bytes_only_where_transfers_are(api, trace_store):
    tid = trace_store.ids["chain"]
    header, d = _fetch(api, tid, 10, 0)
    cols = header["sections"]["slices"]["columns"]
    assert cols["depth"]["dtype"] == "u8" and cols["track"]["dtype"] == "u8"
    # ids and times are integers: base + the narrowest unsigned type holding the offsets
    assert cols["id"]["dtype"] in ("u8", "u16", "u32") and "base" in cols["id"] and "base" in cols["ts"]
    dma = list(d["slices"]["id"]).index(trace_store.chain["dma"])
    assert d["slices"]["bytes"][dma] == 1 << 20  # the transfer's bytes travel with it
    assert "bytes" not in header["sections"]["merged"]["columns"]  # only the tiny kernels merge here


def test_tile_errors_unknown_group_bad_level_and_unknown_trace(api, trace_store):
    tid = trace_store.ids["chain"]
    r = api.get(f"/api/traces/{tid}/tiles/10/0?group=g99")
    assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"
    r = api.get(f"/api/traces/{tid}/tiles/99/0")
    assert r.status_code == 422 and r.json()["error"]["code"] == "validation_error"
    top = api.get(f"/api/traces/{tid}").json()["levels"]["max"]
    r = api.get(f"/api/traces/{tid}/tiles/{top + 1}/0")
    assert r.status_code == 422 and "max level" in r.json()["error"]["message"]
    r = api.get(f"/api/traces/{tid}/tiles/10/-1")
    assert r.status_code == 422
    r = api.get("/api/traces/nonexistent-id/tiles/10/0")
    assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"


def test_tile_past_the_end_of_the_trace_is_empty(api, trace_store):
    tid = trace_store.ids["chain"]
    header, _ = _fetch(api, tid, 4, 10_000_000)
    assert all(s["rows"] == 0 for s in header["sections"].values())


def test_tile_is_the_same_with_or_without_the_name_dictionary_in_memory(synth):
    from acceltrace.tiles.layout import group_counts, name_dictionary
    from acceltrace.tiles.query import LodInfo, build_tile

    _, meta, con = synth
    info, names = LodInfo.load(con), name_dictionary(con, 1 << 20)
    assert names is not None and name_dictionary(con, len(names) - 1) is None
    assert set(group_counts(con)) == {int(g["id"][1:]) for g in meta["groups"]}
    for level in (0, info.base_level, info.max_level):
        for grp in (None, 0):
            kept = build_tile(con, info, level, 0, grp, None if grp is None else f"g{grp}", names=names)
            assert build_tile(con, info, level, 0, grp, None if grp is None else f"g{grp}") == kept
            header, _ = decode_tile(kept)
            assert header["strings"] == sorted(set(header["strings"]), key=names.index)


def test_tiles_of_a_real_nsys_trace_match_brute_force(tmp_path):
    from pathlib import Path

    from fastapi.testclient import TestClient

    from acceltrace.ingest.pipeline import ingest_paths
    from acceltrace.server.app import create_app

    sample = Path(__file__).resolve().parent.parent / "sample_traces" / "nsys" / "nsys-2022.2" / "a100-saxpy-nsys2022.sqlite"
    store = Store(tmp_path / "store")
    (res,) = ingest_paths(store, [sample])
    assert res.error is None, res.error
    with TestClient(create_app(store.root), raise_server_exceptions=False) as client:
        meta = client.get(f"/api/traces/{res.id}").json()
        con = duckdb.connect(":memory:")
        con.execute(f"ATTACH '{store.trace_path(res.id)}' AS t (READ_ONLY)")
        con.execute("USE t")
        rng = np.random.default_rng(3)
        for _ in range(12):
            level = int(rng.integers(0, meta["max_level"] + 1))
            n_tiles = max(1, -(-meta["duration_ns"] // (1024 << level)))
            groups = [None] + [g["id"] for g in meta["groups"]]
            _check(client, con, meta, res.id, level, int(rng.integers(n_tiles)), groups[int(rng.integers(len(groups)))])
        con.close()


def test_either_representations_tag_revalidates_on_the_route_and_the_fast_path(api, trace_store):
    # the identity copy a client got before the gzip twin existed stays valid whatever it asks now
    tid = trace_store.ids["synthetic"]
    url = f"/api/traces/{tid}/tiles/8/3?group=g0"
    plain = api.get(url, headers={"Accept-Encoding": "identity"})
    assert plain.status_code == 200 and "content-encoding" not in plain.headers
    tag = plain.headers["etag"]
    for _ in range(3):  # first through the route, then from memory before routing
        r = api.get(url, headers={"Accept-Encoding": "gzip", "If-None-Match": tag})
        assert r.status_code == 304 and r.headers["etag"] == tag
    r = api.get(url, headers={"Accept-Encoding": "gzip", "If-None-Match": '"other"'})
    assert r.status_code == 200


# -- depth pages: a tile is bounded by rows on a screen, whatever the depth (issue 15) -------------
from _deep_trace import DEEP_DEPTH, DEEP_TRACKS, build_deep_trace  # noqa: E402


@pytest.fixture(scope="module")
def deep(tmp_path_factory):
    from fastapi.testclient import TestClient

    from acceltrace.server.app import create_app
    from acceltrace.tiles import build as lod

    store = Store(tmp_path_factory.mktemp("deep"))
    saved, lod.RAW_TRACE_ROWS = lod.RAW_TRACE_ROWS, 0  # a pyramid, small as the trace is: pages from both paths
    try:
        tid = build_deep_trace(store)
    finally:
        lod.RAW_TRACE_ROWS = saved
    with TestClient(create_app(store.root), raise_server_exceptions=False) as client:
        meta = client.get(f"/api/traces/{tid}").json()
        con = duckdb.connect(str(store.trace_path(tid)), read_only=True)
        yield client, tid, meta, con, store
        con.close()


def test_every_depth_page_of_a_deep_group_is_bounded_by_its_rows_not_the_depth(deep):
    from acceltrace.tiles.query import DEPTH_PAGE, LodInfo, build_tile

    client, tid, meta, con, _ = deep
    (group,) = [g["id"] for g in meta["groups"]]
    assert meta["levels"]["depth_page"] == DEPTH_PAGE
    info = LodInfo.load(con)
    n_pages = (DEEP_DEPTH + 1) // DEPTH_PAGE + 1
    for level in sorted({0, 7, 9, info.base_level, info.max_level - 2, info.max_level}):
        n_tiles = max(1, -(-meta["duration_ns"] // (1024 << level)))
        for index in sorted({0, n_tiles // 2}):
            unpaged = build_tile(con, info, level, index, int(group[1:]), group, page=None)
            biggest = most_rows = 0
            for page in range(n_pages + 1):  # and one page past the deepest depth: empty
                r = client.get(f"/api/traces/{tid}/tiles/{level}/{index}?group={group}&page={page}")
                assert r.status_code == 200, r.text
                header, d = decode_tile(r.content)
                rows = set()
                for sec in ("slices", "merged", "instants"):
                    per_row = {}
                    for t, dp in zip(d[sec]["track"].tolist(), d[sec]["depth"].tolist()):
                        assert page * DEPTH_PAGE <= dp < (page + 1) * DEPTH_PAGE
                        per_row[(t, dp)] = per_row.get((t, dp), 0) + 1
                    assert max(per_row.values(), default=0) <= 1025  # one row of 1024 buckets
                    rows |= set(per_row)
                assert len(rows) <= DEEP_TRACKS * DEPTH_PAGE
                fold_per_track = np.bincount(d["fold"]["track"].astype(np.int64)) if len(d["fold"]["track"]) else [0]
                assert max(fold_per_track) <= 2 * 1024 + 1  # runs of one row: at most one per bucket edge
                if page == n_pages:
                    assert all(s["rows"] == 0 for s in header["sections"].values())
                biggest = max(biggest, len(r.content))
                most_rows = max(most_rows, sum(header["sections"][s]["rows"] for s in ("slices", "merged", "instants")))
            # 42 depths, 11 pages: the largest page is a few depths' worth, not the group's whole depth
            h, full = decode_tile(unpaged)
            all_rows = sum(h["sections"][s]["rows"] for s in ("slices", "merged", "instants"))
            if level >= 7:  # a window holding whole stacks (a level-0 tile at 0 sees depths 0-1 only)
                assert int(full["slices"]["depth"].max()) >= DEEP_DEPTH - 1
                assert most_rows * 2 < all_rows, (level, index, most_rows, all_rows)
                assert biggest * 2 < len(unpaged), (level, index, biggest, len(unpaged))


def test_depth_pages_together_hold_exactly_the_unpaged_tile(deep):
    from acceltrace.tiles.query import LodInfo, build_tile

    client, tid, meta, con, _ = deep
    (group,) = [g["id"] for g in meta["groups"]]
    info = LodInfo.load(con)
    for level in (0, 8, info.base_level, info.max_level):
        header, joined = _fetch(client, tid, level, 0, group)  # every page, each fold checked
        h, full = decode_tile(build_tile(con, info, level, 0, int(group[1:]), group, page=None))
        assert sorted(joined["slices"]["id"].tolist()) == sorted(full["slices"]["id"].tolist())
        key = lambda d, s: sorted(zip(*(d[s][c].tolist() for c in d[s] if c not in ("name", "longest_name"))))
        for sec in ("merged", "instants"):
            assert key(joined, sec) == key(full, sec)
        # names resolve to the same strings
        got = sorted(header["strings"][i] for i in joined["slices"]["name"].tolist())
        assert got == sorted(h["strings"][i] for i in full["slices"]["name"].tolist())


def test_a_cold_page_is_built_alone_and_its_file_is_the_routes_bytes(deep):
    client, tid, meta, con, store = deep
    (group,) = [g["id"] for g in meta["groups"]]
    r = client.get(f"/api/traces/{tid}/tiles/3/5?group={group}&page=2", headers={"Accept-Encoding": "identity"})
    assert r.status_code == 200
    files = sorted(p.name for p in store.traces_dir.glob(f"{tid}.tile.*.3.5.*.bin"))
    assert files == [f"{tid}.tile.v1-2.3.5.{group}.p2.bin"], files  # its own queries: no sibling built
    assert r.content == store.traces_dir.joinpath(files[0]).read_bytes()
    p0 = client.get(f"/api/traces/{tid}/tiles/3/5?group={group}", headers={"Accept-Encoding": "identity"})
    assert p0.content == next(store.traces_dir.glob(f"{tid}.tile.*.3.5.{group}.bin")).read_bytes()
    r = client.get(f"/api/traces/{tid}/tiles/3/5?group={group}&page=-1")
    assert r.status_code == 422


def test_a_page_reads_its_own_depths_and_one_fold_row_per_bucket(deep):
    # what a page's queries return from DuckDB (not time): the rows of its 4 depths, nothing of the
    # shallower ones, and of the deeper ones one row per (track, bucket) for merged slices and instants
    # (exact slices: each deeper one, start and end); the pages together read each row of the tile once
    from acceltrace.tiles.query import DEPTH_PAGE, LodInfo, build_page, build_tile, page_depths

    _, _, meta, con, _ = deep
    (group,) = [g["id"] for g in meta["groups"]]
    grp, info = int(group[1:]), LodInfo.load(con)
    n_pages = (DEEP_DEPTH + 1) // DEPTH_PAGE + 1
    for level in sorted({7, info.base_level, info.max_level - 1, info.max_level}):
        _, full = decode_tile(build_tile(con, info, level, 0, grp, group, page=None))
        read = {}
        for page in range(n_pages):
            stats = {}
            body = build_page(con, info, level, 0, grp, page, group, max_depth=DEEP_DEPTH + 1, stats=stats)
            lo, hi = page_depths(page)
            for sec in ("slices", "merged", "instants"):
                depth = full[sec]["depth"]
                assert stats.get(sec, 0) == int(((depth >= lo) & (depth <= hi)).sum()), (level, page, sec)
                read[sec] = read.get(sec, 0) + stats.get(sec, 0)
            deeper = lambda sec: full[sec]["depth"] > hi
            buckets = lambda sec: len({(t, b) for t, b in zip(full[sec]["track"][deeper(sec)].tolist(),
                                                              full[sec]["bucket"][deeper(sec)].tolist())})
            assert stats.get("merged_fold", 0) == buckets("merged") <= DEEP_TRACKS * 1024
            assert stats.get("instants_fold", 0) == buckets("instants") <= DEEP_TRACKS * 1024
            assert stats.get("slices_fold", 0) == int(deeper("slices").sum())
            for sec in ("merged", "instants"):  # bounded by a screen's rows, whatever the depth
                assert stats.get(sec, 0) + stats.get(sec + "_fold", 0) <= DEEP_TRACKS * (DEPTH_PAGE + 1) * 1024
            assert body == build_tile(con, info, level, 0, grp, group, page=page, max_depth=DEEP_DEPTH + 1)
        assert read == {s: len(full[s]["depth"]) for s in ("slices", "merged", "instants")}  # each row once
        assert read["instants"] and read["slices"] and (read["merged"] or level < info.base_level)


def test_the_deepest_flag_gives_the_same_pages_as_the_group_by_fold_of_older_traces(synth):
    # a coarse page's fold of the deeper depths comes from lod_merged's `deepest` rows in the page's own
    # range scan (one row per (track, bucket) read out of DuckDB, no GROUP BY); a trace built before that
    # column (lod_info without merged_deepest) takes the GROUP BY fold: both give the same bytes
    import dataclasses

    from acceltrace.tiles.query import LodInfo, _page_queries, build_page

    _, meta, con = synth
    info = LodInfo.load(con)
    older = dataclasses.replace(info, merged_deepest=0)
    assert info.merged_deepest == 1 and "GROUP BY" in _page_queries(older, info.max_level, 0, 0, 0, 3, True)["merged"]
    assert "GROUP BY" not in _page_queries(info, info.max_level, 0, 0, 0, 3, True)["merged"]
    (flagged,) = con.execute("SELECT count(*) FILTER (WHERE deepest) FROM lod_merged").fetchone()
    (runs,) = con.execute("SELECT count(*) FROM (SELECT DISTINCT level, grp, b, track_id FROM lod_merged)").fetchone()
    assert flagged == runs > 0  # one deepest row per (level, group, bucket, track)
    groups = [int(g["id"][1:]) for g in meta["groups"] if g["lane"] != "counter"]
    several = 0
    for level in range(info.base_level, info.max_level + 1):
        for grp in groups[:6]:
            b0 = 0
            deeper = con.execute(
                "SELECT count(*), count(DISTINCT (track_id, b)) FROM lod_merged WHERE level = ? AND grp = ?"
                " AND b >= ? AND b < ? AND depth > 3", [level, grp, b0, b0 + 1024]).fetchone()
            several += deeper[0] > deeper[1]  # several deeper depths in one (track, bucket)
            stats, old_stats = {}, {}
            new = build_page(con, info, level, 0, grp, 0, f"g{grp}", stats=stats)
            assert new == build_page(con, older, level, 0, grp, 0, f"g{grp}", stats=old_stats)
            assert stats.get("merged_fold", 0) == old_stats.get("merged_fold", 0) == deeper[1], (level, grp)
    assert several  # the test means something: the GROUP BY had rows to fold


def test_long_slices_come_from_lod_long_with_the_same_bytes_as_from_the_chunks(synth):
    # the classes from long_cls up are read from lod_long (a range per class, however wide the window);
    # a trace built before it (long_cls -1) scans lod_slices' chunks for them: the same bytes, every level
    import dataclasses

    from acceltrace.tiles.query import LodInfo, _page_queries, build_page, build_tile

    _, meta, con = synth
    info = LodInfo.load(con)
    older = dataclasses.replace(info, long_cls=-1)
    (n_long,), (n_all,) = (con.execute(f"SELECT count(*) FROM {t}").fetchone() for t in ("lod_long", "lod_slices"))
    (n_cls,) = con.execute(f"SELECT count(*) FROM lod_slices WHERE cls >= {info.long_cls}").fetchone()
    assert 0 < n_long == n_cls <= 0.25 * n_all and info.long_cls <= info.max_cls
    assert "lod_long" in _page_queries(info, info.max_level, 0, 0, 0, 3, True)["slices"]
    assert "lod_long" not in _page_queries(older, info.max_level, 0, 0, 0, 3, True)["slices"]
    groups = [int(g["id"][1:]) for g in meta["groups"] if g["lane"] != "counter"][:4]
    for level in range(info.max_level + 1):
        n_tiles = max(1, -(-meta["duration_ns"] // (1024 << level)))
        for index in sorted({0, n_tiles // 3, n_tiles - 1}):
            for grp in groups:
                for page in (0, 1):
                    assert (build_page(con, info, level, index, grp, page, f"g{grp}")
                            == build_page(con, older, level, index, grp, page, f"g{grp}")), (level, index, grp, page)
                assert (build_tile(con, info, level, index, grp, f"g{grp}", page=None)
                        == build_tile(con, older, level, index, grp, f"g{grp}", page=None))


@pytest.mark.parametrize("fixture", ["synth", "deep"])
def test_a_fine_page_from_one_window_scan_is_the_two_queries_bytes(fixture, request, monkeypatch):
    # below the pyramid a page's exact slices (first class branch) and merged rows come from one scan
    # of its raw window, aggregated in numpy; the same bytes as the two SQL queries, every page
    from acceltrace.tiles import query
    from acceltrace.tiles.query import DEPTH_PAGE, LodInfo, _window_sql, build_page

    got = request.getfixturevalue(fixture)
    meta, con = (got[1], got[2]) if fixture == "synth" else (got[2], got[3])
    info = LodInfo.load(con)
    groups = [int(g["id"][1:]) for g in meta["groups"] if g["lane"] != "counter"][:4]
    windowed = 0
    for level in range(info.base_level):
        n_tiles = max(1, -(-meta["duration_ns"] // (1024 << level)))
        for index in sorted({0, n_tiles // 3, n_tiles // 2, n_tiles - 1}):
            for grp in groups:
                for page in range(3):
                    for max_depth in (None, 2 * DEPTH_PAGE + 1):
                        lo = page * DEPTH_PAGE
                        windowed += _window_sql(info, level, index, grp, lo, lo + 3, True) is not None
                        monkeypatch.setattr(query, "WINDOW_SCAN", True)
                        one = build_page(con, info, level, index, grp, page, f"g{grp}", max_depth=max_depth)
                        monkeypatch.setattr(query, "WINDOW_SCAN", False)
                        two = build_page(con, info, level, index, grp, page, f"g{grp}", max_depth=max_depth)
                        assert one == two, (fixture, level, index, grp, page, max_depth)
    assert windowed > 50
