"""The Python client writing an .atrace file directly (no daemon): spans, explicit times, threads."""

import json
import threading

import pytest

from _client_paths import client_path  # noqa: F401  (both client paths)

from acceltrace.collect import client
from acceltrace.formats import record as R
from acceltrace.formats.atrace.reader import AtraceReader


def _read(path):
    r = AtraceReader.open(path)
    recs, _ = r.read_all()
    names = r.strings[0]
    return r, recs, names


def test_span_writes_one_complete_record_with_typed_and_json_args(tmp_path):
    p = tmp_path / "a.atrace"
    t = client.connect(file=p)
    with t.span("memcpy", lane="cpu", corr=5, bytes=4096, direction="h2d", mem="pageable", stream=3):
        pass
    t.close()
    r, recs, names = _read(p)
    (rec,) = recs
    assert names[rec["name"]] == "memcpy" and rec["kind"] == R.COMPLETE and rec["dur"] >= 0
    assert (rec["corr"], rec["bytes"], rec["direction"], rec["mem"]) == (5, 4096, 1, 1)
    assert rec["flags"] & R.FLAG_HAS_BYTES and rec["flags"] & R.FLAG_HAS_CORR
    assert json.loads(names[rec["args"]]) == {"stream": 3}
    assert r.trailer["lost_events"] == 0 and r.trailer["events"] == 1


def test_explicit_timestamps_in_a_device_clock_domain(tmp_path):
    p = tmp_path / "b.atrace"
    t = client.connect(file=p, header={"devices": [{"index": 0, "link_gen": 5, "link_width": 16}]})
    t.clock_domain(1, "dev0", device=0, hz=1.5e9)
    t.clock_sync(1, [1000, 2000], [0, 1500])
    t.complete("gemm", ts=300, dur=150, lane="eu", clock=1, device=0, tid=2, corr=9)
    t.name_track("eu", 2, "matrix unit 2", device=0)
    t.close()
    r, recs, names = _read(p)
    k = recs[recs["kind"] == R.COMPLETE][0]
    assert (k["ts"], k["dur"], k["clock"], k["device"], k["tid"], k["lane"]) == (300, 150, 1, 0, 2, 3)
    md = r.merged_metadata()
    assert md["devices"][0]["link_gen"] == 5
    assert {"id": 1, "name": "dev0", "kind": "device", "device": 0, "hz": 1.5e9} in md["clock_domains"]
    tn = recs[recs["kind"] == R.TRACK_NAME][0]
    assert names[tn["name"]] == "matrix unit 2"


def test_decorator_counts_each_call_on_the_calling_thread(tmp_path):
    p = tmp_path / "c.atrace"
    t = client.connect(file=p)

    @t.span("step")
    def step(x):
        return x * 2

    assert step(2) == 4
    tids = []

    def other():
        tids.append(threading.get_native_id())
        step(3)

    th = threading.Thread(target=other)
    th.start()
    th.join()
    t.close()
    _, recs, names = _read(p)
    assert len(recs) == 2
    assert tids[0] in recs["tid"].tolist() and threading.get_native_id() in recs["tid"].tolist()


def test_many_threads_lose_nothing(tmp_path):
    p = tmp_path / "d.atrace"
    t = client.connect(file=p)

    def work(i):
        for j in range(5000):
            with t.span(f"w{i}", corr=j + 1):
                pass

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    t.close()
    _, recs, names = _read(p)
    assert len(recs) == 20000
    for i in range(4):
        mine = recs[recs["name"] == [k for k, v in names.items() if v == f"w{i}"][0]]
        assert sorted(mine["corr"].tolist()) == list(range(1, 5001))


def test_counter_begin_end_instant_and_flows(tmp_path):
    p = tmp_path / "e.atrace"
    t = client.connect(file=p)
    f = t.flow()
    t.begin("outer", flow_out=f)
    t.instant("mark")
    t.end("outer")
    t.instant("later", flow_in=f, flow_kind="dependency")
    t.counter("queue depth", 3.5, unit="entries")
    t.close()
    _, recs, names = _read(p)
    kinds = recs["kind"].tolist()
    assert kinds == [R.BEGIN, R.INSTANT, R.END, R.INSTANT, R.COUNTER]
    assert recs[0]["flags"] & R.FLAG_FLOW_OUT and recs[3]["flags"] & R.FLAG_FLOW_IN
    assert recs[0]["flow"] == recs[3]["flow"] == f and recs[3]["flow_kind"] == R.FLOW_CODES["dependency"]
    assert R.counter_values(recs[4:5])[0] == 3.5 and names[recs[4]["cat"]] == "entries"


def test_bad_typed_values_are_refused_at_the_call():
    t = client.connect(file="/dev/null")
    with pytest.raises(ValueError, match="unknown direction 'up'"):
        t.complete("x", 0, 1, direction="up")
    with pytest.raises(ValueError, match="negative duration"):
        t.complete("x", 0, -1)
    # out-of-range ids and sizes: a ValueError naming the field when the span is made, not a
    # struct.error at its exit
    with pytest.raises(ValueError, match="bytes must be"):
        t.span("x", bytes=-1)
    with pytest.raises(ValueError, match="corr must be"):
        t.span("x", corr=-5)
    with pytest.raises(ValueError, match="flow id must be"):
        t.instant("x", flow_out=1 << 40)
    with t.span("x", corr=5, bytes=10):
        pass
    t.close()


def test_no_daemon_and_no_file_is_a_clear_error(monkeypatch):
    monkeypatch.delenv("ACCELTRACE_SOCKET", raising=False)
    with pytest.raises(client.ClientError, match="no tracing daemon"):
        client.connect()


def test_bulk_records_keep_their_order_after_buffered_spans(tmp_path):
    import numpy as np

    p = tmp_path / "bulk.atrace"
    t = client.connect(file=p)
    t.instant("first", ts=1)
    n = t.intern("bulk")
    recs = np.zeros(5000, R.RECORD_DTYPE)
    recs["kind"], recs["name"], recs["ts"] = R.INSTANT, n, np.arange(5000) + 10
    t.write_records(recs)
    t.close()
    _, got, names = _read(p)
    assert len(got) == 5001 and names[got["name"][0]] == "first"
    assert got["ts"][1:].tolist() == list(range(10, 5010))
