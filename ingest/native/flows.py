"""Flows of an .atrace trace: explicit (flow ids) and by correlation id (docs/formats.md, "Flows").

Both are joined in numpy over the file's slices while they are still in memory (ingest/native/atrace.py
holds them until it hands them to the builder sorted), on provisional ids: a slice's position in the
file's order. The caller maps those to the builder's slice ids (`ids[pid]`) when it adds the flows.
Flows come out ordered by destination in file order, as the SQL joins this replaces ordered them.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from acceltrace.formats import record as R

# flow kind code -> name; codes without a name (0, or one a newer writer uses) are 'other'
_KIND_NAMES = pa.array([n or "other" for n in R.FLOW_KINDS] + ["other"], pa.string())
_OTHER = len(R.FLOW_KINDS)


def _kinds(codes: np.ndarray) -> pa.DictionaryArray:
    """Flow kind names of codes, dictionary-encoded (the builder stores them without a string per row)."""
    return pa.DictionaryArray.from_arrays(pa.array(codes.astype(np.int8)), _KIND_NAMES)


class FlowEnds:
    """Explicit flow ends (FLOW_OUT/FLOW_IN records) of one file, kept as numpy parts.

    link() matches them by (stream, flow id): one source may feed several destinations (fan-out);
    a destination without a source is kept with an empty source end (its source fell outside the
    file), as the store allows; unmatched ends and reused source ids are counted in the warnings it returns.
    """

    def __init__(self):
        self.parts: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []
        self.n = 0

    def add(self, key: np.ndarray, is_out: np.ndarray, kind: np.ndarray, pid: np.ndarray) -> None:
        self.parts.append((np.asarray(key, np.uint64), np.asarray(is_out, bool), np.asarray(kind, np.uint8),
                           np.asarray(pid, np.int64)))
        self.n += len(key)

    def link(self) -> tuple[np.ndarray, np.ndarray, pa.Array, list[str]]:
        """(src pid or -1, dst pid, kind) of every destination, by destination in file order, and the warnings
        for the builder (the caller gives them: this may run on a thread beside the builder's)."""
        if not self.n:
            return np.zeros(0, np.int64), np.zeros(0, np.int64), pa.array([], pa.string()), []
        key, is_out, kind, pid = (np.concatenate(c) for c in zip(*self.parts))
        self.parts = []
        # sources: per key the first in file order (and its kind), and how many share the key
        so = np.flatnonzero(is_out)
        so = so[np.lexsort((pid[so], key[so]))]
        s_key = key[so]
        first = np.r_[True, s_key[1:] != s_key[:-1]] if len(so) else np.zeros(0, bool)
        starts = np.flatnonzero(first)
        src_key, src_pid, src_kind = s_key[starts], pid[so][starts], kind[so][starts]
        reused = len(so) - len(starts)
        do = np.flatnonzero(~is_out)
        do = do[np.argsort(pid[do], kind="stable")]
        d_key = key[do]
        pos = np.minimum(np.searchsorted(src_key, d_key), max(len(src_key) - 1, 0))
        found = (src_key[pos] == d_key) if len(src_key) else np.zeros(len(do), bool)
        src = np.where(found, src_pid[pos] if len(src_key) else 0, -1)
        code = np.where(found & ((src_kind[pos] if len(src_key) else 0) > 0),
                        src_kind[pos] if len(src_key) else 0, kind[do]).astype(np.int64)
        code = np.where(code < _OTHER, code, _OTHER)
        no_src = int((~found).sum())
        no_dst = int((~np.isin(src_key, d_key)).sum())
        said = []
        if reused:
            said.append(f"{reused} flow sources reuse a flow id already used in their stream; the first source is kept")
        if no_src:
            said.append(f"{no_src} flow destinations have no source in the file (kept with an empty source end)")
        if no_dst:
            said.append(f"{no_dst} flow sources have no destination in the file")
        return src, pid[do], _kinds(code), said


def corr_flows(pid: np.ndarray, corr: np.ndarray, ts: np.ndarray, lane: np.ndarray,
               taken: np.ndarray) -> tuple[np.ndarray, np.ndarray, pa.Array]:
    """Correlation flows (docs/formats.md) among slices with a correlation id: (src pid, dst pid, kind),
    by destination in file order. `pid`, `corr`, `ts`, `lane`: the slices that have a corr id; `taken`:
    pids that already have an explicit incoming flow (they get none by correlation).

    Per correlation id, the earliest cpu call and the earliest driver submission (ties: file order):
    cpu -> driver is a 'submit'; every pcie / eu slice gets one from the driver submission ('dma' /
    'exec'), or from the cpu call when there is none ('launch')."""
    empty = (np.zeros(0, np.int64), np.zeros(0, np.int64), pa.array([], pa.string()))
    if not len(pid):
        return empty

    def firsts(code: int) -> tuple[np.ndarray, np.ndarray]:
        rows = np.flatnonzero(lane == code)
        rows = rows[np.lexsort((pid[rows], ts[rows], corr[rows]))]
        c = corr[rows]
        keep = np.r_[True, c[1:] != c[:-1]] if len(rows) else np.zeros(0, bool)
        return c[keep], pid[rows][keep]

    def lookup(keys: np.ndarray, vals: np.ndarray, q: np.ndarray) -> np.ndarray:
        if not len(keys):
            return np.full(len(q), -1, np.int64)
        pos = np.minimum(np.searchsorted(keys, q), len(keys) - 1)
        return np.where(keys[pos] == q, vals[pos], -1)

    cpu_c, cpu_s = firsts(0)
    drv_c, drv_s = firsts(1)
    # cpu -> driver submissions
    sub_src = lookup(cpu_c, cpu_s, drv_c)
    ok = (sub_src >= 0) & ~np.isin(drv_s, taken)
    sub_src, sub_dst = sub_src[ok], drv_s[ok]
    # driver (or cpu) -> pcie / eu
    dev = np.flatnonzero((lane == 2) | (lane == 3))
    dev = dev[~np.isin(pid[dev], taken)]
    d = lookup(drv_c, drv_s, corr[dev])
    c = lookup(cpu_c, cpu_s, corr[dev])
    src = np.where(d >= 0, d, c)
    ok = src >= 0
    dev, d, src = dev[ok], d[ok], src[ok]
    dev_kind = np.where(d < 0, R.FLOW_CODES["launch"], np.where(lane[dev] == 2, R.FLOW_CODES["dma"],
                                                                R.FLOW_CODES["exec"]))
    all_src = np.concatenate([sub_src, src])
    all_dst = np.concatenate([sub_dst, pid[dev]])
    codes = np.concatenate([np.full(len(sub_src), R.FLOW_CODES["submit"]), dev_kind]).astype(np.int64)
    o = np.argsort(all_dst, kind="stable")
    return all_src[o], all_dst[o], _kinds(codes[o])
