"""lod_slices ordered in numpy from the builder's Arrow rows (tiles/build.py _ShortSlices) is the table
DuckDB's join and sort made: the same rows, columns, types and order, and the same lod_info."""

from __future__ import annotations

from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pytest

from acceltrace.ingest.pipeline import ingest_one
from acceltrace.store.catalog import Store
from acceltrace.tiles import build as lod
from acceltrace.tiles import lod_slices

SAMPLES = Path(__file__).resolve().parent.parent / "sample_traces"
CASES = ["chrome/kineto/mtia-rank0-dma.json.gz", "chrome/kineto/a100-rank0-memcpy.json.gz",
         "chrome/kineto/h100-qwen-chat-inference.json.gz", "nsys/nsys-2022.2/a100-saxpy-nsys2022.sqlite"]


def _ingest(tmp: Path, sample: str, in_numpy: bool, monkeypatch) -> Path:
    monkeypatch.setattr(lod, "SLICES_IN_NUMPY", in_numpy)
    store = Store(tmp / ("numpy" if in_numpy else "sql"))
    res = ingest_one(store, [SAMPLES / sample], Path(sample).name, views=False)
    assert res.error is None, res.error
    return store.trace_path(res.id)


@pytest.mark.parametrize("sample", CASES, ids=[Path(c).name.split(".")[0] for c in CASES])
def test_numpy_lod_slices_equal_the_sql_ones(tmp_path, monkeypatch, sample):
    sql_file = _ingest(tmp_path, sample, False, monkeypatch)
    np_file = _ingest(tmp_path, sample, True, monkeypatch)
    con = duckdb.connect(str(sql_file), read_only=True)
    con.execute(f"ATTACH '{np_file}' AS n (READ_ONLY)")
    try:
        info = "SELECT * FROM {}lod_info WHERE key <> 'build_ms' ORDER BY key"
        assert con.execute(info.format("")).fetchall() == con.execute(info.format("n.")).fetchall()
        # slice ids follow the ingest's order, which two runs of a parallel import need not share: by content
        rows = "SELECT * EXCLUDE (slice_id) FROM {}lod_slices ORDER BY ALL"
        assert con.execute(rows.format("")).fetchall() == con.execute(rows.format("n.")).fetchall()
        types = ("SELECT column_name, data_type FROM duckdb_columns() WHERE table_name = 'lod_slices'"
                 " AND database_name = '{}' ORDER BY column_index")
        assert con.execute(types.format(con.execute("SELECT current_database()").fetchone()[0])).fetchall() == \
            con.execute(types.format("n")).fetchall()
        key = con.execute("SELECT grp, chunk, cls, ts FROM n.lod_slices").fetchall()
        assert len(key) > 1000 and key == sorted(key)  # stored in the order tiles scan
        for t in ("lod_long", "lod_merged"):  # built from lod_slices: the same too
            q = f"SELECT * EXCLUDE ({'l_id' if t == 'lod_merged' else 'slice_id'}) FROM {{}}{t} ORDER BY ALL"
            assert con.execute(q.format("")).fetchall() == con.execute(q.format("n.")).fetchall()
    finally:
        con.close()


def test_duration_classes_equal_the_sql_ones_at_every_power_of_two():
    # every duration the store holds: ts + dur <= 2^62 (builder.TIME_LIMIT_NS)
    durs = sorted({max(1, v) for k in range(63) for v in ((1 << k) - 1, 1 << k, (1 << k) + 1) if v <= 1 << 62})
    durs = np.array(durs, dtype=np.int64)
    con = duckdb.connect()
    con.register("d", pa.table({"dur": durs}))
    want = [c for (c,) in con.execute(f"SELECT {lod.dur_class_sql('dur')} FROM d").fetchall()]
    assert lod_slices.dur_class(durs).tolist() == want
    assert want[:4] == [0, 1, 1, 2]  # 1, 2, 3, 4 ns


def _groups_and_names(con, tracks: int, names: list[str]) -> None:
    con.execute("CREATE TABLE lod_tracks AS SELECT range::INTEGER AS track_id, range::INTEGER AS grp"
                f" FROM range({tracks})")
    con.register("_n", pa.table({"name": sorted(names)}))
    con.execute("CREATE TABLE lod_names AS SELECT (row_number() OVER () - 1)::INTEGER AS name_id, name FROM _n")


def _rows(ts, dur, track, names) -> pa.Table:
    n = len(ts)
    return pa.table({"slice_id": pa.array(np.arange(n), pa.int64()), "track_id": pa.array(track, pa.int32()),
                     "ts": pa.array(ts, pa.int64()), "dur": pa.array(dur, pa.int64()),
                     "depth": pa.array(np.zeros(n), pa.int32()),
                     "name": pa.array(names).dictionary_encode(), "bytes": pa.array([None] * n, pa.int64())})


def test_keys_wider_than_63_bits_or_slices_before_the_start_are_left_to_sql():
    con = duckdb.connect()
    _groups_and_names(con, 4000, ["a", "b"])
    wide = _rows([0, 1 << 60], [5, 7], [0, 3999], ["a", "b"])  # 12 bits of group + 6 + 61 of time
    short = lod_slices.ShortSlices(con, wide, 0)
    assert not short.create(con, 20)
    early = lod_slices.ShortSlices(con, _rows([100, 200], [5, 7], [0, 1], ["a", "b"]), 150)  # a live segment's start
    assert not early.usable and not early.create(con, 10)
    assert not con.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name = 'lod_slices'").fetchone()[0]


def test_rows_of_a_chunk_are_ordered_by_class_then_time_and_names_by_their_ids():
    con = duckdb.connect()
    con.execute("SET preserve_insertion_order = true")
    _groups_and_names(con, 2, ["x", "y", "z"])
    #                 group 1 first in the input; chunk width 2^10: ts 5000 is chunk 4, ts 900 chunk 0
    rows = _rows([5000, 900, 950, 100, 100, 40], [3, 1000, 2, 8, 0, 2], [1, 0, 0, 0, 0, 1],
                 ["z", "y", "x", "x", "y", "z"])
    short = lod_slices.ShortSlices(con, rows, 0)
    assert short.peak_rate_per_ns(13) == 3 / float(1 << 13)  # group 0 holds 3 slices of dur > 0 in bucket 0
    assert short.create(con, 10)
    got = con.execute("SELECT grp, chunk, cls, ts, dur, slice_id, name_id FROM lod_slices").fetchall()
    assert got == [(0, 0, 1, 950, 2, 2, 0), (0, 0, 3, 100, 8, 3, 0), (0, 0, 9, 900, 1000, 1, 1),
                   (1, 0, 1, 40, 2, 5, 2), (1, 4, 1, 5000, 3, 0, 2)]


def test_a_build_whose_start_follows_some_slices_gets_the_sql_lod_slices(tmp_path):
    # a live capture's segment is finished with the capture's start, which a slice may precede
    from acceltrace.ingest.builder import TraceBuilder

    b = TraceBuilder(tmp_path / "t.duckdb")
    track = b.track("cpu", "main")
    b.add_slices({"track_id": [track] * 3, "ts": [100, 1_000, 5_000], "dur": [50, 20, 30], "name": ["a", "b", "a"]})
    b.finish("test", "early.json", start_ns=500)
    con = duckdb.connect(str(tmp_path / "t.duckdb"), read_only=True)
    assert con.execute("SELECT ts, dur FROM lod_slices ORDER BY ts").fetchall() == [(-400, 50), (500, 20), (4_500, 30)]
