"""Browser-facing walls: Host (DNS rebinding), Origin (cross-site writes), security headers."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from acceltrace.server.app import create_app
from acceltrace.server.security import CSP, allowed_hosts

TRACE = b'{"traceEvents": [{"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": 1, "dur": 2}]}'


@pytest.fixture
def client(tmp_path, monkeypatch):
    monkeypatch.delenv("ACCELTRACE_ALLOWED_HOSTS", raising=False)
    monkeypatch.delenv("ACCELTRACE_ALLOWED_ORIGINS", raising=False)
    with TestClient(create_app(tmp_path / "store", ingest_wait_s=10), base_url="http://127.0.0.1:8000",
                    raise_server_exceptions=False) as c:
        yield c


def _upload(c, **headers):
    return c.post("/api/traces", files={"file": ("t.json", TRACE, "application/json")}, headers=headers)


def test_a_host_this_server_does_not_serve_is_refused(client):
    assert client.get("/api/traces").status_code == 200
    assert client.get("/api/traces", headers={"host": "localhost:8000"}).status_code == 200
    assert client.get("/api/traces", headers={"host": "[::1]:8000"}).status_code == 200
    r = client.get("/api/traces", headers={"host": "evil.example"})
    assert r.status_code == 403 and r.json()["error"]["code"] == "forbidden"
    assert "evil.example" in r.json()["error"]["message"]
    assert client.get("/", headers={"host": "evil.example:8000"}).status_code == 403


def test_cross_origin_writes_are_refused_same_origin_and_scripts_are_not(client):
    r = _upload(client, origin="http://evil.example")
    assert r.status_code == 403 and "evil.example" in r.text
    assert client.get("/api/traces").json()["traces"] == []  # nothing was stored
    assert _upload(client, origin="null").status_code == 403
    ok = _upload(client, origin="http://127.0.0.1:8000")
    assert ok.status_code in (200, 201, 202), ok.text
    tid = ok.json()["id"]
    assert _upload(client).status_code in (200, 201, 202)  # no Origin: curl, scripts
    assert client.delete(f"/api/traces/{tid}", headers={"origin": "http://evil.example"}).status_code == 403
    # reads from another origin are not state changes (the Host check guards them)
    assert client.get("/api/traces", headers={"origin": "http://evil.example"}).status_code == 200


def test_a_cross_origin_websocket_is_refused(client):
    from starlette.websockets import WebSocketDisconnect

    with pytest.raises(WebSocketDisconnect):
        with client.websocket_connect("/api/live/ws", headers={"origin": "http://evil.example"}) as ws:
            ws.receive_json()


def test_responses_carry_security_headers(client):
    for path in ("/api/traces", "/static/app.css", "/"):
        r = client.get(path)
        assert r.headers["x-content-type-options"] == "nosniff", path
        assert r.headers["referrer-policy"] == "same-origin" and r.headers["x-frame-options"] == "DENY"
    page = client.get("/")
    assert page.headers["content-security-policy"] == CSP
    assert "script-src 'self'" in CSP and "frame-ancestors 'none'" in CSP
    assert "content-security-policy" not in client.get("/api/traces").headers


def test_allowed_hosts_for_a_shared_server(monkeypatch):
    monkeypatch.delenv("ACCELTRACE_ALLOWED_HOSTS", raising=False)
    assert "10.1.2.3" in allowed_hosts("10.1.2.3") and "evil.example" not in allowed_hosts("10.1.2.3")
    assert "trace-box.corp" in allowed_hosts("0.0.0.0", ["trace-box.corp"])
    assert allowed_hosts("127.0.0.1", ["*"]) is None
    monkeypatch.setenv("ACCELTRACE_ALLOWED_HOSTS", "a.example, b.example")
    hosts = allowed_hosts("127.0.0.1")
    assert {"a.example", "b.example", "localhost", "127.0.0.1", "::1"} <= hosts
