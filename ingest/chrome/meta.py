"""Metadata (M) and counter (C) events.

Real files repeat metadata (an MTIA trace holds 310,000 M events for 22 distinct
facts), so M events are reduced to the last one per (name, pid, tid) in C before any
of them is decoded. Counter events are fewer; each of their arg keys is a series.
"""

from __future__ import annotations

import math

import msgspec
import numpy as np

from acceltrace.ingest.chrome.columns import norm_id, values


def handle_metadata(state, src, sub: list) -> None:
    names, pids, tids = values(sub, "name"), values(sub, "pid"), values(sub, "tid")
    last = dict(zip(zip(names, pids, tids), range(len(sub))))
    for (name, pid, tid), i in last.items():
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


def _decode_all(raws: list) -> list:
    """Every args object of a batch in one decode call (one by one only if the batch fails)."""
    try:
        return msgspec.json.decode(b"[" + b",".join(raws) + b"]")
    except (msgspec.DecodeError, RecursionError):
        out = []
        for r in raws:
            try:
                out.append(msgspec.json.decode(r))
            except (msgspec.DecodeError, RecursionError):
                out.append(None)
        return out


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
    all_args = _decode_all([ev.args for ev in sub])
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
