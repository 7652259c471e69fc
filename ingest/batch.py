"""What the builder is handed, as Arrow: a batch's columns in the store's types (ingest/builder.py)."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc


def all_in(col: pa.ChunkedArray, values) -> bool:
    """Whether every value of a string column (or dictionary-encoded one) is one of `values`."""
    allowed = pa.array(values)
    for chunk in col.chunks:
        if pa.types.is_dictionary(chunk.type):  # the values used, not one check per row
            chunk = chunk.dictionary.take(pc.unique(chunk.indices.drop_null()))
        if not pc.all(pc.is_in(chunk, value_set=allowed)).as_py() in (True, None):
            return False
    return True


def _keeps(col, typ: pa.DataType | None) -> bool:
    """No cast needed: the type already, or dictionary-encoded values of it (DuckDB reads those as
    they are, without the per-row strings a cast to plain strings would make)."""
    return typ is None or col.type == typ or (pa.types.is_dictionary(col.type) and col.type.value_type == typ)


def as_table(batch, types: dict[str, pa.DataType]) -> pa.Table:
    if isinstance(batch, pa.Table):
        t = batch
        fields = []
        arrays = []
        for name in t.column_names:
            col = t[name]
            if not _keeps(col, types.get(name)):
                col = col.cast(types[name])
            fields.append(name)
            arrays.append(col)
        return pa.table(dict(zip(fields, arrays)))
    arrays = {}
    for name, col in batch.items():
        if col is None:
            continue
        typ = types.get(name)
        if isinstance(col, (pa.Array, pa.ChunkedArray)):
            arrays[name] = col if _keeps(col, typ) else col.cast(typ)
        else:
            arrays[name] = pa.array(col, type=typ)
    return pa.table(arrays)
