"""Rows of Arrow columns by position, in any order (the write of `slices` takes each column into stored order:
ingest/stage.py)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

try:  # built by `pip install` (setup.py); optional: the takes below give the same strings
    from acceltrace.ingest import _gather
except ImportError:  # pragma: no cover - depends on the install
    _gather = None


class Gather:
    """Rows of a chunked column by position, in any order, each call a batch of the write.

    How depends on the column, so that no call pays for the chunks it touches (at 830 MB a batch's
    rows come from all ~100 of them: a take per chunk, a join and a take back, per column and batch):
    - fixed width (ids, times, bytes): the chunks joined once (8 bytes a row), then one take a call;
    - dictionary-encoded (name, direction, host_mem: each chunk with a dictionary of its own): the
      chunks' codes mapped once onto one dictionary of every chunk's values, then a call takes that
      dictionary's values by the rows' codes (a copy of the short dictionary strings, nothing else);
    - other strings (args, category), never copied whole (at 830 MB the args are 280 MB): the rows'
      bytes copied once from their chunks into the batch (ingest/_gather.c); without it, each chunk's
      rows by one take, put back in order by one more."""

    def __init__(self, col: pa.ChunkedArray):
        chunks = [c for c in col.chunks if len(c)] or [pa.array([], col.type)]
        # one type for every batch: a dictionary column's values (its chunks may not share a dictionary)
        self.type = col.type.value_type if pa.types.is_dictionary(col.type) else col.type
        self.values: pa.Array | None = None  # a dictionary column's values, and codes: each row's, -1 for null
        self.codes: np.ndarray | None = None
        if pa.types.is_dictionary(col.type):
            self.values, self.codes = unified(chunks)
            chunks = []
        elif len(chunks) > 1 and (pa.types.is_integer(col.type) or pa.types.is_floating(col.type)):
            chunks = [pa.concat_arrays(chunks)]
        self.chunks = chunks
        self.starts = np.cumsum([0] + [len(c) for c in chunks])
        self.strings = _Strings(chunks) if _gather is not None and len(chunks) > 1 and _Strings.takes(col.type) else None

    def take(self, rows: np.ndarray) -> pa.Array:
        """The rows at these positions, in this order."""
        if self.codes is not None:
            codes = self.codes[rows]
            return self.values.take(pa.array(codes, mask=codes < 0))
        if len(self.chunks) == 1:
            return self.chunks[0].take(rows)
        which = np.searchsorted(self.starts, rows, side="right") - 1
        if self.strings is not None:
            return self.strings.take(rows, which, rows - self.starts[which], self.type)
        by_chunk = np.argsort(which, kind="stable")
        counts = np.bincount(which, minlength=len(self.chunks))
        parts, lo = [], 0
        for k, n in enumerate(counts.tolist()):
            if n:
                idx = rows[by_chunk[lo:lo + n]] - self.starts[k]
                parts.append(self.chunks[k].take(idx))
                lo += n
        back = np.empty(len(rows), dtype=np.int64)
        back[by_chunk] = np.arange(len(rows))
        return pa.concat_arrays(parts).take(back)


class _Strings:
    """A string column's chunks as the compiled gather reads them: each one's offsets and bytes, and
    every row's validity (one byte a row: 2 MB at 830 MB)."""

    @staticmethod
    def takes(typ: pa.DataType) -> bool:
        return pa.types.is_string(typ) or pa.types.is_large_string(typ)

    def __init__(self, chunks: list[pa.Array]):
        self.wide = pa.types.is_large_string(chunks[0].type)
        bufs = [c.buffers() for c in chunks]
        self.offsets = tuple(b[1] for b in bufs)
        self.data = tuple(b[2] if b[2] is not None else b"" for b in bufs)
        self.firsts = np.array([c.offset for c in chunks], dtype=np.int64)
        self.lengths = np.array([len(c) for c in chunks], dtype=np.int64)
        self.chunks = chunks  # the buffers' owners
        self.valid = np.concatenate([c.is_valid().to_numpy(zero_copy_only=False) for c in chunks]).view(np.uint8)

    def take(self, rows: np.ndarray, which: np.ndarray, local: np.ndarray, typ: pa.DataType) -> pa.Array:
        """The rows at these positions (`which` chunk each, `local` position in it), as an array of `typ`."""
        valid = self.valid[rows]
        out_wide = pa.types.is_large_string(typ)
        offsets, data = _gather.strings(self.offsets, self.firsts, self.lengths, self.data, self.wide,
                                        which.astype(np.int32), local.astype(np.int64), valid, out_wide)
        nulls = not valid.all()
        bitmap = pa.array(valid.view(np.bool_)).buffers()[1] if nulls else None
        cls = pa.LargeStringArray if out_wide else pa.StringArray
        return cls.from_buffers(len(local), pa.py_buffer(offsets), pa.py_buffer(data), bitmap)


def unified(chunks: list[pa.DictionaryArray]) -> tuple[pa.Array, np.ndarray]:
    """One dictionary for the chunks of a dictionary column, and each row's code in it (-1: null).

    Arrow's own unify_dictionaries refuses a dictionary that holds a null (the Chrome importer's
    direction column's may); here a null value, like a null code, is the code -1."""
    values = pa.concat_arrays([c.dictionary for c in chunks]) if chunks else pa.array([], pa.string())
    distinct = values.drop_null().unique()
    # each chunk's dictionary entries as positions in `distinct` (-1 for a null entry)
    at = pc.index_in(values, value_set=distinct).fill_null(-1).to_numpy(zero_copy_only=False)
    codes = np.empty(sum(len(c) for c in chunks), dtype=np.int32)
    lo = base = 0
    for c in chunks:
        mine = at[base:base + len(c.dictionary)]
        idx = c.indices.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)
        codes[lo:lo + len(c)] = np.where(idx < 0, -1, mine[np.maximum(idx, 0)] if len(mine) else -1)
        lo += len(c)
        base += len(c.dictionary)
    return distinct, codes


def plain(arr: pa.Array) -> pa.Array:
    """A dictionary-encoded array as its values (the batches of one stream share one type)."""
    return arr.dictionary_decode() if pa.types.is_dictionary(arr.type) else arr

