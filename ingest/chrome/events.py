"""One decoded chunk of Chrome events -> slices, counters, metadata and staged links.

Everything that can be decided per chunk is written at once (complete and instant
events become slices, counters become samples); what needs the whole source (B/E
pairs, async pairs, flow events, v2 flow bindings, External ids) is staged in
DuckDB tables that chrome_link resolves in SQL at the end.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from acceltrace.ingest.chrome import kineto as kin
from acceltrace.ingest.chrome.columns import (arg_fields, arg_ints, coded_strings, has_field, id_codes, id_ints,
                                             norm_id, phase_bytes, raw_events, raw_text, string_codes, strings, take,
                                             to_ns, unique_inverse, values)
from acceltrace.ingest.chrome.meta import MEMORY_EVENT, handle_counters, handle_memory, handle_metadata
from acceltrace.ingest.chrome.state import ChromeState, SourceState

_DIR_CODES = {None: 0, "h2d": 1, "d2h": 2, "d2d": 3, "p2p": 4}
_DIR_NAMES = [None, "h2d", "d2h", "d2d", "p2p"]
_HOST_CODES = {None: 0, "pageable": 1, "pinned": 2}
_HOST_NAMES = [None, "pageable", "pinned"]
SLICE_PHASES = ("X", "i", "I", "R")
FLOW_PHASES = ("s", "t", "f")
ASYNC_PHASES = {"b": "b", "e": "e", "n": "n", "S": "b", "F": "e", "T": "n", "p": "n"}


class ChunkWork:
    """The events of one chunk and lazily their exact-time twin."""

    def __init__(self, chunk, src: SourceState):
        self.chunk = chunk
        self.src = src
        self._raw = None

    def raw(self) -> list:
        if self._raw is None:
            self._raw = raw_events(self.chunk.raw)
        return self._raw

    def times(self, evs: list, idx: np.ndarray, field_name: str):
        """Exact ns of a time field; timestamps (not durations) move by the source's base time."""
        p = to_ns(values(evs, field_name), lambda: values(take(self.raw(), idx), field_name))
        if self.src.offset_ns and field_name == "ts":
            p.values[p.ok] += self.src.offset_ns
        return p


def process_chunk(state: ChromeState, src: SourceState, chunk) -> None:
    evs = chunk.events
    if not evs:
        return
    work = ChunkWork(chunk, src)
    groups = _phase_groups(evs)
    slice_idx = [groups[p] for p in SLICE_PHASES if p in groups]
    if slice_idx:
        idx = np.sort(np.concatenate(slice_idx)) if len(slice_idx) > 1 else slice_idx[0]
        _slices(state, work, take(evs, idx), idx, groups.get("X"))
    for ph, idx in groups.items():
        if ph in SLICE_PHASES:
            continue
        sub = take(evs, idx)
        if ph == "M":
            handle_metadata(state, src, sub)
        elif ph == "C":
            ts = work.times(sub, idx, "ts")
            handle_counters(state, src, sub, ts, chunk.first_index + idx)
        elif ph in FLOW_PHASES:
            _stage_flow_events(state, work, sub, idx, ph)
        elif ph in ("B", "E"):
            _stage_begin_end(state, work, sub, idx, ph)
        elif ph in ASYNC_PHASES:
            _stage_async(state, work, sub, idx, ASYNC_PHASES[ph])
        else:
            src.count_phase(ph, len(idx), chunk.first_index + int(idx[0]))


def _phase_groups(evs) -> dict:
    """{ph: the indices of the chunk's events of that phase}, in order of first appearance."""
    one = phase_bytes(evs)
    if one is not None:  # the common case: one-character phases, grouped by their byte
        present = np.flatnonzero(np.bincount(one, minlength=256))
        if len(present) == 1:
            return {chr(present[0]): np.arange(len(evs))}
        first = {int(b): int(np.argmax(one == b)) for b in present}
        return {chr(b): np.flatnonzero(one == b) for b in sorted(first, key=first.__getitem__)}
    enc = strings(evs, "ph").dictionary_encode()
    ph_codes = enc.indices.to_numpy(zero_copy_only=False)
    phases = enc.dictionary.to_pylist()
    return {ph: np.flatnonzero(ph_codes == k) if len(phases) > 1 else np.arange(len(evs))
            for k, ph in enumerate(phases)}


def _threads(state: ChromeState, src: SourceState, sub: list):
    """Per event: thread key, normalised pid and tid (as lists of the distinct values + codes)."""
    pc, pu = id_codes(sub, "pid")
    tc, tu = id_codes(sub, "tid")
    pairs, inv = unique_inverse(pc * max(1, len(tu)) + tc)
    keys = np.empty(len(pairs), dtype=np.int64)
    pid_of, tid_of = [], []
    for j, pair in enumerate(pairs.tolist()):
        pid, tid = norm_id(pu[pair // max(1, len(tu))]), norm_id(tu[pair % max(1, len(tu))])
        keys[j] = state.thread_key(src.idx, pid, tid)
        pid_of.append(pid)
        tid_of.append(tid)
    return inv, keys, pid_of, tid_of


def _classify(state, src, sub, names: pa.Array, cats: pa.Array, af):
    """Per event: lane, direction code, host-memory code (vectorised over distinct values)."""
    n = len(sub)
    lane = np.full(n, -1, dtype=np.int8)
    direction = np.zeros(n, dtype=np.int8)
    host = np.zeros(n, dtype=np.int8)
    dma = np.zeros(n, dtype=bool)
    cenc = cats.dictionary_encode()
    ccodes = cenc.indices.to_numpy(zero_copy_only=False)
    ccodes = np.where(cenc.indices.is_null().to_numpy(zero_copy_only=False), -1, ccodes)
    for k, cat in enumerate(cenc.dictionary.to_pylist()):
        rows = np.flatnonzero(ccodes == k)
        c = cat.lower()
        base = kin.category_lane(cat)
        if c in kin.COPY_CATEGORIES or c in kin.DMA_CATEGORIES:
            sub_names = names.take(pa.array(rows))
            nenc = sub_names.dictionary_encode()
            ncodes = nenc.indices.to_numpy(zero_copy_only=False)
            for j, nm in enumerate(nenc.dictionary.to_pylist()):
                r = rows[ncodes == j]
                if c in kin.COPY_CATEGORIES:
                    d, h = kin.copy_kind(nm)
                    direction[r] = _DIR_CODES[d]
                    host[r] = _HOST_CODES[h]
                    lane[r] = kin.lane_for(cat, nm, "", d)
                elif kin.is_dma_name(nm):
                    lane[r] = kin.PCIE
                    dma[r] = True
                    if af is not None:  # one lookup per distinct string, not an args decode per event
                        seen: dict = {}
                        none = _DIR_CODES[None]
                        for i, v in zip(r.tolist(), values(take(af, r), "direction")):
                            if isinstance(v, str):
                                code = seen.get(v)
                                if code is None:
                                    code = seen[v] = _DIR_CODES[kin.dma_direction(v)]
                                direction[i] = code
                            else:
                                direction[i] = none
                else:
                    lane[r] = kin.EU
        elif base is not None:
            lane[rows] = base
    return lane, direction, host, dma


def _tracks(state, src, inv, keys, pid_of, tid_of, lane, direction, skip=None) -> np.ndarray:
    """Track id per event from (thread, lane, direction): one PCIe track per device and direction.

    Rows in `skip` get -1 (their caller places them elsewhere) and create no track.
    """
    unknown = lane < 0
    if unknown.any():
        fallback = np.array([kin.thread_lane(t) for t in tid_of], dtype=np.int8)
        lane = np.where(unknown, fallback[inv], lane)
    combo = inv.astype(np.int64) * 64 + lane.astype(np.int64) * 8 + direction
    if skip is not None:
        combo = np.where(skip, -1, combo)
    uniq, cinv = unique_inverse(combo)
    ids = np.empty(len(uniq), dtype=np.int32)
    for j, c in enumerate(uniq.tolist()):
        if c < 0:
            ids[j] = -1
            continue
        t, ln, d = c // 64, (c // 8) % 8, c % 8
        ids[j] = state.slice_track(src, pid_of[t], tid_of[t], int(keys[t]), ln, _DIR_NAMES[d] or "")
    return ids[cinv]


def _slices(state: ChromeState, work: ChunkWork, sub: list, idx: np.ndarray, x_idx) -> None:
    src = work.src
    seq = work.chunk.first_index + idx
    ts = work.times(sub, idx, "ts")
    is_x = np.isin(idx, x_idx, assume_unique=True) if x_idx is not None and len(x_idx) != len(idx) \
        else np.full(len(sub), x_idx is not None)
    dur = work.times(sub, idx, "dur") if is_x.any() else None
    keep = ts.ok.copy()
    if (~ts.ok).any():
        src.drop("events without a valid ts (expected microseconds as a number)", ~ts.ok, seq, sub, "ts")
    if dur is not None:
        dur.values[~is_x] = 0
        no_dur = is_x & dur.missing
        if no_dur.any():
            src.note("complete (X) events without dur were kept as instants",
                     int(seq[np.flatnonzero(no_dur)[0]]), count=int(no_dur.sum()))
        bad = is_x & ~dur.ok & ~dur.missing
        neg = is_x & dur.ok & (dur.values < 0)
        if bad.any():
            src.drop("complete (X) events with an invalid dur (expected a number)", bad & keep, seq, sub, "dur")
        if neg.any():
            src.drop("complete (X) events with a negative dur (expected >= 0)", neg & keep, seq, sub, "dur")
        keep &= ~bad & ~neg
        dur_ns = np.where(dur.ok, dur.values, 0)
    else:
        dur_ns = np.zeros(len(sub), dtype=np.int64)
    if not keep.all():
        k = np.flatnonzero(keep)
        sub, idx, seq = take(sub, k), idx[k], seq[k]
        ts_ns, dur_ns, is_x = ts.values[k], dur_ns[k], is_x[k]
    else:
        ts_ns = ts.values
    if not sub:
        return
    names = strings(sub, "name").fill_null("")
    if not is_x.all():  # memory events are instant levels over time: counters, not instants
        mem = pc.equal(names, MEMORY_EVENT).to_numpy(zero_copy_only=False) & ~is_x
        if mem.any():
            k = np.flatnonzero(mem)
            handle_memory(state, src, take(sub, k), ts_ns[k])
            k = np.flatnonzero(~mem)
            sub, idx, seq, ts_ns, dur_ns, is_x = take(sub, k), idx[k], seq[k], ts_ns[k], dur_ns[k], is_x[k]
            names = names.take(pa.array(k))
            if not sub:
                return
    cats = strings(sub, "cat")
    args = values(sub, "args")
    af = arg_fields(args)
    inv, keys, pid_of, tid_of = _threads(state, src, sub)
    lane, direction, host, dma = _classify(state, src, sub, names, cats, af)
    scoped = _instant_scopes(state, src, sub, is_x, inv, pid_of) if not is_x.all() else None
    track_ids = _tracks(state, src, inv, keys, pid_of, tid_of, lane, direction,
                        None if scoped is None else scoped >= 0)
    if scoped is not None:
        track_ids = np.where(scoped >= 0, scoped, track_ids).astype(np.int32)
    batch = {"track_id": track_ids, "ts": ts_ns, "dur": dur_ns, "name": coded_strings(sub, "name"), "category": cats,
             "args": raw_text(args)}
    ext = None
    if af is not None:
        batch["corr_id"] = arg_ints(af, "correlation")
        nbytes = arg_ints(af, "nbytes")
        if dma.any():  # DMA requests give their size as "size"
            size = arg_ints(af, "size")
            nbytes = pa.array(np.where(dma & nbytes.is_null().to_numpy(zero_copy_only=False),
                                       size.fill_null(0).to_numpy(), nbytes.fill_null(0).to_numpy()),
                              mask=(nbytes.is_null().to_numpy(zero_copy_only=False)
                                    & (~dma | size.is_null().to_numpy(zero_copy_only=False))), type=pa.int64())
        batch["bytes"] = nbytes
        ext = arg_ints(af, "ext")
        if ext.null_count:
            lower = arg_ints(af, "ext_lower")
            ext = pa.array(np.where(ext.is_null().to_numpy(zero_copy_only=False),
                                    lower.fill_null(0).to_numpy(), ext.fill_null(0).to_numpy()),
                           mask=(ext.is_null().to_numpy(zero_copy_only=False)
                                 & lower.is_null().to_numpy(zero_copy_only=False)), type=pa.int64())
    if direction.any():
        batch["direction"] = pa.DictionaryArray.from_arrays(pa.array(direction, pa.int8()),
                                                            pa.array(_DIR_NAMES, pa.string()))
        batch["host_mem"] = pa.DictionaryArray.from_arrays(pa.array(host, pa.int8()),
                                                           pa.array(_HOST_NAMES, pa.string()))
    first = state.add_slices(batch)
    slice_ids = np.arange(first, first + len(sub), dtype=np.int64)
    src.note_slices(first, len(sub), ts_ns)
    if ext is not None and ext.null_count < len(ext):
        _stage_external_ids(state, src, ext, batch["corr_id"], track_ids, ts_ns, slice_ids)
    if has_field(sub, "bind_id", work.chunk.raw):  # v2 flows are rare: skip the field when no event has it
        _stage_v2_flows(state, src, sub, slice_ids, ts_ns)


_EXT_LANES = {"cpu": 0, "driver": 1}


def _stage_external_ids(state, src, ext: pa.Array, corr: pa.Array, track_ids, ts_ns, slice_ids) -> None:
    """The slices that an External id links (link.external_id_flows): ops, cpu slices without a
    correlation id (is_call 0), and calls, cpu or driver slices with one (1), with their times; the
    others link nothing. Known here, they spare the link a join of every row with the staged slices."""
    tracks, at = unique_inverse(track_ids)
    lane = np.array([_EXT_LANES.get(state.tracks[t].lane, 2) for t in tracks.tolist()], dtype=np.int8)[at]
    cpu = lane == 0
    has_corr = ~corr.is_null().to_numpy(zero_copy_only=False)
    call = (lane <= 1) & has_corr
    keep = ~ext.is_null().to_numpy(zero_copy_only=False) & ((cpu & ~has_corr) | call)
    if keep.any():
        state.stage("ext", {"src": np.full(int(keep.sum()), src.idx, dtype=np.int32), "slice_id": slice_ids[keep],
                            "ext_id": ext.filter(pa.array(keep)), "ts": ts_ns[keep],
                            "is_call": call[keep].astype(np.int8)})


def _instant_scopes(state, src, sub, is_x, inv, pid_of) -> np.ndarray:
    """Global ('g') and process ('p') instants go to their own tracks, not the thread's (-1: thread)."""
    scopes = values(sub, "s")
    out = np.full(len(sub), -1, dtype=np.int32)
    for i in np.flatnonzero(~is_x).tolist():
        sc = scopes[i]
        if sc == "g":
            out[i] = state.scope_track(src, None)
        elif sc == "p":
            out[i] = state.scope_track(src, pid_of[inv[i]])
    return out


def _stage_v2_flows(state, src, sub, slice_ids, ts_ns) -> None:
    bind = values(sub, "bind_id")
    if all(b is None for b in bind[:1]) and set(bind) == {None}:
        return
    rows = [i for i, b in enumerate(bind) if b is not None]
    fin, fout = values(sub, "flow_in"), values(sub, "flow_out")
    state.stage("flow_v2", {
        "src": [src.idx] * len(rows), "bind_id": [norm_id(bind[i]) for i in rows],
        "slice_id": slice_ids[rows], "ts": ts_ns[rows],
        "flow_in": [bool(fin[i]) for i in rows], "flow_out": [bool(fout[i]) for i in rows],
    })


_FLOW_PH = {"s": 0, "t": 1, "f": 2}


def _valid_ts(work, sub, idx, what: str):
    """The events with a valid ts, their chunk indices and exact ts in ns; the rest counted as dropped."""
    ts = work.times(sub, idx, "ts")
    if ts.ok.all():
        return sub, idx, ts.values
    work.src.drop(f"{what} events without a valid ts", ~ts.ok, work.chunk.first_index + idx, sub, "ts")
    k = np.flatnonzero(ts.ok)
    return take(sub, k), idx[k], ts.values[k]


def _stage_flow_events(state, work, sub, idx, ph) -> None:
    src = work.src
    sub, idx, ts_ns = _valid_ts(work, sub, idx, "flow")
    if not sub:
        return
    inv, keys, _, _ = _threads(state, src, sub)
    # (cat, name) pairs: each coded (columns.string_codes), the pair as one number
    (cc, cats), (nc, names) = (string_codes(sub, f) for f in ("cat", "name"))
    combo = cc * len(names) + nc
    uniq, kc = unique_inverse(combo)
    key_of = np.array([state.flow_keys.setdefault((cats[u // len(names)], names[u % len(names)]), len(state.flow_keys))
                       for u in uniq.tolist()], dtype=np.int32)
    ints_ = id_ints(sub, "id")
    fid, fid_text = ((pa.array(ints_, pa.int64()), pa.nulls(len(ints_), pa.string())) if ints_ is not None
                     else flow_ids(values(sub, "id")))
    n = len(sub)
    state.stage("flow_raw", {
        "src": np.full(n, src.idx, dtype=np.int32), "thread_key": keys[inv], "ts": ts_ns,
        "ph": np.full(n, _FLOW_PH[ph], dtype=np.uint8),
        "bp_e": _is_value(sub, "bp", "e", work.chunk.raw),
        "key": key_of[kc], "fid": fid, "fid_text": fid_text, "seq": work.chunk.first_index + idx,
    })


def _is_value(sub, field: str, value: str, raw: bytes) -> np.ndarray:
    """Whether each event's `field` is the string `value` (False where absent), by codes (no strings made)."""
    if not has_field(sub, field, raw):
        return np.zeros(len(sub), dtype=bool)
    codes, vals = string_codes(sub, field)
    return codes == vals.index(value) if value in vals else np.zeros(len(sub), dtype=bool)


def flow_ids(vals: list) -> tuple[pa.Array, pa.Array]:
    """Flow ids as int64 when they are integers (Kineto), else as text."""
    if set(map(type, vals)) <= {int}:
        try:
            return pa.array(vals, type=pa.int64()), pa.nulls(len(vals), pa.string())
        except (OverflowError, pa.ArrowInvalid):
            pass
    nums = [v if type(v) is int and -(1 << 63) <= v < (1 << 63) else None for v in vals]
    return pa.array(nums, type=pa.int64()), pa.array(
        [None if n is not None else norm_id(v) for v, n in zip(vals, nums)], type=pa.string())


def _stage_begin_end(state, work, sub, idx, ph) -> None:
    src = work.src
    sub, idx, ts_ns = _valid_ts(work, sub, idx, ph)
    if not sub:
        return
    names = strings(sub, "name")
    cats = strings(sub, "cat")
    inv, keys, pid_of, tid_of = _threads(state, src, sub)
    track = np.full(len(sub), -1, dtype=np.int32)
    if ph == "B":
        lane, direction, _, _ = _classify(state, src, sub, names.fill_null(""), cats, None)
        track = _tracks(state, src, inv, keys, pid_of, tid_of, lane, direction)
    state.stage("be", {
        "src": np.full(len(sub), src.idx, dtype=np.int32), "thread_key": keys[inv], "track_id": track,
        "ts": ts_ns, "seq": work.chunk.first_index + idx, "ph": [ph] * len(sub),
        "name": names, "cat": cats, "args": raw_text(values(sub, "args")),
    })


def _stage_async(state, work, sub, idx, kind) -> None:
    src = work.src
    sub, idx, ts_ns = _valid_ts(work, sub, idx, "async")
    if not sub:
        return
    state.stage("async", {
        "src": np.full(len(sub), src.idx, dtype=np.int32),
        "pid": [norm_id(v) for v in values(sub, "pid")],
        "cat": strings(sub, "cat").fill_null(""), "aid": [norm_id(v) for v in values(sub, "id")],
        "name": strings(sub, "name").fill_null(""), "ph": [kind] * len(sub),
        "ts": ts_ns, "seq": work.chunk.first_index + idx, "args": raw_text(values(sub, "args")),
    })
