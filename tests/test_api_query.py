"""POST /api/traces/{id}/query: read-only, one trace only, bounded in time and rows; the server survives."""

from __future__ import annotations

import pytest


@pytest.fixture
def q(api, trace_store):
    tid = trace_store.ids["chain"]

    def run(sql, **kw):
        return api.post(f"/api/traces/{tid}/query", json={"sql": sql, **kw})

    return run


def _still_answering(q):
    r = q("SELECT count(*) AS n FROM slices")
    assert r.status_code == 200, r.text
    assert r.json()["rows"] == [[61]]


def test_query_returns_columns_and_rows(q):
    r = q("SELECT name, dur FROM slices WHERE name = 'gemm_kernel'")
    assert r.status_code == 200, r.text
    d = r.json()
    assert d["columns"] == ["name", "dur"] and d["rows"] == [["gemm_kernel", 6000]] and d["truncated"] is False


def test_row_limit_is_flagged(q):
    r = q("SELECT slice_id FROM slices ORDER BY slice_id", max_rows=10)
    assert r.status_code == 200, r.text
    d = r.json()
    assert len(d["rows"]) == 10 and d["truncated"] is True


def test_findings_table_is_queryable_when_present_and_views_only(q):
    # the chain trace has no findings side file: the name is simply unknown, not a crash
    r = q("SELECT * FROM findings")
    assert r.status_code == 400 and r.json()["error"]["code"] == "query_failed"


@pytest.mark.parametrize("sql", [
    "COPY slices TO '/tmp/acceltrace-escape.csv'",
    "ATTACH '/tmp/acceltrace-other.duckdb' AS other",
    "SELECT * FROM read_csv('/etc/passwd')",
    "SELECT * FROM read_text('/etc/passwd')",
    "INSTALL httpfs",
    "LOAD httpfs",
    "SET enable_external_access = true",
    "SET memory_limit = '100GB'",
    "CREATE TABLE evil AS SELECT 1",
    "DELETE FROM slices",
    "DROP TABLE slices",
])
def test_sandbox_refuses_writes_files_extensions_and_settings(q, sql):
    r = q(sql)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["code"] in ("query_refused", "query_failed") and err["message"]
    _still_answering(q)


def test_runaway_recursive_query_is_stopped_and_the_server_keeps_answering(q):
    r = q("WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) SELECT count(*) FROM r")
    assert r.status_code == 400, r.text
    assert r.json()["error"]["code"] in ("query_timeout", "query_failed")
    _still_answering(q)


def test_empty_and_missing_sql_are_refused(q, api, trace_store):
    assert q("   ").status_code == 400
    r = api.post(f"/api/traces/{trace_store.ids['chain']}/query", json={})
    assert r.status_code == 422 and r.json()["error"]["code"] == "validation_error"
