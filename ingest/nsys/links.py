"""The correlation links of an Nsight export's slices, as the mapping queries hand the slices over: (slice_id, corr,
gpid, role) of each slice with a correlation id. The flows query (map.FLOWS_SQL) reads them as `_links`.

They are not inserted into the staging database after each query: with the sort's memory in the bounded regime's
500 MB stage, those inserts cost up to 0.85 s at 4 M slices (docs/performance.md, thirty-seventh stop). Below the
spill threshold they are held as Arrow. Past it they go to an Arrow file in the ingest's work directory as they
come, so what the ingest holds does not grow with them (8 M slices: 170 MB of links; the ingest's peak 1.48-1.52
-> 1.38-1.42 GB, docs/performance.md, thirty-eighth stop), and the flows query reads the file mapped into memory:
its pages are the page cache's, resident while the query reads them but the kernel's to drop, not the heap's. (A
Parquet file took 0.3-0.8 s of CPU to write for 7.3 M links, an Arrow file 0.23 s.)
"""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.ipc as ipc

ROLES = pa.array(["api", "drv", "exec", "dma"])  # every role a mapping query gives (ingest/nsys/map.py)
SCHEMA = pa.schema([("slice_id", pa.int64()), ("corr", pa.int64()), ("gpid", pa.int64()),
                    ("role", pa.dictionary(pa.int8(), pa.string()))])


class Links:
    def __init__(self, spill_to: Path | None = None):
        self.path = spill_to  # None: held in memory
        self.parts: list[pa.Table] = []
        self._writer: ipc.RecordBatchFileWriter | None = None

    def add(self, first: int, batch: pa.Table) -> None:
        """The links of a batch of slices numbered from `first` (its columns corr_id, gpid and role; a slice without
        a role or with a null or 0 correlation id has none)."""
        role, corr = batch["role"], batch["corr_id"]
        if role.null_count == batch.num_rows:
            return
        keep = pc.and_(pc.is_valid(role), pc.not_equal(corr, 0))
        ids = pa.array(np.arange(first, first + batch.num_rows, dtype=np.int64))
        # the role as a code into ROLES: a byte a link, and one dictionary for every batch of an Arrow file
        code = pc.index_in(role, value_set=ROLES)
        if code.null_count != role.null_count:
            raise ValueError(f"a correlation role outside {ROLES.to_pylist()}")
        if isinstance(code, pa.ChunkedArray):  # (from_arrays would read a chunked one value by value)
            code = code.combine_chunks()
        role = pa.DictionaryArray.from_arrays(code.cast(pa.int8()), ROLES)
        link = pa.table({"slice_id": ids, "corr": corr, "gpid": batch["gpid"], "role": role}, schema=SCHEMA)
        if self.path is None:
            self.parts.append(link.filter(keep))
            return
        if self._writer is None:
            self._writer = ipc.new_file(self.path, SCHEMA)
        self._writer.write_table(link.filter(keep))

    @contextmanager
    def viewed(self, stage: duckdb.DuckDBPyConnection):
        """`_links` on the staging connection for the body; afterwards the links are let go."""
        if self._writer is not None:
            self._writer.close()
            self._writer = None
            self.parts = [ipc.open_file(pa.memory_map(str(self.path))).read_all()]
        stage.register("_links", pa.concat_tables(self.parts) if self.parts else SCHEMA.empty_table())
        try:
            yield
        finally:
            stage.unregister("_links")
            self.close()

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        self.parts.clear()
        if self.path is not None:
            self.path.unlink(missing_ok=True)
