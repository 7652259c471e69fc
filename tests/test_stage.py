"""The builder's stage (ingest/stage.py): staged key columns in DuckDB, the other columns held as the
Arrow batches they came in, joined again by slice_id and written in stored order, whole or streamed."""

import threading

import duckdb
import numpy as np
import pyarrow as pa
import pytest

from acceltrace.ingest import gather, ordered, spill, stage
from acceltrace.ingest.builder import TIME_LIMIT_NS, TraceBuilder
from acceltrace.ingest.depths import order_by
from acceltrace.ingest.made_ahead import MadeAhead
from acceltrace.store.catalog import Store


def _batches(rng, n_batches=4, per=700, tracks=(0, 1, 2)):
    """Slices in batches the way an importer adds them: out of order, nested, names and args that say
    which slice they belong to, a dictionary column in some batches and a plain one (or none) in others."""
    out, sid = [], 0
    for b in range(n_batches):
        track = rng.choice(tracks, per).astype(np.int32)
        ts = rng.integers(0, 5_000, per) * 1_000
        dur = rng.integers(0, 3_000, per) * 10
        ids = np.arange(sid, sid + per)
        batch = {"track_id": track, "ts": ts, "dur": dur,
                 "name": pa.array([f"s{i}" for i in ids]),
                 "args": pa.array([f'{{"id": {i}, "pad": "{"x" * int(i % 40)}"}}' for i in ids])}
        if b % 2 == 0:  # the Chrome importer's dictionaries can hold a null, which Arrow cannot unify
            batch["direction"] = pa.array(["HtoD" if i % 3 else "DtoH" if i % 5 else None for i in ids]
                                          ).dictionary_encode(null_encoding="encode")
        elif b == 1:
            batch["direction"] = pa.array(["DtoD"] * per)
        if b == 3:
            batch["bytes"] = pa.array(ids * 8)
        # in every batch, each with a dictionary of its own that holds a null
        batch["host_mem"] = pa.array([None if i % 4 else f"pinned{b}" for i in ids]).dictionary_encode(
            null_encoding="encode")
        out.append(batch)
        sid += per
    return out


def _ingest(tmp_path, batches, bad=()):
    """Build a trace from the batches; `bad`: slice ids given a time past the store's bound (dropped)."""
    store = Store(tmp_path / "store")
    tid, tmp = store.begin("t", 0, None)
    b = TraceBuilder(tmp)
    tracks = {t: b.track("cpu", f"thread {t}", group_name="proc") for t in range(3)}
    first = 0
    for batch in batches:
        batch = dict(batch)
        batch["track_id"] = np.array([tracks[int(t)] for t in batch["track_id"]], dtype=np.int32)
        ts = np.array(batch["ts"], dtype=np.int64)
        for i in bad:
            if first <= i < first + len(ts):
                ts[i - first] = TIME_LIMIT_NS + 1
        batch["ts"] = ts
        first += len(ts)
        b.add_slices(batch)
    counts = b.finish("test", "t")
    store.publish(tid, tmp, "test", counts)
    return store.connect(tid)


def _check(con, n, dropped=()):
    rows = con.execute("SELECT slice_id, track_id, ts, depth, name, args, direction, bytes, host_mem FROM slices"
                       ).fetchall()
    assert len(rows) == n - len(dropped)
    assert not set(dropped) & {r[0] for r in rows}
    keys = [(r[1], r[2], r[3]) for r in rows]
    assert keys == sorted(keys), "slices are not stored in (track_id, ts, depth) order"
    for sid, _, _, _, name, args, direction, nbytes, host_mem in rows:  # every held column is its own slice's
        assert name == f"s{sid}"
        assert args.startswith(f'{{"id": {sid},')
        b = sid // 700
        assert direction == (("HtoD" if sid % 3 else "DtoH" if sid % 5 else None) if b % 2 == 0
                             else "DtoD" if b == 1 else None)
        assert nbytes == (sid * 8 if b == 3 else None)
        assert host_mem == (None if sid % 4 else f"pinned{b}")
    clashes = con.execute(
        "SELECT count(*) FROM slices a JOIN slices b ON a.track_id = b.track_id AND a.depth = b.depth"
        " AND a.slice_id < b.slice_id AND a.ts < b.ts + b.dur AND b.ts < a.ts + a.dur").fetchone()[0]
    assert clashes == 0


def _mode(monkeypatch, mode, batch_rows):
    if mode == "bounded":  # ingest/spill.py from the second batch on: the first two moved into DuckDB, one's args
        monkeypatch.setattr(spill, "SPILL_FROM_SLICES", 1000)  # from the held-args file; depths track by track
        monkeypatch.setattr(spill, "DEPTH_PART_SLICES", 500)
        monkeypatch.setattr(stage, "ARGS_MEMORY_BYTES", 40_000)
        switched = []
        real = TraceBuilder._spill
        monkeypatch.setattr(TraceBuilder, "_spill", lambda self: (switched.append(self.n_slices), real(self)))
        return switched
    if mode in ("streamed", "spilled"):  # every trace streamed, in batches that split chunks and cross their bounds
        monkeypatch.setattr(stage, "STREAM_BYTES", 0)
        monkeypatch.setattr(stage, "BATCH_ROWS", batch_rows)
    if mode == "spilled":  # the first batch's args held in memory, the others' in the work folder's file
        monkeypatch.setattr(stage, "ARGS_MEMORY_BYTES", 40_000)
        spilled = []
        real = stage.Held._spill
        monkeypatch.setattr(stage.Held, "_spill", lambda self, args: (spilled.append(len(args)), real(self, args)))
        return spilled
    return None


@pytest.mark.parametrize("mode", ["whole", "streamed", "spilled", "bounded"])
def test_held_columns_follow_their_slices_into_stored_order(tmp_path, monkeypatch, mode):
    spilled = _mode(monkeypatch, mode, 333)
    released = []
    real = stage.Held.release
    monkeypatch.setattr(stage.Held, "release", lambda self: (released.append(1), real(self)))
    batches = _batches(np.random.default_rng(7))
    _check(_ingest(tmp_path, batches), 2800)
    assert spilled is None or spilled == ([1400] if mode == "bounded" else [700, 700, 700])
    # the write gives back the mapped pages it read as it goes: after each of its 9 batches
    assert len(released) == (9 if mode == "spilled" else 0)


@pytest.mark.parametrize("mode", ["whole", "streamed", "spilled", "bounded"])
def test_slices_dropped_by_the_time_check_take_their_held_columns_with_them(tmp_path, monkeypatch, mode):
    """Dropped slices' held rows are skipped by the write's take (the held columns keep every row: no
    copy of the args without them), while the LOD build's name and bytes are taken to match its rows."""
    spilled = _mode(monkeypatch, mode, 500)
    assert spilled is None or not spilled
    bad = (0, 5, 699, 700, 1500, 2799)
    con = _ingest(tmp_path, _batches(np.random.default_rng(3)), bad=bad)
    _check(con, 2800, dropped=bad)
    assert mode != "bounded" or spilled == [1400]


def test_args_past_the_memory_budget_wait_in_a_file_and_come_back_mapped(tmp_path, monkeypatch):
    monkeypatch.setattr(stage, "ARGS_MEMORY_BYTES", 20)
    held = stage.Held(tmp_path / "work")
    small = pa.table({"name": ["a"], "args": ['{"k": 1}']})
    long = '{"k": 3, "pad": "%s"}' % ("x" * 200)
    big = [pa.table({"name": ["b", "c"], "args": pa.chunked_array([['{"k": 2}'], [long]])}),
           pa.table({"name": ["d"], "args": pa.array(['{"k": 4}', '{"k": 4}']).dictionary_encode()[:1]}),
           pa.table({"name": ["e"]})]
    for t in [small] + big:
        held.add(t)
    assert held.args_bytes == small["args"].nbytes  # the rest went to the file, not into memory
    assert [t.column_names for t in held] == [["name", "args"], ["name"], ["name"], ["name"]]
    assert (tmp_path / "work" / "held-args.arrows").stat().st_size > 200
    held.mapped()
    got = [t["args"].to_pylist() if "args" in t.column_names else None for t in held]
    assert got == [['{"k": 1}'], ['{"k": 2}', long], ['{"k": 4}'], None]
    assert held[1]["args"].num_chunks == 2 and held[2]["args"].type == pa.string()


def test_an_aborted_build_leaves_no_spill_file(tmp_path, monkeypatch):
    monkeypatch.setattr(stage, "ARGS_MEMORY_BYTES", 0)
    b = TraceBuilder(tmp_path / "t.duckdb")
    t = b.track("cpu", "thread 1", group_name="proc")
    b.add_slices({"track_id": np.full(3, t, np.int32), "ts": np.arange(3), "dur": np.ones(3, np.int64),
                  "name": ["a", "b", "c"], "args": ['{"i": 0}', '{"i": 1}', '{"i": 2}']})
    assert (b.work_dir / "held-args.arrows").exists()
    b.abort()
    assert not b.work_dir.exists()


def test_the_same_file_streamed_or_whole(tmp_path, monkeypatch):
    batches = _batches(np.random.default_rng(11), n_batches=4, per=400)
    whole = _ingest(tmp_path / "a", batches).execute("SELECT * FROM slices").fetchall()
    monkeypatch.setattr(stage, "STREAM_BYTES", 0)
    monkeypatch.setattr(stage, "BATCH_ROWS", 128)
    streamed = _ingest(tmp_path / "b", batches).execute("SELECT * FROM slices").fetchall()
    assert whole == streamed


def test_gather_takes_rows_across_chunks_in_any_order():
    rng = np.random.default_rng(5)
    parts = [pa.array([f"v{i}" for i in range(lo, lo + n)], pa.string())
             for lo, n in ((0, 5), (5, 0), (5, 17), (22, 1), (23, 40))]
    col = pa.chunked_array(parts)
    rows = rng.permutation(63)[:50]
    assert gather.Gather(col).take(rows).to_pylist() == [f"v{i}" for i in rows]
    enc = pa.chunked_array([pa.array(["a", "b", "a"]).dictionary_encode(), pa.array(["c", "a"]).dictionary_encode()])
    got = gather.Gather(enc).take(np.array([3, 0, 4, 1]))
    assert got.type == pa.string() and got.to_pylist() == ["c", "a", "a", "b"]


def test_stored_order_packs_or_falls_back_to_lexsort():
    rng = np.random.default_rng(1)
    track = rng.integers(0, 5, 1000)
    ts = rng.integers(-10**6, 10**6, 1000)
    depth = rng.integers(0, 4, 1000)
    for t, d in ((ts, depth), (ts.astype(np.int64) * (1 << 40), depth), (ts, depth - 2)):  # packed; too wide; negative
        got = order_by(track, t, d)
        assert [(track[i], t[i], d[i]) for i in got] == sorted(zip(track, t, d))


@pytest.mark.parametrize("attached", [False, True])
def test_detach_names_the_database_attach_found(tmp_path, attached):
    """detach undoes attach on any connection: a plain file connection, or the builder's, whose file is attached
    beside the in-memory catalog (ingest/opening.py); afterwards bare table names are the file's again."""
    from acceltrace.ingest.opening import open_build_file

    path = tmp_path / "t.duckdb"
    con = open_build_file(path, "100MB", 1) if attached else duckdb.connect(str(path))
    if not attached:
        stage.attach(con)
    (db,) = con.execute("SELECT current_database()").fetchone()
    con.execute("CREATE TABLE mine AS SELECT 7 AS x")  # in the file: the search path's first database
    stage.detach(con)
    assert con.execute("SELECT current_database()").fetchone()[0] == db
    assert stage.NAME not in [r[0] for r in con.execute("SELECT database_name FROM duckdb_databases()").fetchall()]
    assert con.execute("SELECT x FROM mine").fetchall() == [(7,)]
    con.close()
    assert duckdb.connect(str(path), read_only=True).execute("SELECT x FROM mine").fetchall() == [(7,)]


def test_a_failed_write_still_lets_the_lod_build_finish(tmp_path, monkeypatch):
    """The write and the LOD build run at once; a write that fails neither stops the LOD build nor hides its
    error."""
    monkeypatch.setattr(stage, "STREAM_BYTES", 0)
    con = duckdb.connect(str(tmp_path / "t.duckdb"))
    stage.attach(con)  # no `slices` table in the file: the write fails
    con.execute(f"INSERT INTO {stage.NAME}._slices_staging VALUES (0, 1, 10, 5, NULL, NULL), (1, 1, 0, 5, NULL, NULL)")
    held = stage.Held()
    held.add(pa.table({"name": ["a", "b"]}))
    final = stage.finalize(con, _ordered(con), held)
    assert final.large and final.order.tolist() == [1, 0]
    seen = []

    def lod(cur, slices, keep_order_setting, rows, spare=None):
        seen.append(cur.execute(f"SELECT count(*) FROM {slices}").fetchone()[0])
        assert rows.num_rows == 2  # the same rows as Arrow, for lod_slices' numpy order

    errors = []
    t = threading.Thread(target=lambda: _run(errors, con, final, lod))
    t.start()
    t.join(60)
    assert not t.is_alive(), "the build never ended after its write had failed"
    assert seen == [2]
    assert errors and "slices" in str(errors[0])  # no `slices` table to write into


def _ordered(con) -> ordered.Ordered:
    """The two staged slices below at depth 0, the depth pass's result given."""
    return ordered.in_order(ordered.read_staged(con), pa.table({"slice_id": [0, 1], "depth": pa.array([0, 0], pa.int32())}))


def _final(tmp_path, name: str) -> "stage.Final":
    """Two staged slices out of stored order, their names held: a small Final (its rows taken whole)."""
    con = duckdb.connect(str(tmp_path / f"{name}.duckdb"))
    stage.attach(con)
    con.execute(f"INSERT INTO {stage.NAME}._slices_staging VALUES (0, 1, 10, 5, NULL, NULL), (1, 1, 0, 5, NULL, NULL)")
    held = stage.Held()
    held.add(pa.table({"name": ["a", "b"], "args": ['{"x": 1}', None]}))
    return stage.finalize(con, _ordered(con), held)


def test_rows_are_taken_into_stored_order_once_by_whichever_thread_comes_first(tmp_path):
    ahead = _final(tmp_path, "ahead")  # taken ahead: the write gets that very table, in stored order
    assert not ahead.large
    ahead.take_ahead()
    made = ahead._taken
    assert made is not None and not ahead.rest  # the columns only the write reads are in it now
    got = ahead.in_stored_order()
    assert got is made and got.column("name").to_pylist() == ["b", "a"] and got.column("ts").to_pylist() == [0, 10]
    late = _final(tmp_path, "late")  # the write first: a take_ahead after it does nothing
    got = late.in_stored_order()
    late.take_ahead()
    assert late._taken is None and got.column("args").to_pylist() == [None, '{"x": 1}']
    racing = _final(tmp_path, "racing")  # the write waits for a take under way on another thread
    with racing._lock:
        t = threading.Thread(target=lambda: out.append(racing.in_stored_order()))
        out: list = []
        t.start()
        racing._taken = made = racing._in_stored_order()  # (as take_ahead does, the lock held)
    t.join(10)
    assert out == [made]


def _run(errors, con, final, lod):
    try:
        stage.write_slices_and_lod(con, final, lod)
    except duckdb.Error as e:
        errors.append(e)


def test_held_rows_meet_their_staged_rows_whatever_order_duckdb_keeps_them_in(tmp_path):
    """Batches big enough that DuckDB appends them on both cores (its staging then holds the rows out of
    slice_id order, as at 830 MB): the held names must still meet their own slices."""
    store = Store(tmp_path / "store")
    tid, tmp = store.begin("t", 0, None)
    b = TraceBuilder(tmp)
    tracks = [b.track("cpu", f"thread {t}", group_name="proc") for t in range(2)]
    n = 300_000
    for k in range(2):
        ids = np.arange(k * n, (k + 1) * n)
        b.add_slices({"track_id": np.where(ids % 2 == 0, tracks[0], tracks[1]).astype(np.int32),
                      "ts": (n * 2 - ids) * 10, "dur": np.full(n, 5), "name": pa.array(ids.astype(str))})
    store.publish(tid, tmp, "test", b.finish("test", "t"))
    con = store.connect(tid)
    assert con.execute("SELECT count(*), count(*) FILTER (WHERE name <> CAST(slice_id AS VARCHAR)) FROM slices"
                       ).fetchone() == (2 * n, 0)


def test_batches_made_ahead_come_in_order_raise_what_the_making_raised_and_stop_with_their_reader():
    assert list(MadeAhead(iter(range(50)), depth=2)) == list(range(50))

    def failing():
        yield 1
        raise ValueError("bad batch")

    got = []
    with pytest.raises(ValueError, match="bad batch"):
        for x in MadeAhead(failing()):
            got.append(x)
    assert got == [1]
    made = []

    def endless():
        while True:
            made.append(1)
            yield len(made)

    reader = MadeAhead(endless(), depth=2, name="ahead-test")
    assert [next(reader) for _ in range(3)] == [1, 2, 3]
    reader.close()  # a reader that stops early (a failed insert): the making stops too
    assert not [t for t in threading.enumerate() if t.name == "ahead-test"]
    assert len(made) <= 3 + 2 + 1  # at most `depth` made ahead, and the one it was putting
    dropped = MadeAhead(endless(), depth=2, name="ahead-dropped")
    assert next(dropped) > 0
    del dropped  # a reader let go unclosed (DuckDB dropping the stream of a failed insert): the making stops too
    assert not [t for t in threading.enumerate() if t.name == "ahead-dropped"]
    done = MadeAhead(iter([b"a"]))
    assert list(done) == [b"a"] and next(done, b"") == b""  # past its end: done, not waiting (the reader's reads)
