"""The Nsight SQLite reader's compiled path (ingest/nsys/_sqlread.c) against its Python sqlite3 path.

Both must give the same trace (the canonical summary of every sample), the compiled path must hand
tables it would read differently back to the Python path (same message for a wrong value), and no
file, however damaged, may crash the process: a damaged one is refused with an error naming it.
"""

from __future__ import annotations

import random
import shutil
import sqlite3
import threading
from pathlib import Path

import pytest

from _helpers import ingest_ok, ingest_one, ingest_only
from acceltrace.ingest.nsys import read as nsys_read
from canonical import canonical_summary
import nsys_synth

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = sorted((ROOT / "sample_traces" / "nsys").glob("nsys-*/*.sqlite"))
INVALID = sorted((ROOT / "sample_traces" / "nsys" / "invalid").glob("*.sqlite"))

pytestmark = pytest.mark.skipif(nsys_read._sqlread is None, reason="ingest/nsys/_sqlread.c is not built")


@pytest.fixture(scope="module", autouse=True)
def _ingest_only():
    with ingest_only():
        yield


@pytest.fixture
def count_compiled(monkeypatch):
    """How many tables the compiled reader copied (it returns None for a table it hands back); every
    table, however small, goes to it here."""
    monkeypatch.setattr(nsys_read, "COMPILED_MIN_ROWS", 0)
    calls = {"read": 0, "handed_back": 0}
    real = nsys_read._copy_compiled

    def counting(*args, **kw):
        n = real(*args, **kw)
        calls["read" if n is not None else "handed_back"] += 1
        return n

    monkeypatch.setattr(nsys_read, "_copy_compiled", counting)
    return calls


def _both(tmp_path: Path, path: Path, monkeypatch) -> tuple[object, object]:
    """The result of ingesting `path` on the compiled path, then on the Python path."""
    monkeypatch.delenv(nsys_read.READER_ENV, raising=False)
    fast = ingest_one(tmp_path / "compiled", path)
    monkeypatch.setenv(nsys_read.READER_ENV, "python")
    slow = ingest_one(tmp_path / "python", path)
    monkeypatch.delenv(nsys_read.READER_ENV)
    return fast, slow


@pytest.mark.parametrize("path", SAMPLES, ids=[p.name for p in SAMPLES])
def test_compiled_and_python_readers_give_the_same_trace_on_real_exports(tmp_path, monkeypatch, count_compiled,
                                                                        path):
    (s1, r1), (s2, r2) = _both(tmp_path, path, monkeypatch)
    assert r1.error is None and r2.error is None, (r1.error, r2.error)
    assert count_compiled["read"] >= 5  # the event and name tables went through the compiled reader
    assert canonical_summary(s1.connect(r1.id)) == canonical_summary(s2.connect(r2.id))
    assert r1.counts == r2.counts and r1.warnings == r2.warnings


def test_compiled_and_python_readers_give_the_same_trace_on_a_3x_export(tmp_path, monkeypatch, count_compiled):
    path = tmp_path / "synth.sqlite"
    nsys_synth.write(path, iterations=300, metric_samples=40)
    nsys_synth.add_nested_driver_launch(path)
    con = sqlite3.connect(path)  # NULLs, INT64_MIN and a time past 2^62 read as missing on both paths
    con.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET correlationId = NULL WHERE rowid % 7 = 0")
    con.execute("UPDATE CUPTI_ACTIVITY_KIND_MEMCPY SET srcKind = -9223372036854775808 WHERE rowid % 5 = 0")
    con.execute("UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET \"end\" = 4611686018427387905 WHERE rowid = 3")
    con.execute("UPDATE StringIds SET value = value || ' µs ✓' WHERE id % 3 = 0")  # text past ASCII
    con.commit()
    con.close()
    (s1, r1), (s2, r2) = _both(tmp_path, path, monkeypatch)
    assert r1.error is None and r2.error is None, (r1.error, r2.error)
    assert count_compiled["handed_back"] == 0
    assert canonical_summary(s1.connect(r1.id)) == canonical_summary(s2.connect(r2.id))
    def names(store, res) -> list[str]:
        return sorted(x for (x,) in store.connect(res.id).execute("SELECT DISTINCT name FROM slices").fetchall())

    assert names(s1, r1) == names(s2, r2) and any("✓" in n for n in names(s1, r1))
    assert r1.warnings == r2.warnings and any("without a start" in w or "end before" in w for w in r1.warnings)


@pytest.mark.parametrize("path", INVALID, ids=[p.name for p in INVALID])
def test_invalid_exports_give_the_python_paths_message_on_the_compiled_path(tmp_path, monkeypatch, path):
    monkeypatch.setattr(nsys_read, "COMPILED_MIN_ROWS", 0)
    (_, r1), (_, r2) = _both(tmp_path, path, monkeypatch)
    assert r1.error is not None and r1.error == r2.error
    assert path.name in r1.error


def test_a_value_the_compiled_reader_reads_otherwise_goes_to_the_python_path(tmp_path, monkeypatch, count_compiled):
    path = tmp_path / "mixed.sqlite"
    nsys_synth.write(path, iterations=5, metric_samples=4)
    con = sqlite3.connect(path)
    con.execute("UPDATE GPU_METRICS SET value = 3 WHERE rowid = 2")  # an integer in a float column: fine
    con.execute("UPDATE CUPTI_ACTIVITY_KIND_MEMSET SET bytes = 4096.5 WHERE rowid = 1")  # a float in an integer one
    con.commit()
    con.close()
    (s1, r1), (s2, r2) = _both(tmp_path, path, monkeypatch)
    assert count_compiled["handed_back"] == 1  # the memset table, read again from its first row by Python
    assert r1.error == r2.error
    if r1.error is None:
        assert canonical_summary(s1.connect(r1.id)) == canonical_summary(s2.connect(r2.id))


def test_a_file_cut_short_while_read_is_an_error_naming_it(tmp_path, monkeypatch):
    monkeypatch.setattr(nsys_read, "COMPILED_MIN_ROWS", 0)
    path = tmp_path / "cut.sqlite"
    nsys_synth.write(path, iterations=3000, metric_samples=10)
    ex = nsys_read.open_export(path, path.name)  # opened whole ...
    try:
        size = path.stat().st_size
        with open(path, "r+b") as f:  # ... then cut to a third: the compiled reader opens the short file
            f.truncate(size // 3)
        import duckdb

        stage = duckdb.connect()
        with pytest.raises(nsys_read.IngestError) as e:
            for t, spec in nsys_read.EVENT_TABLES.items():
                nsys_read.copy_table(ex, stage, t, spec)
        assert "cut.sqlite" in str(e.value) and "SQLite" in str(e.value)
    finally:
        ex.close()


def test_randomly_damaged_exports_never_crash_the_compiled_path(tmp_path, monkeypatch):
    """Bytes overwritten across the file: each ingest succeeds or is refused with a message naming the
    file; a crash in the C reader would end this test's process."""
    monkeypatch.setattr(nsys_read, "COMPILED_MIN_ROWS", 0)
    src = tmp_path / "fuzz-src.sqlite"
    nsys_synth.write(src, iterations=400, metric_samples=20)
    data = src.read_bytes()
    rng = random.Random(14)
    refused = 0
    for i in range(24):
        buf = bytearray(data)
        for _ in range(rng.choice([1, 8, 64])):
            pos, k = rng.randrange(100, len(buf)), rng.choice([1, 4, 512])  # past the 100-byte header
            buf[pos:pos + k] = bytes(rng.randrange(256) for _ in range(len(buf[pos:pos + k])))
        path = tmp_path / f"fuzz-{i}.sqlite"
        path.write_bytes(bytes(buf))
        _, res = ingest_one(tmp_path / f"s{i}", path)
        if res.error is not None:
            refused += 1
            assert path.name in res.error and "Traceback" not in res.error, res.error
    assert refused > 0  # the damage was real for some of them


def test_query_objects_check_their_arguments_and_bad_files():
    q = nsys_read._sqlread
    with pytest.raises(q.Error):
        q.Query("file:/nonexistent/x.sqlite?mode=ro", "SELECT 1", "i")
    with pytest.raises(ValueError):
        q.Query(":memory:", "SELECT 1, 2", "i")  # one kind per result column
    with pytest.raises(ValueError):
        q.Query(":memory:", "SELECT 1", "x")
    r = q.Query(":memory:", "SELECT 1, 'a', NULL, 2.5", "isif")
    with pytest.raises(ValueError):
        r.fetch(0)
    rows, cols = r.fetch(10)
    assert rows == 1 and len(cols) == 4
    assert r.fetch(10) is None
    r.close()
    with pytest.raises(ValueError):
        r.fetch(10)  # closed


def test_garbage_with_an_sqlite_header_is_refused_on_the_compiled_path(tmp_path, monkeypatch):
    monkeypatch.setattr(nsys_read, "COMPILED_MIN_ROWS", 0)
    path = tmp_path / "garbage.sqlite"
    rng = random.Random(3)
    path.write_bytes(nsys_read.SQLITE_MAGIC + bytes(rng.randrange(256) for _ in range(64 * 1024)))
    _, res = ingest_one(tmp_path / "g", path)
    assert res.error is not None and "garbage.sqlite" in res.error


def test_fresh_copy_of_the_real_export_reads_the_same_on_both_paths_in_small_batches(tmp_path, monkeypatch):
    # batches of 7 rows: the prefetching loop's batch boundaries land everywhere
    path = tmp_path / "a100.sqlite"
    shutil.copy(SAMPLES[0], path)
    monkeypatch.setattr(nsys_read, "COMPILED_BATCH_ROWS", 7)
    monkeypatch.setattr(nsys_read, "COMPILED_MIN_ROWS", 0)
    (s1, r1), (s2, r2) = _both(tmp_path, path, monkeypatch)
    assert canonical_summary(s1.connect(r1.id)) == canonical_summary(s2.connect(r2.id))


def test_a_table_name_that_is_not_utf8_is_a_damaged_file_not_a_crash(tmp_path, monkeypatch):
    monkeypatch.setattr(nsys_read, "COMPILED_MIN_ROWS", 0)
    # found by fuzzing: a wrecked sqlite_master holds a name Python's sqlite3 cannot decode
    path = tmp_path / "badname.sqlite"
    nsys_synth.write(path, iterations=2, metric_samples=0)
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE Tzzzzzzz (x INTEGER)")
    con.commit()
    con.close()
    data = path.read_bytes()
    assert data.count(b"Tzzzzzzz") >= 1
    path.write_bytes(data.replace(b"Tzzzzzzz", b"T\xf6zzzzzz"))
    _, res = ingest_one(tmp_path / "s", path)
    assert res.error is not None and "badname.sqlite" in res.error and "damaged" in res.error, res.error
    assert "Traceback" not in res.error and "internal error" not in res.error


def test_small_tables_take_the_python_path_and_large_ones_the_compiled_reader(tmp_path, monkeypatch):
    path = tmp_path / "mid.sqlite"
    nsys_synth.write(path, iterations=900, metric_samples=5)  # 900-row event tables, a 5-row metrics one
    monkeypatch.setattr(nsys_read, "COMPILED_MIN_ROWS", 500)
    used = []
    real = nsys_read._copy_compiled
    monkeypatch.setattr(nsys_read, "_copy_compiled",
                        lambda ex, st, table, *a: used.append(table) or real(ex, st, table, *a))
    store, res = ingest_ok(tmp_path / "s", path)
    assert "CUPTI_ACTIVITY_KIND_KERNEL" in used and "GPU_METRICS" not in used
    monkeypatch.setenv(nsys_read.READER_ENV, "python")
    store2, res2 = ingest_ok(tmp_path / "p", path)
    assert canonical_summary(store.connect(res.id)) == canonical_summary(store2.connect(res2.id))


def test_two_tables_are_copied_at_once_with_the_rows_of_one_at_a_time(tmp_path, monkeypatch):
    import duckdb

    monkeypatch.setattr(nsys_read, "COMPILED_MIN_ROWS", 0)
    path = tmp_path / "two.sqlite"
    nsys_synth.write(path, iterations=2000, metric_samples=50)
    jobs = [(t, spec, None) for t, spec in {**nsys_read.EVENT_TABLES, **nsys_read.NAME_TABLES}.items()]
    meet = threading.Barrier(2, timeout=10)  # the first two tables must be in the reader together
    real = nsys_read._copy_compiled
    calls = []

    def together(ex, stage, table, *a):
        calls.append(table)
        if len(calls) <= 2:
            meet.wait()
        return real(ex, stage, table, *a)

    got = {}
    for workers in (2, 1):
        if workers == 2:
            monkeypatch.setattr(nsys_read, "_copy_compiled", together)
        else:
            monkeypatch.setattr(nsys_read, "_copy_compiled", real)
        ex = nsys_read.open_export(path, path.name)
        stage = duckdb.connect()
        try:
            n = nsys_read.copy_tables(ex, stage, jobs, workers=workers)
            got[workers] = (n, {t: stage.execute(f'SELECT * FROM "{t}"').fetchall() for t, _, _ in jobs})
        finally:
            ex.close()
            stage.close()
    assert len(calls) >= 5 and got[2] == got[1] and got[1][0] > 10_000
