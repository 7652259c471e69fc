"""Uploads (multipart and raw, limits, garbage, dedup, concurrency, progress), delete, and a live server
that sees traces other processes add and remove."""

from __future__ import annotations

import gzip
import json
import threading
import time

import httpx
import pytest
from fastapi.testclient import TestClient

from acceltrace.store.catalog import Store
from acceltrace.server.app import create_app


def chrome_json(label: str, n: int = 200) -> bytes:
    events = [{"ph": "X", "name": f"{label}_{i % 7}", "ts": i * 10, "dur": 5, "pid": 1, "tid": 1 + i % 3}
              for i in range(n)]
    return json.dumps({"traceEvents": events}).encode()


def _wait_ready(client, trace_id: str, timeout_s: float = 60) -> dict:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        row = client.get(f"/api/traces/{trace_id}").json()
        if row.get("status") != "ingesting":
            return row
        time.sleep(0.1)
    raise AssertionError(f"trace {trace_id} still ingesting after {timeout_s} s")


@pytest.fixture
def fresh(tmp_path):
    """An app on an empty store, small upload limit."""
    with TestClient(create_app(tmp_path / "store", max_upload_bytes=1 << 20), raise_server_exceptions=False) as c:
        yield c


def test_multipart_upload_is_ingested_and_listed_ready(fresh):
    r = fresh.post("/api/traces", files={"file": ("run.json", chrome_json("mp"), "application/json")})
    assert r.status_code in (201, 202), r.text
    tid = r.json()["id"]
    assert len(tid) >= 22
    meta = _wait_ready(fresh, tid)
    assert meta["status"] == "ready" and meta["format"] == "chrome" and meta["name"] == "run.json"
    assert meta["counts"]["slices"] == 200
    assert [t["id"] for t in fresh.get("/api/traces").json()["traces"]] == [tid]
    t = fresh.get(f"/api/traces/{tid}/tiles/0/0")
    assert t.status_code == 200, t.text


def test_raw_gzip_body_with_name_is_accepted(fresh):
    r = fresh.post("/api/traces", params={"name": "raw.json.gz"}, content=gzip.compress(chrome_json("raw")))
    assert r.status_code in (201, 202), r.text
    meta = _wait_ready(fresh, r.json()["id"])
    assert meta["status"] == "ready" and meta["name"] == "raw.json.gz"


def test_identical_upload_is_deduplicated(fresh):
    body = chrome_json("dup")
    first = fresh.post("/api/traces", files={"file": ("a.json", body)})
    _wait_ready(fresh, first.json()["id"])
    again = fresh.post("/api/traces", files={"file": ("b.json", body)})
    assert again.status_code == 200, again.text
    assert again.json()["id"] == first.json()["id"] and again.json()["deduplicated"] is True
    assert len(fresh.get("/api/traces").json()["traces"]) == 1


@pytest.fixture
def patient(tmp_path):
    """As `fresh`, but the upload waits up to 30 s for its ingest's end (2 s by default: past it, 202 and the
    progress stream). What the refusal's answer says is under test, not how soon a loaded machine gives it."""
    with TestClient(create_app(tmp_path / "store", max_upload_bytes=1 << 20, ingest_wait_s=30),
                    raise_server_exceptions=False) as c:
        yield c


@pytest.mark.parametrize("name", ["junk.bin", "junk.json"])  # .json: refused by the ingest that read it arriving
def test_garbage_upload_is_a_clear_4xx_and_never_listed_ready(patient, tmp_path, name):
    r = patient.post("/api/traces", files={"file": (name, b"\x00\x01garbage" * 100)})
    assert 400 <= r.status_code < 500, r.text
    msg = r.json()["error"]["message"]
    assert name in msg and "expected" in msg
    rows = patient.get("/api/traces").json()["traces"]
    assert all(t["status"] != "ready" for t in rows)
    assert all(t["status"] == "failed" and t["error"] for t in rows)
    assert not list((tmp_path / "store" / "traces").glob("*.duckdb"))


def test_upload_over_the_limit_is_413_and_leaves_nothing(fresh, tmp_path):
    big = b"[" + b" " * (2 << 20) + b"]"
    r = fresh.post("/api/traces", params={"name": "big.json"}, content=big)
    assert r.status_code == 413, r.text
    assert r.json()["error"]["code"] == "too_large"
    r = fresh.post("/api/traces", files={"file": ("big.json", big)})
    assert r.status_code == 413, r.text
    assert fresh.get("/api/traces").json()["traces"] == []
    assert not list((tmp_path / "store" / "tmp").iterdir())


def test_upload_of_a_file_the_cli_ingested_answers_with_that_trace(fresh, tmp_path):
    """The CLI hashes the file (read from disk), the server the upload in pieces as it arrives: the same
    content hash."""
    from acceltrace.ingest.pipeline import ingest_paths

    body = chrome_json("cli", 3000)  # several of the upload's pieces
    path = tmp_path / "cli.json"
    path.write_bytes(body)
    (res,) = ingest_paths(Store(tmp_path / "store"), [path], views=False)
    assert res.error is None
    r = fresh.post("/api/traces", files={"file": ("other-name.json", body)})
    assert r.status_code == 200, r.text
    assert r.json()["id"] == res.id and r.json()["deduplicated"] is True


def test_empty_upload_and_multipart_without_file_are_400(fresh):
    r = fresh.post("/api/traces", params={"name": "x.json"}, content=b"")
    assert r.status_code == 400 and r.json()["error"]["code"] == "bad_request"
    r = fresh.post("/api/traces", data={"other": "field"}, files={"notfile": ("x.json", b"{}")})
    assert r.status_code == 400 and "'file'" in r.json()["error"]["message"]


def test_slow_ingest_answers_202_and_progress_stream_ends_ready(tmp_path):
    app = create_app(tmp_path / "store", ingest_wait_s=0.0)
    with TestClient(app, raise_server_exceptions=False) as c:
        r = c.post("/api/traces", files={"file": ("slow.json", chrome_json("slow", 2000))})
        assert r.status_code == 202, r.text
        body = r.json()
        assert body["status"] == "ingesting" and body["progress_url"] == f"/api/traces/{body['id']}/progress"
        with c.stream("GET", body["progress_url"]) as s:
            assert s.headers["content-type"].startswith("text/event-stream")
            events = [json.loads(line[5:]) for line in s.iter_lines() if line.startswith("data:")]
        assert events[-1]["status"] == "ready"
        assert all(0 <= (e["progress"] or 0) <= 1 for e in events)


def test_delete_removes_the_trace_and_its_files(fresh, tmp_path):
    r = fresh.post("/api/traces", files={"file": ("del.json", chrome_json("del"))})
    tid = r.json()["id"]
    _wait_ready(fresh, tid)
    fresh.get(f"/api/traces/{tid}/summary")  # creates a side file too
    d = fresh.delete(f"/api/traces/{tid}")
    assert d.status_code == 204, d.text
    assert fresh.get(f"/api/traces/{tid}").status_code == 404
    assert not list((tmp_path / "store" / "traces").glob(f"{tid}*"))
    again = fresh.delete(f"/api/traces/{tid}")
    assert again.status_code == 404 and again.json()["error"]["code"] == "not_found"


def test_concurrent_uploads_to_a_live_server_all_become_ready(live_server_factory, tmp_path):
    server = live_server_factory(tmp_path / "store")
    results: dict[int, httpx.Response] = {}

    def send(i: int) -> None:
        with httpx.Client(base_url=server.url, timeout=120) as c:
            results[i] = c.post("/api/traces", files={"file": (f"c{i}.json", chrome_json(f"c{i}", 300 + i))})

    threads = [threading.Thread(target=send, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert all(results[i].status_code in (201, 202) for i in range(6)), {i: r.text for i, r in results.items()}
    ids = {r.json()["id"] for r in results.values()}
    assert len(ids) == 6
    with httpx.Client(base_url=server.url, timeout=30) as c:
        for tid in ids:
            assert _wait_ready(c, tid)["status"] == "ready"
        assert {t["id"] for t in c.get("/api/traces").json()["traces"]} == ids
    assert "Traceback" not in server.log()


def test_ten_concurrent_uploads_of_one_file_make_one_trace(live_server_factory, tmp_path):
    server = live_server_factory(tmp_path / "store")
    body = chrome_json("same", 400)
    results: dict[int, httpx.Response] = {}
    gate = threading.Barrier(10)

    def send(i: int) -> None:
        with httpx.Client(base_url=server.url, timeout=120) as c:
            gate.wait(30)
            results[i] = c.post("/api/traces", files={"file": (f"same{i}.json", body)})

    threads = [threading.Thread(target=send, args=(i,)) for i in range(10)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert sorted(r.status_code for r in results.values()) in ([200] * 9 + [201], [200] * 9 + [202]), \
        {i: (r.status_code, r.text[:200]) for i, r in results.items()}
    ids = {r.json()["id"] for r in results.values()}
    assert len(ids) == 1
    assert sum(bool(r.json().get("deduplicated")) for r in results.values()) == 9
    with httpx.Client(base_url=server.url, timeout=30) as c:
        (tid,) = ids
        assert _wait_ready(c, tid)["status"] == "ready"
        assert [t["id"] for t in c.get("/api/traces").json()["traces"]] == [tid]
    assert "Traceback" not in server.log()


def test_live_server_sees_traces_other_processes_add_and_remove(live_server, trace_store):
    from bench.gen_synthetic import build_trace

    store = Store(trace_store.root, sweep=False)
    tid, _ = build_trace(store, 2_000, name="added-by-cli", n_tracks=4, n_counter_tracks=0, batch_rows=5_000)
    with httpx.Client(base_url=live_server.url, timeout=30) as c:
        r = c.get(f"/api/traces/{tid}")
        assert r.status_code == 200, r.text
        assert c.get(f"/api/traces/{tid}/tiles/0/0").status_code == 200
        store.remove(tid)
        for url in (f"/api/traces/{tid}", f"/api/traces/{tid}/tiles/0/0", f"/api/traces/{tid}/summary"):
            r = c.get(url)
            assert r.status_code == 404, r.text
            assert r.json()["error"]["code"] == "not_found"
        assert c.get("/api/traces").status_code == 200
    assert "Traceback" not in live_server.log() and "ERROR" not in live_server.log()


def test_serve_ingests_the_given_files_and_prints_the_url(live_server_factory, tmp_path):
    trace = tmp_path / "given.json"
    trace.write_bytes(chrome_json("given"))
    server = live_server_factory(tmp_path / "store2", paths=[trace])
    assert server.url.startswith("http://127.0.0.1:")
    assert f"at {server.url}/" in server.log()
    with httpx.Client(base_url=server.url, timeout=30) as c:
        names = [t["name"] for t in c.get("/api/traces").json()["traces"]]
    assert names == ["given.json"]


def test_zip_upload_is_accepted(fresh):
    import io
    import zipfile

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("inner.json", chrome_json("zipped"))
    r = fresh.post("/api/traces", files={"file": ("trace.zip", buf.getvalue())})
    assert r.status_code in (201, 202), r.text
    meta = _wait_ready(fresh, r.json()["id"])
    assert meta["status"] == "ready" and meta["counts"]["slices"] == 200


def test_serve_skips_invalid_sample_folders_but_not_named_files(tmp_path):
    from acceltrace.server.main import _demo_inputs

    (tmp_path / "kineto").mkdir()
    (tmp_path / "kineto" / "good.json").write_bytes(chrome_json("good"))
    (tmp_path / "kineto" / "invalid").mkdir()
    bad = tmp_path / "kineto" / "invalid" / "bad.json"
    bad.write_bytes(b"nope")
    assert _demo_inputs([tmp_path]) == [tmp_path / "kineto" / "good.json"]
    assert _demo_inputs([bad]) == [bad]


# -- a JSON trace is ingested while it arrives (server/upload.py streamable) ----------------------------

def _send_in_two(url: str, name: str, body: bytes, release: threading.Event, out: dict, fail_after_half=False,
                 declare=True):
    """POST body raw (?name=), streamed: its first half, then (once `release` is set) the rest, or, with
    fail_after_half, an error that cuts the request off. `declare`: with its Content-Length (else chunked)."""
    def chunks():
        half = len(body) // 2
        for lo in range(0, half, 64 << 10):
            yield body[lo:min(lo + (64 << 10), half)]
        release.wait(60)
        if fail_after_half:
            raise ConnectionAbortedError("the client went away")
        for lo in range(half, len(body), 64 << 10):
            yield body[lo:lo + (64 << 10)]
    try:
        with httpx.Client(base_url=url, timeout=120) as c:
            # the body's length declared, as a browser's upload declares it (the ingest's progress goes by it)
            out["r"] = c.post("/api/traces", params={"name": name}, content=chunks(),
                              headers={"Content-Length": str(len(body))} if declare else None)
    except BaseException as e:  # the cut-off case
        out["error"] = e


def test_a_json_upload_is_ingested_while_it_arrives(live_server_factory, tmp_path):
    server = live_server_factory(tmp_path / "store")
    body = chrome_json("arrive", 40_000)
    release, out = threading.Event(), {}
    t = threading.Thread(target=_send_in_two, args=(server.url, "arrive.json", body, release, out))
    t.start()
    try:
        with httpx.Client(base_url=server.url, timeout=30) as c:
            deadline, row = time.monotonic() + 60, None
            while time.monotonic() < deadline:  # half the body is in: its ingest has started and read some
                rows = c.get("/api/traces").json()["traces"]
                if rows and rows[0]["status"] == "ingesting" and (rows[0].get("progress") or 0) > 0:
                    row = rows[0]
                    break
                time.sleep(0.05)
            assert row is not None, rows
            assert "r" not in out  # the upload is still open
    finally:
        release.set()
        t.join(120)
    r = out["r"]
    assert r.status_code in (201, 202), r.text
    assert r.json()["id"] == row["id"]
    with httpx.Client(base_url=server.url, timeout=30) as c:
        meta = _wait_ready(c, row["id"])
        assert meta["status"] == "ready" and meta["counts"]["slices"] == 40_000
        again = c.post("/api/traces", files={"file": ("again.json", body)})  # its hash was claimed: a duplicate
        assert again.status_code == 200 and again.json()["id"] == row["id"], again.text
        assert [x["id"] for x in c.get("/api/traces").json()["traces"]] == [row["id"]]
    deadline = time.monotonic() + 60  # the upload's files go when its job ends (after the analysis)
    while time.monotonic() < deadline and list((tmp_path / "store" / "tmp").glob("up-*")):
        time.sleep(0.1)
    assert not list((tmp_path / "store" / "tmp").glob("up-*"))
    assert "Traceback" not in server.log()


def test_an_upload_cut_off_while_it_is_ingested_leaves_no_trace(live_server_factory, tmp_path):
    server = live_server_factory(tmp_path / "store")
    body = chrome_json("cut", 40_000)
    release, out = threading.Event(), {}
    t = threading.Thread(target=_send_in_two, args=(server.url, "cut.json", body, release, out, True))
    t.start()
    with httpx.Client(base_url=server.url, timeout=30) as c:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not c.get("/api/traces").json()["traces"]:
            time.sleep(0.05)
        release.set()
        t.join(120)
        assert "error" in out
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and c.get("/api/traces").json()["traces"]:
            time.sleep(0.1)
        assert c.get("/api/traces").json()["traces"] == []  # neither ready nor failed: it was never whole
        ok = c.post("/api/traces", files={"file": ("next.json", chrome_json("next"))})  # and it goes on serving
        assert ok.status_code in (201, 202), ok.text
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and list((tmp_path / "store" / "tmp").glob("up-*")):
        time.sleep(0.1)
    assert not list((tmp_path / "store" / "tmp").glob("up-*"))
    assert "Traceback" not in server.log()


def test_an_upload_that_grows_past_the_limit_while_ingested_is_413_and_leaves_nothing(fresh, tmp_path):
    body = chrome_json("big", 40_000)  # ~2.6 MB, over the 1 MiB limit; chunked: no length declared
    assert len(body) > 2 << 20

    def chunks():
        for lo in range(0, len(body), 64 << 10):
            yield body[lo:lo + (64 << 10)]

    r = fresh.post("/api/traces", params={"name": "big.json"}, content=chunks())
    assert r.status_code == 413, r.text
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and (fresh.get("/api/traces").json()["traces"]
                                           or list((tmp_path / "store" / "tmp").glob("up-*"))):
        time.sleep(0.1)
    assert fresh.get("/api/traces").json()["traces"] == []
    assert not list((tmp_path / "store" / "tmp").glob("up-*"))


def test_an_upload_of_undeclared_length_claims_no_share_until_it_is_all_there(live_server_factory, tmp_path):
    # chunked, no Content-Length: the share read of it is unknown while it arrives (it once said 99 %)
    server = live_server_factory(tmp_path / "store")
    body = chrome_json("undeclared", 40_000)
    release, out = threading.Event(), {}
    t = threading.Thread(target=_send_in_two, args=(server.url, "undeclared.json", body, release, out),
                         kwargs={"declare": False})
    t.start()
    try:
        with httpx.Client(base_url=server.url, timeout=30) as c:
            deadline, seen = time.monotonic() + 20, []
            while time.monotonic() < deadline and len(seen) < 20:
                rows = c.get("/api/traces").json()["traces"]
                if rows and rows[0]["status"] == "ingesting":
                    seen.append(rows[0].get("progress") or 0)
                time.sleep(0.05)
            assert seen and max(seen) == 0, seen
            assert "r" not in out
    finally:
        release.set()
        t.join(120)
    assert out["r"].status_code in (201, 202), out["r"].text
    with httpx.Client(base_url=server.url, timeout=30) as c:
        assert _wait_ready(c, out["r"].json()["id"])["counts"]["slices"] == 40_000


def _tiles_ready(state, tid: str, within_s: float = 10.0):
    """The open handle of tid once the groups and names every tile needs are read, else None."""
    from acceltrace.server.deps import GROUPS, NAMES

    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        h = state._open.get(tid)
        if h is not None and GROUPS in h.cache and NAMES in h.cache:
            return h
        time.sleep(0.02)
    return None


def test_a_published_upload_is_ready_for_its_first_tiles_before_they_are_asked(patient):
    # the handle opens and the groups and names every tile needs are read on a warming thread as the
    # upload answers, so the page's first tile requests take the fast path (server/tile_cache.py)
    from acceltrace.server.routers.tiles import cold_job

    r = patient.post("/api/traces", files={"file": ("warm.json", chrome_json("warm"), "application/json")})
    assert r.status_code == 201, r.text
    tid = r.json()["id"]
    state = patient.app.state.acceltrace
    h = _tiles_ready(state, tid)
    assert h is not None
    state.row(tid)  # the row cached, as the page's own first request leaves it
    assert cold_job(state, tid, h.info.max_level, 0, "g0", 0) is not None  # no detour through the route


def test_the_progress_stream_that_ends_ready_warms_the_trace_for_its_page(tmp_path):
    # an upload answered 202 opens its page at once; the page follows the progress stream, and asks for
    # the metadata and tiles as soon as it reads `ready`: the stream opens the handle as it says so
    with TestClient(create_app(tmp_path / "store", max_upload_bytes=1 << 20, ingest_wait_s=0),
                    raise_server_exceptions=False) as c:
        r = c.post("/api/traces", files={"file": ("p.json", chrome_json("p"), "application/json")})
        assert r.status_code == 202, r.text
        tid = r.json()["id"]
        state = c.app.state.acceltrace
        with c.stream("GET", f"/api/traces/{tid}/progress") as s:
            events = [json.loads(line[6:]) for line in s.iter_lines() if line.startswith("data: ")]
        assert events[-1]["status"] == "ready"
        assert _tiles_ready(state, tid) is not None
