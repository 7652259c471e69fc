"""The Chrome Trace Event ingester on small hand-written traces, one behaviour each."""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import pytest

from acceltrace.ingest.chrome import importer as chrome, reader as chrome_reader
from acceltrace.ingest import pipeline
from acceltrace.store.catalog import Store


def ingest_text(tmp_path: Path, text, name: str = "t.json", **kw):
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / name
    data = text if isinstance(text, bytes) else (text if isinstance(text, str) else json.dumps(text)).encode()
    path.write_bytes(gzip.compress(data) if name.endswith(".gz") else data)
    store = Store(tmp_path / "store")
    res = pipeline.ingest_paths(store, [path], **kw)[0]
    assert res.error is None, res.error
    return store.connect(res.id), res


def rows(con, sql):
    return con.execute(sql).fetchall()


def ev(ph, name="e", ts=0, **kw):
    d = {"ph": ph, "name": name, "pid": 1, "tid": 1, "ts": ts}
    d.update(kw)
    return d


def test_microsecond_decimals_become_exact_nanoseconds(tmp_path):
    text = ('{"traceEvents": [{"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": 1419116963736.702, "dur": 0.001},'
            '{"ph": "X", "name": "b", "pid": 1, "tid": 1, "ts": "1419116963736.703", "dur": "2"},'
            '{"ph": "X", "name": "c", "pid": 1, "tid": 1, "ts": 1700000000000000.123, "dur": 1.5},'
            '{"ph": "X", "name": "d", "pid": 1, "tid": 1, "ts": 1700000000000001, "dur": 1}]}')
    con, _ = ingest_text(tmp_path, text)
    got = dict((n, (t, d)) for n, t, d in rows(con, "SELECT name, ts, dur FROM slices"))
    assert got["a"] == (1419116963736702, 1)
    assert got["b"] == (1419116963736703, 2000)
    assert got["c"] == (1700000000000000123, 1500)
    assert got["d"] == (1700000000000001000, 1000)


def test_complete_and_nested_begin_end_events_nest_by_depth(tmp_path):
    evs = [ev("B", "outer", 0), ev("X", "inner", 10, dur=5), ev("B", "mid", 20), ev("E", "", 30),
           ev("E", "", 100), ev("X", "after", 100, dur=1)]
    con, res = ingest_text(tmp_path, {"traceEvents": evs})
    got = {n: (t, d, dp) for n, t, d, dp in rows(con, "SELECT name, ts, dur, depth FROM slices")}
    assert got == {"outer": (0, 100000, 0), "inner": (10000, 5000, 1), "mid": (20000, 10000, 1),
                   "after": (100000, 1000, 0)}
    assert res.warnings == []


def test_unmatched_begin_and_end_become_counted_warnings(tmp_path):
    evs = [ev("E", "", 1), ev("B", "never closed", 2), ev("X", "ok", 3, dur=1)]
    con, res = ingest_text(tmp_path, evs)
    assert [r[0] for r in rows(con, "SELECT name FROM slices")] == ["ok"]
    assert any("E events without an open B" in w for w in res.warnings)
    assert any("B events never closed" in w for w in res.warnings)
    assert res.counts["dropped_events"] == 2


def test_unsorted_input_gives_the_same_trace_as_sorted(tmp_path):
    evs = [ev("X", f"s{i}", ts=i * 10, dur=5) for i in range(50)] + [ev("B", "b", 600), ev("E", "", 700)]
    a, _ = ingest_text(tmp_path / "a", evs)
    b, _ = ingest_text(tmp_path / "b", list(reversed(evs)))
    q = "SELECT name, ts, dur, depth FROM slices ORDER BY ts, name"
    assert rows(a, q) == rows(b, q)


def test_instants_scopes_go_to_thread_process_and_global_tracks(tmp_path):
    evs = [ev("X", "x", 0, dur=10), ev("i", "thread", 1, s="t"), ev("I", "proc", 2, s="p"),
           ev("i", "global", 3, s="g", pid="", tid="")]
    con, _ = ingest_text(tmp_path, evs)
    got = dict(rows(con, "SELECT s.name, t.name FROM slices s JOIN tracks t USING (track_id) WHERE dur = 0"))
    assert got == {"thread": "thread 1", "proc": "process instants", "global": "global instants"}
    assert rows(con, "SELECT count(*) FROM tracks")[0][0] == 3  # no empty track for pid "" / tid ""


def test_counter_args_become_one_series_each_with_id_suffix(tmp_path):
    evs = [ev("C", "mem", 1, args={"used": 5, "free": 7.5}), ev("C", "mem", 2, args={"used": 6, "free": 6.5}),
           ev("C", "q", 1, id=3, args={"q": 2}), ev("X", "x", 0, dur=5)]
    con, _ = ingest_text(tmp_path, evs)
    got = rows(con, "SELECT t.name, t.lane, count(*), max(value) FROM counters JOIN tracks t USING (track_id)"
                    " GROUP BY ALL ORDER BY 1")
    assert got == [("mem: free", "counter", 2, 7.5), ("mem: used", "counter", 2, 6.0), ("q[3]", "counter", 1, 2.0)]


def test_flow_events_bind_to_enclosing_or_next_slice(tmp_path):
    evs = [ev("X", "a", 0, dur=100), ev("X", "a-child", 10, dur=5), ev("s", "f", 50, id=1, cat="c"),
           ev("X", "b", 200, dur=10, tid=2), ev("f", "f", 190, id=1, cat="c", tid=2),  # no bp: next slice
           ev("s", "g", 205, id=2, cat="c", tid=2), ev("X", "c", 295, dur=15), ev("t", "g", 300, id=2, cat="c"),
           ev("X", "d", 350, dur=100), ev("f", "g", 400, id=2, cat="c", bp="e")]
    con, _ = ingest_text(tmp_path, evs)
    got = rows(con, "SELECT a.name, b.name, f.kind, f.raw_kind FROM flows f JOIN slices a ON a.slice_id = f.src_slice"
                    " JOIN slices b ON b.slice_id = f.dst_slice ORDER BY 1, 2")
    # s inside a after its child ended -> a; f without bp -> the next slice b; t and f(bp=e) -> enclosing
    assert got == [("a", "b", "other", "c"), ("b", "c", "other", "c"), ("c", "d", "other", "c")]


@pytest.mark.parametrize("arrow_bytes", [None, 1], ids=["arrow", "moved-into-duckdb"])
def test_a_base_time_after_the_events_moves_every_staged_kind_as_one_before_them_does(tmp_path, monkeypatch,
                                                                                     arrow_bytes):
    # relative times with baseTimeNanoseconds written after traceEvents: slices, flow events, v2
    # bindings, B/E and async events are staged before the base is seen and must all move with it
    # (with arrow_bytes 1, every staged row moves into DuckDB at once and the late base is an UPDATE there)
    if arrow_bytes is not None:
        from acceltrace.ingest.chrome import state as chrome_state
        monkeypatch.setattr(chrome_state, "STAGE_ARROW_BYTES", arrow_bytes)
    base = 1_767_189_312_000_000_000
    evs = [ev("X", "a", 0, dur=100), ev("X", "a-child", 10, dur=5), ev("s", "f", 50, id=1, cat="c"),
           ev("X", "b", 200, dur=10, tid=2), ev("f", "f", 190, id=1, cat="c", tid=2),
           ev("X", "v-src", 500, dur=10, bind_id="0x1", flow_out=True),
           ev("X", "v-dst", 540, dur=10, bind_id="0x1", flow_in=True),
           ev("B", "be", 600), ev("E", "", 650),
           ev("b", "as", 700, id=5, cat="async"), ev("e", "as", 780, id=5, cat="async")]
    events = json.dumps(evs)
    late, _ = ingest_text(tmp_path / "late", '{"traceEvents": ' + events + f', "baseTimeNanoseconds": {base}}}')
    early, _ = ingest_text(tmp_path / "early", f'{{"baseTimeNanoseconds": {base}, "traceEvents": ' + events + "}")
    q_slices = "SELECT name, ts, dur, depth FROM slices ORDER BY ts, name"
    q_flows = ("SELECT a.name, b.name, f.raw_kind FROM flows f JOIN slices a ON a.slice_id = f.src_slice"
               " JOIN slices b ON b.slice_id = f.dst_slice ORDER BY 1, 2")
    got = rows(late, q_slices)
    assert got == rows(early, q_slices)
    assert {n: t - base for n, t, _, _ in got} == {"a": 0, "a-child": 10_000, "b": 200_000, "v-src": 500_000,
                                                   "v-dst": 540_000, "be": 600_000, "as": 700_000}
    assert rows(late, q_flows) == rows(early, q_flows) == [("a", "b", "c"), ("v-src", "v-dst", "flow_v2")]


def test_v2_flows_link_flow_out_to_next_flow_in(tmp_path):
    evs = [ev("X", "src", 0, dur=10, bind_id="0x1", flow_out=True),
           ev("X", "mid", 20, dur=10, bind_id="0x1", flow_in=True, flow_out=True),
           ev("X", "dst", 40, dur=10, bind_id="0x1", flow_in=True)]
    con, _ = ingest_text(tmp_path, evs)
    got = rows(con, "SELECT a.name, b.name, f.raw_kind FROM flows f JOIN slices a ON a.slice_id = f.src_slice"
                    " JOIN slices b ON b.slice_id = f.dst_slice ORDER BY 1")
    assert got == [("mid", "dst", "flow_v2"), ("src", "mid", "flow_v2")]


def test_metadata_names_and_sorts_tracks(tmp_path):
    evs = [ev("X", "a", 0, dur=1, pid=7, tid=70), ev("X", "b", 0, dur=1, pid=8, tid=80),
           {"ph": "M", "name": "process_name", "pid": 8, "tid": 0, "args": {"name": "trainer"}},
           {"ph": "M", "name": "process_sort_index", "pid": 8, "tid": 0, "args": {"sort_index": -1}},
           {"ph": "M", "name": "thread_name", "pid": 8, "tid": 80, "args": {"name": "main"}}]
    con, _ = ingest_text(tmp_path, evs)
    got = rows(con, "SELECT group_name, name, process, thread FROM tracks ORDER BY sort_key")
    assert got == [("trainer (8)", "main", "8", "80"), ("process 7", "thread 70", "7", "70")]


def test_repeated_metadata_the_last_of_each_key_wins(tmp_path):
    """Real files repeat M events many times (an MTIA trace: 310,000 for 22 facts); only the last of
    each (name, pid, tid) counts, and where 8 and "8" name one process the later-seen key wins."""
    def meta(kind, pid, tid, **args):
        return {"ph": "M", "name": kind, "pid": pid, "tid": tid, "args": args}
    evs = [ev("X", "a", 0, dur=1, pid=8, tid=80), ev("X", "b", 0, dur=1, pid=9, tid=90)]
    for i in range(300):  # interleaved, as a profiler that writes them per flush does
        evs += [meta("process_name", 8, 0, name=f"p8-{i}"), meta("thread_name", 9, 90, name=f"t90-{i}"),
                meta("process_sort_index", 9, 0, sort_index=i % 7), meta("thread_name", 8, 80, name="old")]
    evs += [meta("process_name", "8", 0, name="string-pid"), meta("thread_name", 8, 80, name="main")]
    con, _ = ingest_text(tmp_path, {"traceEvents": evs})
    got = set(rows(con, "SELECT group_name, name, process FROM tracks"))
    assert got == {("string-pid (8)", "main", "8"), ("process 9", "t90-299", "9")}


def test_async_begin_end_pairs_become_slices(tmp_path):
    evs = [ev("b", "load", 0, id="0x1", cat="io"), ev("b", "load", 5, id="0x2", cat="io"),
           ev("n", "tick", 7, id="0x1", cat="io"), ev("e", "load", 10, id="0x1", cat="io"),
           ev("e", "load", 20, id="0x2", cat="io"), ev("e", "lost", 30, id="0x3", cat="io")]
    con, res = ingest_text(tmp_path, evs)
    got = sorted(rows(con, "SELECT s.name, s.ts, s.dur, t.name FROM slices s JOIN tracks t USING (track_id)"))
    assert got == [("load", 0, 10000, "async io"), ("load", 5000, 15000, "async io"), ("tick", 7000, 0, "async io")]
    assert res.counts["dropped_events"] == 1


def test_pid_and_tid_as_int_or_string_are_one_thread(tmp_path):
    evs = [ev("X", "a", 0, dur=1, pid=5, tid=6), ev("X", "b", 2, dur=1, pid="5", tid="6"),
           ev("X", "c", 4, dur=1, pid=5.0, tid="6")]
    con, _ = ingest_text(tmp_path, evs)
    assert rows(con, "SELECT count(DISTINCT track_id) FROM slices")[0][0] == 1


def test_track_ids_do_not_depend_on_the_string_hash_seed(tmp_path):
    """Int and string pids in one chunk (as PyTorch Profiler's "Spans" beside numeric pids): the same
    file gives the same track ids in every process. Their codes followed a set's order, which moves
    with PYTHONHASHSEED, so a re-ingest renumbered the tracks and with them every slice id."""
    import subprocess
    import sys

    pids = ["Spans", 542, "Traces", 17, "Host", "Device", 3, "Other"]
    path = tmp_path / "mixed.json"
    path.write_text(json.dumps([ev("X", f"e{i}", i * 10, dur=5, pid=p, tid=i) for i, p in enumerate(pids)]))
    code = ("import sys, tempfile; from pathlib import Path; from acceltrace.ingest import pipeline;"
            " from acceltrace.store.catalog import Store; s = Store(tempfile.mkdtemp());"
            " r = pipeline.ingest_paths(s, [Path(sys.argv[1])], views=False)[0];"
            " print(s.connect(r.id).execute('SELECT track_id, process FROM tracks ORDER BY 1').fetchall())")
    seen = {subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, timeout=120,
                           env={**os.environ, "PYTHONHASHSEED": str(seed)}, check=True).stdout
            for seed in (1, 2, 3, 4)}
    assert len(seen) == 1, seen


def test_codes_are_in_order_of_first_appearance():
    from acceltrace.ingest.chrome.columns import codes

    vals = ["b", 7, "a", "b", 3.5, 7, "z"]
    c, uniq = codes(vals)
    assert uniq == ["b", 7, "a", 3.5, "z"] and c.tolist() == [0, 1, 2, 0, 3, 1, 4]


def test_big_integers_in_args_are_kept_verbatim(tmp_path):
    text = b'[{"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": 1, "dur": 1, "args": {"ptr": 123456789012345678901234567890}}]'
    con, _ = ingest_text(tmp_path, text)
    (args,) = rows(con, "SELECT args FROM slices")[0]
    assert "123456789012345678901234567890" in args


def test_leading_blank_line_and_bom_are_tolerated(tmp_path):
    text = "\ufeff\n\n" + json.dumps({"traceEvents": [ev("X", "a", 1, dur=1)]})
    con, _ = ingest_text(tmp_path, text.encode("utf-8"))
    assert rows(con, "SELECT name FROM slices") == [("a",)]


def test_external_id_in_either_spelling_links_op_to_runtime_call(tmp_path):
    evs = [ev("X", "aten::mm", 0, dur=50, cat="cpu_op", args={"External id": 9}),
           ev("X", "cudaLaunchKernel", 10, dur=5, cat="cuda_runtime", args={"external id": 9, "correlation": 77}),
           ev("X", "gemm", 20, dur=30, cat="kernel", pid=0, tid=7, args={"correlation": 77, "stream": 7})]
    con, _ = ingest_text(tmp_path, evs)
    got = rows(con, "SELECT a.name, b.name, f.kind, f.raw_kind FROM flows f JOIN slices a ON a.slice_id = f.src_slice"
                    " JOIN slices b ON b.slice_id = f.dst_slice ORDER BY 1")
    assert got == [("aten::mm", "cudaLaunchKernel", "other", "external_id"),
                   ("cudaLaunchKernel", "gemm", "launch", "correlation")]


def test_driver_record_makes_exec_and_submit_flows(tmp_path):
    evs = [ev("X", "runFunction", 0, dur=5, cat="mtia_runtime", args={"correlation": 1}),
           ev("X", "job", 10, dur=5, cat="mtia_ccp_events", pid=9, tid=4, args={"correlation": 1}),
           ev("X", "dma_request", 12, dur=1, cat="mtia_ccp_events", pid=9, tid=801,
              args={"direction": "HOST_TO_DEVICE", "size": 4096}),
           ev("X", "cudaLaunch", 20, dur=5, cat="cuda_runtime", args={"correlation": 2}),
           ev("X", "cuLaunchKernel", 21, dur=2, cat="cuda_driver", args={"correlation": 2}),
           ev("X", "k", 30, dur=5, cat="kernel", pid=0, tid=7, args={"correlation": 2})]
    con, _ = ingest_text(tmp_path, evs)
    kinds = sorted(rows(con, "SELECT a.name, b.name, f.kind FROM flows f JOIN slices a ON a.slice_id = f.src_slice"
                             " JOIN slices b ON b.slice_id = f.dst_slice"))
    assert kinds == [("cuLaunchKernel", "k", "exec"), ("cudaLaunch", "cuLaunchKernel", "submit"),
                     ("runFunction", "job", "exec")]
    dma = rows(con, "SELECT t.lane, t.name, s.bytes, s.direction FROM slices s JOIN tracks t USING (track_id)"
                    " WHERE s.name = 'dma_request'")
    assert dma == [("pcie", "PCIe HtoD", 4096, "h2d")]


def test_cut_off_array_loads_whole_events_with_a_warning(tmp_path):
    full = json.dumps({"traceEvents": [ev("X", f"e{i}", i, dur=1) for i in range(10)]})
    cut = full[: full.index('"e9"') - 30]
    con, res = ingest_text(tmp_path, cut)
    n = rows(con, "SELECT count(*) FROM slices")[0][0]
    assert 7 <= n < 10
    assert any("cut off" in w and "no closing" in w for w in res.warnings)


@pytest.mark.parametrize("block", [1, 7, 64])
def test_tiny_read_sizes_give_the_same_trace(tmp_path, monkeypatch, block):
    evs = ([{"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": "a \\\" } ] { ["}}]
           + [ev("X", f"op{i} }}, {{", i * 3, dur=2, args={"s": "x\"}]" * (i % 3)}) for i in range(40)])
    text = json.dumps({"before": {"traceEvents": 1}, "traceEvents": evs, "after": [1, {"x": "]"}]})
    q = "SELECT name, ts, dur, args FROM slices ORDER BY ts"
    ref, _ = ingest_text(tmp_path / "ref", text)
    monkeypatch.setattr(chrome_reader, "BLOCK_BYTES", block)
    small, _ = ingest_text(tmp_path / "small", text)
    assert rows(small, q) == rows(ref, q)
    assert rows(small, "SELECT name FROM tracks") == [(evs[0]["args"]["name"],)]


def test_same_content_under_an_unknown_name_is_detected_by_content(tmp_path):
    text = json.dumps({"traceEvents": [ev("X", "a", 1, dur=1)]})
    con, res = ingest_text(tmp_path, text, name="capture.bin")
    assert res.format == "chrome"


def test_sniff_accepts_objects_and_arrays_but_not_other_json():
    assert chrome.sniff(b'\n{"traceEvents": [')
    assert chrome.sniff(b'\xef\xbb\xbf[{"ph": "X"')
    assert chrome.sniff(b"[]")
    assert not chrome.sniff(b'{"rows": [1, 2]}')
    assert not chrome.sniff(b"[1, 2, 3]")


def test_reader_reads_in_blocks_and_yields_many_small_chunks():
    import io

    from acceltrace.ingest.chrome.columns import decode_events

    class Recording(io.BytesIO):
        sizes: list = []

        def read(self, n=-1):
            self.sizes.append(n)
            return super().read(n)

    text = json.dumps({"traceEvents": [ev("X", f"e{i}", i, dur=1) for i in range(200)]}).encode()
    stream = Recording(text)
    reader = chrome_reader.ChromeReader(stream, "t.json", decode_events, block=256)
    chunks = list(reader.chunks())
    assert max(stream.sizes) == 256 and all(n is not None and n > 0 for n in stream.sizes)
    assert len(chunks) > 20 and sum(len(c.events) for c in chunks) == 200


@pytest.mark.parametrize("head, ending", [
    (b'{"traceEvents": [', b"]}"), (b'{"traceEvents": [', b",\n ]}\n"), (b'{"traceEvents": [', b'], "after": {"x": "]"}}'),
    (b'{"traceEvents": [', b"]} junk"), (b'{"traceEvents": [', b""), (b"[", b"]"), (b"[", b" , ]\n"), (b"[", b"]]"),
])
def test_the_last_chunk_decoded_ahead_reads_as_it_does_in_line(head, ending):
    """At the end of input the last events are cut and decoded on the scan thread too (while the chunk
    before is turned into rows); chunks, offsets and what the reader reports equal a reader's without it."""
    import io
    import threading

    from acceltrace.ingest.chrome.columns import decode_events

    body = b", ".join(json.dumps(ev("X", f"e{i}", i, dur=1, args={"k": "x" * (i % 50)})).encode() for i in range(300))
    text = head + body + ending
    got = {}
    for ahead in (True, False):
        threads = []

        def decode(raw):
            threads.append(threading.current_thread().name)
            return decode_events(raw)

        reader = chrome_reader.ChromeReader(io.BytesIO(text), "t.json", decode, block=4096, prefetch=ahead)
        try:
            chunks = [(c.offset, c.first_index, len(c.events), c.raw) for c in reader.chunks()]
        except Exception as e:  # the same error both ways
            chunks = [repr(e)]
        r = reader.result
        got[ahead] = (chunks, r.events, r.cut_off, r.partial_event, r.ignored_tail, r.meta)
        if ahead and ending in (b"]}", b"]"):
            assert threads[-1].startswith("chrome-scan"), threads  # the last chunk was decoded ahead
    assert got[True] == got[False]
    assert len(got[True][0]) > 5


@pytest.mark.parametrize("compiled", [True, False])
def test_memory_events_levels_and_running_sums_on_both_paths(tmp_path, monkeypatch, compiled):
    """`[memory]` instants: device totals as levels, old files' signed sizes as running sums per device
    (per process for host memory, where pid 7 and "7" are one process); events without either are
    counted as skipped, never dropped silently."""
    from acceltrace.ingest.chrome import columns

    monkeypatch.setattr(columns, "USE_COMPILED", compiled)

    def mem(ts, pid, **args):
        return {"ph": "i", "name": "[memory]", "pid": pid, "tid": 1, "ts": ts, "s": "t", **({"args": args} if args else {})}
    evs = [ev("X", "k", 0, dur=50, pid=7, tid=1),
           mem(1, 7, **{"Device Id": 0, "Total Allocated": 100, "Total Reserved": 200}),
           mem(2, 7, **{"Device Id": 0, "Total Allocated": 300, "Total Reserved": 400}),
           mem(3, 7, **{"Device Id": -1, "Bytes": 64}), mem(4, "7", **{"Device Id": -1, "Bytes": 36}),
           mem(5, 8, **{"Device Id": -1, "Bytes": 5}), mem(6, 7, **{"Device Id": 1, "Bytes": -10}),
           mem(7, 7), mem(8, 7, **{"Device Id": 0})]
    con, res = ingest_text(tmp_path, {"traceEvents": evs})
    got = rows(con, "SELECT t.name, t.device, c.ts, c.value FROM counters c JOIN tracks t USING (track_id)"
                    " ORDER BY 1, 2 NULLS FIRST, 3")
    assert got == [("memory allocated", "0", 1000, 100.0), ("memory allocated", "0", 2000, 300.0),
                   ("memory allocated since trace start", None, 3000, 64.0),
                   ("memory allocated since trace start", None, 4000, 100.0),
                   ("memory allocated since trace start", None, 5000, 5.0),
                   ("memory allocated since trace start", "1", 6000, -10.0),
                   ("memory reserved", "0", 1000, 200.0), ("memory reserved", "0", 2000, 400.0)]
    assert res.warnings == ["t.json: 2 [memory] events without a device total or a size were skipped"]
    assert res.counts["dropped_events"] == 2


@pytest.mark.parametrize("compiled", [True, False])
@pytest.mark.parametrize("at", [5, 150, 297])
def test_a_stray_quote_anywhere_is_an_error_at_its_byte_not_a_cut_off_array(tmp_path, monkeypatch, compiled, at):
    """A value that lost its opening quote makes the structural scan read the rest of the file as one
    string: it once loaded the events before it and called the array cut off, dropping all after it."""
    from acceltrace.ingest.chrome import columns

    monkeypatch.setattr(columns, "USE_COMPILED", compiled)
    monkeypatch.setattr(chrome_reader, "BLOCK_BYTES", 4096)  # many blocks: the bad one in the middle, first or last
    text = json.dumps({"traceEvents": [ev("X", f"op{i}", i, dur=1, args={"k": "x" * (i % 40)}) for i in range(300)]})
    bad = text.replace(f'"name": "op{at}"', f'"name": op{at}"')
    path = tmp_path / "t.json"
    path.write_text(bad)
    res = pipeline.ingest_paths(Store(tmp_path / "store"), [path])[0]
    assert res.error == f"t.json: byte {bad.index(f'op{at}' + chr(34))}: invalid JSON near" \
        f" {bad[bad.index(f'op{at}' + chr(34)):][:24].encode()!r}; expected a JSON value"
    assert Store(tmp_path / "store").list() == []


@pytest.mark.parametrize("compiled", [True, False])
def test_a_stray_quote_in_the_last_event_of_a_closed_array_is_an_error_not_a_cut(tmp_path, monkeypatch, compiled):
    """The error of a stray quote a few bytes before the file's end looks like a cut inside a token, except that
    the array's ']' and the object's '}' still follow it: it once loaded the events before it and said "cut off
    (no closing ']')" of a file that ends in "]}"."""
    from acceltrace.ingest.chrome import columns

    monkeypatch.setattr(columns, "USE_COMPILED", compiled)
    bad = ('{"traceEvents": [{"ph": "X", "name": "a", "ts": 1, "dur": 2, "pid": 1, "tid": 1},'
           ' {"ph": "X", "name": "b", "ts": 3, "dur": "oops, "pid": 1}]}')
    path = tmp_path / "t.json"
    path.write_text(bad)
    res = pipeline.ingest_paths(Store(tmp_path / "store"), [path])[0]
    at = bad.index('pid": 1}]}')
    assert res.error == f"t.json: byte {at}: invalid JSON near {bad[at:].encode()!r}; expected a JSON value"
    assert Store(tmp_path / "store").list() == []


@pytest.mark.parametrize("token", ['"flag": tr', '"n": 12.', '"s": "\\u00e', '"n": -'])
def test_a_file_cut_inside_its_last_token_is_still_a_cut_off_array(tmp_path, token):
    """...and a file cut inside a literal, a number or an escape, with no bracket after the cut, still loads its
    whole events with the cut-off warning."""
    text = json.dumps({"traceEvents": [ev("X", f"e{i}", i, dur=1) for i in range(5)]})
    cut = text[: text.rindex("]")] + ", {" + token
    con, res = ingest_text(tmp_path, cut)
    assert rows(con, "SELECT count(*) FROM slices")[0][0] == 5
    assert any("cut off" in w and "dropped the partial last one" in w for w in res.warnings), res.warnings


def test_an_event_longer_than_many_blocks_is_checked_for_bad_json_once():
    """The check for a stray quote decodes the whole unfinished buffer: once per event, not once per read
    while an event of many blocks arrives (that made a large event's reading quadratic twice over)."""
    import io

    from acceltrace.ingest.chrome.columns import decode_events

    calls = []
    real = chrome_reader.fail_if_malformed

    def counted(*a):
        calls.append(a[2])
        return real(*a)

    events = [ev("X", "a", 1, dur=1), ev("X", "big", 2, dur=1, args={"blob": "x" * 40_000}), ev("X", "b", 3, dur=1)]
    text = json.dumps({"traceEvents": events}).encode()
    reader = chrome_reader.ChromeReader(io.BytesIO(text), "t.json", decode_events, block=256, prefetch=False)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(chrome_reader, "fail_if_malformed", counted)
        got = [e.name for c in reader.chunks() for e in c.events]
    assert got == ["a", "big", "b"]
    assert len(calls) == len(set(calls)) >= 1  # one check per stream offset (the big event's start)


def test_structure_scanned_on_from_a_prefix_is_the_whole_buffers():
    """blocks.structure_from resumes where a scan of a prefix stopped (depth, inside a string or not,
    a run of backslashes across the cut): the same brackets and depths as one scan of the whole."""
    import random

    from acceltrace.ingest.chrome.blocks import structure, structure_from

    rng = random.Random(4)
    pieces = ['{"a": [1, {"b": "x}]"}]}', '"\\\\"', '"\\""', '"q\\\\\\"[{"', ", ", "[[", "]]", "{}", '"{"', "\\"]
    for _ in range(300):
        buf = "".join(rng.choice(pieces) for _ in range(rng.randint(1, 30))).encode()
        st, depth = structure(buf)
        state, got_st, got_depth = (0, 0, False), [], []
        cuts = sorted(rng.sample(range(len(buf) + 1), min(len(buf) + 1, rng.randint(1, 5)))) + [len(buf)]
        for cut in cuts:  # the buffer as it grows: each scan picks up from the last one's state
            if cut < state[0]:
                continue
            s, d, state = structure_from(buf[:cut], state)
            got_st += s.tolist()
            got_depth += d.tolist()
        assert got_st == st.tolist() and got_depth == depth.tolist(), buf


def test_an_event_of_many_blocks_is_scanned_once_not_once_per_read(monkeypatch):
    """Each read of an event that spans many blocks scans only the new bytes (a 100 MB event took 8.7 s
    when every read rescanned it from its start, 2.2 s after), and still reads as one event."""
    import io

    from acceltrace.ingest.chrome import blocks, reader as reader_mod
    from acceltrace.ingest.chrome.columns import decode_events

    scanned = []
    real = blocks.structure_from

    def counted(buf, state=(0, 0, False)):
        scanned.append(len(buf) - state[0])
        return real(buf, state)

    monkeypatch.setattr(reader_mod, "structure_from", counted)
    blob = [{"k": i, "s": "x}" * (i % 7)} for i in range(20_000)]  # braces inside strings and objects both
    events = [ev("X", "a", 1, dur=1), ev("X", "big", 2, dur=1, args={"blob": blob}), ev("X", "b", 3, dur=1)]
    text = json.dumps({"traceEvents": events}).encode()
    r = chrome_reader.ChromeReader(io.BytesIO(text), "t.json", decode_events, block=4096, prefetch=False)
    got = [(e.name, len(json.loads(bytes(e.args))["blob"]) if e.name == "big" else 0)
           for c in r.chunks() for e in c.events]
    assert got == [("a", 0), ("big", 20_000), ("b", 0)]
    assert len(scanned) > 50  # many reads of the big event ...
    assert sum(scanned) < 2 * len(text)  # ... each scanning its new bytes (rescans: ~len(text)**2 / 8192)


def test_correlation_flow_events_link_only_ids_with_a_start_and_lone_ends_bind_as_before(tmp_path):
    """ac2g's s -> f links its two slices; ac2g 'f' events whose id has no 's' or 't' (A100's 28 k) link
    nothing and are not noted when they bind (the edges' windows leave them out, every id kept whole);
    a lone 'f' that binds no slice is still noted; a lone 'f' of another category is still a half flow."""
    evs = [ev("X", "launch", 0, dur=10), ev("s", "ac2g", 5, id=7, cat="ac2g"),
           ev("X", "kernel", 20, dur=5, tid=2), ev("f", "ac2g", 20, id=7, cat="ac2g", tid=2, bp="e"),
           ev("X", "kernel2", 30, dur=5, tid=2), ev("f", "ac2g", 31, id=8, cat="ac2g", tid=2, bp="e"),
           ev("f", "ac2g", 31, id=7, cat="ac2g", tid=3, bp="e"),  # id 7 on a thread without slices
           ev("f", "other", 32, id=9, cat="c", tid=2, bp="e")]
    con, res = ingest_text(tmp_path, evs)
    got = rows(con, "SELECT a.name, b.name, f.raw_kind FROM flows f LEFT JOIN slices a ON a.slice_id = f.src_slice"
                    " LEFT JOIN slices b ON b.slice_id = f.dst_slice ORDER BY 1 NULLS FIRST, 2")
    assert got == [(None, "kernel2", "c"), ("launch", "kernel", "ac2g")]
    assert [w for w in res.warnings if "match no slice" in w] == ["t.json: event 6: 1 flow events match no slice on their"
                                                                " thread at their time (not linked)"]
