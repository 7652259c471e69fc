"""Opening a published trace in the server: a trace page that does not wait for the DuckDB open, and one
open per trace however many requests meet it (server/deps.py AppState.trace, warm)."""

from __future__ import annotations

import json
import re
import threading
import time

from fastapi.testclient import TestClient

from acceltrace.server import metadata
from acceltrace.server.app import create_app


def test_a_cold_trace_page_goes_before_its_handle_opens_which_opens_once_beside_it(trace_store, monkeypatch):
    """The page of a trace no request opened yet carries the catalog row only (the page asks
    /api/traces/{id} for the rest) and does not wait for the DuckDB open, which the warming pool does;
    requests that meet a trace being opened wait for that one open rather than start their own, and its
    metadata is built once for all of them (TraceHandle.once)."""
    app = create_app(trace_store.root)
    tid = trace_store.ids["chain"]
    opened, gate, built = [], threading.Event(), []
    real_build = metadata._build

    def slow_build(h):
        built.append(h.trace_id)
        time.sleep(0.2)  # long enough for the other requests to meet it being built
        return real_build(h)

    monkeypatch.setattr(metadata, "_build", slow_build)

    with TestClient(app, base_url="http://127.0.0.1") as c:
        state = app.state.acceltrace  # made at the app's start
        real = state.store.connect

        def slow_connect(trace_id, **kw):
            opened.append(trace_id)
            gate.wait(10)  # held open until the page has answered
            return real(trace_id, **kw)

        state.store.connect = slow_connect
        r = c.get(f"/t/{tid}")
        assert r.status_code == 200, r.text
        meta = json.loads(re.search(r'id="trace-meta">(.*?)</script>', r.text, re.S).group(1))
        assert meta["id"] == tid and meta["status"] == "ready" and "tracks" not in meta  # the row, not the metadata
        deadline = time.monotonic() + 10
        while not opened and time.monotonic() < deadline:
            time.sleep(0.01)
        assert opened == [tid], "the page should have set the open going in the background"
        answers = []
        callers = [threading.Thread(target=lambda: answers.append(c.get(f"/api/traces/{tid}").json()))
                   for _ in range(3)]
        for t in callers:
            t.start()
        time.sleep(0.2)
        gate.set()
        for t in callers:
            t.join(20)
        assert opened == [tid], f"one open for four requests, got {len(opened)}"
        assert built == [tid], f"one metadata build for four requests, got {len(built)}"
        assert len(answers) == 3 and all(a["tracks"] for a in answers)
        r = c.get(f"/t/{tid}")  # open now: the page carries the whole metadata
        meta = json.loads(re.search(r'id="trace-meta">(.*?)</script>', r.text, re.S).group(1))
        assert meta["tracks"] == answers[0]["tracks"]
        assert opened == [tid]
