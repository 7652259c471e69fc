"""Chrome Trace Event JSON, as written by the PyTorch profiler (Kineto), Perfetto and Chrome.

The ingester streams the event array in chunks (chrome_reader), decodes each chunk
into columns (chrome_columns) and writes slices and counters as it goes
(chrome_events, chrome_meta). What needs the whole trace (B/E pairs, flows,
correlation and External id links, track names) is resolved in finish()
(chrome_link). docs/ingest.md describes the mapping onto the store's tables.
"""

from __future__ import annotations

import json
import re

from acceltrace.ingest.chrome import kineto as kin
from acceltrace.ingest.chrome import link as chrome_link
from acceltrace.ingest.chrome.columns import decode_events
from acceltrace.ingest.chrome.detect import TRACE_KEYS, describe, top_level_keys
from acceltrace.ingest.chrome.events import process_chunk
from acceltrace.ingest.chrome.reader import ChromeReader
from acceltrace.ingest.chrome.state import ChromeState, SourceState
from acceltrace.ingest.importer import Importer

NAME = "chrome"
SUFFIXES = (".pt.trace.json", ".trace.json", ".json", ".pftrace.json", ".ctf.json")

# An object with a Chrome/Kineto top-level key in its head (Kineto puts schemaVersion and
# deviceProperties before traceEvents, which may be past the first 4 KiB), or an array whose
# first element is an object (or an empty array).
_HEAD = re.compile(rb'^(\xef\xbb\xbf)?\s*(\{.*"(traceEvents|displayTimeUnit|schemaVersion|deviceProperties'
                   rb'|otherData|systemTraceEvents|stackFrames|samples|traceName|distributedInfo)"\s*:'
                   rb'|\[\s*(\{|\]|$))', re.S)
_LANE_ORDER = {"cpu": 0, "driver": 1, "pcie": 2, "eu": 3, "counter": 4, "annotation": 5}
# Top-level keys that name the profiler, its runtime and driver (trace_meta "versions")
_VERSION_KEYS = ("schemaVersion", "cupti_version", "cuda_runtime_version", "cuda_driver_version",
                 "roctracer_version", "hip_runtime_version", "hip_driver_version", "trace_id", "traceName",
                 "host_name", "with_stack", "profile_memory", "record_shapes", "with_flops", "with_modules")
# top-level keys stored under their own trace_meta keys; the rest go to chrome_extra
_STORED_KEYS = frozenset(_VERSION_KEYS) | {"traceEvents", "deviceProperties", "displayTimeUnit", "baseTimeNanoseconds",
                                           "distributedInfo"}
EXTRA_MAX_BYTES = 256 << 10
_KIND_ORDER = {"global": 0, "process": 1, "thread": 2, "async": 3, "pcie": 4, "counter": 5, "memory": 6}


def sniff(head: bytes) -> bool:
    """A JSON object (with trace keys) or an array of event objects, after optional BOM/blank lines."""
    return bool(_HEAD.match(head[:4096]))


def probe(source) -> tuple[bool, str | None]:
    """A JSON object whose traceEvents key lies past the head: walk its top-level keys."""
    if source.head.lstrip(b"\xef\xbb\xbf \t\r\n")[:1] != b"{":
        return False, None
    with source.open() as stream:
        kind, keys, complete = top_level_keys(stream)
    if kind == "object" and keys and keys[-1] in TRACE_KEYS:
        return True, None
    return False, describe(kind, keys, complete)


class ChromeSession:
    """One trace's Chrome sources: each streamed in as it comes, linked across all in finish()."""

    def __init__(self, builder, block: int | None = None):
        self.state = ChromeState(builder)
        self.block = block

    def add(self, source) -> None:
        ingest(self.state, source, self.block)

    def finish(self) -> None:
        finish(self.state)


def ingest(state: ChromeState, source, block: int | None = None) -> None:
    """Stream one source's events into the builder (links wait for finish())."""
    builder = state.builder
    src = SourceState(idx=len(state.sources), name=source.name, group=source.group)
    state.sources.append(src)
    state.begin_writes()
    ok = False
    try:
        with source.open() as stream:
            reader = ChromeReader(stream, source.name, decode_events, block=block,
                                  on_prefix=lambda meta: _early_base_time(src, meta))
            for chunk in reader.chunks():
                process_chunk(state, src, chunk)
        ok = True
    finally:
        state.end_writes(ok)
    res = reader.result
    src.meta = res.meta
    if res.cut_off:
        src.note_file(res.cut_off, dropped=1 if res.partial_event else 0)
    elif res.truncated:
        src.note_file(f"{res.truncated}; the whole event array came before the cut and was loaded")
    ftrace = res.meta.get("systemTraceEvents")
    if isinstance(ftrace, str) and ftrace.strip():  # Chrome's about:tracing puts Linux ftrace text here
        lines = ftrace.count("\n") + (not ftrace.endswith("\n"))
        src.note_file(f"its systemTraceEvents (Linux ftrace text, {lines} lines) are kept in the trace's metadata"
                      " (chrome_extra) but not drawn: acceltrace does not read ftrace text")
    if res.unread:
        src.note_file(f"the file has a second top-level \"traceEvents\" array; the first was read, the second's"
                      f" {res.unread} events were not", dropped=res.unread)
    if res.bad_prefix:
        src.note_file(res.bad_prefix)
    elif res.ignored_tail:
        src.note_file(f"{res.ignored_tail} bytes after the event array are not valid JSON and were ignored")
    if res.events == 0 and not res.cut_off:
        src.note_file("the event array is empty")
    _apply_base_time(state, src)
    src.flush(builder)


def _base_ns(meta: dict) -> int | None:
    base = meta.get("baseTimeNanoseconds")
    if not isinstance(base, int) or isinstance(base, bool) or base <= 0 or base >= (1 << 62):
        return None
    return base


def _early_base_time(src: SourceState, meta: dict) -> None:
    """A base written before the events is added while parsing (no second pass over the rows)."""
    base = _base_ns(meta)
    if base is not None:
        src.offset_ns = base


def _apply_base_time(state: ChromeState, src: SourceState) -> None:
    """Newer Kineto writes times relative to "baseTimeNanoseconds": add it back (one host clock).

    Times at or above the base were already absolute (Kineto leaves those alone): then the
    base is not added, or taken back out if it was added while parsing.
    """
    base = _base_ns(src.meta)
    applied = src.offset_ns
    if base is None and not applied:
        return
    raw_max = None if src.max_ts_ns is None else src.max_ts_ns - applied
    if applied:
        if raw_max is None or raw_max < applied:
            return  # relative times, base already added
        _shift(state, src, -applied)
        src.offset_ns = 0
        return
    if raw_max is not None and raw_max >= base:
        return  # already absolute
    _shift(state, src, base)
    src.offset_ns = base


def _shift(state: ChromeState, src: SourceState, base: int) -> None:
    con = state.builder.con
    if src.first_slice is not None:
        con.execute("UPDATE _slices_staging SET ts = ts + ? WHERE slice_id >= ? AND slice_id < ?",
                    [base, src.first_slice, src.first_slice + src.n_slices])
    if src.counter_tracks:
        ids = ", ".join(str(int(t)) for t in src.counter_tracks)
        con.execute(f"UPDATE counters SET ts = ts + ? WHERE track_id IN ({ids})", [base])
    state.shift_staged(src.idx, base)


def finish(state: ChromeState) -> None:
    """Pairs, flows and links across the trace, then names and orders the tracks."""
    builder = state.builder
    state.register_staged()
    chrome_link.pair_begin_end(state)
    chrome_link.pair_async(state)
    builder.start_depths()  # every slice is staged: their depths beside the links below
    _name_tracks(state)  # the links neither add nor rename tracks:
    builder.lod_ahead()  # the finished rows and the LOD build beside the links (ingest/lod_ahead.py)
    chrome_link.write_track_tables(state)
    chrome_link.correlation_flows(state)
    chrome_link.flow_event_flows(state)
    chrome_link.v2_flows(state)
    chrome_link.external_id_flows(state)
    state.drop_staging()
    for src in state.sources:
        src.flush(builder)
    _trace_meta(state)


def _process_label(state, src_idx: int, pid: str, device_lane: bool) -> tuple[str, bool]:
    p = state.proc.get((src_idx, pid), {})
    labels, name = p.get("labels"), p.get("name")
    is_device = kin.is_device_process(labels, None) or (device_lane and not name)
    if labels and labels.upper() != "CPU":
        return labels, is_device
    if device_lane and not name:
        return f"device {pid}", True
    if name:
        return f"{name} ({pid})" if pid else name, is_device
    return (f"process {pid}" if pid else "trace"), is_device


def _thread_label(state, src_idx: int, pid: str, tid: str) -> str:
    t = state.thread_meta.get((src_idx, pid, tid), {}).get("name")
    if t:
        return t.strip()
    if tid.lower().startswith("stream"):
        return tid
    return f"thread {tid}" if tid else "events"


def _name_tracks(state) -> None:
    multi = len(state.sources) > 1
    ranks = _rank_names(state) if multi else {}
    first = _source_order(state, ranks)
    order = []
    for track_id, info in state.tracks.items():
        device_lane = (info.lane in ("eu", "pcie") or (info.lane == "annotation" and info.sub == "device")
                       or (info.kind == "memory" and info.tid == "device"))
        proc, is_device = _process_label(state, info.src, info.pid, device_lane)
        if info.kind == "thread":
            label = _thread_label(state, info.src, info.pid, info.tid)
            if info.lane == "driver":
                label += " (driver)"
            elif info.lane == "annotation":
                if device_lane and not label.lower().startswith("stream") and info.tid.isdigit():
                    label = f"stream {info.tid}"
                label += " annotations"
            elif info.lane == "eu" and not label.lower().startswith("stream") and info.tid.isdigit():
                label = f"stream {info.tid}" if is_device else label
        elif info.kind == "pcie":
            label = kin.PCIE_TRACK_NAMES.get(info.sub, f"PCIe {info.sub}")
        elif info.kind == "global":
            proc, label = "trace", "global instants"
        elif info.kind == "process":
            label = "process instants"
        elif info.kind == "async":
            label = f"async {info.sub}" if info.sub else "async"
        else:
            label = info.sub
        if multi:
            group, name = ranks[info.src], (f"{proc} / {label}" if info.kind != "global" else label)
        else:
            group, name = proc, label
        device = info.pid if (is_device or device_lane) and info.pid else None
        if device is not None and multi:  # GPU 0 of rank 1 is not GPU 0 of rank 2: busy and passes key on it
            device = f"{group}/{device}"
        thread = info.tid if info.tid and info.kind != "memory" else None
        psort = state.proc.get((info.src, info.pid), {}).get("sort")
        tsort = state.thread_meta.get((info.src, info.pid, info.tid), {}).get("sort")
        key = (first[info.src], _KIND_ORDER.get(info.kind) == 0, psort if psort is not None else _num(info.pid),
               info.pid, _LANE_ORDER[info.lane], tsort if tsort is not None else _num(info.tid), info.tid, name)
        order.append((key, track_id))
        state.builder.update_track(track_id, group_name=group, name=name, device=device,
                                   process=info.pid or None, thread=thread)
    for rank, (key, track_id) in enumerate(sorted(order, key=lambda kv: _sortable(kv[0]))):
        state.builder.update_track(track_id, sort_key=rank)


def _num(s: str):
    try:
        return int(s)
    except ValueError:
        return 1 << 62


def _sortable(key: tuple) -> tuple:
    src, is_global, psort, pid, lane, tsort, tid, name = key
    return (src, not is_global, psort, pid, lane, tsort, tid, name)


def _rank_names(state) -> dict[int, str]:
    """A group per source: "rank N" from distributedInfo when every source has a distinct one."""
    ranks = {}
    for s in state.sources:
        info = s.meta.get("distributedInfo") if isinstance(s.meta, dict) else None
        r = info.get("rank") if isinstance(info, dict) else None
        ranks[s.idx] = f"rank {r}" if isinstance(r, int) else None
    if None in ranks.values() or len(set(ranks.values())) != len(ranks):
        return {s.idx: s.group or s.name for s in state.sources}
    return ranks


def _source_order(state, ranks: dict[int, str]) -> dict[int, int]:
    """Each source's place in the track order: by rank where every source is a distinct "rank N" (an archive
    lists its ranks in any order: the timeline stacks rank 0 first), else in the order the sources came."""
    numbers = {idx: int(n[5:]) for idx, n in ranks.items() if n and n.startswith("rank ") and n[5:].isdecimal()}
    if len(numbers) == len(state.sources) and len(set(numbers.values())) == len(numbers):
        return numbers
    return {s.idx: s.idx for s in state.sources}


def _trace_meta(state) -> None:
    b = state.builder
    metas = [s.meta for s in state.sources if isinstance(s.meta, dict)]
    # deviceProperties is a list of objects in Kineto; anything else in its place is said and ignored
    for s in state.sources:
        if isinstance(s.meta, dict) and "deviceProperties" in s.meta and not isinstance(s.meta["deviceProperties"], list):
            b.warn(s.name, f"deviceProperties is {type(s.meta['deviceProperties']).__name__}, expected a list of"
                           " objects; the device properties are left out")
    props = [d for m in metas if isinstance(m.get("deviceProperties"), list)
             for d in m["deviceProperties"] if isinstance(d, dict)]
    devices = [str(d["name"]) for d in props if d.get("name")]
    if devices:
        b.set_meta("chrome_device_names", sorted(set(devices)))
    if props:
        b.set_meta("device_properties", json.dumps(props))
    versions = {}
    for m in metas:
        for key in _VERSION_KEYS:
            if key in m and isinstance(m[key], (str, int, float)) and not isinstance(m[key], bool):
                versions.setdefault(key, str(m[key]))
    profiler = "PyTorch profiler (Kineto)" if any("schemaVersion" in m or "deviceProperties" in m for m in metas) \
        else "Chrome trace event format"
    if versions.get("schemaVersion"):
        profiler += f", trace schema {versions['schemaVersion']}"
    b.set_meta("profiler", profiler)
    if versions:
        b.set_meta("versions", json.dumps(versions, sort_keys=True))
    # every other top-level fact the file carries (a harness's `metadata` object, host names, ...):
    # kept, not dropped silently, up to EXTRA_MAX_BYTES of JSON per trace
    extra = {}
    for src in state.sources:
        if isinstance(src.meta, dict):
            rest = {k: v for k, v in src.meta.items() if k not in _STORED_KEYS}
            if rest:
                extra[src.name] = rest
    if extra:
        doc = extra if len(state.sources) > 1 else next(iter(extra.values()))
        kept, left_out, used = {}, {}, 0
        for key, value in doc.items():
            size = len(json.dumps(value, default=str))
            if used + size <= EXTRA_MAX_BYTES:
                kept[key], used = value, used + size
            else:
                left_out[key] = size
        if left_out:
            kept["_left_out_bytes"] = left_out
            b.warn(state.sources[0].name, f"top-level facts {sorted(left_out)} ({sum(left_out.values())} bytes of JSON)"
                   f" exceed trace_meta chrome_extra's {EXTRA_MAX_BYTES} bytes and were not kept")
        b.set_meta("chrome_extra", json.dumps(kept, default=str))
    n_mem = sum(s.memory_events for s in state.sources)
    if n_mem:
        b.set_meta("chrome_memory_events", str(n_mem))
    for key in ("schemaVersion", "displayTimeUnit", "baseTimeNanoseconds"):
        vals = sorted({str(m[key]) for m in metas if key in m})
        if vals:
            b.set_meta(f"chrome_{key}", vals[0] if len(vals) == 1 else vals)
    ranks = [m["distributedInfo"].get("rank") for m in metas
             if isinstance(m.get("distributedInfo"), dict) and "rank" in m["distributedInfo"]]
    if ranks:
        b.set_meta("chrome_ranks", ranks)


IMPORTER = Importer(name=NAME, suffixes=SUFFIXES, sniff=sniff, session=ChromeSession, probe=probe)
