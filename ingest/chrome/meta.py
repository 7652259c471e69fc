"""Metadata (M) and counter (C) events.

Real files repeat metadata (an MTIA trace holds 310,000 M events for 22 distinct
facts), so M events are reduced to the last one per (name, pid, tid) on integer codes
before any of them is decoded. Counter events are fewer; each of their arg keys is a series.
"""

from __future__ import annotations

import math

import msgspec
import numpy as np

from acceltrace.ingest.chrome.columns import args_objects, id_codes, norm_id, string_codes, take, unique_inverse, values


def handle_metadata(state, src, sub: list) -> None:
    for (name, pid, tid), i in _last_of_each(sub):
        try:
            args = msgspec.json.decode(sub[i].args)
        except (msgspec.DecodeError, RecursionError):
            continue
        if not isinstance(args, dict):
            continue
        p, t = norm_id(pid), norm_id(tid)
        proc = state.proc.setdefault((src.idx, p), {})
        if name == "process_name" and isinstance(args.get("name"), str):
            proc["name"] = args["name"]
        elif name == "process_labels" and args.get("labels") is not None:
            lab = args["labels"]
            proc["labels"] = ",".join(map(str, lab)) if isinstance(lab, list) else str(lab)
        elif name == "process_sort_index" and _is_int(args.get("sort_index")):
            proc["sort"] = int(args["sort_index"])
        elif name == "thread_name" and isinstance(args.get("name"), str):
            state.thread_meta.setdefault((src.idx, p, t), {})["name"] = args["name"]
        elif name == "thread_sort_index" and _is_int(args.get("sort_index")):
            state.thread_meta.setdefault((src.idx, p, t), {})["sort"] = int(args["sort_index"])


def _last_of_each(sub: list) -> list:
    """((name, pid, tid), index of its last event) for each distinct key, in order of first appearance
    (later keys win where two normalise alike), found on codes: no Python value per event."""
    nc, _ = string_codes(sub, "name")
    pc, pu = id_codes(sub, "pid")
    tc, tu = id_codes(sub, "tid")
    _, np_ = unique_inverse(nc * max(1, len(pu)) + pc)
    _, key = unique_inverse(np_ * max(1, len(tu)) + tc)
    _, first = np.unique(key, return_index=True)
    _, from_end = np.unique(key[::-1], return_index=True)  # both in key order: aligned
    last = (len(key) - 1 - from_end)[np.argsort(first)]
    picked = take(sub, last)
    keys = zip(values(picked, "name"), values(picked, "pid"), values(picked, "tid"))
    return list(zip(keys, last.tolist()))


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and -(1 << 62) < v < (1 << 62)


def handle_counters(state, src, sub: list, ts, seq: np.ndarray) -> None:
    """Each numeric arg of a C event is one sample of the series "name[id]: key"."""
    names, pids, ids = values(sub, "name"), values(sub, "pid"), values(sub, "id")
    track_ids: list[int] = []
    times: list[int] = []
    samples: list[float] = []
    bad = 0
    first_bad = None
    tracks: dict[tuple, int] = {}
    all_args = args_objects(sub)
    for i, args in enumerate(all_args):
        if not ts.ok[i]:
            bad += 1
            first_bad = first_bad if first_bad is not None else int(seq[i])
            continue
        if not isinstance(args, dict) or not args:
            bad += 1
            first_bad = first_bad if first_bad is not None else int(seq[i])
            continue
        series = names[i] or "counter"
        if ids[i] is not None:
            series = f"{series}[{norm_id(ids[i])}]"
        pid = norm_id(pids[i])
        for key, v in args.items():
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                bad += 1
                first_bad = first_bad if first_bad is not None else int(seq[i])
                continue
            label = series if key in (series, names[i]) else f"{series}: {key}"
            tk = (pid, label)
            t = tracks.get(tk)
            if t is None:
                t = tracks[tk] = state.counter_track(src, pid, label)
            track_ids.append(t)
            times.append(int(ts.values[i]))
            samples.append(float(v))
    if bad:
        src.note("counter (C) values that are not finite numbers (or events without a valid ts) were skipped",
                 first_bad, dropped=True, count=bad)
    if track_ids:
        state.add_counters(np.array(track_ids, dtype=np.int32), np.array(times, dtype=np.int64),
                                   np.array(samples, dtype=np.float64))
        src.counter_tracks.update(tracks.values())


MEMORY_EVENT = "[memory]"


def handle_memory(state, src, sub: list, ts_ns: np.ndarray) -> None:
    """Kineto `[memory]` instants -> per-device counter tracks of allocated and reserved bytes.

    Newer Kineto records the allocator's totals after each event ("Total Allocated",
    "Total Reserved"): those are the levels. Older files give only the signed size of each
    allocation ("Bytes"): the level is then their running sum in file order, i.e. the bytes
    allocated since the trace began (what was allocated before it is not known). "Device Id"
    -1 is host memory. Each event's size and address stay in no slice: the counters hold
    the levels, trace_meta chrome_memory_events the count (docs/ingest.md).
    """
    all_args = args_objects(sub)
    tracks, times, samples = [], [], []
    bad = 0
    # a profiler with memory on writes an event per allocation: pids and tracks are worked out once each
    pid_code, pid_values = id_codes(sub, "pid")
    owners = [norm_id(v) for v in pid_values]
    pid_of = [owners[c] for c in pid_code.tolist()]
    track_of: dict = {}

    def track(dev: int, pid: str, series: str) -> int:
        t = track_of.get((dev, pid, series))
        if t is None:
            t = track_of[(dev, pid, series)] = state.memory_track(src, dev, pid, series)
        return t

    for i, args in enumerate(all_args):
        if not isinstance(args, dict):
            bad += 1
            continue
        dev = args.get("Device Id")
        dev = int(dev) if _is_int(dev) else -1
        alloc, reserved, nbytes = args.get("Total Allocated"), args.get("Total Reserved"), args.get("Bytes")
        pid = pid_of[i]
        if not _is_int(alloc):
            if not _is_int(nbytes):
                bad += 1
                continue
            key = (dev, pid if dev < 0 else "")
            alloc = src.memory_running[key] = src.memory_running.get(key, 0) + int(nbytes)
            series = "memory allocated since trace start"
        else:
            series = "memory allocated"
        t = int(ts_ns[i])
        tracks.append(track(dev, pid, series))
        times.append(t)
        samples.append(float(alloc))
        if _is_int(reserved):
            tracks.append(track(dev, pid, "memory reserved"))
            times.append(t)
            samples.append(float(reserved))
    src.memory_events += len(sub)
    if bad:
        src.note("[memory] events without a device total or a size were skipped", None, dropped=True, count=bad)
    if tracks:
        track_ids = np.array(tracks, dtype=np.int32)
        state.add_counters(track_ids, np.array(times, dtype=np.int64), np.array(samples, dtype=np.float64))
        src.counter_tracks.update(set(tracks))
