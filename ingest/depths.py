"""Nesting depths of the slices an ingester gave none (the builder's finish step)."""

from __future__ import annotations

from typing import Callable

import duckdb
import numpy as np
import pyarrow as pa

from acceltrace.ingest.made_ahead import OnThread
from acceltrace.store.duck import cursor_like

try:  # built by `pip install` (setup.py); optional: the Python loop below gives the same depths
    from acceltrace.ingest import _depths
except ImportError:  # pragma: no cover - depends on the install
    _depths = None


def assign_depths(con: duckdb.DuckDBPyConnection, where: str = "true", staged: pa.Table | None = None) -> pa.Table:
    """Nesting depth for every slice whose ingester gave none: a table (slice_id, depth).

    A sweep over start/end events per track, in numpy: at equal times ends come before
    starts (adjacent slices share a depth), starts of longer slices before shorter ones
    (parents first), and an instant's end after every start. A slice's depth is the number
    of slices open when it starts (every track's starts and ends cancel, so one running sum
    over all tracks in track order needs no reset). That is exact for properly nested
    slices; tracks where partial overlaps make two slices collide at one depth get a
    first-free-depth pass (those tracks only), so every slice stays visible.

    `where`: the staged slices to read, whole tracks (the bounded regime's parts, ingest/spill.py); `staged`:
    every staged row, read already (ingest/ordered.py: finish() reads the same columns), in place of `where`.
    """
    empty = pa.table({"slice_id": pa.array([], pa.int64()), "depth": pa.array([], pa.int32())})
    if staged is not None:
        if not staged["depth"].null_count:
            return empty
        cols = {c: staged[c].to_numpy() for c in ("slice_id", "track_id", "ts", "dur")}
        known = staged["depth"].is_valid().to_numpy()
        given = staged["depth"].fill_null(0).to_numpy()
    else:
        ((todo,),) = con.execute(f"SELECT count(*) FROM _slices_staging WHERE depth IS NULL AND ({where})").fetchall()
        if not todo:
            return empty
        cols = con.execute(f"SELECT slice_id, track_id, ts, dur, depth FROM _slices_staging WHERE {where}").fetchnumpy()
        known = ~np.ma.getmaskarray(cols["depth"])
        given = np.ma.getdata(cols["depth"])
    sid = np.asarray(cols["slice_id"], dtype=np.int64)
    track = np.asarray(cols["track_id"], dtype=np.int64)
    ts = np.asarray(cols["ts"], dtype=np.int64)
    dur = np.asarray(cols["dur"], dtype=np.int64)
    del cols
    if not known.any():  # no depth given (most importers): the numpy entry point, flat tracks skipped
        return pa.table({"slice_id": sid, "depth": depths_of(sid, track, ts, dur)})
    depth = np.where(known, given, 0).astype(np.int32)
    bad_tracks = _sweep(sid, track, ts, dur, depth, known)
    if not len(bad_tracks):
        return pa.table({"slice_id": sid[~known], "depth": depth[~known]})
    # the rows to return: those without a given depth and every row of a bad track (a mask, not
    # np.union1d: that sorts through a hash of 2N indices, seconds at a few million slices)
    fix_mask = ~known
    fix_mask |= np.isin(track, bad_tracks)
    fix = np.flatnonzero(fix_mask)
    # slices of a bad track with a given depth are re-placed too (as the SQL version did)
    con.execute("UPDATE _slices_staging SET depth = NULL WHERE list_contains(?, track_id)", [bad_tracks.tolist()])
    return pa.table({"slice_id": sid[fix], "depth": depth[fix]})


class Ahead(OnThread):
    """work(cursor) on a cursor of its own, in a thread: started once every slice is staged, it runs beside
    the importer's link queries (DuckDB and the sweep release the GIL); result() joins it. `work`: by default
    assign_depths; the builder's is ordered.made, the depth pass and what finish() makes of it."""

    def __init__(self, con: duckdb.DuckDBPyConnection, work: Callable | None = None):
        self._cur = cursor_like(con)
        super().__init__(work or assign_depths, self._cur, name="depths-ahead")

    def result(self):
        self.close()
        return self.get()

    def close(self) -> None:
        self.join()
        try:
            self._cur.close()
        except duckdb.Error:
            pass


def depths_of(sid: np.ndarray, track: np.ndarray, ts: np.ndarray, dur: np.ndarray,
              compiled: bool = True) -> np.ndarray:
    """assign_depths' depths (int32) for slices given no depth at all, from their columns (int64).

    Compiled (ingest/_depths.c `sweep`): one sort of all rows by (track, ts), then a walk of each
    track with a heap of its open slices' ends, the greedy pass for tracks where two slices of one
    depth overlap; the same depths as the numpy sweep (tests/test_depths.py), a sort of N rows
    instead of three of 2N events and one of N (830 MB: ~1.3 CPU-s -> ~0.3 on the thread that
    runs beside the links). Otherwise (no compiler, or durations the heap's order cannot take: a
    negative one or an end past int64, which the builder then drops and asks again): a flat track
    (in time order each slice starts at or after the end of the one before it, and later than its
    start) gets depth 0 throughout, as the sweep would give it; only the other tracks' rows go
    through the sweep."""
    if len(sid) < 2:
        return np.zeros(len(sid), dtype=np.int32)
    return _depths_over(order_by(track, ts, np.zeros(len(sid), np.int8)), sid, track, ts, dur, compiled)


def depths_and_order(sid: np.ndarray, track: np.ndarray, ts: np.ndarray, dur: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """depths_of's depths, and the order the builder stores the rows in, order_by(track, ts, depth): the depth
    pass's own sort by (track, ts), its ties then put in depth order by a stable sort of rows nearly in order
    (a merge of short runs), not a second sort of all of them (2 M native slices, depths and order: 85-130 ->
    75-105 ms)."""
    by_time = order_by(track, ts, np.zeros(len(sid), np.int8))
    depth = _depths_over(by_time, sid, track, ts, dur) if len(sid) > 1 else np.zeros(len(sid), dtype=np.int32)
    keys = _primary_keys(track, ts, depth)
    if len(keys) > 1:
        return depth, np.lexsort(keys)
    return depth, by_time[np.argsort(keys[0][by_time], kind="stable")]


def _depths_over(o: np.ndarray, sid, track, ts, dur, compiled: bool = True) -> np.ndarray:
    """depths_of, given o = order_by(track, ts, 0)."""
    n = len(sid)
    depth = np.zeros(n, dtype=np.int32)
    if compiled and _depths is not None and _sweepable(ts, dur):  # one pass over that order, in C
        args = (np.ascontiguousarray(a, dtype=np.int64) for a in (track, ts, dur, sid, o))
        return np.frombuffer(_depths.sweep(*args), dtype=np.int32).copy()
    t, s = track[o], ts[o]
    e = s + dur[o]
    bad = (t[1:] == t[:-1]) & ((s[1:] < e[:-1]) | (s[1:] == s[:-1]))
    if not bad.any():
        return depth
    bad_t = t[1:][bad]
    lo, hi = int(bad_t.min()), int(bad_t.max())
    nested = (np.flatnonzero(np.bincount(bad_t - lo, minlength=1)) + lo if hi - lo < 1 << 24  # no sort
              else np.unique(bad_t))
    rows = np.flatnonzero(np.isin(track, nested))
    sub = np.zeros(len(rows), dtype=np.int32)
    _sweep(sid[rows], track[rows], ts[rows], dur[rows], sub, np.zeros(len(rows), dtype=bool))
    depth[rows] = sub
    return depth


def _sweepable(ts: np.ndarray, dur: np.ndarray) -> bool:
    """Durations >= 0 with every end within int64: what the compiled sweep's heap of ends assumes."""
    if not len(ts):
        return True
    return bool((dur >= 0).all()) and not bool((ts > np.iinfo(np.int64).max - dur).any())


def _sweep(sid, track, ts, dur, depth, known) -> np.ndarray:
    """Fill depth (in place) for the rows not `known`; returns the tracks that needed the greedy pass."""
    todo_rows = np.flatnonzero(~known)
    n = len(todo_rows)
    t_sid, t_track, t_ts, t_dur = sid[todo_rows], track[todo_rows], ts[todo_rows], dur[todo_rows]
    ev_track = np.concatenate([t_track, t_track])
    ev_t = np.concatenate([t_ts, t_ts + t_dur])
    ev_kind = np.concatenate([np.ones(n, np.int8), np.where(t_dur == 0, 2, 0).astype(np.int8)])
    ev_delta = np.concatenate([np.ones(n, np.int64), -np.ones(n, np.int64)])
    ev_row = np.concatenate([np.arange(n), np.arange(n)])
    order = np.lexsort((np.concatenate([t_sid, t_sid]), -np.concatenate([t_dur, t_dur]))
                       + _primary_keys(ev_track, ev_t, ev_kind))
    delta = ev_delta[order]
    open_before = np.cumsum(delta) - delta
    starts = delta > 0
    depth[todo_rows[ev_row[order][starts]]] = open_before[starts]
    # slices of one track and depth that overlap (by ts, then id): those tracks need the greedy pass
    o = np.lexsort((sid, ts, depth, track))
    end = ts[o] + dur[o]
    same = (track[o][1:] == track[o][:-1]) & (depth[o][1:] == depth[o][:-1])
    bad_tracks = np.unique(track[o][1:][same & (end[:-1] > ts[o][1:])])
    for track_id in bad_tracks.tolist():
        rows = np.flatnonzero(track == track_id)
        rows = rows[np.lexsort((sid[rows], -dur[rows], ts[rows]))]
        depth[rows] = _first_free(ts[rows], dur[rows])
    return bad_tracks


def order_by(track: np.ndarray, t: np.ndarray, low: np.ndarray) -> np.ndarray:
    """The stable permutation that sorts rows by (track, t, low): one argsort of a packed key where
    that fits (_primary_keys), else a lexsort of the three. The builder's stored order is (track_id,
    ts, depth); the depth sweep's (track, ts)."""
    keys = _primary_keys(track, t, low)
    return np.argsort(keys[0], kind="stable") if len(keys) == 1 else np.lexsort(keys)


def _primary_keys(track: np.ndarray, t: np.ndarray, low: np.ndarray) -> tuple:
    """lexsort's last keys for the order (track, t, low): one packed int64 where the three fit in
    63 bits (about 1.7x faster: each lexsort key is a pass over all events), else the three. `low`
    (an event kind, a depth) takes the bits of its largest value and must not be negative to be packed."""
    if not len(t):
        return (low, t, track)
    t0 = int(t.min())
    span, top, lb = int(t.max()) - t0, int(track.max()), int(low.max()).bit_length()
    if int(track.min()) >= 0 and int(low.min()) >= 0 and top.bit_length() + span.bit_length() + lb <= 63:
        return (((track.astype(np.int64) << (span.bit_length() + lb)) | ((t - t0) << lb) | low.astype(np.int64)),)
    return (low, t, track)


def _first_free(ts: np.ndarray, dur: np.ndarray, compiled: bool = True) -> np.ndarray:
    """Greedy interval colouring of one track's slices (given in ts, dur DESC, id order)."""
    if compiled and _depths is not None:
        out = _depths.first_free(np.ascontiguousarray(ts, dtype=np.int64), np.ascontiguousarray(dur, dtype=np.int64))
        return np.frombuffer(out, dtype=np.int32).copy()
    depth = np.zeros(len(ts), dtype=np.int32)
    # open_end[d] = end time of the slice currently occupying depth d
    open_end: list[int] = []
    for i, (t, d_) in enumerate(zip(ts.tolist(), dur.tolist())):
        e = t + d_
        # a depth is free when its occupant ended at or before t (instants never block)
        # and no deeper depth is still needed by an enclosing slice
        chosen = None
        lowest_free_above_containers = 0
        for d, end in enumerate(open_end):
            if end > t and end >= e:
                lowest_free_above_containers = d + 1
        for d in range(lowest_free_above_containers, len(open_end)):
            if open_end[d] <= t:
                chosen = d
                break
        if chosen is None:
            chosen = len(open_end)
            open_end.append(e)
        else:
            open_end[chosen] = e
        depth[i] = chosen
    return depth
