"""Export to Chrome Trace JSON and Parquet: valid, exact, streamed, readable without acceltrace."""

import argparse
import gzip
import json
import re
import shutil
from decimal import Decimal
from pathlib import Path

import duckdb
import pyarrow.parquet as pq
import pytest

from _helpers import ingest, ingest_only

import nsys_synth
from acceltrace.store import schema
from acceltrace.ingest.builder import TraceBuilder
from acceltrace.export.command import export_command, export_trace
from acceltrace.export.chrome import chrome_chunks
from acceltrace.export.parquet import ExportError, write_parquet
from acceltrace.ingest.pipeline import ingest_paths
from acceltrace.store.catalog import Store

ROOT = Path(__file__).resolve().parent.parent
A100 = ROOT / "sample_traces" / "nsys" / "nsys-2022.2" / "a100-saxpy-nsys2022.sqlite"


@pytest.fixture(scope="module", autouse=True)
def _ingest_only():
    with ingest_only():
        yield


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    """The A100 Nsight trace and a synthesized 3.x one with counters and a submit -> exec chain."""
    tmp = tmp_path_factory.mktemp("export")
    synth = tmp / "h100.sqlite"
    nsys_synth.write(synth, iterations=4, metric_samples=6)
    nsys_synth.add_nested_driver_launch(synth)
    store, results = ingest(tmp, A100, synth)
    for r in results:
        assert r.error is None, r.error
    return store, results[0].id, results[1].id


def built_trace(tmp_path, flows):
    """A trace from the builder with slices 0..7 on two tracks and the given (src, dst, kind) flows (None = missing)."""
    store = Store(tmp_path / "store")
    tid, tmp = store.begin("flows", 0, None)
    b = TraceBuilder(tmp)
    cpu = b.track("cpu", "thread 1", group_name="proc")
    eu = b.track("eu", "stream 7", group_name="gpu0", device="0")
    first = b.add_slices({"track_id": [cpu, cpu, cpu, cpu, eu, eu, eu, eu],
                          "ts": [0, 100, 200, 300, 50, 150, 250, 350], "dur": [10] * 8,
                          "name": [f"s{i}" for i in range(8)]})
    b.add_flows([None if s is None else first + s for s, _, _ in flows],
                [None if d is None else first + d for _, d, _ in flows], [k for _, _, k in flows])
    store.publish(tid, tmp, "test", b.finish("test", "flows"))
    return store, tid


def chrome_doc(con, **kw):
    data = b"".join(chrome_chunks(con, **kw))
    return data, json.loads(data, parse_float=Decimal)


def test_chrome_export_names_every_track_and_process(traces):
    store, a100, _ = traces
    con = store.connect(a100)
    _, doc = chrome_doc(con)
    events = doc["traceEvents"]
    tracks = con.execute("SELECT track_id, lane, group_name, name FROM tracks").fetchall()
    names = {(e["tid"] - 1): e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    lanes = {(e["tid"] - 1): e["args"]["lane"] for e in events if e["ph"] == "M" and e["name"] == "acceltrace_track"}
    procs = {e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    assert names == {t: n for t, _, _, n in tracks}
    assert lanes == {t: lane for t, lane, _, _ in tracks}
    assert procs == {g for _, _, g, _ in tracks}
    assert doc["displayTimeUnit"] == "ns"
    assert doc["otherData"]["start_ns"] == con.execute(
        "SELECT value FROM trace_meta WHERE key = 'start_ns'").fetchone()[0]


def test_chrome_times_are_exact_microseconds_with_three_decimals(traces):
    store, a100, _ = traces
    con = store.connect(a100)
    data, doc = chrome_doc(con)
    start_ns = int(doc["otherData"]["start_ns"])
    exported = sorted((e["tid"] - 1, start_ns + int(e["ts"] * 1000), int(e["dur"] * 1000), e["name"])
                      for e in doc["traceEvents"] if e["ph"] == "X")
    stored = sorted(con.execute("SELECT track_id, ts, dur, name FROM slices").fetchall())
    assert exported == stored
    # written as integers with a three-digit ns part, never through a float
    assert re.findall(rb'"ts":(\d+\.\d{3})[,}]', data) and not re.findall(rb'"ts":[^,}]*e', data)
    assert not re.findall(rb'"(?:ts|dur)":\d+(?:\.\d{0,2}|\.\d{4,})?[,}]', data)


def test_chrome_export_carries_bytes_direction_and_correlation_in_args(traces):
    store, a100, _ = traces
    _, doc = chrome_doc(store.connect(a100))
    copies = [e for e in doc["traceEvents"] if e["ph"] == "X" and e["cat"] == "gpu_memcpy"]
    assert len(copies) == 15
    assert {(e["args"]["direction"], e["args"]["host_mem"], e["args"]["bytes"]) for e in copies} == {
        ("h2d", "pageable", 262144000), ("d2h", "pageable", 262144000)}
    assert all(isinstance(e["args"]["correlation"], int) for e in copies)


def test_flows_keep_their_kind_as_s_f_categories_and_lone_other_flows_use_v2(tmp_path):
    # 0->4 other and alone (v2); chain 1->5->2 launch/exec (s/f "ac2g"); fan-out 3->6, 3->7 dependency
    # (s/f "fwdbwd"); 2 -> missing destination (a lone s, "ac2g": a correlation flow whose end is missing)
    store, tid = built_trace(tmp_path, [(0, 4, "other"), (1, 5, "launch"), (5, 2, "exec"), (3, 6, "dependency"),
                                        (3, 7, "dependency"), (2, None, "launch")])
    _, doc = chrome_doc(store.connect(tid))
    by_name = {e["name"]: e for e in doc["traceEvents"] if e["ph"] == "X"}
    assert by_name["s0"]["bind_id"] == by_name["s4"]["bind_id"]
    assert by_name["s0"].get("flow_out") is True and by_name["s4"].get("flow_in") is True
    assert all("bind_id" not in by_name[f"s{i}"] for i in (1, 2, 3, 5, 6, 7))
    ends = sorted((e["cat"], e["ph"]) for e in doc["traceEvents"] if e["ph"] in ("s", "f"))
    assert ends == sorted([("ac2g", "s"), ("ac2g", "f")] * 2 + [("fwdbwd", "s"), ("fwdbwd", "f")] * 2
                          + [("ac2g", "s")])
    assert all(e.get("bp") == "e" for e in doc["traceEvents"] if e["ph"] == "f")
    pairs = {}
    for e in doc["traceEvents"]:
        if e["ph"] in ("s", "f"):
            pairs.setdefault(e["id"], []).append(e["ph"])
    assert sorted(map(sorted, pairs.values())) == sorted([["f", "s"]] * 4 + [["s"]])


def test_counters_become_c_events_keyed_by_unit(traces):
    store, _, synth = traces
    con = store.connect(synth)
    _, doc = chrome_doc(con)
    cs = [e for e in doc["traceEvents"] if e["ph"] == "C"]
    assert len(cs) == con.execute("SELECT count(*) FROM counters").fetchone()[0] == 18
    assert {(e["name"], next(iter(e["args"]))) for e in cs} == {
        ("PCIe RX Throughput", "%"), ("PCIe TX Throughput", "%"), ("GPC Clock Frequency", "MHz")}


def test_chrome_export_is_the_same_in_tiny_batches(traces):
    store, _, synth = traces
    con = store.connect(synth)
    whole, _ = chrome_doc(con)
    tiny, _ = chrome_doc(con, batch_rows=3)
    assert whole == tiny


def test_export_command_writes_gzip_and_refuses_unknown_ids(traces, tmp_path, capsys):
    store, a100, _ = traces
    out = tmp_path / "a100.json.gz"
    ns = argparse.Namespace(store=str(store.root), id=a100[:8], format="chrome", out=out)
    assert export_command(ns) == 0
    with gzip.open(out) as f:
        doc = json.load(f)
    n_slices = store.connect(a100).execute("SELECT count(*) FROM slices").fetchone()[0]  # 7169: runtime, NVTX, sched, samples...
    assert sum(e["ph"] == "X" for e in doc["traceEvents"]) == n_slices == 7169
    assert not [p for p in store.tmp_dir.iterdir() if ".export" in p.name]  # spill directory removed
    ns = argparse.Namespace(store=str(store.root), id="no-such-trace", format="chrome", out=tmp_path / "x.json")
    assert export_command(ns) == 1
    assert "no ready trace with id 'no-such-trace'" in capsys.readouterr().err
    assert not (tmp_path / "x.json").exists()


def test_export_to_dash_streams_chrome_json_to_stdout_and_refuses_parquet(traces, tmp_path, capsysbinary,
                                                                         monkeypatch):
    store, a100, _ = traces
    monkeypatch.chdir(tmp_path)
    ns = argparse.Namespace(store=str(store.root), id=a100, format="chrome", out="-")
    assert export_command(ns) == 0
    out, err = capsysbinary.readouterr()
    assert sum(e["ph"] == "X" for e in json.loads(out)["traceEvents"]) == 7169
    assert b"standard output" in err
    assert not (tmp_path / "-").exists()
    ns = argparse.Namespace(store=str(store.root), id=a100, format="parquet", out="-")
    assert export_command(ns) == 1
    assert b"only with --format chrome" in capsysbinary.readouterr().err
    assert not (tmp_path / "-").exists()


def test_parquet_files_read_back_equal_to_the_store_without_acceltrace(traces, tmp_path):
    store, _, synth = traces
    out = tmp_path / "pq"
    export_trace(store, synth, "parquet", out)
    analysed = store.side_path(synth, "findings").exists()  # a findings file only once analysed
    assert sorted(p.name for p in out.iterdir()) == sorted(
        f"{t}.parquet" for t in ("trace_meta", "tracks", "slices", "flows", "counters") + ("findings",) * analysed)
    con = store.connect(synth)
    for table, cols in schema.TABLES.items():
        names = [c for c, _ in cols]
        arrow = pq.read_table(out / f"{table}.parquet")
        assert arrow.column_names == names
        key = ", ".join(f'"{c}"' for c in names)
        stored = con.execute(f"SELECT {key} FROM {table} ORDER BY ALL").fetchall()
        via_duckdb = duckdb.sql(f"SELECT {key} FROM read_parquet('{out / table}.parquet') ORDER BY ALL").fetchall()
        via_arrow = sorted(zip(*[arrow[c].to_pylist() for c in names]), key=lambda r: [(v is None, v) for v in r])
        assert via_duckdb == stored
        assert via_arrow == sorted(stored, key=lambda r: [(v is None, v) for v in r])
    assert pq.read_table(out / "slices.parquet").schema.field("ts").type == "int64"


def test_parquet_includes_the_findings_of_an_analysed_trace(traces, tmp_path):
    store, a100, _ = traces
    side = store.side_path(a100, "findings")
    if not side.exists():  # analysis is off in these tests: findings written by hand

        def build(con):
            con.execute(schema.create_sql("findings", schema.FINDINGS))
            con.execute("INSERT INTO findings (pass, severity, message) VALUES ('pageable_memory', 'warning', 'x')")

        store.write_side(a100, "findings", build)
    out = tmp_path / "pq"
    export_trace(store, a100, "parquet", out)
    cols = ", ".join(f'"{c}"' for c, _ in schema.FINDINGS)
    stored = store.connect(a100).execute(f"SELECT {cols} FROM findings ORDER BY ALL").fetchall()
    assert stored
    assert duckdb.sql(f"SELECT {cols} FROM '{out}/findings.parquet' ORDER BY ALL").fetchall() == stored


def test_parquet_export_replaces_its_own_output_but_not_other_files(traces, tmp_path):
    store, a100, _ = traces
    out = tmp_path / "pq"
    export_trace(store, a100, "parquet", out)
    first = sorted(p.name for p in out.iterdir())
    export_trace(store, a100, "parquet", out)  # again: replaced in place
    assert sorted(p.name for p in out.iterdir()) == first
    (out / "notes.txt").write_text("mine")
    with pytest.raises(ExportError, match="already holds other files"):
        write_parquet(store.connect(a100), out)
    assert (out / "notes.txt").read_text() == "mine"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp leftovers


def exact_tables(con) -> dict:
    """Every table's content keyed by what it means (no ids), times relative to the start."""
    start = "(SELECT value::BIGINT FROM trace_meta WHERE key = 'start_ns')"
    sl = ("SELECT s.slice_id AS id, t.lane, t.group_name AS g, t.name AS tn, s.ts - {start} AS ts, s.dur, s.name,"
          " s.category, s.corr_id, s.bytes, s.direction, s.host_mem, s.args"
          " FROM slices s JOIN tracks t USING (track_id)")
    sl = sl.format(start=start)

    def norm(row):  # args compared as JSON values, not text
        return tuple(row[1:-1]) + (json.dumps(json.loads(row[-1]), sort_keys=True) if row[-1] else None,)

    return {
        "tracks": sorted(con.execute("SELECT lane, group_name, name, device, process, thread, unit, sort_key"
                                     " FROM tracks").fetchall()),
        "slices": sorted((norm(r) for r in con.execute(sl).fetchall()),
                         key=lambda r: [(v is None, v) for v in r]),
        "flows": sorted(con.execute(
            f"WITH s AS ({sl}) SELECT f.kind, a.g, a.tn, a.ts, a.name, b.g, b.tn, b.ts, b.name FROM flows f"
            " LEFT JOIN s a ON a.id = f.src_slice LEFT JOIN s b ON b.id = f.dst_slice").fetchall(),
            key=lambda r: [(v is None, v) for v in r]),
        "counters": sorted(con.execute(f"SELECT t.name, t.unit, c.ts - {start}, c.value FROM counters c"
                                       " JOIN tracks t USING (track_id)").fetchall()),
    }


def native_like_trace(tmp_path):
    """A trace the way native .atrace ingest makes them: no categories, every lane, typed copies, all flow kinds."""
    store = Store(tmp_path / "store")
    tid, tmp = store.begin("native-like", 0, None)
    b = TraceBuilder(tmp)
    cpu = b.track("cpu", "main", group_name="app (pid 7)", process="7", thread="7")
    drv = b.track("driver", "queue 0", group_name="accel0", device="0", sort_key=1)
    h2d = b.track("pcie", "H2D", group_name="accel0", device="0", sort_key=2)
    eu = b.track("eu", "matrix0", group_name="accel0", device="0", sort_key=3)
    util = b.track("counter", "PCIe H2D utilisation", group_name="accel0", device="0", unit="%", sort_key=9)
    first = b.add_slices({
        "track_id": [cpu, cpu, drv, h2d, drv, eu, cpu],
        "ts": [1_000, 1_500, 1_600, 2_000, 2_100, 2_500, 9_000],
        "dur": [5_000, 400, 50, 3_000, 40, 1_000, 0],
        "name": ["step", "copy_to_device", "submit", "dma h2d", "submit", "gemm", "mark"],
        "bytes": [None, None, None, 1 << 20, None, None, None],
        "direction": [None, None, None, "h2d", None, None, None],
        "host_mem": [None, None, None, "pinned", None, None, None],
        "args": [None, '{"iteration": 3}', None, '{"engine": 1}', None, None, None],
    })
    b.add_flows([first + 1, first + 2, first + 4, first + 1, None],
                [first + 2, first + 3, first + 5, first + 5, first + 5],
                ["submit", "dma", "exec", "dependency", "launch"], ["call", "desc", "desc", None, "lost"])
    b.add_counters([util] * 3, [1_000, 2_000, 3_000], [0.0, 87.5, 12.25])
    store.publish(tid, tmp, "atrace", b.finish("atrace", "native-like"))
    return store, tid


def test_chrome_round_trip_gives_the_same_trace(traces, tmp_path):
    from canonical import canonical_summary

    store, a100, synth = traces
    native_store, native = native_like_trace(tmp_path / "native")
    for st, tid in ((store, a100), (store, synth), (native_store, native)):
        out = tmp_path / f"{tid}.json"
        export_trace(st, tid, "chrome", out)
        (again,) = ingest_paths(st, [out])
        assert again.error is None, again.error
        assert again.format == "acceltrace-chrome"
        assert canonical_summary(st.connect(again.id)) == canonical_summary(st.connect(tid))
        assert exact_tables(st.connect(again.id)) == exact_tables(st.connect(tid))
        assert kept_meta(st.connect(again.id)) == kept_meta(st.connect(tid))


def kept_meta(con) -> dict:
    from acceltrace.export.chrome import META_DERIVED

    rows = con.execute("SELECT key, value FROM trace_meta").fetchall()
    return {k: v for k, v in rows if k not in META_DERIVED and k != "exported_from_format"}


def test_counter_names_units_and_samples_survive_a_chrome_round_trip(traces, tmp_path):
    store, _, synth = traces
    out = tmp_path / "synth.json"
    export_trace(store, synth, "chrome", out)
    (again,) = ingest_paths(store, [out])
    assert again.error is None, again.error
    q = ("SELECT t.name, c.ts - (SELECT value::BIGINT FROM trace_meta WHERE key = 'start_ns'), c.value"
         " FROM counters c JOIN tracks t USING (track_id) ORDER BY ALL")
    before = store.connect(synth).execute(q).fetchall()
    after = store.connect(again.id).execute(q).fetchall()
    assert len(after) == len(before) == 18
    assert after == before
    units = "SELECT name, unit FROM tracks WHERE lane = 'counter' ORDER BY ALL"
    assert store.connect(again.id).execute(units).fetchall() == store.connect(synth).execute(units).fetchall()


def test_parquet_slices_and_counters_come_sorted_by_track_and_time(tmp_path):
    from bench.gen_synthetic import build_trace

    store = Store(tmp_path / "store")
    tid, _ = build_trace(store, 60_000, name="sorted")
    out = tmp_path / "pq"
    export_trace(store, tid, "parquet", out)
    for table in ("slices", "counters"):
        t = pq.read_table(out / f"{table}.parquet", columns=["track_id", "ts"])
        keys = list(zip(t["track_id"].to_pylist(), t["ts"].to_pylist()))
        assert keys == sorted(keys) and len(keys) > 0


def test_args_that_are_not_a_json_object_do_not_break_the_export(tmp_path):
    store = Store(tmp_path / "store")
    tid, tmp = store.begin("odd-args", 0, None)
    b = TraceBuilder(tmp)
    cpu = b.track("cpu", "thread 1", group_name="proc")
    b.add_slices({"track_id": [cpu] * 4, "ts": [0, 10, 20, 30], "dur": [5] * 4, "name": ["a", "b", "c", "d"],
                  "args": ['{"k": 1}', "[1, 2]", "not json", None], "corr_id": [7, None, None, None]})
    store.publish(tid, tmp, "test", b.finish("test", "odd-args"))
    _, doc = chrome_doc(store.connect(tid))
    args = {e["name"]: e["args"] for e in doc["traceEvents"] if e["ph"] == "X"}
    assert args == {"a": {"k": 1, "correlation": 7}, "b": {"args": "[1, 2]"}, "c": {"args": "not json"}, "d": {}}


def test_flows_whose_slices_share_a_start_time_come_back_on_the_right_slices(tmp_path):
    store = Store(tmp_path / "store")
    tid, tmp = store.begin("same-start", 0, None)
    b = TraceBuilder(tmp)
    cpu = b.track("cpu", "thread 1", group_name="proc")
    eu = b.track("eu", "stream 7", group_name="gpu0", device="0")
    # cudaLaunchKernel starts with a shorter cudaPeekAtLastError: binding an "s" by time would pick the latter
    first = b.add_slices({"track_id": [cpu, cpu, eu, cpu, eu], "ts": [100, 100, 300, 500, 600],
                          "dur": [50, 10, 40, 20, 30],
                          "name": ["cudaLaunchKernel", "cudaPeekAtLastError", "k1", "cudaLaunchKernel", "k2"],
                          "category": ["cuda_runtime", "cuda_runtime", "kernel", "cuda_runtime", "kernel"],
                          "corr_id": [5, 4, 5, 6, 6]})
    b.add_flows([first, first + 3], [first + 2, first + 4], ["launch", "launch"], ["correlation"] * 2)
    store.publish(tid, tmp, "test", b.finish("test", "same-start"))
    out = tmp_path / "same-start.json"
    export_trace(store, tid, "chrome", out)
    (again,) = ingest_paths(store, [out])
    assert again.error is None, again.error
    assert exact_tables(store.connect(again.id))["flows"] == exact_tables(store.connect(tid))["flows"]


def test_chrome_times_are_exact_for_any_nanosecond_value(tmp_path):
    import random

    rng = random.Random(7)
    start = 1_700_000_000_123_456_789  # an epoch start: too big for a double to keep its ns
    offsets = [0, 1, 999, 1000, 1001, 123_456_789_012] + [rng.randrange(10**15) for _ in range(40)]
    durs = [0, 1, 999, 1000, 1001, 5] + [rng.randrange(10 ** rng.randrange(1, 13)) for _ in range(40)]
    store = Store(tmp_path / "store")
    tid, tmp = store.begin("times", 0, None)
    b = TraceBuilder(tmp)
    cpu = b.track("cpu", "t", group_name="p")
    b.add_slices({"track_id": [cpu] * len(offsets), "ts": [start + o for o in offsets], "dur": durs,
                  "name": [f"e{i}" for i in range(len(offsets))]})
    store.publish(tid, tmp, "test", b.finish("test", "times"))
    _, doc = chrome_doc(store.connect(tid))
    got = {e["name"]: (int(e["ts"] * 1000), int(e["dur"] * 1000)) for e in doc["traceEvents"] if e["ph"] == "X"}
    assert got == {f"e{i}": (offsets[i], durs[i]) for i in range(len(offsets))}


class _TightAtTwoThreads:
    """A read connection whose queries run out of memory while DuckDB has more than one thread (as the 830 MB trace's
    flow lines did at two threads and 1 GB); everything else is the real connection's."""

    def __init__(self, con, fail_at_one=False):
        self.con, self.fail_at_one, self.refused = con, fail_at_one, 0

    def execute(self, *a, **k):
        return self.con.execute(*a, **k)

    def sql(self, *a, **k):
        (threads,) = self.con.execute("SELECT current_setting('threads')").fetchall()[0]
        if int(threads) > 1 or self.fail_at_one:
            self.refused += 1
            raise duckdb.OutOfMemoryException("Out of Memory Error: could not allocate block (test)")
        return self.con.sql(*a, **k)


def test_chrome_export_runs_a_query_again_at_one_thread_when_it_runs_out_of_memory_at_two(traces):
    store, a100, _ = traces
    con = store.connect(a100)
    con.execute("SET threads = 2")
    want = b"".join(chrome_chunks(con))
    tight = _TightAtTwoThreads(con)
    assert b"".join(chrome_chunks(tight)) == want
    assert tight.refused == 4  # the slices', the flows' (whole, then their one part) and the counters' lines
    assert con.execute("SELECT current_setting('threads')").fetchall()[0][0] == 2  # set back
    with pytest.raises(duckdb.OutOfMemoryException):  # out of memory at one thread too: the error, not a cut file
        b"".join(chrome_chunks(_TightAtTwoThreads(con, fail_at_one=True)))



def test_chrome_export_sorts_its_flow_lines_in_parts_when_all_of_them_do_not_fit(traces, monkeypatch):
    store, a100, _ = traces
    from acceltrace.export import chrome

    con = store.connect(a100)
    con.execute("SET threads = 2")
    want = b"".join(chrome_chunks(con))
    assert want.count(b'"ph":"s"') == 20  # the A100 export's flows, each a start and a finish line

    class FlowsTooBig(_TightAtTwoThreads):
        """Refuses the query of all the flow lines (at any thread count); its parts fit."""
        def sql(self, query, *a, **k):
            whole_flows = "'ac2g'" in query and "BETWEEN" not in query
            self.refused += whole_flows
            if whole_flows:
                raise duckdb.OutOfMemoryException("Out of Memory Error: could not allocate block (test)")
            self.threads.append(self.con.execute("SELECT current_setting('threads')").fetchall()[0][0])
            return self.con.sql(query, *a, **k)

    monkeypatch.setattr(chrome, "FLOW_PART", 7)
    tight = FlowsTooBig(con)
    tight.threads = []
    assert b"".join(chrome_chunks(tight)) == want  # the same lines in the same order
    assert tight.refused == 1 and tight.threads == [2] * 5  # slices, flows in parts of 7, 7 and 6, counters


def test_export_command_out_of_memory_at_one_thread_is_a_message_and_no_file(traces, tmp_path, capsys, monkeypatch):
    store, a100, _ = traces
    from acceltrace.export import command

    def tight(con, batch_rows=None):
        yield b'{"traceEvents": [\n'
        raise duckdb.OutOfMemoryException("Out of Memory Error: could not allocate block of size 256.0 KiB (test)")

    monkeypatch.setattr(command, "chrome_chunks", tight)
    out = tmp_path / "big.json"
    assert export_command(argparse.Namespace(store=str(store.root), id=a100, format="chrome", out=out)) == 1
    err = capsys.readouterr().err
    assert "export failed" in err and "ran out of the export's memory" in err and f"{out} was not written" in err
    assert not out.exists() and not list(tmp_path.glob(".big.json.tmp-*"))


@pytest.mark.parametrize("operators", [None, "700MB"])
def test_the_exports_duckdb_memory_is_the_operators_where_set(traces, monkeypatch, operators):
    from acceltrace.export.command import connect_for_export

    store, a100, _ = traces
    if operators:
        monkeypatch.setenv("ACCELTRACE_DUCKDB_MEMORY", operators)
    else:
        monkeypatch.delenv("ACCELTRACE_DUCKDB_MEMORY", raising=False)
    con, spill = connect_for_export(store, a100, memory_limit="512MB")
    try:
        ((limit,),) = con.execute("SELECT current_setting('memory_limit')").fetchall()
    finally:
        con.close()
        shutil.rmtree(spill, ignore_errors=True)
    assert limit == ("667.5 MiB" if operators else "488.2 MiB")
