"""GET /events and /events.csv (the views page's events table) against the raw rows of a small trace."""

from __future__ import annotations

import csv
import io
import json

import pytest
from fastapi.testclient import TestClient

from acceltrace.ingest.pipeline import ingest_paths
from acceltrace.server.app import create_app
from acceltrace.store import range_events
from acceltrace.store.catalog import Store

US = 1000
# 30 slices on two threads (a0..a9, b0..b18 and "b19 50%") plus one copy
EVENTS = ([{"ph": "X", "cat": "cpu_op", "name": f"a{i}", "pid": 1, "tid": 1, "ts": i * 10, "dur": 5 + i}
           for i in range(10)]
          + [{"ph": "X", "cat": "cpu_op", "name": f"b{i}" if i < 19 else "b19 50%", "pid": 1, "tid": 2,
              "ts": i * 7, "dur": 3} for i in range(20)]
          + [{"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD (Pinned -> Device)", "pid": 0, "tid": 8, "ts": 50, "dur": 8,
              "args": {"bytes": 4096, "device": 0, "stream": 8}}])


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    d = tmp_path_factory.mktemp("events")
    path = d / "t.json"
    path.write_text(json.dumps({"traceEvents": EVENTS}))
    store = Store(d / "store")
    (res,) = ingest_paths(store, [path])
    assert res.error is None, res.error
    with TestClient(create_app(store.root)) as c:
        c.trace_id = res.id
        yield c


def _get(client, route="events", **params):
    r = client.get(f"/api/traces/{client.trace_id}/{route}", params=params)
    assert r.status_code == 200, r.text
    return r


def test_events_of_a_range_are_the_overlapping_slices_in_time_order(client):
    body = _get(client, start_ns=40 * US, end_ns=60 * US, limit=1000).json()
    want = sorted((e["ts"], e["name"]) for e in EVENTS if e["ts"] < 60 and e["ts"] + e["dur"] >= 40)
    got = [(r["ts"] // US, r["name"]) for r in body["rows"]]
    assert sorted(got) == want and [t for t, _ in got] == sorted(t for t, _ in got)
    assert body["total"] == len(want)
    copy = next(r for r in body["rows"] if r["name"].startswith("Memcpy"))
    assert copy["lane"] == "pcie" and copy["bytes"] == 4096 and copy["dur"] == 8 * US


def test_events_sort_filter_and_page(client):
    body = _get(client, sort="dur", desc="true", limit=3).json()
    assert [r["name"] for r in body["rows"]] == ["a9", "a8", "a7"] and body["total"] == len(EVENTS)
    page2 = _get(client, sort="dur", desc="true", limit=3, offset=3).json()
    assert [r["name"] for r in page2["rows"]] == ["a6", "a5", "a4"]
    # the name filter is a substring; % is literal
    assert [r["name"] for r in _get(client, q="0%").json()["rows"]] == ["b19 50%"]
    assert [r["name"] for r in _get(client, q="HTOD").json()["rows"]] == ["Memcpy HtoD (Pinned -> Device)"]
    assert _get(client, q="a%").json()["total"] == 0
    assert _get(client, lane="pcie").json()["total"] == 1


def test_events_refuse_an_unknown_sort_and_an_empty_range(client):
    r = client.get(f"/api/traces/{client.trace_id}/events", params={"sort": "slice_id; DROP"})
    assert r.status_code == 422 and r.json()["error"]["code"] == "validation_error"
    r = client.get(f"/api/traces/{client.trace_id}/events", params={"start_ns": 50, "end_ns": 10})
    assert r.status_code == 400 and "end_ns" in r.json()["error"]["message"]


def test_events_csv_holds_every_row_in_order_and_says_when_cut(client, monkeypatch):
    r = _get(client, "events.csv", sort="name")
    assert r.headers["content-type"].startswith("text/csv") and r.headers["x-acceltrace-truncated"] == "false"
    rows = list(csv.DictReader(io.StringIO(r.text)))
    assert [x["name"] for x in rows] == sorted(e["name"] for e in EVENTS)
    assert list(rows[0]) == list(range_events.EVENT_COLUMNS)
    monkeypatch.setattr(range_events, "EVENTS_CSV_MAX", 5)
    r = _get(client, "events.csv")
    assert r.headers["x-acceltrace-truncated"] == "true" and len(list(csv.DictReader(io.StringIO(r.text)))) == 5


def test_a_page_of_events_carries_a_preview_of_long_args_and_the_csv_all_of_them(client, monkeypatch):
    """One event's args can be 100 MB: a page of events carries ARGS_CELL_MAX characters of each, with
    `args_chars` where they were cut; the CSV export keeps them whole."""
    monkeypatch.setattr(range_events, "ARGS_CELL_MAX", 10)
    rows = _get(client, start_ns=50 * US, end_ns=51 * US, limit=1000).json()["rows"]
    copy = next(r for r in rows if r["name"].startswith("Memcpy"))
    whole = json.dumps({"bytes": 4096, "device": 0, "stream": 8})
    assert copy["args"] == whole[:10] and copy["args_chars"] == len(whole)
    assert all("args_chars" not in r for r in rows if r is not copy)  # no args, nothing cut
    csv_rows = list(csv.DictReader(io.StringIO(_get(client, "events.csv", start_ns=50 * US, end_ns=51 * US).text)))
    assert next(r for r in csv_rows if r["name"].startswith("Memcpy"))["args"] == whole
