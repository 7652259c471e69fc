"""Rows of Arrow columns by position, in any order (the write of `slices` takes each column into stored order:
ingest/stage.py)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa


class Gather:
    """Rows of a chunked column by position, in any order, without joining its chunks into one array
    first (a copy of the whole column; Arrow's own take of a chunked array makes it on each call)."""

    def __init__(self, col: pa.ChunkedArray):
        self.chunks = [c for c in col.chunks if len(c)] or [pa.array([], col.type)]
        self.starts = np.cumsum([0] + [len(c) for c in self.chunks])
        # one type for every batch: a dictionary column's values (its chunks may not share a dictionary)
        self.type = col.type.value_type if pa.types.is_dictionary(col.type) else col.type

    def take(self, rows: np.ndarray) -> pa.Array:
        """The rows at these positions, in this order: each chunk's by one take, put back in order by one more."""
        if len(self.chunks) == 1:
            return plain(self.chunks[0].take(rows))
        which = np.searchsorted(self.starts, rows, side="right") - 1
        by_chunk = np.argsort(which, kind="stable")
        counts = np.bincount(which, minlength=len(self.chunks))
        parts, lo = [], 0
        for k, n in enumerate(counts.tolist()):
            if n:
                idx = rows[by_chunk[lo:lo + n]] - self.starts[k]
                parts.append(plain(self.chunks[k].take(idx)))
                lo += n
        back = np.empty(len(rows), dtype=np.int64)
        back[by_chunk] = np.arange(len(rows))
        return pa.concat_arrays(parts).take(back)


def plain(arr: pa.Array) -> pa.Array:
    """A dictionary-encoded array as its values (the batches of one stream share one type)."""
    return arr.dictionary_decode() if pa.types.is_dictionary(arr.type) else arr


def whole(col: pa.ChunkedArray) -> pa.Array:
    """One array of a column's chunks (a dictionary column's decoded: Arrow cannot join dictionaries
    that hold a null, as the Chrome importer's direction column's can)."""
    if pa.types.is_dictionary(col.type):
        col = pa.chunked_array([plain(c) for c in col.chunks], type=col.type.value_type)
    return col.combine_chunks()
