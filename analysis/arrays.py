"""Array helpers of the what-if graph (analysis/graph.py, analysis/transform.py): a stable counting
sort and a scatter-max, compiled in analysis/_replay.c, with numpy doing the same where it is not built."""

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
