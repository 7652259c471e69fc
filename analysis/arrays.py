"""Array helpers of the what-if graph (analysis/graph.py, analysis/transform.py): a stable counting
sort and a scatter-max, compiled in analysis/_replay.c, with numpy doing the same where it is not built;
the index from slice ids to the graph's nodes."""

from __future__ import annotations

import numpy as np

try:  # built by `pip install` (setup.py); optional: numpy does the same below
    from acceltrace.analysis import _replay as _C
except ImportError:  # pragma: no cover - depends on the install
    _C = None


def order_by(key: np.ndarray, n: int) -> np.ndarray:
    """The stable order of items by a key in 0..n-1 (np.argsort(kind="stable")'s, by a counting sort)."""
    key = np.ascontiguousarray(key, dtype=np.int64)
    if _C is None:
        return np.argsort(key, kind="stable")
    out = np.empty(len(key), np.int64)
    _C.order_by(key, int(n), out)
    return out


def stable_order(codes: np.ndarray) -> np.ndarray:
    """np.argsort(codes, kind="stable"), by a counting sort where the codes are small non-negative numbers."""
    top = int(codes.max(initial=-1)) + 1
    if codes.min(initial=0) >= 0 and top <= 4 * len(codes) + 1024:
        return order_by(codes, top)
    return np.argsort(codes, kind="stable")


def scatter_max(out: np.ndarray, idx: np.ndarray, val: np.ndarray) -> None:
    """np.maximum.at(out, idx, val) (out: int64, written in place)."""
    if _C is None:
        np.maximum.at(out, idx, val)
    else:
        _C.scatter_max(out, np.ascontiguousarray(idx, dtype=np.int64), np.ascontiguousarray(val, dtype=np.int64))


class NodeIndex:
    """slice_id -> node, over sorted arrays (a dict of millions of ints costs more than the graph)."""

    def __init__(self, slice_ids: np.ndarray):
        self.lut = None
        lo = int(slice_ids.min()) if len(slice_ids) else 0
        span = int(slice_ids.max()) - lo + 1 if len(slice_ids) else 0
        if 0 < span <= 4 * len(slice_ids) + 1024:  # ids nearly dense (as the builder numbers them): a table
            self.lo, self.lut = lo, np.full(span, -1, np.int64)
            self.lut[slice_ids - lo] = np.arange(len(slice_ids))
            self.order = self.sorted = None
            return
        self.order = np.argsort(slice_ids, kind="stable")
        self.sorted = slice_ids[self.order]

    def nodes(self, ids) -> np.ndarray:
        """The node of each id, -1 where the graph has none."""
        ids = np.asarray(ids, np.int64)
        if self.lut is not None:
            k = ids - self.lo
            inside = (k >= 0) & (k < len(self.lut))
            return np.where(inside, self.lut[np.where(inside, k, 0)], -1)
        if not len(self.sorted) or not len(ids):
            return np.full(len(ids), -1, np.int64)
        pos = np.minimum(np.searchsorted(self.sorted, ids), len(self.sorted) - 1)
        return np.where(self.sorted[pos] == ids, self.order[pos], -1)

    def get(self, sid, default=None):
        if sid is None:
            return default
        v = int(self.nodes([int(sid)])[0])
        return default if v < 0 else v

    def __contains__(self, sid) -> bool:
        return self.get(sid) is not None

    def __getitem__(self, sid) -> int:
        v = self.get(sid)
        if v is None:
            raise KeyError(sid)
        return v
