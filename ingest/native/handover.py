"""An .atrace file's slices and flows handed to the builder at once (ingest/native/atrace.py `_flush`).

The importer keeps a file's slices as numpy columns (in file order) until the file is read. Here they
get their depths (ingest/depths.py's, on the columns in hand), are sorted as `slices` is stored
(track, ts, depth) and staged in that order, so the builder's finish neither computes depths nor
sorts (it checks the order as the batches arrive). Flows are joined in numpy on provisional ids
(a slice's position in the file, ingest/native/flows.py) and mapped to the builder's ids. Both cores:
the flows are joined on a thread (numpy releases the GIL) beside the depth pass and the staging.
Slices with times out of the store's range get depth 0 here and are dropped, with a warning, by the
builder as before.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from acceltrace.formats import record as R
from acceltrace.ingest.builder import TIME_LIMIT_NS
from acceltrace.ingest.depths import depths_and_order, depths_of, order_by
from acceltrace.ingest.made_ahead import OnThread
from acceltrace.ingest.native.flows import FlowEnds, corr_flows

BATCH_EVENTS = 1 << 20  # slices per batch handed to the builder
PARALLEL_MIN_SLICES = 100_000  # below this a file's hand-over runs on one thread (a live segment's, say)

_DIRECTIONS = pa.array([None, "h2d", "d2h", "d2d", "p2p"], pa.string())
_HOST_MEM = pa.array([None, "pageable", "pinned", None, None], pa.string())


def hand_over(b, label: str, cols: dict, flow_ends: FlowEnds, corr: bool,
              dict_arr: pa.Array, empty: np.ndarray, last: bool = False) -> None:
    """Stage `cols` (Pending.columns(): the file's slices in file order) into builder `b`, then their flows;
    `cols` is emptied once they are staged.

    `corr`: whether correlation flows may exist (some slice could be a target); `dict_arr`: the
    global string table the name / category / args indices point into; `empty`: which of its
    strings are empty (a category or args that is none). `last`: the trace's last slices, its tracks
    named: the level-of-detail build starts once they are staged, beside the flows (b.lod_ahead)."""
    n = len(cols["ts"])
    pid = np.arange(n, dtype=np.int64)
    ts, dur, track = cols["ts"], cols["dur"], cols["track"]
    # what the flows read of the columns; the rest is the staging's alone, let go once staged (the LOD
    # build starts then: it need not share the memory with them)
    has_corr, lane, corr_id = cols["has_corr"], cols["lane"], cols["corr"]

    def link() -> tuple:
        """The flows on provisional ids: they read only columns in file order, not the depths or the order."""
        src, dst, kind, said = flow_ends.link()
        found = None
        if corr:
            c = np.flatnonzero(has_corr & (lane <= 3))
            found = corr_flows(pid[c], corr_id[c], ts[c], lane[c], taken=dst)
        return src, dst, kind, found, said

    # The joins run on a thread beside the depth pass, which otherwise ran with the other core idle (2 M events:
    # 0.2 s), and the staging; their flows are inserted once the slices are staged (the builder's connection
    # is one thread's at a time). A one-thread build (a fleet's worker, a live segment) stays on one core.
    parallel = n >= PARALLEL_MIN_SLICES and getattr(b, "threads", None) != 1
    linking = OnThread(link, name="atrace-link") if parallel else None
    try:
        lim = TIME_LIMIT_NS
        end = ts + dur  # wraps past int64 only where it would be out of range anyway (then end < ts)
        ok = (ts >= -lim) & (ts <= lim) & (end >= ts) & (end <= lim)  # the builder's range check
        if ok.all():
            depth, order = depths_and_order(pid, track.astype(np.int64), ts, dur)
        else:
            r = np.flatnonzero(ok)
            depth = np.zeros(n, np.int32)
            depth[r] = depths_of(pid[r], track[r].astype(np.int64), ts[r], dur[r])
            order = order_by(track, ts, depth)
        del end, ok, dur, track
        first = b.n_slices
        ids = np.empty(n, np.int64)  # provisional id -> the builder's slice id
        ids[order] = first + pid
        for lo in range(0, n, BATCH_EVENTS):
            got = b.add_slices(_slice_table(cols, order[lo:lo + BATCH_EVENTS], depth, dict_arr, empty))
            if got != first + lo:  # ids are consecutive from `first`: `ids` is the builder's
                raise RuntimeError(f"builder gave slice id {got}, expected {first + lo}")
        cols.clear()  # (the caller's dict too: its columns go now, but for those the flows still read)
        del order, depth
        if last:  # the flows read no staged slice: the staging goes with the LOD build's finished rows
            b.lod_ahead(links_read_staging=False)
    finally:
        if linking is not None:
            linking.join()  # its error, if any, is raised below: not in place of one on its way
    src, dst, kind, found, said = linking.get() if linking is not None else link()
    for message in said:
        b.warn(label, message)
    if len(dst):  # a destination whose source is not in the file keeps an empty source end
        b.add_flows(pa.array(ids[np.maximum(src, 0)], pa.int64(), mask=src < 0), ids[dst], kind,
                    _repeat("atrace", len(dst)))
    if found is not None and len(found[1]):
        csrc, cdst, ckind = found
        b.add_flows(ids[csrc], ids[cdst], ckind, _repeat("corr", len(cdst)))


class Pending:
    """The file's slices in file order until hand_over, as the columns it needs, written batch by batch
    into arrays made once for as many slices as the file has records (every slice is one record, or two
    of a BEGIN/END pair): no join of per-batch parts at the end (2 M events: 75-85 ms of it)."""

    TYPES = {"track": np.int32, "ts": np.int64, "dur": np.int64, "name": np.int64, "cat": np.int64,
             "args": np.int64, "corr": np.int64, "has_corr": bool, "bytes": np.int64, "has_bytes": bool,
             "direction": np.int8, "mem": np.int8, "lane": np.int8}

    def __init__(self, records: int):
        self.cols = {k: np.empty(records, t) for k, t in self.TYPES.items()}  # pages touched as written
        self.n = 0

    def add(self, s: np.ndarray, track, ts, dur, name, cat, args) -> int:
        """One batch's slices (`s` their records; name / cat / args global string indices, the empty
        string meaning none); returns the first one's position."""
        a, b = self.n, self.n + len(ts)
        if b > len(self.cols["ts"]):  # each slice is a record or two: the reader's count was wrong, said so
            raise RuntimeError(f"{b} slices from a reader of at most {len(self.cols['ts'])} event records")
        flags, c = s["flags"], self.cols
        c["track"][a:b], c["ts"][a:b], c["dur"][a:b] = track, ts, dur
        c["name"][a:b], c["cat"][a:b], c["args"][a:b] = name, cat, args
        c["corr"][a:b], c["bytes"][a:b], c["lane"][a:b] = s["corr"], s["bytes"], s["lane"]
        np.not_equal(flags & R.FLAG_HAS_CORR, 0, out=c["has_corr"][a:b])
        np.not_equal(flags & R.FLAG_HAS_BYTES, 0, out=c["has_bytes"][a:b])
        c["direction"][a:b] = np.where(s["direction"] < len(R.DIRECTIONS), s["direction"], 0)
        c["mem"][a:b] = np.where(s["mem"] < len(R.MEM_KINDS), s["mem"], 0)
        self.n = b
        return a

    def columns(self) -> dict:
        return {k: v[:self.n] for k, v in self.cols.items()}


def _slice_table(c: dict, o: np.ndarray, depth: np.ndarray, dict_arr: pa.Array, empty: np.ndarray) -> dict:
    """The builder's columns of the slices at positions `o`, strings as dictionary columns."""
    cat, args = c["cat"][o], c["args"][o]
    return {
        "track_id": pa.array(c["track"][o], pa.int32()),
        "ts": pa.array(c["ts"][o], pa.int64()),
        "dur": pa.array(c["dur"][o], pa.int64()),
        "depth": pa.array(depth[o], pa.int32()),
        "name": pa.DictionaryArray.from_arrays(pa.array(c["name"][o], pa.int64()), dict_arr),
        "category": pa.DictionaryArray.from_arrays(pa.array(cat, pa.int64(), mask=empty[cat]), dict_arr),
        "corr_id": pa.array(c["corr"][o], pa.int64(), mask=~c["has_corr"][o]),
        "bytes": pa.array(c["bytes"][o], pa.int64(), mask=~c["has_bytes"][o]),
        "direction": pa.DictionaryArray.from_arrays(pa.array(c["direction"][o]), _DIRECTIONS),
        "host_mem": pa.DictionaryArray.from_arrays(pa.array(c["mem"][o]), _HOST_MEM),
        "args": pa.DictionaryArray.from_arrays(pa.array(args, pa.int64(), mask=empty[args]), dict_arr),
    }


def _repeat(text: str, n: int) -> pa.Array:
    return pa.DictionaryArray.from_arrays(pa.array(np.zeros(n, np.int8)), pa.array([text], pa.string()))
