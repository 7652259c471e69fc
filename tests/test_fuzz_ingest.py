"""Every ingester under mutation (bench/fuzz_ingest.py), and one test for each class of bug it found.

The short run here uses a fixed seed so a failure reproduces; bench/fuzz_ingest.py without
--count runs the long one with a fresh seed. Both ingest through the compiled Chrome scanner
where it is built and through the pure-Python path, and run the passes and the server's routes
on every accepted trace.
"""

from __future__ import annotations

import io
import json
import sqlite3
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

from acceltrace.analysis.runner import run_passes
from acceltrace.formats.actr.writer import ActrWriter
from acceltrace.ingest import builder as builder_mod, pipeline
from acceltrace.store.catalog import Store

ROOT = Path(__file__).resolve().parent.parent
NSYS = ROOT / "sample_traces" / "nsys" / "nsys-2022.2" / "a100-saxpy-nsys2022.sqlite"


def test_short_fuzzing_run_of_every_ingester_finds_no_bug(tmp_path):
    r = subprocess.run([sys.executable, "bench/fuzz_ingest.py", "--count", "3", "--seed", "20261201",
                        "--keep", str(tmp_path / "bugs")],
                       cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "ok: 0 bug(s) in 18 rounds" in r.stdout
    for fmt in ("chrome ", "chrome-python", "archive", "nsys", "atrace", "actr"):
        assert f"\n{fmt}" in "\n" + r.stdout, fmt


@pytest.fixture
def store(tmp_path, monkeypatch):
    monkeypatch.setattr(builder_mod, "build_lod", lambda con, **kw: None)
    return Store(tmp_path / "store")


def _ingest(store: Store, path: Path):
    return pipeline.ingest_paths(store, [path])[0]


def test_device_properties_that_is_not_a_list_is_a_warning(store, tmp_path):
    p = tmp_path / "props.json"
    p.write_text(json.dumps({"deviceProperties": 7, "traceEvents": [
        {"ph": "X", "name": "k", "ts": 1, "dur": 2, "pid": 1, "tid": 1}]}))
    res = _ingest(store, p)
    assert res.error is None, res.error
    assert any("deviceProperties is int, expected a list of objects" in w for w in res.warnings), res.warnings


def test_a_zip_member_whose_local_header_is_damaged_is_refused_by_name(store, tmp_path):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for rank in (0, 1):
            z.writestr(f"rank{rank}.json", json.dumps([{"ph": "X", "name": "k", "ts": 1, "dur": 2, "pid": 1, "tid": 1}]))
        at = z.infolist()[1].header_offset
    data = bytearray(buf.getvalue())
    data[at:at + 4] = b"XXXX"  # rank1's local header signature; the central directory still points at it
    p = tmp_path / "run.zip"
    p.write_bytes(bytes(data))
    res = _ingest(store, p)
    assert res.error is not None and "internal error" not in res.error
    assert "run.zip" in res.error and "rank1.json" in res.error and "local header" in res.error, res.error
    assert store.list() == []


def _actr(path: Path, host_ns: np.ndarray) -> Path:
    header = {"devices": [{"name": "host", "kind": "cpu"}],
              "counters": [{"name": "cycles", "unit": "count", "bits": 64, "kind": "cumulative", "group": 0}],
              "groups": [{"id": 0, "counters": ["cycles"], "device": "host"}]}
    n = len(host_ns)
    w = ActrWriter(path, header)
    w.append_many(0, host_ns, np.full(n, -1, dtype=np.int64), np.arange(n, dtype=np.int64) * 1000 + 1000,
                  np.arange(n, dtype=np.int64) * 1000 + 1000, np.arange(n, dtype=np.uint64)[:, None] * 100)
    w.close()
    return path


def test_actr_host_times_that_wrap_are_dropped_and_counted(store, tmp_path):
    host = np.arange(200, dtype=np.int64) * 1_000_000 + 5_000_000_000
    host[120:] -= 4_000_000_000  # the host clock wrapped at sample 120
    res = _ingest(store, _actr(tmp_path / "wrap.actr", host))
    assert res.error is None, res.error
    assert any("going backwards" in w and "dropped" in w for w in res.warnings), res.warnings
    assert res.counts["dropped_events"] >= 1
    con = store.connect(res.id, sides=())
    try:
        (bad,) = con.execute("SELECT count(*) FROM counters WHERE ts < 0 OR ts > 1e16").fetchone()
    finally:
        con.close()
    assert bad == 0


def test_actr_whose_every_sample_has_a_corrupt_time_is_refused_clearly(store, tmp_path):
    host = np.full(50, -(1 << 63), dtype=np.int64)
    res = _ingest(store, _actr(tmp_path / "allbad.actr", host))
    assert res.error is not None and "internal error" not in res.error, res.error
    assert "allbad.actr" in res.error and "no event could be kept" in res.error
    assert store.list() == []


@pytest.mark.parametrize("table, column", [("TARGET_INFO_SESSION_START_TIME", "utcEpochNs"),
                                           ("CUPTI_ACTIVITY_KIND_RUNTIME", "start")])
def test_nsys_int64_min_times_never_reach_an_internal_error(tmp_path, table, column):
    store = Store(tmp_path / "store")
    p = tmp_path / "report.sqlite"
    p.write_bytes(NSYS.read_bytes())
    db = sqlite3.connect(p)
    where = "" if table.startswith("TARGET") else " WHERE rowid IN (SELECT rowid FROM CUPTI_ACTIVITY_KIND_RUNTIME LIMIT 3)"
    db.execute(f'UPDATE "{table}" SET "{column}" = ?{where}', (-(1 << 63),))
    db.commit()
    db.close()
    res = _ingest(store, p)
    if res.error is not None:  # refused: by name, never as a crash
        assert "internal error" not in res.error and "report.sqlite" in res.error, res.error
        return
    report = run_passes(store, res.id)
    assert [s.pass_id for s in report.statuses if s.status == "failed"] == []
    con = store.connect(res.id, sides=())
    try:
        start, end = (int(v) for v in con.execute(
            "SELECT max(value) FILTER (key = 'start_ns'), max(value) FILTER (key = 'end_ns') FROM trace_meta").fetchone())
    finally:
        con.close()
    assert 0 <= end - start < 86400 * 10**9, (start, end)  # the run is seconds, not a span from INT64_MIN
