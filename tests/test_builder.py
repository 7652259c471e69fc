"""The builder and store invariants, independent of any input format."""

import os
import subprocess
import sys

import duckdb
import numpy as np
import pytest
from _helpers import numbered_slices

from acceltrace.ingest.builder import TraceBuilder
from acceltrace.store.errors import IngestError
from acceltrace.store.catalog import Store


def build(tmp_path, slices, flows=None, counters=None):
    store = Store(tmp_path / "store")
    tid, tmp = store.begin("t", 0, None)
    b = TraceBuilder(tmp)
    cpu = b.track("cpu", "thread 1", group_name="proc")
    eu = b.track("eu", "stream 7", group_name="gpu0", device="0")
    rows = {k: [s[i] for s in slices] for i, k in enumerate(("track", "ts", "dur", "name"))}
    rows["track_id"] = [cpu if t == "cpu" else eu for t in rows.pop("track")]
    first = b.add_slices(rows)
    if flows:
        b.add_flows([first + a for a, _ in flows], [first + d for _, d in flows], ["launch"] * len(flows))
    if counters:
        c = b.track("counter", "util", unit="%")
        b.add_counters([c] * len(counters), [t for t, _ in counters], [v for _, v in counters])
    counts = b.finish("test", "t")
    store.publish(tid, tmp, "test", counts)
    return store, tid


def depths(store, tid):
    con = store.connect(tid)
    return dict(con.execute("SELECT name, depth FROM slices").fetchall())


def test_nested_slices_get_nesting_depths(tmp_path):
    store, tid = build(tmp_path, [
        ("cpu", 0, 100, "a"), ("cpu", 10, 50, "b"), ("cpu", 20, 10, "c"),
        ("cpu", 60, 40, "d"), ("cpu", 100, 10, "e"), ("cpu", 10, 0, "i"),
    ])
    assert depths(store, tid) == {"a": 0, "b": 1, "c": 2, "d": 1, "e": 0, "i": 2}


def test_partial_overlaps_never_share_a_depth(tmp_path):
    store, tid = build(tmp_path, [
        ("cpu", 0, 10, "A"), ("cpu", 5, 10, "B"), ("cpu", 12, 1, "C"), ("cpu", 14, 5, "D"),
    ])
    con = store.connect(tid)
    clashes = con.execute(
        "SELECT count(*) FROM slices a JOIN slices b ON a.track_id = b.track_id AND a.depth = b.depth"
        " AND a.slice_id < b.slice_id AND a.ts < b.ts + b.dur AND b.ts < a.ts + a.dur"
    ).fetchone()[0]
    assert clashes == 0
    d = depths(store, tid)
    assert d["C"] > d["B"]


def test_published_trace_is_read_only_and_sorted(tmp_path):
    store, tid = build(tmp_path, [("eu", 50, 5, "k2"), ("cpu", 0, 10, "launch"), ("eu", 20, 5, "k1")],
                       flows=[(1, 2)], counters=[(0, 1.0), (30, 2.0)])
    con = store.connect(tid)
    meta = dict(con.execute("SELECT key, value FROM trace_meta").fetchall())
    assert meta["start_ns"] == "0" and meta["end_ns"] == "55" and meta["lost_events"] == "0"
    assert [r[0] for r in con.execute("SELECT name FROM slices").fetchall()] == ["launch", "k1", "k2"]
    assert con.execute("SELECT count(*) FROM flows WHERE kind = 'launch'").fetchone()[0] == 1
    with pytest.raises(duckdb.Error):
        con.execute("INSERT INTO slices SELECT * FROM slices")


def test_empty_trace_is_refused(tmp_path):
    store = Store(tmp_path / "store")
    tid, tmp = store.begin("t", 0, None)
    b = TraceBuilder(tmp)
    with pytest.raises(IngestError, match="no events"):
        b.finish("test", "empty.json")


def test_dead_ingest_leaves_nothing_visible(tmp_path):
    root = tmp_path / "store"
    code = (
        "import os, sys; sys.path.insert(0, %r);"
        "from acceltrace.store.catalog import Store; s = Store(%r); tid, tmp = s.begin('x', 1, None);"
        "open(tmp, 'wb').write(b'partial'); os._exit(0)"
    ) % (os.getcwd(), str(root))
    subprocess.run([sys.executable, "-c", code], check=True)
    store = Store(root)
    assert store.list() == []
    assert list((root / "tmp").iterdir()) == []


def test_a_trace_whose_every_event_was_dropped_is_refused_with_the_reasons(tmp_path):
    store = Store(tmp_path / "store")
    tid, tmp = store.begin("t", 0, None)
    b = TraceBuilder(tmp)
    b.warn("bad.json", "1 events without a valid ts (expected microseconds as a number); e.g. '\"abc\"'",
           "event 0", dropped=1)
    with pytest.raises(IngestError) as e:
        b.finish("test", "bad.json")
    msg = str(e.value)
    assert "1 dropped" in msg and "bad.json: event 0: 1 events without a valid ts" in msg


def test_args_are_stored_in_zstd_and_read_back_as_given(tmp_path):
    """The args JSON column is written with zstd (at 830 MB: 1.5 CPU-s less than DuckDB's default for
    text, the file 43 % smaller); what is read back is what was given."""
    args = ['{"External id": %d, "stream": 7, "name": "k\\u00e9"}' % i for i in range(5000)] + [None]
    b = TraceBuilder(tmp_path / "t.duckdb")
    t = b.track("eu", "stream 7", group_name="GPU 0")
    b.add_slices({"track_id": np.full(len(args), t, np.int32), "ts": np.arange(len(args), dtype=np.int64) * 10,
                  "dur": np.full(len(args), 5, np.int64), "name": ["k"] * len(args), "args": args})
    b.finish("test", "t")
    con = duckdb.connect(str(tmp_path / "t.duckdb"), read_only=True)
    assert [a for (a,) in con.execute("SELECT args FROM slices ORDER BY slice_id").fetchall()] == args
    kinds = {c for (c,) in con.execute("SELECT DISTINCT compression FROM pragma_storage_info('slices')"
                                       " WHERE column_name = 'args' AND segment_type = 'VARCHAR'").fetchall()}
    assert "ZSTD" in kinds, kinds


def test_arrow_type_of_every_declared_column_is_what_duckdb_gives_for_it():
    """schema.arrow_type (the staging tables, the Nsight copy, live segments and findings use it):
    for every column the store declares, the Arrow type DuckDB itself exports for that column."""
    from acceltrace.ingest.chrome.state import STAGING
    from acceltrace.store import schema

    con = duckdb.connect()
    declared = [(f"t_{t}", cols) for t, cols in schema.TABLES.items()] + [("t_findings", schema.FINDINGS)]
    declared += [(f"s_{t}", cols) for t, cols in STAGING.items()]
    for name, cols in declared:
        con.execute(schema.create_sql(name, cols, name=name))
        got = con.execute(f"SELECT * FROM {name}").to_arrow_table().schema
        assert {c: schema.arrow_type(t) for c, t in cols} == {f.name: f.type for f in got}, name


class _Watched:
    """A connection that calls note(statement, the real connection) before each statement it runs."""

    def __init__(self, con, note):
        self._con, self.note = con, note

    def execute(self, sql, *args):
        self.note(sql.strip(), self._con)
        return self._con.execute(sql, *args)

    def __getattr__(self, name):
        return getattr(self._con, name)


def _fsync_mode_at(seen: list, *words: str):
    """A note: DuckDB's fsync mode each time a statement starting with one of `words` runs."""
    def note(sql, con):
        for word in words:
            if sql.startswith(word):
                seen.append((word, con.execute("SELECT current_setting('fsync_mode')").fetchall()[0][0]))
    return note


def test_the_build_syncs_the_file_once_after_its_last_checkpoint(tmp_path, synced):
    """A file being built is not synced commit by commit (the store throws it away if the build fails),
    nor by DuckDB's last checkpoint (two syncs): the whole file is synced once, after it, before publication."""
    store = Store(tmp_path / "store")
    tid, tmp = store.begin("t", 0, None)
    b = TraceBuilder(tmp)
    seen = []
    b.con = _Watched(b.con, _fsync_mode_at(seen, "INSERT INTO _slices_staging", "CHECKPOINT"))
    cpu = b.track("cpu", "thread 1", group_name="proc")
    b.add_slices({"track_id": [cpu, cpu], "ts": [0, 10], "dur": [5, 5], "name": ["a", "b"]})
    counts = b.finish("test", "t")
    assert seen == [("INSERT INTO _slices_staging", "NONE"), ("CHECKPOINT", "NONE")]
    assert synced == [str(tmp)]  # the finished file, once, before it is published
    store.publish(tid, tmp, "test", counts)
    assert store.connect(tid).execute("SELECT count(*) FROM slices").fetchall() == [(2,)]


@pytest.mark.parametrize("threads, expected", [(None, 1), (2, 2)])
def test_the_write_and_level_of_detail_get_one_duckdb_thread_unless_the_caller_chose(tmp_path, monkeypatch,
                                                                                     threads, expected):
    """From the finished rows to publication the builder's own two threads share the cores: DuckDB's worker
    would only compete with them, so the build drops to one DuckDB thread there (a caller's count stands)."""
    import acceltrace.ingest.stage as stage

    seen = []
    write = stage.write_slices_and_lod

    def recording(con, *a, **k):
        seen.append(con.execute("SELECT current_setting('threads')").fetchall()[0][0])
        return write(con, *a, **k)

    monkeypatch.setattr(stage, "write_slices_and_lod", recording)
    store = Store(tmp_path / "store")
    tid, tmp = store.begin("t", 0, None)
    b = TraceBuilder(tmp, threads=threads)
    track = b.track("cpu", "thread 1", group_name="proc")
    b.add_slices({"track_id": [track] * 3, "ts": [0, 10, 20], "dur": [30, 5, 5], "name": ["a", "b", "c"]})
    counts = b.finish("test", "t")
    store.publish(tid, tmp, "test", counts)
    assert seen == [expected]
    assert depths(store, tid) == {"a": 0, "b": 1, "c": 1}


def test_the_file_is_opened_on_a_thread_and_its_failure_is_raised_at_first_use(tmp_path, monkeypatch):
    """Opening a DuckDB file costs 11-15 ms: the builder starts it on a thread and returns at once
    (ingest/opening.py). A file that cannot be made fails the first use of the connection, and abort()
    still ends cleanly."""
    import threading

    from acceltrace.ingest import opening

    where = []
    real_open = opening.open_build_file

    def recording(*a):
        where.append(threading.current_thread().name)
        return real_open(*a)

    monkeypatch.setattr(opening, "open_build_file", recording)
    b = TraceBuilder(tmp_path / "t.duckdb")
    cpu = b.track("cpu", "thread 1", group_name="proc")
    b.add_slices({"track_id": [cpu], "ts": [0], "dur": [5], "name": ["a"]})
    assert where == ["duckdb-open"]
    b.finish("test", "t")

    bad = TraceBuilder(tmp_path / "no such folder" / "t.duckdb")  # returns before the open fails
    with pytest.raises(duckdb.IOException):
        bad.add_slices({"track_id": [bad.track("cpu", "thread 1")], "ts": [0], "dur": [5], "name": ["a"]})
    bad.abort()


def test_slices_under_a_row_group_reach_the_file_at_their_commit_not_through_the_wal(tmp_path, monkeypatch):
    """The write of `slices` lets its commit checkpoint (DuckDB skips the WAL for it) when nothing else
    writes then: a small trace's rows are written once, compressed, not to the WAL and again at the end."""
    import acceltrace.ingest.stage as stage

    b = TraceBuilder(tmp_path / "t.duckdb", threads=1)  # one thread: the LOD build after the write
    seen = {}
    real = stage.write_slices_and_lod

    def watched(con, final, build_lod, *a, **k):
        def after_write_lod(cur, **kw):  # runs after the write on a one-thread build
            wal = tmp_path / "t.duckdb.wal"
            seen["wal"] = wal.stat().st_size if wal.exists() else 0
            seen["persistent"] = cur.execute(
                "SELECT bool_and(persistent) FROM pragma_storage_info('slices')").fetchall()[0][0]
            return build_lod(cur, **kw)
        return real(con, final, after_write_lod, *a, **k)

    monkeypatch.setattr(stage, "write_slices_and_lod", watched)
    cpu = b.track("cpu", "thread 1", group_name="proc")
    n = 50_000
    b.add_slices({"track_id": [cpu] * n, "ts": list(range(0, 10 * n, 10)), "dur": [5] * n,
                  "name": ["a" * 40] * n, "args": ['{"k": "' + "v" * 200 + '"}'] * n})
    b.finish("test", "t")
    assert seen["persistent"] is True
    assert seen["wal"] < 1 << 20  # the rows' 12 MB are not in it


@pytest.mark.parametrize("small, sets", [(True, []), (False, ["SET threads = 1"])])
def test_a_small_build_runs_duckdb_at_one_thread_from_its_start_and_never_relaunches_it(tmp_path, small, sets):
    """Each change of DuckDB's thread count relaunches its pool and trims the heap: a small build is at one
    thread from the open, so the switch before the write is not made; any other starts at DuckDB's
    default and switches there (ingest/opening.py)."""
    default = duckdb.connect().execute("SELECT current_setting('threads')").fetchall()[0][0]
    b = TraceBuilder(tmp_path / "t.duckdb", small=small)
    assert b.con.execute("SELECT current_setting('threads')").fetchall()[0][0] == (1 if small else default)
    seen = []
    b.con = _Watched(b.con, lambda sql, _: seen.append(sql))
    track = b.track("cpu", "thread 1", group_name="proc")
    b.add_slices({"track_id": [track] * 3, "ts": [0, 10, 20], "dur": [30, 5, 5], "name": ["a", "b", "c"]})
    b.finish("test", "t")
    assert [q for q in seen if q.startswith("SET threads")] == sets


@pytest.mark.parametrize("small", [True, False])
def test_a_small_build_writes_its_tables_in_small_row_groups_that_a_plain_connect_reads(tmp_path, small):
    """A small build's file is attached with ROW_GROUP_SIZE (ingest/opening.py): its tables are stored in groups
    of SMALL_ROW_GROUP_ROWS rows, any other build's in DuckDB's own; the published file opens with a plain
    connect and holds the same rows either way, in the same order. (A quote in its path is not the end of
    the ATTACH's string.)"""
    from acceltrace.ingest.opening import SMALL_ROW_GROUP_ROWS

    folder = tmp_path / "it's here"
    folder.mkdir()
    b = TraceBuilder(folder / "t.duckdb", small=small)
    n = 50_000
    numbered_slices(b, n)
    counts = b.finish("test", "t")
    assert counts["slices"] == n and counts["flows"] == n // 2
    con = duckdb.connect(str(folder / "t.duckdb"), read_only=True)
    for table in ("slices", "flows", "lod_slices"):
        sizes = [r for (r,) in con.execute(  # the rows of each row group, as its first column's segments count them
            f"SELECT sum(count) FROM pragma_storage_info('{table}') WHERE column_id = 0"
            " AND segment_type <> 'VALIDITY' GROUP BY row_group_id").fetchall()]
        assert sum(sizes) == con.execute(f"SELECT count(*) FROM {table}").fetchall()[0][0]
        assert max(sizes) == (SMALL_ROW_GROUP_ROWS if small else sum(sizes)), table
    got = con.execute("SELECT slice_id, ts, name, args FROM slices").fetchall()
    assert got == [(i, 10 * i, f"s{i % 7}", f'{{"i": {i}}}') for i in range(n)]


def test_the_pipeline_calls_a_build_small_for_chrome_json_up_to_256_mb(tmp_path, monkeypatch):
    """Chrome JSON of at most 256 MB (a gzip file's trailer says how much once inflated) builds small;
    a bigger one, or another format, does not."""
    import gzip
    from types import SimpleNamespace

    from acceltrace.ingest import builder as builder_mod, pipeline

    made = []

    class Noting(TraceBuilder):
        def __init__(self, *a, small=False, **k):
            made.append(small)
            super().__init__(*a, small=small, **k)

    monkeypatch.setattr(pipeline, "TraceBuilder", Noting)
    events = b'{"traceEvents": [{"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": 1, "dur": 2}]}'
    plain, packed = tmp_path / "t.json", tmp_path / "t.json.gz"
    plain.write_bytes(events)
    packed.write_bytes(gzip.compress(events))
    store = Store(tmp_path / "store")
    for p in (plain, packed):
        assert pipeline.ingest_paths(store, [p], views=False)[0].error is None
    assert pipeline._json_bytes(packed) == len(events)
    big = bytearray(gzip.compress(events))
    big[-4:] = (300 << 20).to_bytes(4, "little")  # its trailer claims 300 MB once inflated
    (tmp_path / "big.json.gz").write_bytes(bytes(big))
    assert pipeline._json_bytes(tmp_path / "big.json.gz") == 300 << 20
    monkeypatch.setattr(pipeline, "SMALL_BUILD_BYTES", len(events) - 1)  # the same file, now over the line
    assert pipeline.ingest_paths(store, [plain], views=False)[0].error is None
    assert made == [True, True, False]
    assert builder_mod.TraceBuilder is TraceBuilder
    other = SimpleNamespace(name="nsys")  # another format, whatever its size
    assert pipeline._small_build([(None, other)], [plain], None) is False
