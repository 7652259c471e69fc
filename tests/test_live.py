"""The live view: a growing .atrace (and a running daemon) streamed over the websocket."""

import time

from fastapi.testclient import TestClient

from acceltrace.collect import client
from acceltrace.formats import record as R
from acceltrace.formats.atrace.writer import AtraceWriter
from acceltrace.server.app import create_app


def test_websocket_streams_events_as_the_file_grows(tmp_path, monkeypatch):
    f = tmp_path / "live.atrace"
    w = AtraceWriter(f)
    w.add_metadata({"clock_domains": [{"id": 1, "name": "dev0", "kind": "device", "device": 0, "hz": 1e9}]})
    w.add_records(R.encode(R.COMPLETE, w.intern("first"), ts=1_000_000, dur=500, flags=R.FLAG_HAS_CORR, corr=3))
    w.flush()
    monkeypatch.setenv("ACCELTRACE_LIVE_FILE", str(f))
    monkeypatch.delenv("ACCELTRACE_SOCKET", raising=False)
    app = create_app(store=tmp_path / "store")
    with TestClient(app) as c:
        r = c.get("/api/live")
        assert r.status_code == 200, r.text
        assert r.json()["sources"][0]["kind"] == "file"
        assert c.get("/live").status_code == 200
        with c.websocket_connect("/api/live/ws?source=0") as ws:
            hello = ws.receive_json()
            assert hello["type"] == "hello" and hello["start_ns"] == "1000000"
            msg = ws.receive_json()
            assert [(e["name"], e["ts"], e["dur"], e["corr"]) for e in msg["events"]] == [("first", 0, 500, 3)]
            # a device event waits for its clock-sync pairs, then arrives mapped to host time
            w.add_records(R.encode(R.COMPLETE, w.intern("kernel"), ts=100, dur=50, clock=1, lane=3, device=0))
            w.flush()
            sent = time.monotonic()
            w.add_clock_sync(1, [1_000_000, 2_000_000], [0, 1_000_000])
            w.add_records(R.encode(R.INSTANT, w.intern("second"), ts=1_002_000))
            w.flush()
            got = []
            while len(got) < 2:
                got += ws.receive_json()["events"]
            assert time.monotonic() - sent < 1.0  # event to websocket well under a second
            by_name = {e["name"]: e for e in got}
            assert by_name["kernel"]["ts"] == 100 and by_name["kernel"]["lane"] == "eu"
            assert by_name["second"]["ts"] == 2000
            w.close()
            assert ws.receive_json()["finished"] is True  # the trailer landed


def test_websocket_follows_a_running_daemon(tmp_path, monkeypatch):
    from test_traced import _start, _stop

    proc, sock, out = _start(tmp_path)
    try:
        monkeypatch.setenv("ACCELTRACE_SOCKET", str(sock))
        monkeypatch.delenv("ACCELTRACE_LIVE_FILE", raising=False)
        t = client.connect(sock)
        app = create_app(store=tmp_path / "store")
        with TestClient(app) as c, c.websocket_connect("/api/live/ws") as ws:
            with t.span("from the daemon", corr=11):
                pass
            sent = time.monotonic()
            msg = ws.receive_json()
            if msg["type"] == "hello":
                msg = ws.receive_json()
            assert time.monotonic() - sent < 1.0  # event to websocket: the bound for event to screen
            assert [e["name"] for e in msg["events"]] == ["from the daemon"]
        t.close()
    finally:
        _stop(proc)


def test_unknown_source_is_a_clear_message(tmp_path, monkeypatch):
    monkeypatch.delenv("ACCELTRACE_SOCKET", raising=False)
    monkeypatch.delenv("ACCELTRACE_LIVE_FILE", raising=False)
    with TestClient(create_app(store=tmp_path / "store")) as c, c.websocket_connect("/api/live/ws?source=3") as ws:
        msg = ws.receive_json()
        assert msg["type"] == "error" and "ACCELTRACE_SOCKET" in msg["message"]


def test_websocket_from_another_origin_is_refused(tmp_path, monkeypatch):
    # any web page may open a websocket to localhost: only this server's own pages may read events
    import pytest
    from starlette.websockets import WebSocketDisconnect

    f = tmp_path / "live.atrace"
    w = AtraceWriter(f)
    w.add_records(R.encode(R.INSTANT, w.intern("secret op"), ts=1_000))
    w.flush()
    monkeypatch.setenv("ACCELTRACE_LIVE_FILE", str(f))
    monkeypatch.delenv("ACCELTRACE_SOCKET", raising=False)
    with TestClient(create_app(store=tmp_path / "store")) as c:
        with pytest.raises(WebSocketDisconnect) as e:
            with c.websocket_connect("/api/live/ws?source=0", headers={"origin": "http://evil.example"}) as ws:
                ws.receive_json()
        assert e.value.code == 1008
        with c.websocket_connect("/api/live/ws?source=0", headers={"origin": "http://testserver"}) as ws:
            assert ws.receive_json()["type"] == "hello"
    w.close()


def test_live_view_names_tracks_as_the_ingested_trace_does(tmp_path):
    from acceltrace.ingest.pipeline import ingest_paths
    from acceltrace.server.live import LiveStream
    from acceltrace.store.catalog import Store

    f = tmp_path / "names.atrace"
    t = client.connect(file=f, header={"devices": [{"id": 1, "name": "gpu-a"}]}, pid=7)
    t.name_process("trainer", pid=7)
    t.name_track("eu", 4, "matrix 4", device=1)
    t.complete("step", 1000, 100, lane="cpu", tid=3)                       # trainer thread 3
    t.complete("submit", 1100, 10, lane="driver", tid=0, device=1)          # gpu-a queue 0
    t.complete("gemm", 1200, 50, lane="eu", tid=4, device=1)                # matrix 4 (named)
    t.complete("copy", 1300, 20, lane="pcie", tid=2)                        # host engine 2
    t.counter("depth", 2.0, ts=1400, device=1)                              # the counter's name
    t.close()
    live = {e["name"]: e["track"] for m in LiveStream(f).poll() if m["type"] == "events" for e in m["events"]}
    (res,) = ingest_paths(Store(tmp_path / "store"), [f])
    con = Store(tmp_path / "store").connect(res.id)
    ingested = {}
    for name, tname, group, lane in con.execute(
            "SELECT s.name, t.name, t.group_name, t.lane FROM slices s JOIN tracks t USING (track_id)").fetchall():
        ingested[name] = tname if name == "gemm" else f"{group} {tname}"
    ingested["depth"] = con.execute("SELECT name FROM tracks WHERE lane = 'counter'").fetchone()[0]
    assert live == ingested == {"step": "trainer thread 3", "submit": "gpu-a queue 0", "gemm": "matrix 4",
                                "copy": "host engine 2", "depth": "depth"}


CHROMIUM = "/usr/bin/chromium"


def _colour_px(page, x0: int) -> int:
    """Saturated (slice-coloured) pixels of the canvas right of x0 css px."""
    return page.evaluate("""(x0) => {
        const c = document.querySelector('#timeline canvas'), d = window.devicePixelRatio || 1;
        const px = c.getContext('2d').getImageData(x0 * d, 0, c.width - x0 * d, c.height).data;
        let n = 0;
        for (let i = 0; i < px.length; i += 4) if (Math.max(px[i], px[i+1], px[i+2]) - Math.min(px[i], px[i+1], px[i+2]) > 60) n++;
        return n; }""", x0)


def test_live_page_draws_a_growing_file_in_the_browser(tmp_path, monkeypatch, live_server_factory):
    import pytest
    from pathlib import Path

    sync_api = pytest.importorskip("playwright.sync_api")
    if not Path(CHROMIUM).exists():
        pytest.skip(f"chromium not found at {CHROMIUM}")
    f = tmp_path / "grow.atrace"
    w = AtraceWriter(f)
    w.add_records(R.encode(R.COMPLETE, w.intern("outer <b>step</b>"), ts=1_000_000_000, dur=400_000_000, tid=1))
    w.flush()
    monkeypatch.setenv("ACCELTRACE_LIVE_FILE", str(f))
    monkeypatch.delenv("ACCELTRACE_SOCKET", raising=False)
    srv = live_server_factory(tmp_path / "store")
    try:
        with sync_api.sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM,
                                        args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"])
            page = browser.new_page(viewport={"width": 1200, "height": 600})
            errors = []
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(str(e)))
            modules = []
            page.on("response", lambda r: modules.append((r.url, r.status)) if "/static/" in r.url else None)
            page.goto(f"{srv.url}/live")
            page.wait_for_function("() => window.acceltraceLive && window.acceltraceLive.drawn >= 1", timeout=15000)
            assert page.text_content("#live-status") == "grow.atrace"
            # the file grows: nested spans, an instant, begin/end, a counter, a second thread
            for i in range(20):
                ts = 1_010_000_000 + i * 20_000_000
                w.add_records(R.encode(R.COMPLETE, w.intern(f"inner {i % 3}"), ts=ts, dur=15_000_000, tid=1))
                w.add_records(R.encode(R.COMPLETE, w.intern("worker"), ts=ts, dur=10_000_000, tid=2))
                w.add_records(R.encode_counter(w.intern("queue depth"), ts, float(i % 5)))
            w.add_records(R.encode(R.INSTANT, w.intern("mark"), ts=1_200_000_000, tid=1))
            w.add_records(R.encode(R.BEGIN, w.intern("phase"), ts=1_300_000_000, tid=3))
            w.add_records(R.encode(R.END, w.intern("phase"), ts=1_350_000_000, tid=3))
            w.flush()
            page.wait_for_function("() => window.acceltraceLive.drawn >= 63", timeout=15000)
            page.evaluate("() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))")
            tracks = page.evaluate("() => window.acceltraceLive.model.ordered().map(t => [t.lane, t.name, t.max_depth])")
            assert tracks == [["cpu", "pid 0 thread 1", 1], ["cpu", "pid 0 thread 2", 0], ["cpu", "pid 0 thread 3", 0],
                              ["counter", "queue depth", 0]]
            assert _colour_px(page, 230) > 2000  # slices drawn right of the names column
            # names from the trace are drawn on the canvas, never parsed as markup
            assert page.evaluate("() => document.querySelectorAll('b, main *:not(div):not(canvas)').length") == 0
            w.close()
            page.wait_for_function("() => document.getElementById('timeline').dataset.state === 'finished'",
                                   timeout=15000)
            assert "finished" in page.text_content("#live-count")
            browser.close()
        assert [u for u, s in modules if s != 200] == []
        assert any(u.endswith("/static/pages/live.js") for u, _ in modules)
        assert errors == []
    finally:
        srv.stop()


def test_a_corrupt_chunk_header_ends_the_stream_with_the_readers_message(tmp_path, monkeypatch):
    import struct

    from acceltrace.formats.atrace.layout import CHUNK_HEADER

    f = tmp_path / "bad.atrace"
    w = AtraceWriter(f)
    w.add_records(R.encode(R.INSTANT, w.intern("before"), ts=1_000))
    w.close()
    with open(f, "ab") as out:  # a chunk header no writer makes: type 99
        out.write(CHUNK_HEADER.pack(99, 0, 8, 0) + struct.pack("<q", 0))
    monkeypatch.setenv("ACCELTRACE_LIVE_FILE", str(f))
    monkeypatch.delenv("ACCELTRACE_SOCKET", raising=False)
    with TestClient(create_app(store=tmp_path / "store")) as c, c.websocket_connect("/api/live/ws") as ws:
        assert ws.receive_json()["type"] == "hello"
        assert [e["name"] for e in ws.receive_json()["events"]] == ["before"]
        msg = ws.receive_json()
        assert msg["type"] == "error" and "corrupt chunk header (type 99" in msg["message"]
