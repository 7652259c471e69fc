"""GET /api/traces/{id}/export: Chrome JSON (plain or gzip) and a zip of Parquet tables, streamed."""

import gzip
import io
import json
import zipfile
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from fastapi.testclient import TestClient

from _helpers import ingest_ok, ingest_only

from acceltrace.server.app import create_app

ROOT = Path(__file__).resolve().parent.parent
A100 = ROOT / "sample_traces" / "nsys" / "nsys-2022.2" / "a100-saxpy-nsys2022.sqlite"


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    with ingest_only():  # the export needs no analysis or level-of-detail tables
        store, res = ingest_ok(tmp_path_factory.mktemp("api"), A100)
    with TestClient(create_app(store.root)) as c:
        yield c, res.id, store


def test_chrome_download_is_the_trace_as_json(client):
    c, tid, store = client
    r = c.get(f"/api/traces/{tid}/export", params={"format": "chrome"})
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("application/json")
    assert 'filename="a100-saxpy-nsys2022.json"' in r.headers["content-disposition"]
    doc = r.json()
    assert sum(e["ph"] == "X" for e in doc["traceEvents"]) == 7169  # API calls, NVTX, device work, sched, samples


def test_chrome_download_gzipped(client):
    c, tid, _ = client
    r = c.get(f"/api/traces/{tid}/export", params={"format": "chrome", "gzip": "true"})
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == "application/gzip"
    doc = json.loads(gzip.decompress(r.content))
    assert doc["displayTimeUnit"] == "ns"


def test_parquet_download_is_a_zip_of_tables_and_leaves_no_temp_files(client):
    c, tid, store = client
    r = c.get(f"/api/traces/{tid}/export", params={"format": "parquet"})
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == "application/zip"
    zf = zipfile.ZipFile(io.BytesIO(r.content))
    names = set(zf.namelist())
    assert {"trace_meta.parquet", "tracks.parquet", "slices.parquet", "flows.parquet", "counters.parquet"} <= names
    slices = pq.read_table(io.BytesIO(zf.read("slices.parquet")))
    assert slices.num_rows == 7169
    assert not [p for p in store.tmp_dir.iterdir() if ".export" in p.name]


def test_unknown_trace_and_format_answer_the_json_error_shape(client):
    c, tid, _ = client
    r = c.get("/api/traces/nosuchtrace/export", params={"format": "chrome"})
    assert r.status_code == 404, r.text
    assert r.json()["error"]["code"] == "not_found"
    r = c.get(f"/api/traces/{tid}/export", params={"format": "csv"})
    assert r.status_code == 422, r.text
    assert "format" in r.json()["error"]["message"]


def test_export_is_in_the_openapi_description(client):
    c, _, _ = client
    r = c.get("/openapi.json")
    assert r.status_code == 200, r.text
    assert "/api/traces/{trace_id}/export" in r.json()["paths"]


def test_unreadable_trace_file_answers_the_error_shape_not_an_empty_200(tmp_path):
    with ingest_only():
        store, res = ingest_ok(tmp_path, A100)
    (store.root / "traces" / f"{res.id}.duckdb").write_bytes(b"not a database" * 100)
    with TestClient(create_app(store.root), raise_server_exceptions=False) as c:
        # more requests than export slots: a failed export must give its slot back
        for fmt in ("chrome", "parquet") * 3:
            r = c.get(f"/api/traces/{res.id}/export", params={"format": fmt})
            assert r.status_code == 500, r.text
            assert r.json()["error"]["code"] == "export_failed"
    assert not [p for p in store.tmp_dir.iterdir() if ".export" in p.name]
