"""Ingest of .atrace files and run directories: tracks, clocks, flows, begin/end, meta, damage."""

import json
import shutil

import numpy as np
import pytest

from acceltrace.collect import client
from acceltrace.formats import record as R
from acceltrace.formats.atrace.reader import AtraceReader
from acceltrace.formats.atrace.writer import AtraceWriter, default_header
from acceltrace.ingest.pipeline import ingest_paths
from acceltrace.store.catalog import Store

DEVICES = [{"id": 0, "name": "dev0", "link_gen": 4, "link_width": 16, "max_payload_bytes": 256},
           {"id": 1, "name": "dev1", "link_gen": 5, "link_width": 8, "max_payload_bytes": 512}]


def _sim_like(path, cut_trailer=False):
    """What the device model writes: API call -> submission -> doorbell -> DMA (device clock) + kernel by corr."""
    t = client.connect(file=path, header={"devices": DEVICES, "host_clock": "virtual"}, pid=100)
    t.name_process("trainer", pid=100)
    t.name_track("cpu", 1, "main", pid=100)
    t.name_track("driver", 0, "dev0 queue 0", device=0, pid=100)
    t.name_track("pcie", 0, "dev0 h2d engine 0", device=0)
    t.name_track("eu", 2, "dev0 matrix 0", device=0)
    t.clock_domain(1, "dev0 clock", device=0, hz=2e9)
    # device clock: 2 ticks per ns, offset 1000 ns, with a tiny drift between pairs
    t.clock_sync(1, [1000, 2000, 3000, 4000], [0, 2000, 4001, 6000])
    f_sub, f_dma = t.flow(), t.flow()
    t.complete("memcpyAsync", 1100, 300, lane="cpu", tid=1, corr=7, flow_out=f_sub, flow_kind="submit",
               bytes=1 << 20, direction="h2d", mem="pinned", host_buffer=3)
    t.complete("submit", 1200, 100, lane="driver", device=0, tid=0, corr=7, flow_in=f_sub, flow_kind="submit")
    t.instant("doorbell", lane="driver", ts=1250, device=0, tid=0, flow_out=f_dma, flow_kind="dma")
    t.complete("DMA h2d", 600, 1000, lane="pcie", clock=1, device=0, tid=0, corr=7, flow_in=f_dma,
               flow_kind="dma", bytes=1 << 20, direction="h2d", mem="pinned")
    # a kernel linked only by correlation (no explicit flow): gets an exec flow from the submission
    t.complete("launchKernel", 1400, 50, lane="cpu", tid=1, corr=8)
    t.complete("submit", 1450, 40, lane="driver", device=0, tid=0, corr=8)
    t.complete("gemm", 1000, 2000, lane="eu", clock=1, device=0, tid=2, corr=8, flops=1e9)
    t.begin("step", lane="cpu", ts=1000, tid=1)
    t.end("step", lane="cpu", ts=3900, tid=1)
    t.counter("queue depth", 2.0, ts=1500, device=0, unit="entries")
    t.counter("queue depth", 3.0, ts=1600, device=0, unit="entries")
    if cut_trailer:
        t._sink.flush()
        return
    t.close()


@pytest.fixture()
def store(tmp_path):
    return Store(tmp_path / "store")


def _one(store, path):
    (res,) = ingest_paths(store, [path])
    assert res.error is None, res.error
    return res, store.connect(res.id)


def test_sim_like_file_becomes_tracks_slices_flows_and_meta(tmp_path, store):
    p = tmp_path / "x.atrace"
    _sim_like(p)
    res, con = _one(store, p)
    assert res.format == "atrace"
    tracks = {r[0]: r[1:] for r in con.execute("SELECT name, lane, group_name, device FROM tracks").fetchall()}
    assert tracks["main"] == ("cpu", "trainer", None)
    assert tracks["dev0 queue 0"] == ("driver", "dev0", "dev0")
    assert tracks["dev0 h2d engine 0"] == ("pcie", "dev0", "dev0")
    assert tracks["dev0 matrix 0"] == ("eu", "dev0", "dev0")
    assert tracks["queue depth"][0] == "counter"
    # device ticks -> host ns: 600 ticks -> 1300 ns, end 1600 ticks -> 1800 ns
    dma = con.execute("SELECT ts, dur, bytes, direction, host_mem, corr_id FROM slices WHERE name='DMA h2d'").fetchone()
    assert dma == (1300, 500, 1 << 20, "h2d", "pinned", 7)
    flows = con.execute("""
        SELECT s.name, d.name, f.kind, f.raw_kind FROM flows f JOIN slices s ON s.slice_id = f.src_slice
        JOIN slices d ON d.slice_id = f.dst_slice ORDER BY f.kind, s.name""").fetchall()
    assert flows == [("doorbell", "DMA h2d", "dma", "atrace"), ("submit", "gemm", "exec", "corr"),
                     ("launchKernel", "submit", "submit", "corr"), ("memcpyAsync", "submit", "submit", "atrace")]
    step = con.execute("SELECT ts, dur, depth FROM slices WHERE name='step'").fetchone()
    assert step[:2] == (1000, 2900)
    args = json.loads(con.execute("SELECT args FROM slices WHERE name='gemm'").fetchone()[0])
    assert args == {"flops": 1e9}
    meta = dict(con.execute("SELECT key, value FROM trace_meta").fetchall())
    assert meta["link_gen"] == "4" and meta["link_gen:1"] == "5" and meta["max_payload_bytes:1"] == "512"
    assert meta["lost_events"] == "0" and meta["host_clock"] == "virtual"
    # pairs at ticks 0, 2000, 4001, 6000: the 4001 pair sits 0.5 ns off its neighbours' line
    assert meta["clock_sync_residual_ns"] in ("0", "1")
    assert con.execute("SELECT count(*), min(value), max(value) FROM counters").fetchone() == (2, 2.0, 3.0)
    unit = con.execute("SELECT unit FROM tracks WHERE lane='counter'").fetchone()[0]
    assert unit == "entries"


def test_file_without_trailer_ingests_with_a_warning(tmp_path, store):
    p = tmp_path / "cut.atrace"
    _sim_like(p, cut_trailer=True)
    res, con = _one(store, p)
    assert any("no trailer" in w for w in res.warnings)
    assert con.execute("SELECT count(*) FROM slices").fetchone()[0] == 8


def _ops_file(p, chunk_events):
    """1000 complete 'op' events, chunk_events to a chunk."""
    w = AtraceWriter(p, chunk_events=chunk_events)
    n = w.intern("op")
    recs = np.zeros(1000, R.RECORD_DTYPE)
    recs["kind"], recs["name"], recs["ts"], recs["dur"] = R.COMPLETE, n, np.arange(1000) * 10, 5
    w.add_records(recs)
    w.close()
    return p


def test_cut_off_chunk_is_a_warning_with_its_offset(tmp_path, store):
    p = _ops_file(tmp_path / "big.atrace", chunk_events=100)
    data = p.read_bytes()
    cut_at = AtraceReader.open(p).event_chunks()[6].offset
    p.write_bytes(data[: cut_at + 100])
    res, con = _one(store, p)
    assert con.execute("SELECT count(*) FROM slices").fetchone()[0] == 600
    assert any(f"byte {cut_at}" in w and "cut short" in w for w in res.warnings)


def test_file_cut_inside_its_first_events_chunk_names_the_cut_not_just_no_events(tmp_path, store):
    p = _ops_file(tmp_path / "early.atrace", chunk_events=1000)
    cut_at = AtraceReader.open(p).event_chunks()[0].offset
    p.write_bytes(p.read_bytes()[: cut_at + 5000])
    (res,) = ingest_paths(store, [p])
    assert res.id is None and res.error
    assert "cut short" in res.error and f"byte {cut_at}" in res.error, res.error
    assert "1000 events" in res.error, res.error


def test_directory_without_a_run_or_trace_files_is_an_error_not_silence(tmp_path, capsys):
    from acceltrace.cli import main

    empty = tmp_path / "nothing here"
    empty.mkdir()
    (empty / "notes.txt").write_text("no trace")
    assert main(["--store", str(tmp_path / "store"), "ingest", str(empty)]) == 1
    err = capsys.readouterr().err
    assert "nothing here" in err and "no trace files found" in err, err


def test_string_ids_far_apart_do_not_make_a_table_of_gigabytes(tmp_path, store):
    # a crafted (or damaged) file defining string id 2^31 - 1: a table indexed by id would be 16 GiB
    import resource

    p = tmp_path / "sparse.atrace"
    w = AtraceWriter(p)
    far = (1 << 31) - 1
    w.define_strings([(far, "far away"), (7, "near")], 0)
    w.add_records(R.encode(R.COMPLETE, far, ts=1000, dur=5))
    w.add_records(R.encode(R.COMPLETE, 7, ts=2000, dur=5))
    w.add_records(R.encode(R.COMPLETE, 1 << 20, ts=3000, dur=5))  # never defined: dropped, counted
    w.close()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    res, con = _one(store, p)
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 1 << 20  # KiB: well under 1 GiB
    assert con.execute("SELECT list(name ORDER BY ts) FROM slices").fetchone()[0] == ["far away", "near"]
    assert any("not defined" in w for w in res.warnings)


def test_devices_and_clock_domains_of_the_wrong_shape_are_ignored_with_a_warning(tmp_path, store):
    p = tmp_path / "odd.atrace"
    hdr = default_header()
    hdr["devices"] = 5
    w = AtraceWriter(p, hdr)
    w.add_metadata({"clock_domains": [{"id": [1], "name": "x"}, {"id": 1, "hz": "fast"}, "dev"]})
    w.add_records(R.encode(R.COMPLETE, w.intern("op"), ts=1000, dur=5))
    w.close()
    res, con = _one(store, p)
    assert con.execute("SELECT count(*) FROM slices").fetchone()[0] == 1
    assert any("'devices' is not a list" in w for w in res.warnings), res.warnings
    assert any("'clock_domains' entries of the wrong shape" in w for w in res.warnings), res.warnings


def test_a_trailer_with_unreadable_counts_is_skipped_and_the_loss_chunks_count(tmp_path, store):
    p = tmp_path / "trailer.atrace"
    w = AtraceWriter(p)
    w.add_records(R.encode(R.COMPLETE, w.intern("op"), ts=1000, dur=5))
    w.add_loss({0: 4})
    w.close(lost_events=4, producers=[{"stream": 0, "lost": {"n": 4}}])  # a count that is not a number
    res, con = _one(store, p)
    assert any("trailer chunk cannot be decoded" in w for w in res.warnings), res.warnings
    lost = con.execute("SELECT value FROM trace_meta WHERE key = 'lost_events'").fetchone()[0]
    assert lost == "4"


def test_newer_major_version_fails_with_a_clear_message(tmp_path, store):
    p = tmp_path / "new.atrace"
    _sim_like(p)
    data = bytearray(p.read_bytes())
    data[8] = 9
    p.write_bytes(bytes(data))
    (res,) = ingest_paths(store, [p])
    assert res.id is None and "newer acceltrace" in res.error and "new.atrace" in res.error


def test_unknown_names_and_clock_domains_are_dropped_and_counted(tmp_path, store):
    p = tmp_path / "bad.atrace"
    w = AtraceWriter(p)
    ok = w.intern("ok")
    w.add_records(R.encode(R.COMPLETE, ok, 10, 5) + R.encode(R.COMPLETE, 999, 10, 5)
                  + R.encode(R.COMPLETE, ok, 10, 5, clock=7) + R.encode(R.COMPLETE, ok, 10, 5, lane=9))
    w.close()
    res, con = _one(store, p)
    assert con.execute("SELECT count(*) FROM slices").fetchone()[0] == 1
    meta = dict(con.execute("SELECT key, value FROM trace_meta").fetchall())
    assert meta["dropped_events"] == "3"
    text = " ".join(res.warnings)
    assert "string id not defined" in text and "clock domain without" in text and "unknown lane" in text


def test_run_directory_ingests_as_one_trace_and_ignores_ground_truth(tmp_path, store):
    run = tmp_path / "run1"
    run.mkdir()
    _sim_like(run / "run.atrace")
    (run / "ground_truth.json").write_text(json.dumps({"issues": [{"kind": "secret"}]}))
    res, con = _one(store, run)
    assert res.format.startswith("atrace")
    names = [r[0] for r in con.execute("SELECT DISTINCT name FROM slices").fetchall()]
    assert "secret" not in json.dumps(names)
    assert con.execute("SELECT count(*) FROM slices").fetchone()[0] == 8


def test_lost_events_and_per_producer_detail_come_from_the_trailer(tmp_path, store):
    p = tmp_path / "lost.atrace"
    w = AtraceWriter(p, default_header())
    w.add_records(R.encode(R.INSTANT, w.intern("x", stream=3), 5), stream=3)
    w.add_loss({3: 4})
    w.close(lost_events=12, producers=[{"stream": 3, "pid": 9, "events": 1, "lost": 12}])
    res, con = _one(store, p)
    meta = dict(con.execute("SELECT key, value FROM trace_meta").fetchall())
    assert meta["lost_events"] == "12" and meta["lost_events:3"] == "12"
    assert json.loads(meta["producer:3"])["pid"] == 9


def test_same_content_under_another_name_is_detected_by_magic(tmp_path, store):
    p = tmp_path / "x.atrace"
    _sim_like(p)
    q = tmp_path / "renamed.bin"
    shutil.copy(p, q)
    (res,) = ingest_paths(store, [q])
    assert res.error is None and res.format == "atrace"


def test_run_directory_with_counters_maps_their_device_ticks_with_the_trace_clock(tmp_path, store):
    from acceltrace.formats.actr.writer import ActrWriter

    run = tmp_path / "run2"
    run.mkdir()
    _sim_like(run / "run.atrace")
    hdr = {"devices": [{"name": "dev0", "clock_hz": 2e9}],
           "counters": [{"name": "hbm_read_bytes", "unit": "B", "bits": 32, "kind": "cumulative", "group": 0,
                         "device": "dev0"}],
           "groups": [{"id": 0, "counters": ["hbm_read_bytes"]}]}
    w = ActrWriter(run / "run.actr", hdr)
    for i in range(4):
        # recorded host times are deliberately far off: the trace's clock-sync pairs must win
        w.append(0, 10**9 + i, i * 1500, i * 1000, i * 1000, [i * 100])
    w.close()
    res, con = _one(store, run)
    assert con.execute("SELECT value FROM trace_meta WHERE key = 'format'").fetchone()[0] == "atrace+actr"
    ts = [r[0] for r in con.execute("""SELECT c.ts FROM counters c JOIN tracks t USING (track_id)
                                       WHERE t.name = 'hbm_read_bytes' ORDER BY c.ts""").fetchall()]
    # device clock of _sim_like: host = 1000 + ticks / 2 (up to the drift between pairs)
    # (the counters ingest stamps each rate at its interval's start or end; either way on that grid)
    grid = [1000 + k * 750 for k in range(4)]
    assert len(ts) >= 3 and all(min(abs(t - g) for g in grid) <= 2 for t in ts)


@pytest.mark.parametrize("threshold", [1 << 40, 1], ids=["one-thread", "joins-on-a-thread"])
def test_flow_ends_without_partners_are_counted_and_kept_as_open_flows(tmp_path, store, monkeypatch, threshold):
    # the joins' warnings reach the builder from either hand-over (native/handover.py: on a thread, kept till joined)
    from acceltrace.ingest.native import handover

    monkeypatch.setattr(handover, "PARALLEL_MIN_SLICES", threshold)
    p = tmp_path / "flows.atrace"
    t = client.connect(file=p)
    t.instant("orphan source", ts=10, flow_out=77, flow_kind="dependency")
    t.instant("orphan destination", ts=20, flow_in=78, flow_kind="exec")
    t.instant("fan source", ts=30, flow_out=5, flow_kind="dma")
    t.instant("fan a", ts=40, flow_in=5)
    t.instant("fan b", ts=50, flow_in=5)
    t.close()
    res, con = _one(store, p)
    rows = con.execute("""SELECT s.name, d.name, f.kind FROM flows f LEFT JOIN slices s ON s.slice_id = f.src_slice
                          JOIN slices d ON d.slice_id = f.dst_slice ORDER BY d.name""").fetchall()
    assert rows == [("fan source", "fan a", "dma"), ("fan source", "fan b", "dma"), (None, "orphan destination", "exec")]
    text = " ".join(res.warnings)
    assert "1 flow destinations have no source" in text and "1 flow sources have no destination" in text


def test_the_threaded_hand_over_gives_the_one_thread_result(tmp_path, monkeypatch):
    """A large file's flows are joined on a thread beside its depth pass and staging (native/handover.py);
    the same file on one thread gives the same tables, flows and ids included."""
    from acceltrace.ingest.native import handover
    from canonical import canonical_summary

    p = tmp_path / "x.atrace"
    _sim_like(p)
    out = []
    for threshold in (1 << 40, 1):  # one thread, then the thread for every file
        monkeypatch.setattr(handover, "PARALLEL_MIN_SLICES", threshold)
        store = Store(tmp_path / f"store-{threshold}")
        res, con = _one(store, p)
        flows = con.execute("SELECT src_slice, dst_slice, kind, raw_kind FROM flows ORDER BY flow_id").fetchall()
        slices = con.execute("SELECT slice_id, track_id, ts, dur, depth, name FROM slices ORDER BY slice_id").fetchall()
        out.append((canonical_summary(con), flows, slices, res.warnings))
        assert flows
    assert out[0] == out[1]


def test_a_thread_with_few_records_among_many_gets_its_own_track(tmp_path, store):
    # tracks are found in a sample of each batch (ingest/native/tracks.py); threads whose records fall
    # between the sampled ones (a cycle through 16 threads, one thread's single record) are found too
    p = tmp_path / "few.atrace"
    w = AtraceWriter(p, chunk_events=1 << 16)
    n = w.intern("op")
    recs = np.zeros(50_000, R.RECORD_DTYPE)
    recs["kind"], recs["name"], recs["ts"], recs["dur"], recs["pid"] = R.COMPLETE, n, np.arange(50_000) * 10, 5, 7
    recs["tid"] = np.arange(50_000) % 16
    recs["tid"][12_345] = 99  # a record at no multiple of any stride tried
    w.add_records(recs)
    w.close()
    _, con = _one(store, p)
    per_track = dict(con.execute("SELECT t.thread, count(*) FROM slices s JOIN tracks t USING (track_id)"
                                 " GROUP BY ALL").fetchall())
    assert per_track.pop("99") == 1
    assert sorted(per_track.values()) == [3124] + [3125] * 15  # tid 9 gave one record to 99
    assert sorted(per_track) == sorted(str(t) for t in range(16))
