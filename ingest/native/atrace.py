"""Native .atrace files and run directories (run.atrace + run.actr) -> the trace store.

Vectorised: event chunks are numpy structured arrays (formats.record.RECORD_DTYPE) decoded
in batches of ~128 k records; strings become Arrow dictionary columns, device ticks are mapped
to host ns per clock domain with numpy. The file's slices are kept as columns until it is read,
then given depths, sorted as the store keeps them and handed to the builder in that order, while
explicit and correlation flows are joined in numpy (both cores: the builder stages on a thread, and
the LOD build of a one-source trace starts beside the flows). Each batch is read, and its times mapped,
on a thread of its own ahead of the one being made into columns.
Python runs per batch, per track and per clock domain, never per event. docs/formats.md ("How
ingest reads records") is the contract this module implements.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from acceltrace.formats import record as R
from acceltrace.formats.atrace.layout import MAGIC, AtraceError
from acceltrace.formats.atrace.reader import AtraceReader
from acceltrace.formats.atrace.clock import domain_maps
from acceltrace.ingest.made_ahead import MadeAhead
from acceltrace.ingest.native.flows import FlowEnds
from acceltrace.ingest.native.handover import Pending, hand_over
from acceltrace.ingest.native.header import distributed_meta, sane_meta
from acceltrace.ingest.native.tracks import Tracks
from acceltrace.store.errors import IngestError
from acceltrace.ingest.sources import Source
from acceltrace.ingest.importer import Importer, per_source

NAME = "atrace"
SUFFIXES = (".atrace",)
RUN_EVENTS, RUN_COUNTERS = "run.atrace", "run.actr"
RUN_TORCH = "torch.*.trace.json"  # written into a run directory by `acceltrace record` (collect/record.py)
# records per batch read: a batch this size is concatenated into a buffer the allocator reuses (16 MB
# or less); batches of 1 M records were fresh mappings each time, whose page faults cost more here
READ_BATCH_EVENTS = 1 << 17



def sniff(head: bytes) -> bool:
    return head[:8] == MAGIC


def sniff_dir(path) -> bool:
    return path is not None and (Path(path) / RUN_EVENTS).is_file()


def ingest(source: Source, builder) -> None:
    if source.is_dir:
        run = Path(source.path)
        maps = ingest_atrace(run / RUN_EVENTS, builder, group=source.group, label=f"{source.name}/{RUN_EVENTS}")
        actr = run / RUN_COUNTERS
        if actr.is_file():
            from acceltrace.ingest.native.actr import ingest_actr  # the counters helper's module

            ingest_actr(actr, builder, clock_map=maps or None)
            builder.set_meta("format", "atrace+actr")
        torch_traces = sorted(run.glob(RUN_TORCH))
        if torch_traces:  # `acceltrace record`: the PyTorch profiler's traces, already on the run's clock
            from acceltrace.ingest.native.recorded import ingest_torch

            ingest_torch(torch_traces, builder, source, with_counters=actr.is_file())
        # ground_truth.json is the simulator's answer key, never part of the trace
        return
    ingest_atrace(source, builder, alone=True)


def ingest_atrace(src: Source | Path, builder, group: str | None = None, label: str | None = None,
                  alone: bool = False) -> dict:
    """Ingest one .atrace (a Source or a path); returns {device name: (ticks, host_ns)} sync pairs."""
    if isinstance(src, Source):
        label = label or src.name
        group = group if group is not None else src.group
        if src.path is not None and not src.is_dir:
            path = src.path
        else:
            path = src.materialize(builder.work_dir)
    else:
        path = Path(src)
        label = label or path.name
    try:
        reader = AtraceReader.open(path)
    except AtraceError as e:
        raise IngestError(label, e.detail, f"byte {e.offset}" if e.offset is not None else None) from None
    except OSError as e:
        raise IngestError(label, f"cannot read ({e.strerror or e})") from None
    try:
        return _Ingest(reader, builder, label, group).run(alone)
    finally:
        reader.close()


class _Ingest:
    def __init__(self, reader: AtraceReader, builder, label: str, group: str | None):
        self.r, self.b, self.label = reader, builder, label
        self.meta = sane_meta(reader.merged_metadata(), builder, label)
        self.first_slice = builder.n_slices
        self._strings()
        devices = [d for d in self.meta.get("devices", []) if isinstance(d, dict)]
        self.tracks = Tracks(builder, group, devices, self.gstrings)
        self.maps, problems = domain_maps(reader.sync, self.meta.get("clock_domains", []))
        for p in problems:
            builder.warn(label, p)
        self.flow_ends = FlowEnds()
        self.corr_targets = 0
        self.pending = Pending(reader.event_records())  # the file's slices until _flush
        self.be_parts: list[np.ndarray] = []
        self.be_order: list[np.ndarray] = []
        self.order = 0
        self.dropped: dict[str, int] = {}

    # -- strings: one global table, per-stream offsets ------------------------------------------
    def _strings(self) -> None:
        self.gstrings: list[str] = []
        # per stream: (offset in gstrings, dense size) or, for sparse ids, (offset, sorted ids)
        self.str_off: dict[int, tuple[int, int]] = {}
        self.str_sparse: dict[int, tuple[int, np.ndarray]] = {}
        for stream, tab in sorted(self.r.strings.items()):
            size = max(tab) + 1
            if size > 4 * len(tab) + 4096:
                # ids far apart (a hostile or damaged file can define id 2^31 - 1): a table indexed
                # by id would take gigabytes; look the ids up in sorted order instead
                ids = np.array(sorted(tab), dtype=np.int64)
                self.str_sparse[stream] = (len(self.gstrings), ids)
                self.gstrings.extend(tab[int(i)] for i in ids)
                continue
            col = [""] * size
            for sid, text in tab.items():
                col[sid] = text
            self.str_off[stream] = (len(self.gstrings), size)
            self.gstrings.extend(col)
        self.gstrings.append("")  # id for streams without a table: index of an empty string
        self.dict_arr = pa.array(self.gstrings, pa.string())
        self.empty = pc.equal(pc.binary_length(self.dict_arr), 0).to_numpy(zero_copy_only=False)

    def _local(self, stream: int, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(global index, undefined mask) of one stream's string ids."""
        none = len(self.gstrings) - 1
        local = ids.astype(np.int64)
        sparse = self.str_sparse.get(stream)
        if sparse is not None:
            off, known = sparse
            pos = np.minimum(np.searchsorted(known, local), len(known) - 1)
            bad = known[pos] != local
            return np.where(bad, none, off + pos), bad
        off, size = self.str_off.get(stream, (none, 1))
        bad = local >= size
        return np.where(bad, none, off + local), bad

    def _gid(self, ids: np.ndarray, streams: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Global string index per record and a mask of ids the stream never defined."""
        if len(streams) and streams.min() == streams.max():  # one producer: no per-stream masks
            return self._local(int(streams[0]), ids)
        out = np.full(len(ids), len(self.gstrings) - 1, dtype=np.int64)
        bad = np.zeros(len(ids), dtype=bool)
        for s in np.unique(streams):
            m = streams == s
            out[m], bad[m] = self._local(int(s), ids[m])
        return out, bad

    def _drop(self, why: str, n: int) -> None:
        if n:
            self.dropped[why] = self.dropped.get(why, 0) + int(n)

    # -- main loop ----------------------------------------------------------------------------------
    def run(self, alone: bool = False) -> dict:
        # each batch read (checksums, joins) and its times mapped to host ns, ahead on a thread of its own,
        # beside the batch before it taken into columns (2 M events: the last batch done at 275 ms, not 404)
        batches = ((recs, streams, self._host_ns(recs)) for recs, streams in self.r.iter_events(READ_BATCH_EVENTS))
        if getattr(self.b, "threads", None) != 1:
            batches = MadeAhead(batches, depth=1, name="atrace-read")
        try:
            for recs, streams, times in batches:
                self._batch(recs, streams, times)
                self.order += len(recs)
        finally:
            if isinstance(batches, MadeAhead):  # (an error mid-file: the reads end before the file is closed)
                batches.close()
        lost_to_damage = [p for p in self.r.problems if p.dropped_events]
        if (alone and lost_to_damage and not self.pending.n and self.b.n_slices == self.first_slice
                and self.b.n_counters == 0):
            # nothing survived the damage: say what happened, not merely that the trace is empty
            p = lost_to_damage[0]
            raise IngestError(self.label, f"no events before the damage: {p.message} "
                              f"({sum(q.dropped_events for q in lost_to_damage)} events lost)", f"byte {p.offset}")
        for p in self.r.problems:
            self.b.warn(self.label, p.message, f"byte {p.offset}", dropped=p.dropped_events)
        self._begin_end()
        self.tracks.apply_names()
        self._flush(last=alone and self.b.sole_source)  # (an archive's next member may add slices)
        for why, n in self.dropped.items():
            self.b.warn(self.label, f"{n} events dropped: {why}", dropped=n)
        self._meta()
        return self._clock_pairs_by_device()

    def _batch(self, recs: np.ndarray, streams: np.ndarray, times: tuple[np.ndarray, ...]) -> None:
        """One batch of records (`times`: their _host_ns) into the slices, counters and tracks they make."""
        kind = recs["kind"]
        meta = (kind == R.TRACK_NAME) | (kind == R.PROCESS_NAME)
        if meta.any():
            m = recs[meta]
            g, _ = self._gid(m["name"], streams[meta])
            self.tracks.names(m, g)
        ev = ~meta
        bad_kind = ev & ((kind == 0) | (kind > R.PROCESS_NAME))
        bad_lane = ev & (recs["lane"] >= len(R.LANES))
        self._drop("unknown record kind", bad_kind.sum())
        self._drop("unknown lane", (bad_lane & ~bad_kind).sum())
        keep = ev & ~bad_kind & ~bad_lane
        if keep.all():  # the usual case: no copy of the records
            order = self.order + np.arange(len(recs))
        else:
            recs, streams, times = recs[keep], streams[keep], tuple(t[keep] for t in times)
            order = self.order + np.flatnonzero(keep)
        if not len(recs):
            return
        name, bad_name = self._gid(recs["name"], streams)
        self._drop("name string id not defined in the file", bad_name.sum())
        ts, end, ok_clock = times
        self._drop("clock domain without clock-sync pairs", (~ok_clock & ~bad_name).sum())
        good = ~bad_name & ok_clock
        neg = good & (recs["kind"] == R.COMPLETE) & (recs["dur"] < 0)
        self._drop("negative duration", neg.sum())
        good &= ~neg
        if not good.all():
            recs, streams, name, ts, end, order = (recs[good], streams[good], name[good], ts[good], end[good],
                                                   order[good])
        cat, _ = self._gid(recs["cat"], streams)
        args, _ = self._gid(recs["args"], streams)
        track = self.tracks.ids(recs, name, cat)
        kind = recs["kind"]
        cnt = kind == R.COUNTER
        if cnt.any():
            self.b.add_counters(track[cnt], ts[cnt], R.counter_values(recs[cnt]))
        be = (kind == R.BEGIN) | (kind == R.END)
        if be.any():
            part = np.zeros(int(be.sum()), dtype=_BE_DTYPE)
            for f in ("kind", "lane", "flags", "direction", "mem", "flow_kind", "corr", "bytes", "flow"):
                part[f] = recs[f][be]
            part["track"], part["ts"], part["name"], part["stream"] = track[be], ts[be], name[be], streams[be]
            part["cat"], part["args"] = cat[be], args[be]
            self.be_parts.append(part)
            self.be_order.append(order[be])
        sl = (kind == R.COMPLETE) | (kind == R.INSTANT)
        if sl.all():
            self._add_slices(recs, streams, track, ts, np.maximum(end - ts, 0), name, cat, args)
        elif sl.any():
            self._add_slices(recs[sl], streams[sl], track[sl], ts[sl], np.maximum(end[sl] - ts[sl], 0), name[sl],
                             cat[sl], args[sl])

    def _host_ns(self, recs: np.ndarray) -> tuple[np.ndarray, ...]:
        """Records' starts and ends in host ns (each record's clock domain), and which had a mapped domain."""
        clock, ticks = recs["clock"], recs["ts"]
        ends = ticks + np.where(recs["kind"] == R.COMPLETE, recs["dur"], 0)
        out, out_end = ticks.astype(np.int64, copy=True), ends.astype(np.int64, copy=True)
        ok = np.ones(len(ticks), dtype=bool)
        if not clock.any():
            return out, out_end, ok
        for dom in np.flatnonzero(np.bincount(clock, minlength=1)).tolist():  # O(n): no sort of the clocks
            if dom == 0:
                continue
            m = clock == dom
            fn = self.maps.get(dom)
            if fn is None:
                ok[m] = False
            else:
                out[m], out_end[m] = fn(ticks[m]), fn(ends[m])
        return out, out_end, ok

    def _add_slices(self, s, streams, track, ts, dur, name, cat, args) -> None:
        """Keep slices for _flush (handover.Pending); a slice's provisional id (pid), on which flows are
        joined, is its position in file order."""
        flags = s["flags"]
        first = self.pending.add(s, track, ts, dur, name, cat, args)
        # slices a correlation flow could still point at (driver/pcie/eu with a corr id and no explicit
        # incoming flow): when a file has none, as the device model's do, the corr join is skipped
        self.corr_targets += int(((s["lane"] >= 1) & (s["lane"] <= 3) & ((flags & R.FLAG_HAS_CORR) != 0)
                                  & ((flags & R.FLAG_FLOW_IN) == 0)).sum())
        fl = (flags & (R.FLAG_FLOW_OUT | R.FLAG_FLOW_IN)) != 0
        if fl.any():
            idx = np.flatnonzero(fl)
            self.flow_ends.add(
                (streams[idx].astype(np.uint64) << np.uint64(32)) | s["flow"][idx].astype(np.uint64),
                (flags[idx] & R.FLAG_FLOW_OUT) != 0, s["flow_kind"][idx], first + idx.astype(np.int64))

    def _flush(self, last: bool) -> None:
        """The file's slices and flows to the builder at once (ingest/native/handover.py); `last`: nothing
        is added to the trace after them (a lone file, not a run directory's first part)."""
        pending, self.pending = self.pending, Pending(0)
        if pending.n:
            cols = pending.columns()
            del pending  # the columns' only holder is `cols` now, which hand_over empties once it has staged them
            hand_over(self.b, self.label, cols, self.flow_ends, self.corr_targets > 0, self.dict_arr, self.empty, last)

    # -- begin/end pairs ------------------------------------------------------------------------
    def _begin_end(self) -> None:
        if not self.be_parts:
            return
        be = np.concatenate(self.be_parts)
        order = np.concatenate(self.be_order)
        srt = np.lexsort((order, be["track"]))
        be = be[srt]
        delta = np.where(be["kind"] == R.BEGIN, 1, -1).astype(np.int64)
        csum = np.cumsum(delta)
        # running depth per track: subtract the sum before each track's first row
        starts = np.flatnonzero(np.concatenate([[True], be["track"][1:] != be["track"][:-1]]))
        base = np.repeat(np.concatenate([[0], csum[starts[1:] - 1]]), np.diff(np.append(starts, len(be))))
        depth = csum - base
        level = np.where(delta > 0, depth, depth + 1)  # a BEGIN opens level d, the END closing it ends level d
        pos = np.lexsort((np.arange(len(be)), level, be["track"]))
        b, lv = be[pos], level[pos]
        pair = (b["kind"][:-1] == R.BEGIN) & (b["kind"][1:] == R.END) & (b["track"][:-1] == b["track"][1:]) \
            & (lv[:-1] == lv[1:])
        # a row can be the END of one pair and the BEGIN of the next only if kinds say so: no overlap
        bi = np.flatnonzero(pair)
        ei = bi + 1
        unmatched = len(be) - 2 * len(bi)
        self._drop("BEGIN without END or END without BEGIN on its track", unmatched)
        if not len(bi):
            return
        beg, fin = b[bi], b[ei]
        # the END may carry args/bytes/corr too; the BEGIN's win where both have them
        self._add_slices(beg, beg["stream"], beg["track"], beg["ts"], np.maximum(fin["ts"] - beg["ts"], 0),
                         beg["name"], beg["cat"], beg["args"])

    # -- metadata -------------------------------------------------------------------------------------
    def _meta(self) -> None:
        b, r = self.b, self.r
        b.set_meta("atrace_version", f"{r.version[0]}.{r.version[1]}")
        b.set_meta("host_clock", str(self.meta.get("host_clock", "monotonic")))
        lost, per = r.lost_events()
        prev = int(b.meta.get("lost_events", "0"))
        b.set_meta("lost_events", str(prev + lost))
        for stream, n in per.items():
            b.set_meta(f"lost_events:{stream}", str(n))
        if r.trailer is not None:
            for i, p in enumerate(r.trailer.get("producers", [])):
                if isinstance(p, dict):
                    b.set_meta(f"producer:{p.get('stream', i)}", json.dumps(p, sort_keys=True))
        else:
            b.warn(self.label, "no trailer: the collection did not end cleanly (crash or kill); lost-event "
                               "counts are those of the last loss chunk" + (" (none written)" if not per else ""))
        first = True
        for d in self.meta.get("devices", []):
            if not isinstance(d, dict):
                continue
            dev = d.get("id", d.get("index"))
            for key in ("link_gen", "link_width", "max_payload_bytes", "max_read_request_bytes"):
                if key in d:
                    b.set_meta(f"{key}:{dev}", str(d[key]))
                    if first:
                        b.set_meta(key, str(d[key]))
            first = False
        if isinstance(self.meta.get("switch"), dict):
            b.set_meta("switch", json.dumps(self.meta["switch"], sort_keys=True))
        distributed_meta(self.meta, b, self.label)
        # domain 255 is the daemon's wall clock (NTP may step it): not an event clock, no residual
        res = [m.residual_ns() for dom, m in self.maps.items() if dom != 255]
        res = [x for x in res if x is not None]
        if res:
            b.set_meta("clock_sync_residual_ns", str(max(res)))
        b.set_meta("clock_sync_pairs", str(int(len(r.sync))))

    def _clock_pairs_by_device(self) -> dict:
        """{device name: (ticks, host_ns)} for the counters ingest (same mapping for both files)."""
        out = {}
        for dom in self.meta.get("clock_domains", []):
            if not isinstance(dom, dict) or dom.get("device") is None:
                continue
            m = self.maps.get(int(dom.get("id", -1)))
            if m is None:
                continue
            for key in self.tracks.device_names(dom["device"]):
                out[key] = (m.ticks, m.host)
        return out


_BE_DTYPE = np.dtype([("kind", "u1"), ("lane", "u1"), ("flags", "u1"), ("direction", "u1"), ("mem", "u1"), ("flow_kind", "u1"),
                      ("track", "<i4"), ("stream", "<u4"), ("ts", "<i8"), ("name", "<i8"), ("cat", "<i8"),
                      ("args", "<i8"), ("corr", "<u8"), ("bytes", "<u8"), ("flow", "<u4")])


IMPORTER = Importer(name=NAME, suffixes=SUFFIXES, sniff=sniff, session=per_source(ingest), claims_dir=sniff_dir)
