"""The in-memory head of a live trace (server/live_build.py's build_head, tiles/live.py's HeadArrays):
its tiles are the tiles a sealed segment of the same records gives, its details and search the same."""

from concurrent.futures import Future

import numpy as np
import pytest

from acceltrace.formats import record as R
from acceltrace.formats.atrace.writer import AtraceWriter
from acceltrace.server.live_build import _flat
from acceltrace.server.live_capture import LiveCapture
from acceltrace.store.catalog import Store
from acceltrace.tiles.head import dur_class
from acceltrace.tiles.live import compose_tile
from acceltrace.tiles.query import decode_tile

T0 = 5_000_000_000


def _records(w: AtraceWriter, rng: np.random.Generator, n: int) -> None:
    """Nested cpu slices (a parent per 8 children), device work by correlation id, instants, a
    begin/end pair, counter samples, a transfer with bytes: what a tile's every section holds."""
    w.add_metadata({"devices": [{"id": 0, "name": "dev0"}]})
    w.add_records(R.encode(R.TRACK_NAME, w.intern("dev0 matrix 0"), ts=0, lane=3, device=0, tid=0))
    names = [w.intern(x) for x in ("step", "gemm", "copy", "mark", "launch")]
    recs = np.zeros(n, R.RECORD_DTYPE)
    par = np.arange(n) % 9 == 0
    ts = T0 + np.cumsum(rng.integers(50, 5_000, n))  # distinct times: no ties for the order of equal keys
    recs["kind"], recs["pid"], recs["tid"], recs["ts"] = R.COMPLETE, 3, 1 + (np.arange(n) % 2), ts
    recs["dur"] = np.where(par, 0, rng.integers(1, 40, n) * 25)
    recs["name"] = np.asarray(names)[np.arange(n) % 3]
    # parents: a long slice over the next eight children of the track
    recs["dur"][par] = ts[np.minimum(np.flatnonzero(par) + 17, n - 1)] - ts[par] + 1
    recs["name"][par] = names[0]
    inst = np.arange(n) % 13 == 5
    recs["kind"][inst], recs["dur"][inst], recs["name"][inst] = R.INSTANT, 0, names[3]
    dev = np.arange(n) % 7 == 3  # device work launched by the cpu slice before it
    recs["lane"][dev], recs["device"][dev], recs["tid"][dev] = 3, 0, 0
    recs["corr"] = np.arange(n) // 2
    recs["flags"] = R.FLAG_HAS_CORR
    recs["bytes"][::11], recs["flags"][::11] = 4096, R.FLAG_HAS_CORR | R.FLAG_HAS_BYTES
    # an explicit flow (flow ids, not correlation) from a cpu slice to a device slice
    recs["flow"][[1, 3]], recs["flow_kind"][[1, 3]] = 77, R.FLOW_CODES["exec"]
    recs["flags"][1] |= R.FLAG_FLOW_OUT
    recs["flags"][3] |= R.FLAG_FLOW_IN
    w.add_records(recs)
    w.add_records(R.encode(R.BEGIN, names[4], ts=int(ts[10]) + 1, pid=3, tid=5))
    w.add_records(R.encode(R.END, names[4], ts=int(ts[20]), pid=3, tid=5))
    for k in range(200):
        w.add_records(R.encode_counter(w.intern("power"), int(ts[0]) + k * 7_919, float((k * 37) % 101), device=0))
    w.flush()


def _rows(buf: bytes) -> dict:
    header, cols = decode_tile(buf)
    return {s: sorted(zip(*[c.tolist() for c in cols[s].values()])) for s in cols} | {"strings": header["strings"]}


@pytest.fixture
def capture(tmp_path):
    f = tmp_path / "head.atrace"
    w = AtraceWriter(f)
    _records(w, np.random.default_rng(7), 20_000)
    cap = LiveCapture(Store(tmp_path / "store"), f, "head")
    cap.dir = tmp_path / "segs"
    cap.dir.mkdir()
    yield cap
    cap.stop()
    w.close()


def test_a_head_segment_gives_the_tiles_a_sealed_segment_of_the_same_records_gives(capture):
    from acceltrace.formats.atrace.window import snapshot

    recs, streams = capture.tail.poll()
    ctx = snapshot(capture.tail)
    sealed = capture._ingest_window(ctx, recs, streams, 0)
    head = capture._head_window(ctx, recs, streams, 0)
    assert head.head is not None and sealed.head is None
    assert (head.n_slices, head.lo_ns, head.hi_ns) == (sealed.n_slices, sealed.lo_ns, sealed.hi_ns)
    assert head.n_slices == 20_001  # the begin/end pair is one slice
    assert max(t["max_depth"] for t in capture.layout.tracks) >= 1  # nested: ingest's depth sweep ran
    span = head.hi_ns
    compared = 0
    seen = set()
    for level in (8, 11, 14, 17, 20, 24, 30):  # below and above every class of the slices (25 ns .. 90 us)
        for index in range(0, (span >> (level + 10)) + 1):
            for g in capture.layout.groups:
                tracks = capture.layout.group_tracks(g["grp"])
                a = _rows(compose_tile([head], capture.parts, level, index, tracks, g["group_name"], capture.names))
                b = _rows(compose_tile([sealed], capture.parts, level, index, tracks, g["group_name"], capture.names))
                assert a == b, (level, index, g["group_name"])
                seen |= {s for s in ("slices", "merged", "instants", "counters") if a[s]}
                compared += 1
    assert compared >= 20 and seen == {"slices", "merged", "instants", "counters"}  # every section compared
    # details and search answer from the head's Arrow tables as from the sealed file
    got = {}
    for seg in (head, sealed):
        capture.sealed = [seg]
        found = capture.search("gemm", 0, 50)
        dev = next(r for r in found["results"] if capture.layout.tracks[r["track_id"]]["lane"] == "eu")
        got[seg.key] = (found, capture.slice_detail(dev["id"]))
    capture.sealed = []
    for seg in (head, sealed):  # the explicit flow: its source's detail lists it (ids are the segment's)
        capture.sealed = [seg]
        src = capture.search("gemm", 0, 5)["results"][0]  # record 1: the second record, a gemm on the cpu
        got[seg.key + "/flow"] = capture.slice_detail(src["id"])["flows"]
    capture.sealed = []
    assert got[head.key + "/flow"] == got[sealed.key + "/flow"]
    assert [f["kind"] for f in got[head.key + "/flow"]["out"]] == ["exec"]
    (hs, hd), (ss, sd) = got[head.key], got[sealed.key]
    assert hs == ss and hs["total"] > 1000
    assert hd == sd and hd["slice"]["track"]["name"] == "dev0 matrix 0"
    assert [f["kind"] for f in hd["chain"]["flows"]] == ["launch"]  # its launch, by correlation id


def test_flat_tracks_take_the_fast_path_and_nested_ones_the_sweep():
    ts = np.array([0, 10, 10, 20], np.int64)
    track = np.array([0, 0, 1, 1], np.int64)
    assert _flat(track, ts, np.array([10, 5, 10, 0], np.int64))  # back to back: one depth
    assert not _flat(track, ts, np.array([11, 5, 10, 0], np.int64))  # overlaps the next
    assert not _flat(np.zeros(2, np.int64), np.array([5, 5]), np.array([0, 0]))  # two instants at one time nest
    d = np.array([1, 2, 3, 4, 7, 8, (1 << 40) - 1, 1 << 40, (1 << 53) + 1], np.int64)
    assert dur_class(d).tolist() == [int(x).bit_length() - 1 for x in d.tolist()]


@pytest.fixture
def bounded(tmp_path, monkeypatch):
    """A capture whose head holds at most 1,000 records, its file's writer, and the name id "step"."""
    monkeypatch.setenv("ACCELTRACE_LIVE_HEAD_RECORDS", "1000")
    f = tmp_path / "bound.atrace"
    w = AtraceWriter(f)
    cap = LiveCapture(Store(tmp_path / "store"), f, "bound")
    assert cap.head_max == 1000
    yield cap, w, w.intern("step")
    cap.stop()
    w.close()


def _steps(name: int, n: int, t0: int) -> np.ndarray:
    """n complete slices of 5 us, 10 us apart from t0, on one thread."""
    recs = np.zeros(n, R.RECORD_DTYPE)
    recs["kind"], recs["pid"], recs["tid"], recs["name"] = R.COMPLETE, 1, 1, name
    recs["ts"] = t0 + np.arange(n) * 10_000
    recs["dur"] = 5_000
    return recs


def _read(cap: LiveCapture, w: AtraceWriter, recs: np.ndarray) -> None:
    w.add_records(recs)
    w.flush()
    cap._take(*cap.tail.poll())


def _built(cap: LiveCapture) -> None:
    """A delta of what was read, built."""
    cap._build_delta()
    cap._window_futs[-1].result(timeout=60)


def test_head_segments_beyond_the_memory_bound_leave_the_view_counted_and_hatched(bounded):
    cap, w, step = bounded
    for k in range(4):  # four deltas of 400 records, 10 ms apart: the bound holds two of them
        _read(cap, w, _steps(step, 400, T0 + k * 10_000_000))
        _built(cap)
    segs = cap.segments()
    assert [s.head is not None for s in segs] == [True, True] and cap.dropped_live == 800
    assert cap.counts()["dropped_live"] == 800 and cap.not_shown == 0
    # the spans let go are said (hatched on the page), in relative ns: the first two deltas
    assert cap.gaps.relative(cap.start_abs_ns) == [[0, 399 * 10_000 + 5_000],
                                                    [10_000_000, 10_000_000 + 399 * 10_000 + 5_000]]
    assert segs[0].lo_ns == 20_000_000 and cap.head_ns() == 30_000_000 + 399 * 10_000 + 5_000


def test_a_burst_larger_than_the_memory_bound_still_shows_its_newest_records(bounded):
    """A server behind reads more at once than the head may hold: the newest records that fit are drawn,
    the older ones are left out (counted, hatched). Before, the whole burst became one head segment over
    the bound and was let go at once: a capture behind showed nothing at all (a CI run saw no slices
    in 60 s, another a span not drawn past the view's end)."""
    cap, w, step = bounded
    for part in np.array_split(_steps(step, 2_500, T0), 5):  # read in several pieces, as a follower does
        _read(cap, w, part)
    _built(cap)
    segs = cap.segments()
    assert len(segs) == 1 and segs[0].head is not None
    assert segs[0].n_slices == 1000 and cap.dropped_live == 0
    assert cap.not_shown == 1_500  # what was left out is counted ...
    first = T0 + 1_500 * 10_000  # ... the newest 1,000 are drawn ...
    assert cap.start_abs_ns == first and cap.head_ns() == 999 * 10_000 + 5_000
    gaps = cap.gaps.relative(0)  # ... and the rest hatched (a span per piece read)
    assert gaps[0][0] == T0 and gaps[-1][1] == T0 + 1_499 * 10_000 + 5_000
    # a further burst while the first head is being sealed (a compaction under way keeps it): the bound
    # is over, and the one head that may go is the newest, which is never let go
    sealing = Future()
    sealing.set_result(segs[0])
    cap._sealing = [sealing]
    _read(cap, w, _steps(step, 2_500, T0 + 100_000_000))
    _built(cap)
    segs = cap.segments()
    assert len(segs) == 2 and cap.dropped_live == 0
    assert segs[-1].hi_ns == cap.head_ns() == T0 + 100_000_000 + 2_499 * 10_000 + 5_000 - first
    cap._sealing = []  # sealed, say: the next burst lets the oldest go, the newest stays within the bound
    _read(cap, w, _steps(step, 2_500, T0 + 200_000_000))
    _built(cap)
    segs = cap.segments()
    assert len(segs) == 1 and cap.dropped_live == 2_000
    assert segs[0].hi_ns == cap.head_ns() == T0 + 200_000_000 + 2_499 * 10_000 + 5_000 - first
