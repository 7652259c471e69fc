"""The finished rows and the level-of-detail build started before an importer's links (ingest/lod_ahead.py):
the Chrome importer's SQL links, the native importer's flows. The same trace as when they wait for the
links, and no thread left behind when either side fails."""

import json
import threading
from pathlib import Path

import pytest

from acceltrace.ingest import lod_ahead, pipeline
from acceltrace.store.catalog import Store

SAMPLES = Path(__file__).resolve().parent.parent / "sample_traces" / "chrome" / "kineto"


def _ingest(tmp_path, name: str, path: Path):
    store = Store(tmp_path / name)
    r = pipeline.ingest_paths(store, [path], views=False)[0]
    return store, r


def _tables(store, tid) -> dict:
    con = store.connect(tid)
    names = [r[0] for r in con.execute("SELECT table_name FROM duckdb_tables() ORDER BY table_name").fetchall()]
    # every row in stored order (the order is part of the contract: tiles read row ranges)
    out = {n: con.execute(f"SELECT * FROM {n}").fetchall() for n in names}
    out["lod_info"] = [r for r in out["lod_info"] if r[0] != "build_ms"]  # a time, not content
    # flow ids follow the order the link queries return their rows in, which two DuckDB threads vary from
    # run to run (the build after the links; the one beside them runs its links on one and numbers alike)
    out["flows"] = sorted((r[1:] for r in out["flows"]), key=lambda r: [(1, 0) if v is None else (0, v) for v in r])
    return out


@pytest.fixture
def started(monkeypatch):
    """How many builds started their rows and LOD build ahead of the links."""
    seen = []

    class Recording(lod_ahead.LodAhead):
        def __init__(self, con, *a, **k):
            # from here two threads of the build's own (the links', the LOD build's): one of DuckDB's
            assert con.execute("SELECT current_setting('threads')").fetchall() == [(1,)]
            seen.append(1)
            super().__init__(con, *a, **k)

    monkeypatch.setattr(lod_ahead, "LodAhead", Recording)
    return seen


@pytest.mark.parametrize("sample", ["mi250-rocm-minitoy.json.gz", "v100-with-gpu-metrics-counters.json",
                                    "nccl-collectives.json.gz"])
def test_the_trace_is_the_same_whether_the_lod_build_starts_before_the_links_or_after(tmp_path, monkeypatch,
                                                                                        started, sample):
    """Flows (correlation ids, flow events, External ids), counters, instants: every table and every row in
    its stored order, against the build that waits for the links (past MAX_SLICES it does)."""
    ahead_store, ahead = _ingest(tmp_path, "ahead", SAMPLES / sample)
    assert ahead.error is None and started == [1]
    monkeypatch.setattr(lod_ahead, "MAX_SLICES", 0)
    after_store, after = _ingest(tmp_path, "after", SAMPLES / sample)
    assert after.error is None and started == [1]
    assert ahead.counts == after.counts and ahead.counts["slices"] > 0
    got, want = _tables(ahead_store, ahead.id), _tables(after_store, after.id)
    assert got.keys() == want.keys() and "lod_merged" in got and "flows" in got
    for name in want:
        assert got[name] == want[name], name


def _chrome(tmp_path, events) -> Path:
    p = tmp_path / "t.json"
    p.write_text(json.dumps({"traceEvents": events}))
    return p


def _events(n=50):
    return [{"ph": "X", "name": f"k{i}", "pid": 1, "tid": 1, "ts": 10 * i, "dur": 5, "cat": "kernel"} for i in range(n)]


def test_a_trace_the_time_check_drops_from_waits_for_the_links(tmp_path, started):
    """The time check deletes the flows that touch a dropped slice, and the links make those: such a trace
    takes the build after the links, and says what it dropped as before."""
    far = {"ph": "X", "name": "far", "pid": 1, "tid": 1, "ts": 5e15, "dur": 1, "cat": "kernel"}
    store, r = _ingest(tmp_path, "s", _chrome(tmp_path, _events() + [far]))
    assert r.error is None and started == []
    assert r.counts["slices"] == 50 and r.counts["dropped_events"] == 1


@pytest.mark.parametrize("where, name", [("acceltrace.ingest.chrome.link", "external_id_flows"),
                                         ("acceltrace.ingest.builder", "build_lod")])
def test_a_failure_on_either_side_waits_for_the_other_and_publishes_nothing(tmp_path, monkeypatch, started,
                                                                            where, name):
    """The links failing while the LOD build runs beside them, or the LOD build failing ahead: the error is
    the ingest's, the LOD thread has ended (the builder's abort waits for it before closing the file), and
    no trace is published."""
    import importlib

    def broken(*a, **k):
        raise RuntimeError(f"{name} broke")

    monkeypatch.setattr(importlib.import_module(where), name, broken)
    store, r = _ingest(tmp_path, "s", _chrome(tmp_path, _events()))
    assert started == [1] and r.error and f"{name} broke" in r.error
    assert not any(t.name == "lod-ahead" and t.is_alive() for t in threading.enumerate())
    assert store.list(status="ready") == []


@pytest.mark.parametrize("sample", ["vllm-decode-graph-capture.json.gz", "a100-rank0-memcpy.json.gz"])
def test_rows_taken_ahead_on_the_lod_thread_give_the_same_trace(tmp_path, monkeypatch, sample):
    """A trace of a row group or more and no pyramid (takes_ahead): its rows are taken into stored order on the
    LOD build's thread before the build, and the write finds them made; every table as when the write takes them.
    The row group is the build's: A100's 67 k slices are under DuckDB's 122,880 but a small build's groups hold
    16,384 rows (ingest/opening.py)."""
    from acceltrace.ingest import stage
    from acceltrace.ingest.opening import SMALL_ROW_GROUP_ROWS

    taken = []
    real = stage.Final.take_ahead

    def spy(self):
        before = self._taken
        real(self)
        if self._taken is not before:  # made here
            assert not self.rest  # the columns only the write reads are let go
            taken.append((threading.current_thread().name, self.rows.num_rows))

    monkeypatch.setattr(stage.Final, "take_ahead", spy)
    ahead_store, ahead = _ingest(tmp_path, "ahead", SAMPLES / sample)
    assert ahead.error is None and [t for t, _ in taken] == ["lod-ahead"]
    assert lod_ahead.takes_ahead(taken[0][1], SMALL_ROW_GROUP_ROWS) and taken[0][1] == ahead.counts["slices"]
    assert SMALL_ROW_GROUP_ROWS <= taken[0][1]
    monkeypatch.setattr(lod_ahead, "takes_ahead", lambda rows, group_rows=None: False)
    after_store, after = _ingest(tmp_path, "after", SAMPLES / sample)
    assert after.error is None  # (its rows taken after the build, on whichever thread comes first)
    got, want = _tables(ahead_store, ahead.id), _tables(after_store, after.id)
    assert got.keys() == want.keys()
    for name in want:
        assert got[name] == want[name], name
    # under a row group (the small build's 16,384 rows) not before the LOD build: after it, where the links run
    monkeypatch.undo()
    monkeypatch.setattr(stage.Final, "take_ahead", spy)
    began = []
    build = lod_ahead.LodAhead._run

    def run(self, cur, build_lod):
        def timed(*a, **k):
            began.append(len(taken))  # takes made before the build began
            return build_lod(*a, **k)
        return build(self, cur, timed)

    monkeypatch.setattr(lod_ahead.LodAhead, "_run", run)
    n = len(taken)
    small_store, small = _ingest(tmp_path, "small", _chrome(tmp_path, _events(8_000)))
    assert small.error is None and small.counts["slices"] < SMALL_ROW_GROUP_ROWS and began == [n]
    assert {t for t, _ in taken[n:]} <= {"lod-ahead"}  # made after the build (the links still ran), or by the write


@pytest.mark.parametrize("sample, threaded", [
    ("atrace/acceltrace-0.1/daemon-python-c.atrace", False), ("atrace/acceltrace-0.1/daemon-python-c.atrace", True),
    ("run/acceltrace-sim-0.1/pcie-saturation-seed5/run.atrace", False),
    ("run/acceltrace-sim-0.1/pcie-saturation-seed5/run.atrace", True),
    ("nsys/nsys-2022.2/a100-saxpy-nsys2022.sqlite", False)])
def test_native_and_nsight_files_build_their_lod_beside_their_flows_and_give_the_same_trace(
        tmp_path, monkeypatch, started, threaded, sample):
    """A lone .atrace file or Nsight export starts its finished rows and LOD build once its slices (and
    counters) are in, before its flows are joined and inserted (ingest/native/handover.py, ingest/nsys/
    importer.py), at any size (its flows read no staged slice, so the staging is let go then): every table
    and row as when the build waits for the flows. `threaded`: an .atrace file's slices staged on a thread
    of their own, as a large file's are."""
    from acceltrace.ingest.builder import TraceBuilder
    from acceltrace.ingest.native import handover

    if threaded:
        monkeypatch.setattr(handover, "PARALLEL_MIN_SLICES", 1)
    monkeypatch.setattr(lod_ahead, "MAX_SLICES", 0)  # the Chrome importer's bound: not the native one's
    src = tmp_path / ("lone" + Path(sample).suffix)  # a run directory's events file alone: the lone-file path
    src.write_bytes((SAMPLES.parent.parent / sample).read_bytes())
    ahead_store, ahead = _ingest(tmp_path, "ahead", src)
    assert ahead.error is None and started == [1]
    monkeypatch.setattr(TraceBuilder, "lod_ahead", lambda self, **k: None)
    after_store, after = _ingest(tmp_path, "after", src)
    assert after.error is None and started == [1]
    assert ahead.counts == after.counts and ahead.counts["slices"] > 0 and ahead.counts["flows"] > 0
    got, want = _tables(ahead_store, ahead.id), _tables(after_store, after.id)
    assert got.keys() == want.keys() and "lod_slices" in got
    for name in want:
        assert got[name] == want[name], name


def test_native_files_in_one_archive_wait_for_the_last_before_the_lod_build(tmp_path, started):
    """Two lone .atrace files in one zip are one trace: the first file's end is not the trace's, so neither
    starts the LOD build early (the second's slices would come after it); the trace holds both files."""
    import zipfile

    from acceltrace.ingest.builder import TraceBuilder

    data = (SAMPLES.parent.parent / "atrace/acceltrace-0.1/daemon-python-c.atrace").read_bytes()
    one_store, one = _ingest(tmp_path, "one", _write(tmp_path / "one.atrace", data))
    assert one.error is None and started == [1]
    z = tmp_path / "two.zip"
    with zipfile.ZipFile(z, "w") as f:
        f.writestr("rank0.atrace", data)
        f.writestr("rank1.atrace", data)
    two_store, two = _ingest(tmp_path, "two", z)
    assert two.error is None and started == [1], two.error
    assert two.counts["slices"] == 2 * one.counts["slices"] and two.counts["flows"] == 2 * one.counts["flows"]
    # and a builder refuses slices once its LOD build has begun, rather than publish a trace without them
    b = TraceBuilder(tmp_path / "b.duckdb")
    t = b.track("cpu", "t")
    b.add_slices({"track_id": [t], "ts": [0], "dur": [5], "name": ["a"]})
    b.lod_ahead(links_read_staging=False)
    assert started == [1, 1]
    with pytest.raises(RuntimeError, match="after lod_ahead"):
        b.add_slices({"track_id": [t], "ts": [9], "dur": [5], "name": ["b"]})
    b.abort()


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def test_a_native_file_with_a_time_out_of_range_waits_for_its_flows_and_drops_it(tmp_path, started):
    """The time check drops a slice past 2^62 ns and the flows that touch it: a native file with one is built
    after its flows, as before, and the drop is said (the LOD build ahead starts only where nothing is dropped)."""
    from acceltrace.collect import client

    p = tmp_path / "far.atrace"
    t = client.connect(file=p, header={"devices": [{"id": 0, "name": "dev0"}], "host_clock": "virtual"}, pid=1)
    for i in range(50):
        t.complete(f"call {i}", 1000 + 100 * i, 50, lane="cpu", tid=1, corr=i + 1)
        t.complete(f"submit {i}", 1010 + 100 * i, 20, lane="driver", device=0, tid=0, corr=i + 1)
    t.complete("far away", (1 << 62) + 5, 10, lane="cpu", tid=1, corr=999)  # dropped, and its flow with it
    t.complete("submit far", 9000, 20, lane="driver", device=0, tid=0, corr=999)
    t.close()
    store, res = _ingest(tmp_path, "far", p)
    assert res.error is None and started == []
    assert res.counts["slices"] == 101 and res.counts["dropped_events"] == 1, res.counts
    assert any("2^62" in w for w in res.warnings), res.warnings
    con = store.connect(res.id)
    assert con.execute("SELECT count(*) FROM flows f LEFT JOIN slices s ON s.slice_id = f.src_slice "
                       "WHERE s.slice_id IS NULL AND f.src_slice IS NOT NULL").fetchall() == [(0,)]
    assert con.execute("SELECT count(*) FROM flows").fetchall()[0][0] == 50


NSIGHT_A100 = SAMPLES.parent.parent / "nsys" / "nsys-2022.2" / "a100-saxpy-nsys2022.sqlite"


def test_an_nsight_export_writes_its_slices_beside_its_flows(tmp_path, monkeypatch, started):
    """The Nsight importer's flows run while the write of `slices` does (LodAhead's `write`): here its flows wait
    until the write has begun, which they never would if the write waited for finish(). Nothing of the export's
    copied tables is left in its staging database by then: the flows read the links alone."""
    from acceltrace.ingest import stage
    from acceltrace.ingest.nsys import importer as nsys

    began, left = threading.Event(), []
    real_write, real_flows = stage.write_slices, nsys._Ingest._flows

    def write(cur, final, spare):
        began.set()
        real_write(cur, final, spare)

    def flows(self):
        left.extend(self.q("SELECT table_name FROM duckdb_tables()").fetchall())
        assert began.wait(60), "the write of `slices` did not begin beside the flows"
        real_flows(self)

    monkeypatch.setattr(stage, "write_slices", write)
    monkeypatch.setattr(nsys._Ingest, "_flows", flows)
    monkeypatch.setattr(lod_ahead, "ROW_GROUP_ROWS", 1000)  # its 7,169 slices: past "a row group" here
    store, r = _ingest(tmp_path, "s", NSIGHT_A100)
    assert r.error is None and started == [1] and r.counts["flows"] > 0
    assert left == []


def test_a_failed_write_beside_the_flows_is_the_ingests_error_and_leaves_no_thread(tmp_path, monkeypatch, started):
    from acceltrace.ingest import stage

    def broken(cur, final, spare):
        raise RuntimeError("the write broke")

    monkeypatch.setattr(stage, "write_slices", broken)
    _fails_beside_the_write(tmp_path, monkeypatch, started, "the write broke")


def _fails_beside_the_write(tmp_path, monkeypatch, started, message: str) -> None:
    """The A100 export ingested with its write of `slices` ahead (a row group of 1,000): it fails with `message`,
    leaves no build thread behind and publishes nothing."""
    monkeypatch.setattr(lod_ahead, "ROW_GROUP_ROWS", 1000)
    store, r = _ingest(tmp_path, "s", NSIGHT_A100)
    assert started == [1] and r.error and message in r.error
    assert not any(t.name in ("lod-ahead", "slices-write") and t.is_alive() for t in threading.enumerate())
    assert store.list(status="ready") == []


def test_flows_that_fail_while_the_write_runs_wait_for_it_and_publish_nothing(tmp_path, monkeypatch, started):
    """The importer failing beside the write of `slices` (its flows): the builder's abort waits for the write and the
    LOD build before it closes the file; the flows' error is the ingest's."""
    from acceltrace.ingest import stage
    from acceltrace.ingest.nsys import importer as nsys

    began, real_write = threading.Event(), stage.write_slices

    def write(cur, final, spare):
        began.set()
        real_write(cur, final, spare)

    def flows(self):
        assert began.wait(60)
        raise RuntimeError("the flows broke")

    monkeypatch.setattr(stage, "write_slices", write)
    monkeypatch.setattr(nsys._Ingest, "_flows", flows)
    _fails_beside_the_write(tmp_path, monkeypatch, started, "the flows broke")


def test_an_export_under_a_row_group_writes_its_slices_in_finish(tmp_path, monkeypatch, started):
    """Under a row group the write's commit would go to the WAL beside the flows': finish() writes, after them."""
    from acceltrace.ingest import stage

    threads, real_write = [], stage.write_slices
    monkeypatch.setattr(stage, "write_slices", lambda cur, final, spare: (
        threads.append(threading.current_thread().name), real_write(cur, final, spare))[1])
    store, r = _ingest(tmp_path, "s", NSIGHT_A100)
    assert r.error is None and started == [1] and r.counts["slices"] < lod_ahead.ROW_GROUP_ROWS
    assert threads == ["MainThread"]
