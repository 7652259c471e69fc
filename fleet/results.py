"""The per-trace results as Parquet: one declared schema, one row group per trace, streamed."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

_I, _F, _S, _B = pa.int64(), pa.float64(), pa.string(), pa.bool_()

SCHEMA = pa.schema([
    ("build", _I), ("path", _S), ("name", _S), ("trace_id", _S), ("status", _S), ("error", _S),
    ("ingested", _B), ("analyzed_now", _B), ("worker", _S), ("map_ms", _F), ("cpu_ms", _F), ("format", _S),
    ("tag_job", _S), ("tag_rank", _S), ("tag_host", _S), ("tag_run", _S), ("tags_json", _S),
    ("run_ns", _I), ("devices", _I), ("device_busy", _F), ("compute_busy", _F), ("host_busy", _F),
    ("host_gap_ns", _I), ("host_gaps", _I), ("host_gap_frac", _F), ("launch_ns_median", _F),
    ("h2d_bytes", _I), ("h2d_ns", _I), ("h2d_gbps", _F), ("d2h_bytes", _I), ("d2h_ns", _I), ("d2h_gbps", _F),
    ("transfer_ns", _I), ("pageable_bytes", _I), ("pageable_frac", _F),
    ("link_gen", _I), ("link_width", _I), ("link_peak_gbps", _F), ("link_util", _F),
    ("collective_ns", _I), ("collectives", _I),
    ("step_source", _S), ("steps", _I), ("step_ns", pa.list_(_I)), ("step_comm_ns", pa.list_(_I)),
    ("step_ns_median", _F), ("step_work_ns_median", _F), ("comm_frac", _F),
    ("kernels", pa.list_(pa.struct([("name", _S), ("count", _I), ("total_ns", _I), ("median_ns", _F)]))),
    ("transfers", pa.list_(pa.struct([("direction", _S), ("host_mem", _S), ("count", _I), ("bytes", _I),
                                      ("ns", _I)]))),
    ("findings", pa.list_(pa.struct([("pass", _S), ("count", _I), ("impact_ns", _I)]))),
    ("analyzed", _B),
])


def to_row(result: dict, build: int) -> dict:
    """A map result as one row of SCHEMA (tags split into their columns, the rest as JSON)."""
    row = {k: result.get(k) for k in SCHEMA.names}
    tags = dict(result.get("tags") or {})
    for key in ("job", "rank", "host", "run"):
        row[f"tag_{key}"] = tags.get(key)
    row["tags_json"] = json.dumps(tags, sort_keys=True)
    row["build"] = build
    return row


class ResultWriter:
    """Appends one row group per trace to results/<build>.parquet (a temp name until closed)."""

    def __init__(self, directory: Path, build: int):
        self.final = Path(directory) / f"build-{build:06d}.parquet"
        self.tmp = Path(directory) / f".build-{build:06d}.{os.getpid()}.parquet.tmp"
        self.build = build
        self.rows = 0
        self._w = pq.ParquetWriter(self.tmp, SCHEMA, compression="zstd")

    def write(self, result: dict) -> None:
        self._w.write_table(pa.Table.from_pylist([to_row(result, self.build)], schema=SCHEMA))
        self.rows += 1

    def close(self) -> Path | None:
        self._w.close()
        if not self.rows:
            self.tmp.unlink(missing_ok=True)
            return None
        os.replace(self.tmp, self.final)
        return self.final

    def abort(self) -> None:
        try:
            self._w.close()
        finally:
            self.tmp.unlink(missing_ok=True)
