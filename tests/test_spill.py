"""The builder's bounded-memory regime (ingest/spill.py): a real trace that crosses the threshold part way
is the same trace, table for table, as the in-memory path makes of it."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

from acceltrace.ingest import pipeline, spill, stage
from acceltrace.ingest.builder import TraceBuilder
from acceltrace.ingest.chrome import reader, state
from acceltrace.ingest.nsys import importer as nsys_importer
from acceltrace.store.catalog import Store
from acceltrace.tiles import build as lod, pyramid
from tests.canonical import canonical_summary

SAMPLES = Path(__file__).resolve().parent.parent / "sample_traces"


def _small_pieces(monkeypatch):
    """Chunks and runs of slices small enough that a sample is handed to the builder in many batches."""
    monkeypatch.setattr(reader, "BLOCK_BYTES", 64 << 10)
    monkeypatch.setattr(reader, "FIRST_BLOCK_BYTES", 64 << 10)
    monkeypatch.setattr(state, "STAGE_ROWS", 500)
    monkeypatch.setattr(state, "STAGE_ROWS_MAX", 1000)


def _ingest(tmp_path: Path, path: Path, name: str):
    store = Store(tmp_path / name)
    (r,) = pipeline.ingest_paths(store, [path], views=False)
    assert r.error is None, r.error
    return duckdb.connect(str(store.trace_path(r.id)), read_only=True), r


def _tables(con) -> dict[str, list]:
    """Every table's rows in stored order; flows (numbered in the order DuckDB's joins return them, which
    varies from run to run on either path) as a sorted list without their ids; lod_info less its timing."""
    out = {}
    for (t,) in con.execute("SELECT table_name FROM duckdb_tables() ORDER BY 1").fetchall():
        where = " WHERE key <> 'build_ms'" if t == "lod_info" else ""
        out[t] = con.execute(f'SELECT * FROM "{t}"{where} ORDER BY rowid').fetchall()
    out["flows"] = sorted((r[1:] for r in out["flows"]), key=repr)
    return out


def _both(tmp_path, monkeypatch, path: Path, part_way: bool = True):
    """The trace made by the in-memory path, then by the bounded regime from its 100th slice on (depths a
    few hundred slices at a time, held args from the work folder's file): both stores' connections and the
    slice count at which the builder switched."""
    fast, _ = _ingest(tmp_path, path, "fast")
    monkeypatch.setattr(spill, "SPILL_FROM_SLICES", 100)
    monkeypatch.setattr(spill, "DEPTH_PART_SLICES", 150)
    monkeypatch.setattr(stage, "ARGS_MEMORY_BYTES", 20_000)
    switched = []
    real = TraceBuilder._spill
    monkeypatch.setattr(TraceBuilder, "_spill", lambda self: (switched.append(self.n_slices), real(self)))
    bounded, r = _ingest(tmp_path, path, "bounded")
    assert len(switched) == 1
    assert switched[0] < r.counts["slices"] or not part_way, "the switch must come part way"
    return fast, bounded, switched[0]


@pytest.mark.parametrize("sample", [
    "chrome/kineto/sampled-rank0-small.json.gz",  # nested CPU ops, launches, kernels, memcpys, flow events
    "chrome/kineto/nccl-collectives.json.gz",  # collectives on several streams of several ranks
    "run/acceltrace-sim-0.1/llm-inference-seed2/run.atrace",  # native: in stored order, depths given, one batch
])
def test_a_trace_past_the_threshold_is_the_same_trace(tmp_path, monkeypatch, sample):
    _small_pieces(monkeypatch)
    fast, bounded, _ = _both(tmp_path, monkeypatch, SAMPLES / sample, part_way=not sample.endswith(".atrace"))
    a, b = _tables(fast), _tables(bounded)
    assert sorted(a) == sorted(b)
    for table in a:
        assert a[table] == b[table], f"{table} differs"


def test_an_nsight_report_past_the_threshold_is_the_same_trace(tmp_path, monkeypatch):
    """Nsight's rows come from queries run two at a time, so their slice ids differ from run to run on
    either path: the same summary, and the same slices but for their ids. An export's row counts say it is
    past the threshold before any slice is added: the bounded regime from the first (builder.expect_slices)."""
    sample = SAMPLES / "nsys/nsys-2022.2/a100-saxpy-nsys2022.sqlite"
    stages = []  # each ingest's staging database's memory limit: less beside the bounded regime
    real_connect = duckdb.connect

    def connect(database=":memory:", *a, config=None, **k):
        if config and "nsys-stage" in str(config.get("temp_directory", "")):
            stages.append(config["memory_limit"])
        return real_connect(database, *a, config=config, **k) if config else real_connect(database, *a, **k)

    monkeypatch.setattr(nsys_importer.duckdb, "connect", connect)
    files = []  # where each ingest's correlation links went: held in memory, or a file past the threshold
    real_links = nsys_importer.Links.__init__
    monkeypatch.setattr(nsys_importer.Links, "__init__",
                        lambda self, spill_to=None: (files.append(spill_to), real_links(self, spill_to))[1])
    fast, bounded, switched_at = _both(tmp_path, monkeypatch, sample)
    assert switched_at == 0
    assert stages == [nsys_importer.STAGE_MEMORY, nsys_importer.BOUNDED_STAGE_MEMORY]
    assert files[0] is None and files[1].suffix == ".arrows" and not files[1].exists()
    ends = """SELECT f.kind, a.track_id, a.ts, a.name, b.track_id, b.ts, b.name FROM flows f
              JOIN slices a ON a.slice_id = f.src_slice JOIN slices b ON b.slice_id = f.dst_slice ORDER BY ALL"""
    flows = fast.execute(ends).fetchall()
    assert len(flows) == 20 and flows == bounded.execute(ends).fetchall()
    assert canonical_summary(fast) == canonical_summary(bounded)
    rows = "SELECT * EXCLUDE (slice_id) FROM slices ORDER BY ALL"
    assert fast.execute(rows).fetchall() == bounded.execute(rows).fetchall()
    keys = "SELECT track_id, ts, depth FROM slices ORDER BY rowid"
    got = bounded.execute(keys).fetchall()
    assert got == sorted(got), "not stored in (track_id, ts, depth) order"


@pytest.mark.parametrize("parts", [1, 3])
def test_a_trace_past_the_threshold_gets_its_pyramid(tmp_path, monkeypatch, parts):
    """A big trace (past the threshold) whose densest group needs a pyramid: the pyramid reads lod_slices back
    from the file, a part at a time, on cursors of its own. Those named lod_slices in the instance's default
    database, not the build's file: every such trace failed ("Table with name lod_slices does not exist")."""
    _small_pieces(monkeypatch)
    monkeypatch.setattr(lod, "RAW_TRACE_ROWS", 0)  # a pyramid, small as the sample is
    if parts > 1:  # several parts, two at a time on two cursors (a trace of millions of slices)
        monkeypatch.setattr(pyramid, "NUMPY_MAX_SLICES", 1_000)
        monkeypatch.setattr(pyramid, "PARALLEL_MIN_SLICES", 1_000)
    fast, bounded, _ = _both(tmp_path, monkeypatch, SAMPLES / "chrome/kineto/sampled-rank0-small.json.gz")
    (levels,) = bounded.execute("SELECT count(DISTINCT level) FROM lod_merged").fetchone()
    assert levels > 1
    a, b = _tables(fast), _tables(bounded)
    assert sorted(a) == sorted(b)
    for table in a:
        assert a[table] == b[table], f"{table} differs"


@pytest.mark.parametrize("threads", [None, 1])  # a fleet's workers build on one thread
def test_the_switch_moves_every_held_column_into_duckdb_and_lowers_its_limit(tmp_path, monkeypatch, threads):
    monkeypatch.setattr(spill, "SPILL_FROM_SLICES", 3)
    monkeypatch.setattr(stage, "ARGS_MEMORY_BYTES", 10)
    b = TraceBuilder(tmp_path / "t.duckdb", threads=threads)
    track = b.track("cpu", "t")
    for first in (0, 2, 4):
        b.add_slices({"track_id": [track, track], "ts": [first * 10, first * 10 + 1], "dur": [5, 1],
                      "name": [f"s{first}", f"s{first + 1}"], "args": ['{"a": 1}', None]})
        if first == 0:
            assert (b.work_dir / "held-args.arrows").exists() and not b.spilling
    assert b.spilling and not len(b._held)
    assert not (b.work_dir / "held-args.arrows").exists()
    ((limit,),) = b.con.execute("SELECT current_setting('memory_limit')").fetchall()
    assert limit == "476.8 MiB"  # SPILL_MEMORY, 500 MB
    staged = b.con.execute("SELECT slice_id, name, args FROM _slices_staging ORDER BY slice_id").fetchall()
    assert staged == [(i, f"s{i}", '{"a": 1}' if i % 2 == 0 else None) for i in range(6)]
    b.finish("test", "t")
    con = duckdb.connect(str(tmp_path / "t.duckdb"), read_only=True)
    got = con.execute("SELECT slice_id, depth FROM slices ORDER BY rowid").fetchall()
    assert got == [(0, 0), (1, 1), (2, 0), (3, 1), (4, 0), (5, 1)]  # each second slice inside the first
    lod = con.execute("SELECT slice_id, depth FROM lod_slices ORDER BY slice_id").fetchall()
    assert lod == got


def test_an_operator_sets_the_threshold_in_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("ACCELTRACE_SPILL_SLICES", "1000")
    switched = []
    real = TraceBuilder._spill
    monkeypatch.setattr(TraceBuilder, "_spill", lambda self: (switched.append(self.n_slices), real(self)))
    _small_pieces(monkeypatch)
    _, r = _ingest(tmp_path, SAMPLES / "chrome/kineto/sampled-rank0-small.json.gz", "env")
    assert len(switched) == 1 and 1000 < switched[0] < r.counts["slices"]
    monkeypatch.setenv("ACCELTRACE_SPILL_SLICES", "lots")
    with pytest.raises(ValueError, match="ACCELTRACE_SPILL_SLICES='lots': expected a whole number of slices"):
        TraceBuilder(tmp_path / "bad.duckdb")
