"""A dropped trace's first tiles are built while its page loads (server/first_view.py), and the page and the
server agree on which they are: the level of the width the upload says, every tile of the whole trace."""

from __future__ import annotations

import json
import threading
import time

import pytest
from fastapi.testclient import TestClient

import _ui
from acceltrace.server.app import create_app
from acceltrace.server.deps import AppState
from acceltrace.server.first_view import FIRST_VIEW_TILES, build_first_view, first_level, first_tiles
from acceltrace.server.tile_cache import TileBytes
from acceltrace.tiles.query import page_key

A100 = _ui.A100  # 5 tile groups, one of them 4 depth pages deep: more first tiles than FIRST_VIEW_TILES


def _stacked_processes(n: int = 20, depth: int = 8) -> bytes:
    """n processes p00.. whose profiler sort index stacks them in reverse (p19 first on the page, as
    Kineto's process_sort_index says), each one thread with a stack `depth` deep (two depth pages)."""
    events = []
    for i in range(n):
        pid = 100 + i
        events += [{"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": f"p{i:02d}"}},
                   {"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0, "args": {"sort_index": n - i}}]
        for rep in range(50):
            t0 = rep * 1000
            events += [{"ph": "X", "name": f"f{d}", "ts": t0 + d, "dur": 900 - 2 * d, "pid": pid, "tid": 1}
                       for d in range(depth)]
    return json.dumps({"traceEvents": events}).encode()


def _upload(client, query: str = "") -> str:
    r = client.post(f"/api/traces{query}", files={"file": (A100.name, A100.read_bytes(), "application/gzip")})
    assert r.status_code in (201, 202), r.text
    return r.json()["id"]


def _on_disk(state: AppState, tid: str, tiles) -> list[bool]:
    return [state.tile_bytes.disk.has(tid, lv, ix, page_key(g, p), "identity") for lv, ix, g, p in tiles]


def _wait_on_disk(state: AppState, tid: str, tiles, timeout_s: float = 60) -> list[bool]:
    deadline = time.monotonic() + timeout_s
    while not all(have := _on_disk(state, tid, tiles)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return have


@pytest.fixture
def app_client(tmp_path):
    with TestClient(create_app(tmp_path / "store", max_upload_bytes=64 << 20, ingest_wait_s=60),
                    raise_server_exceptions=False) as c:
        yield c


def test_an_upload_that_says_its_pages_width_has_its_first_tiles_built_before_they_are_asked(app_client):
    tid = _upload(app_client, "?view_px=1000")
    state = app_client.app.state.acceltrace
    h = state.trace(tid)
    tiles = first_tiles(h, 1000)
    assert len(tiles) == FIRST_VIEW_TILES  # A100 has more: the budget holds
    assert {t[0] for t in tiles} == {first_level(h.info.duration_ns, 1000, h.info.max_level)}
    assert tiles[0][1] == 0 and tiles[0][3] == 0 and tiles[1][2:] == tiles[0][2:]  # a group's first page first
    assert all(_wait_on_disk(state, tid, tiles)), "the first tiles were not built ahead"
    # they are the bytes the route answers (the same job: server/routers/tiles.py)
    lv, ix, g, p = tiles[0]
    r = app_client.get(f"/api/traces/{tid}/tiles/{lv}/{ix}?group={g}&page={p}", headers={"Accept-Encoding": "identity"})
    assert r.status_code == 200
    assert r.content == state.tile_bytes.disk.read(tid, lv, ix, page_key(g, p), "identity")


def test_the_first_tiles_are_the_groups_the_page_stacks_first_not_the_first_numbered(app_client):
    r = app_client.post("/api/traces?view_px=900", files={"file": ("stacked.json", _stacked_processes(), "application/json")})
    assert r.status_code == 201, r.text
    tid = r.json()["id"]
    meta = app_client.get(f"/api/traces/{tid}").json()
    group_of = {g["group_name"].split()[0]: g["id"] for g in meta["groups"]}  # "p00 (100)"
    assert group_of["p00"] == "g0"  # numbered by name: the page stacks it last
    tiles = first_tiles(app_client.app.state.acceltrace.trace(tid), 900)
    assert len(tiles) == FIRST_VIEW_TILES
    shown = list(dict.fromkeys(g for _, _, g, _ in tiles))
    assert shown == [group_of[f"p{i:02d}"] for i in range(19, 19 - len(shown), -1)]


def _tile_builds(state: AppState, monkeypatch) -> list[tuple]:
    """The keys of the tiles asked of the server's tile cache from now on: the warming's and the routes'. (Not
    the disk: after an ingest, another process prebuilds the coarsest levels there, server/upload.py, and at a
    fast hour it writes the first tiles of a small trace within the tests' wait.)"""
    keys: list[tuple] = []
    get = state.tile_bytes.get

    def asked(key, want_gzip, build):
        keys.append(key)
        return get(key, want_gzip, build)

    monkeypatch.setattr(state.tile_bytes, "get", asked)
    return keys


def test_an_upload_without_a_width_builds_no_tile_and_a_page_that_asks_first_stops_the_build(app_client,
                                                                                            monkeypatch):
    state = app_client.app.state.acceltrace
    built = _tile_builds(state, monkeypatch)
    tid = _upload(app_client)
    h = state.trace(tid)
    tiles = first_tiles(h, 1200)
    time.sleep(0.5)  # the warming (groups and names only) has had its time
    assert built == []
    h.asked.set()  # the page's own tile requests have begun: it builds what it needs itself
    build_first_view(state, tid, 1200)(h)
    assert built == []
    h.asked.clear()
    build_first_view(state, tid, 1200)(h)
    assert len(built) == len(tiles) and all(_on_disk(state, tid, tiles))


def test_the_progress_stream_of_an_upload_answered_202_builds_its_first_tiles(tmp_path):
    with TestClient(create_app(tmp_path / "store", max_upload_bytes=64 << 20, ingest_wait_s=0),
                    raise_server_exceptions=False) as c:
        r = c.post("/api/traces", files={"file": (A100.name, A100.read_bytes(), "application/gzip")})
        assert r.status_code == 202, r.text
        tid = r.json()["id"]
        with c.stream("GET", f"/api/traces/{tid}/progress?view_px=900") as s:  # the page's stream says its width
            events = [json.loads(line[6:]) for line in s.iter_lines() if line.startswith("data: ")]
        assert events[-1]["status"] == "ready"
        state = c.app.state.acceltrace
        assert all(_wait_on_disk(state, tid, first_tiles(state.trace(tid), 900)))


def test_a_tile_request_by_the_route_or_the_fast_path_says_the_page_asks(app_client):
    tid = _upload(app_client)
    state = app_client.app.state.acceltrace
    h = state.trace(tid)
    h.ready_for_tiles()
    state._rows.clear()  # the row not at hand: the route answers
    h.asked.clear()
    assert app_client.get(f"/api/traces/{tid}/tiles/{h.info.max_level}/0?group=g0").status_code == 200
    assert h.asked.is_set()
    assert state.open_trace(tid) is h  # now at hand: the fast path answers (server/tile_cache.py)
    h.asked.clear()
    assert app_client.get(f"/api/traces/{tid}/tiles/{h.info.max_level}/0?group=g1").status_code == 200
    assert h.asked.is_set()


def test_a_progress_stream_of_a_trace_already_ready_builds_no_tile(app_client, monkeypatch):
    tid = _upload(app_client)
    state = app_client.app.state.acceltrace
    time.sleep(0.5)  # the upload's own warming (no width: no tile) has had its time
    built = _tile_builds(state, monkeypatch)
    with app_client.stream("GET", f"/api/traces/{tid}/progress?view_px=1000") as s:
        events = [json.loads(line[6:]) for line in s.iter_lines() if line.startswith("data: ")]
    assert [e["status"] for e in events] == ["ready"]
    h = state.trace(tid)
    time.sleep(0.5)  # the warming (groups and names only) has had its time
    assert built == []


def test_the_first_tiles_are_the_depths_a_track_shows_not_its_folded_ones(app_client):
    r = app_client.post("/api/traces?view_px=900",
                        files={"file": ("deep.json", _stacked_processes(2, depth=40), "application/json")})
    assert r.status_code == 201, r.text
    tiles = first_tiles(app_client.app.state.acceltrace.trace(r.json()["id"]), 900)
    # 40 depths, no launches: the page shows 24 (pages 0-5) and folds the rest
    assert max(p for _, _, _, p in tiles) == 5
    assert len({g for _, _, g, _ in tiles}) == 2  # both groups within the budget


@pytest.mark.parametrize("px", [99, 16385, "wide"])
def test_a_width_out_of_bounds_is_refused(app_client, px):
    r = app_client.post(f"/api/traces?view_px={px}", files={"file": (A100.name, b"{}", "application/json")})
    assert r.status_code == 422
    assert "view_px" in r.text


class _Disk:
    def __init__(self):
        self.files = {}

    def read(self, *key):
        return self.files.get(key)

    def write(self, *key_and_data):
        self.files[key_and_data[:-1]] = key_and_data[-1]
        return True


class _Memory(dict):
    def put(self, key, value):
        self[key] = value


def _until_waiting(tb: TileBytes, key: tuple) -> None:
    """Until a second thread waits on the build of `key` under way."""
    deadline = time.monotonic() + 10
    while tb._builds.users(key) < 2:
        assert time.monotonic() < deadline, "the second request did not wait for the build under way"
        time.sleep(0.005)


def test_a_tile_asked_while_it_is_being_built_waits_for_that_build():
    tb = TileBytes(_Memory(), _Disk())
    tb.gzip_on = False
    started, release, calls = threading.Event(), threading.Event(), []

    def build():
        calls.append(1)
        started.set()
        release.wait(10)
        return b"tile"

    out = []
    first = threading.Thread(target=lambda: out.append(tb.get(("t", 1, 0, "g0"), False, build)))
    first.start()
    assert started.wait(10)
    second = threading.Thread(target=lambda: out.append(tb.get(("t", 1, 0, "g0"), False, build)))
    second.start()
    _until_waiting(tb, ("t", 1, 0, "g0"))
    release.set()
    first.join(10), second.join(10)
    assert out == [(b"tile", "identity")] * 2 and len(calls) == 1
    tb.close()


def test_a_failed_build_is_not_kept_and_a_request_that_waited_for_it_tries_itself():
    tb = TileBytes(_Memory(), _Disk())
    started, release, calls = threading.Event(), threading.Event(), []

    def broken():
        calls.append(1)
        started.set()
        release.wait(10)
        raise OSError("the trace's file went away")

    errors = []

    def ask():
        try:
            tb.get(("t", 1, 0, "g0"), False, broken)
        except OSError as e:
            errors.append(str(e))

    threads = [threading.Thread(target=ask) for _ in range(2)]
    threads[0].start()
    assert started.wait(10)
    threads[1].start()
    _until_waiting(tb, ("t", 1, 0, "g0"))
    release.set()
    for t in threads:
        t.join(10)
    assert errors == ["the trace's file went away"] * 2 and len(calls) == 2
    assert tb._builds.users(("t", 1, 0, "g0")) == 0  # no lock left behind for the key
    assert tb.get(("t", 1, 0, "g0"), False, lambda: b"again") == (b"again", "identity")  # built anew
    tb.close()


# durations and widths whose level the page and the server must agree on
GRID = [(d, w) for d in (1, 999, 1000, 1024, 123_456_789, 1_264_913_000, 2**40 + 3) for w in (300, 889, 1000, 1024, 2560)]


def _drop(browser, server, path) -> tuple[int, list[tuple], dict]:
    """Drop `path` through the list page's file chooser in a 1500 x 900 window: (the width its upload said,
    the page's tile requests in order as (level, index, group, page), what the page says of itself)."""
    posts, asked = [], []
    with _ui.new_page(browser, server.url, width=1500, height=900) as page:
        page.on("request", lambda r: posts.append(r.url) if r.method == "POST" else
                asked.append(r.url) if "/api/traces/" in r.url and "/tiles/" in r.url else None)
        page.goto("/")
        with page.expect_file_chooser() as chooser:
            page.click("#open-file")
        chooser.value.set_files(str(path))
        page.wait_for_url("**/t/*", timeout=60000)
        _ui.wait_idle(page, timeout_ms=30000)
        (post,) = [u for u in posts if "/api/traces" in u]
        checks = page.evaluate("""(grid) => ({tracks_px: window.acceltrace.timeline.view.width_css_px,
            inset: localStorage.getItem('acceltrace.tracks_inset_px'), id: document.body.dataset.traceId,
            levels: grid.map(([d, w]) => { const v = new window.acceltrace.timeline.view.constructor(d);
                                           v.width_css_px = w; return v.level(); })})""", GRID)
    px = int(post.split("view_px=")[1])
    requests = []
    for u in asked:
        at, _, q = u.partition("?")
        lv, ix = map(int, at.rsplit("/tiles/", 1)[1].split("/"))
        args = dict(kv.split("=") for kv in q.split("&"))
        requests.append((lv, ix, args["group"], int(args.get("page", 0))))
    return px, requests, checks


def _built(server, trace_id: str, px: int) -> set[tuple]:
    state = AppState(server.store)
    try:
        return set(first_tiles(state.trace(trace_id), px))
    finally:
        state.close_all()


def test_a_dropped_traces_page_asks_for_the_tiles_the_server_built_for_it(browser, tmp_path, live_server_factory):
    server = live_server_factory(tmp_path / "store")
    px, requests, page = _drop(browser, server, A100)
    assert px == page["tracks_px"]  # the default layout's inset is what the list page assumes
    assert int(page["inset"]) == 1500 - px  # ... and the trace page keeps the real one for the next drop
    # the page's level for the whole trace is the server's for that width, for any duration and width
    assert page["levels"] == [first_level(d, w, 62) for d, w in GRID]
    built = _built(server, page["id"], px)
    level = requests[0][0]
    assert {t[0] for t in built} == {level}
    on_screen = [t for t in requests if t[0] == level][:8]
    assert on_screen and set(on_screen) <= built, (on_screen, built)
    # processes stacked by their profiler sort index, not by name: the page's first screen is still the one built
    stacked = tmp_path / "stacked.json"
    stacked.write_bytes(_stacked_processes())
    px, requests, page = _drop(browser, server, stacked)
    built = _built(server, page["id"], px)
    on_screen = [t for t in requests if t[0] == requests[0][0]][:8]
    assert set(on_screen) <= built, (on_screen, sorted(built))
