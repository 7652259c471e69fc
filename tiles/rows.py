"""A tile section's rows in the encoding's order, and a depth page's fold sections (numpy only).

tiles/query.py reads the rows of a tile or depth page out of DuckDB unordered; here they are put in
the order the encoding wants (by track, then ts or bucket and depth), split into the page's own rows
and the deeper ones, and the deeper ones folded into the coverage runs and instant ticks the UI's
fold row draws (docs/api.md "Depth pages").
"""

from __future__ import annotations

import numpy as np

from acceltrace.tiles.build import TILE_BUCKETS_LOG2
from acceltrace.tiles.encoding import _col

DEPTH_PAGE = 4  # depths per page (tiles/query.py re-exports it)
_DEPTH_BITS = (DEPTH_PAGE - 1).bit_length()  # a depth within its page, in a sort key


def _union_runs(track: np.ndarray, start: np.ndarray, end: np.ndarray) -> list[np.ndarray]:
    """Per track, the union of [start, end) intervals as disjoint runs (touching ones joined), sorted
    by (track, start): the [track, start, end] columns of the fold section. Vectorised per track."""
    if not len(track):
        return [np.zeros(0, np.int64), np.zeros(0, np.float64), np.zeros(0, np.float64)]
    o = np.lexsort((start, track))
    track, start, end = track[o], start[o], end[o]
    uniq, first = np.unique(track, return_index=True)
    bounds = list(first) + [len(track)]
    out_t, out_s, out_e = [], [], []
    for k, t in enumerate(uniq.tolist()):  # one step per track of the group, not per event
        s, e = start[bounds[k]:bounds[k + 1]], end[bounds[k]:bounds[k + 1]]
        reach = np.maximum.accumulate(e)
        new = np.ones(len(s), dtype=bool)
        new[1:] = s[1:] > reach[:-1]
        idx = np.flatnonzero(new)
        last = np.append(idx[1:] - 1, len(s) - 1)
        out_t.append(np.full(len(idx), t, np.int64))
        out_s.append(s[idx])
        out_e.append(reach[last])
    return [np.concatenate(out_t), np.concatenate(out_s), np.concatenate(out_e)]


def _split_sorted(section: str, cols: list[np.ndarray], lo: int, hi: int
                  ) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """A page query's rows as (page rows, fold rows: depth > hi), each in the encoding's order (by
    track, then bucket and depth; exact slices by track, ts, depth, id), so both come out of one
    gather as contiguous slices. Merged and instant rows are unique per (track, bucket, depth) and
    counters per (track, bucket): two stable radix passes over small keys ((bucket, depth - lo),
    then (fold, track - the group's first track)) order them where the tracks span < 128 ids, else
    one argsort of a packed int64 key."""
    n = len(cols[0])
    is_fold = np.zeros(n, dtype=bool)
    if section != "counters":
        depth = cols[_col(section, "depth")].astype(np.int64)
        is_fold = depth > hi
    n_fold = int(np.count_nonzero(is_fold))
    if n > 1:
        track = cols[0].astype(np.int64)
        if section == "slices":
            o = np.lexsort((cols[_col(section, "id")], depth, cols[_col(section, "ts")], track, is_fold))
        else:
            low = cols[1].astype(np.int64) << _DEPTH_BITS  # bucket in [0, 1024)
            if section != "counters":
                low |= np.where(is_fold, 0, depth - lo)  # in [0, DEPTH_PAGE) on page rows
            t_lo = int(track.min())
            if int(track.max()) - t_lo < 128:
                o = np.argsort(low.astype(np.uint16), kind="stable")
                high = ((is_fold.astype(np.uint8) << 7) | (track - t_lo).astype(np.uint8))[o]
                o = o[np.argsort(high, kind="stable")]
            else:
                o = np.argsort((is_fold.astype(np.int64) << 62) | (track << 25) | low)
        cols = [c[o] for c in cols]
    k = n - n_fold
    return [c[:k] for c in cols], [c[k:] for c in cols]


def _page_fold(folds: dict[str, list[np.ndarray]], level: int, index: int) -> dict[str, list[np.ndarray]]:
    """The fold sections from a page's fold rows (_split_sorted): per track, the union of the exact
    slices' [ts, ts + dur) and the merged buckets as runs, and one tick per (track, bucket) at its
    first deeper instant. The merged buckets come sorted by (track, bucket): each run of adjacent
    buckets is one interval before the union."""
    t0 = index << (level + TILE_BUCKETS_LOG2)
    bn = 1 << level
    sl, mg, ins = folds["slices"], folds["merged"], folds["instants"]
    mt, mb = mg[0].astype(np.int64), mg[1].astype(np.int64)
    if len(mt):
        new = np.ones(len(mt), dtype=bool)
        new[1:] = (mt[1:] != mt[:-1]) | (mb[1:] != mb[:-1] + 1)
        first = np.flatnonzero(new)
        last = np.append(first[1:] - 1, len(mt) - 1)
        mt, ms, me = mt[first], mb[first] * bn + t0, (mb[last] + 1) * bn + t0
    else:
        ms = me = mb
    ts = sl[_col("slices", "ts")].astype(np.int64)
    fold = _union_runs(np.concatenate([sl[0].astype(np.int64), mt]), np.concatenate([ts, ms]).astype(np.float64),
                       np.concatenate([ts + sl[_col("slices", "dur")].astype(np.int64), me]).astype(np.float64))
    return {"fold": fold, "fold_instants": [ins[0].astype(np.int64), ins[_col("instants", "ts")].astype(np.float64)]}


def _order(section: str, cols: list[np.ndarray]) -> np.ndarray:
    """The encoding's row order: by track, then ts and depth (slices) or bucket and depth; one stable
    argsort of a packed int64 key where the columns fit (track < 2^31, bucket < 2^10, depth < 2^15)."""
    track = cols[0].astype(np.int64)
    if section == "slices":
        return np.lexsort((cols[_col(section, "depth")], cols[_col(section, "ts")], track))
    key = (track << 25) | (cols[1].astype(np.int64) << 15)
    if section != "counters":
        key |= cols[2].astype(np.int64)
    return np.argsort(key, kind="stable")


def window_sections(cols: dict, level: int, index: int, hi: int, fold: bool) -> tuple[list, list]:
    """A fine page's exact slices (classes >= level, and every row of `part` 1: the longer classes'
    branches) and merged rows (the shorter ones starting in the tile, one row per (track, bucket,
    depth)) from one query of its raw window (tiles/query.py _window_sql), in the columns and values
    of the SQL sections they replace (build_page then runs neither): a merged row's count, busy ns
    and bytes (nulls count as nothing), and its longest slice (ties to the smaller id) with that
    slice's name; with `fold`, depths past the page's `hi` are counted as hi + 1."""
    L, t0, b0 = level, index << (level + TILE_BUCKETS_LOG2), index << TILE_BUCKETS_LOG2
    track, sid, ts, dur = (np.asarray(cols[c]) for c in ("track_id", "slice_id", "ts", "dur"))
    name, cls = np.asarray(cols["name_id"]), np.asarray(cols["cls"])
    depth = np.asarray(cols["depth"]).astype(np.int16)
    if fold:
        depth = np.minimum(depth, hi + 1).astype(np.int16)
    raw_bytes = cols["bytes"]
    has = ~np.ma.getmaskarray(raw_bytes)
    nbytes = np.where(has, np.ma.getdata(raw_bytes), 0).astype(np.int64)
    exact = cls >= L
    if "part" in cols:  # rows of the longer classes' branches (part 1): exact slices whatever their class
        exact |= np.asarray(cols["part"]) == 1
    slices = [track[exact], sid[exact], ts[exact], dur[exact], depth[exact], name[exact], nbytes[exact]]
    short = np.flatnonzero(~exact & (ts >= t0))
    if not len(short):
        z = np.zeros(0, np.int64)
        return slices, [track[:0], z, depth[:0], z, z.astype(np.float64), z.astype(np.float64), z, z, name[:0]]
    t, b, d = track[short].astype(np.int64), (ts[short] >> L) - b0, depth[short].astype(np.int64)
    rel = np.lexsort((sid[short], -dur[short], d, b, t))  # each group's longest first
    o, t, b, d = short[rel], t[rel], b[rel], d[rel]
    new = np.ones(len(o), dtype=bool)
    new[1:] = (t[1:] != t[:-1]) | (b[1:] != b[:-1]) | (d[1:] != d[:-1])
    first = np.flatnonzero(new)
    lead = o[first]
    merged = [track[lead], b[first], depth[lead], np.diff(np.append(first, len(o))),
              np.add.reduceat(dur[o], first).astype(np.float64), np.add.reduceat(nbytes[o], first).astype(np.float64),
              sid[lead], dur[lead], name[lead]]
    return slices, merged
