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
