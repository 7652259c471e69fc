"""The trace store's tables, declared once (DESIGN.md, docs/schema.md documents every column).

Every ingester writes these tables through ingest.builder.TraceBuilder and nothing else
decides their shape. Times are int64 nanoseconds on one host clock (absolute); the
API converts them to ns relative to trace_meta start_ns.
"""

import functools

INGEST_VERSION = "2"  # 2: annotation lane, label vs full name, memory counters, nsys OS runtime/sched/samples

# The lanes of the native event record (formats/record.py LANES matches these).
LANES = ("cpu", "driver", "pcie", "eu", "counter")
# Ranges that mark time but are not work (gpu_user_annotation, CUDA-graph capture markers, NVTX
# ranges, profiler spans such as "PyTorch Profiler (0)"): a lane of their own, so no pass or
# summary that reads cpu/eu/pcie work ever counts them. The track's device (device-side
# markers) or process/thread (host-side) says whose rows they are (docs/schema.md).
ANNOTATION_LANE = "annotation"
# Every lane a track may have.
TRACK_LANES = LANES + (ANNOTATION_LANE,)
# Device busy is the union of these intervals per device (docs/analysis.md "Busy").
DEVICE_WORK_LANES = ("eu", "pcie")
DIRECTIONS = ("h2d", "d2h", "d2d", "p2p")
HOST_MEM = ("pageable", "pinned")
FLOW_KINDS = ("submit", "launch", "dma", "exec", "dependency", "other")
# Flow kinds that make up "the correlation chain" (never dependency).
CHAIN_FLOW_KINDS = ("submit", "launch", "dma", "exec")

# (column, DuckDB type) per table, in order.
TABLES: dict[str, list[tuple[str, str]]] = {
    "trace_meta": [
        ("key", "VARCHAR NOT NULL"),
        ("value", "VARCHAR"),
    ],
    "tracks": [
        ("track_id", "INTEGER NOT NULL"),
        ("lane", "VARCHAR NOT NULL"),
        ("group_name", "VARCHAR NOT NULL"),
        ("name", "VARCHAR NOT NULL"),
        ("device", "VARCHAR"),
        ("process", "VARCHAR"),
        ("thread", "VARCHAR"),
        ("unit", "VARCHAR"),
        ("sort_key", "BIGINT NOT NULL"),
    ],
    "slices": [
        ("slice_id", "BIGINT NOT NULL"),
        ("track_id", "INTEGER NOT NULL"),
        ("ts", "BIGINT NOT NULL"),
        ("dur", "BIGINT NOT NULL"),
        ("depth", "INTEGER NOT NULL"),
        ("name", "VARCHAR NOT NULL"),
        ("category", "VARCHAR"),
        ("corr_id", "BIGINT"),
        ("bytes", "BIGINT"),
        ("direction", "VARCHAR"),
        ("host_mem", "VARCHAR"),
        ("args", "VARCHAR"),
    ],
    "flows": [
        ("flow_id", "BIGINT NOT NULL"),
        ("src_slice", "BIGINT"),
        ("dst_slice", "BIGINT"),
        ("kind", "VARCHAR NOT NULL"),
        ("raw_kind", "VARCHAR"),
    ],
    "counters": [
        ("track_id", "INTEGER NOT NULL"),
        ("ts", "BIGINT NOT NULL"),
        ("value", "DOUBLE NOT NULL"),
    ],
}

# The findings side file's single table (written by analysis/, never into the trace file).
FINDINGS: list[tuple[str, str]] = [
    ("pass", "VARCHAR NOT NULL"),
    ("severity", "VARCHAR NOT NULL"),
    ("ts", "BIGINT"),
    ("dur", "BIGINT"),
    ("track_id", "INTEGER"),
    ("slice_id", "BIGINT"),
    ("metric", "VARCHAR"),
    ("value", "DOUBLE"),
    ("threshold", "DOUBLE"),
    ("impact_ns", "BIGINT"),      # what-if: the run's saving if this finding alone is fixed (a replay)
    ("exclusive_ns", "BIGINT"),   # its share of the critical path, never counted twice
    ("impact_basis", "VARCHAR"),  # how impact_ns was found: replay | pass share | none (+ a bound)
    ("message", "VARCHAR"),
]

# trace_meta keys every trace has (docs/schema.md lists the optional ones).
REQUIRED_META = ("format", "start_ns", "end_ns", "ingest_version", "lost_events")


def create_sql(table: str, columns: list[tuple[str, str]] | None = None, name: str | None = None) -> str:
    """CREATE TABLE statement for one declared table (optionally under another name)."""
    cols = columns if columns is not None else TABLES[table]
    body = ", ".join(f'"{c}" {t}' for c, t in cols)
    return f'CREATE TABLE "{name or table}" ({body})'


def column_names(table: str) -> list[str]:
    return [c for c, _ in TABLES[table]]


@functools.cache
def arrow_type(sql_type: str):
    """The Arrow type of a column declared here as `sql_type` (its first word: NOT NULL and the like aside)."""
    import pyarrow as pa  # the schema itself is read where pyarrow is not needed

    return {"INTEGER": pa.int32(), "BIGINT": pa.int64(), "VARCHAR": pa.string(), "DOUBLE": pa.float64(),
            "BOOLEAN": pa.bool_(), "UTINYINT": pa.uint8(), "SMALLINT": pa.int16(), "TINYINT": pa.int8()
            }[sql_type.split()[0]]
