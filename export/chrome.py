"""Export a trace as Chrome Trace Event JSON (opens in Perfetto and chrome://tracing), streamed.

Layout (docs/export.md): one Chrome process per track group (process_name = group_name), one
Chrome thread per track (thread_name = track name), sort indexes from sort_key, and one
`acceltrace_track` metadata event per track carrying what Chrome has no field for (lane,
device, process, thread, unit); viewers ignore it, and acceltrace's Chrome ingester derives
lanes from the categories without it.

Times are ns relative to the trace's start, written as microseconds with exactly three
decimals from integer arithmetic (never through a float), so they stay exact; the absolute
start is in `otherData.start_ns`. Slices are X events, counter samples C events.

Flows: correlation-chain flows (launch, submit, dma, exec) are s/f pairs of category "ac2g"
and dependencies s/f pairs of category "fwdbwd", as Kineto writes them, so any reader can
tell what they are (every slice also carries its correlation id in args); they bind to the
slice starting at their time ("bp": "e"), and their args name the kind and both slices
exactly (for ingest/acceltrace_chrome/importer.py). Perfetto's v2 form (bind_id with flow_out / flow_in on
the slices) has no category and allows one bind_id per slice, so it is used only for flows of
kind other between two slices that have no other flow; the rest are s/f pairs of category
"other". docs/export.md has the details.

The JSON lines are built by DuckDB in SQL and leave as Arrow string buffers, so no Python
runs per event and memory stays bounded by the batch size. Events are ordered (slices by
time, then flows, then counters), so exporting a trace twice gives the same bytes.
"""

from __future__ import annotations

import json
from typing import Iterator

import duckdb
import pyarrow as pa

from acceltrace.store import schema

BATCH_ROWS = 65_536
# flows per query where all of a trace's flow lines do not sort in the export's memory at once (_flow_parts)
FLOW_PART = 262_144
# trace_meta keys an ingest computes itself, so an export does not carry them
META_DERIVED = frozenset({"format", "start_ns", "end_ns", "ingest_version", "warning_count", "dropped_events",
                          "warnings"})

# Flow categories Kineto writes (and Chrome ingesters know): a correlation edge, an autograd dependency.
CORRELATION_CAT = "ac2g"
DEPENDENCY_CAT = "fwdbwd"
_CHAIN = ", ".join(f"'{k}'" for k in schema.CHAIN_FLOW_KINDS)

# v2 (bind_id) only for flows of kind other between two slices with no other flow: v2 carries no
# category, so a reader could not tell a launch from a dependency, and one bind_id per slice
# cannot express fan-out or chains.
V2_CTES = """real AS (SELECT * FROM flows WHERE src_slice IS NOT NULL AND dst_slice IS NOT NULL),
    outs AS (SELECT src_slice AS slice_id, count(*) AS n FROM real GROUP BY ALL),
    ins AS (SELECT dst_slice AS slice_id, count(*) AS n FROM real GROUP BY ALL),
    v2 AS (
        SELECT f.flow_id, f.src_slice, f.dst_slice FROM real f
        JOIN outs o ON o.slice_id = f.src_slice AND o.n = 1
        JOIN ins i ON i.slice_id = f.dst_slice AND i.n = 1
        WHERE f.kind = 'other'
          AND f.src_slice NOT IN (SELECT slice_id FROM ins) AND f.dst_slice NOT IN (SELECT slice_id FROM outs)
    )"""

# A slice's args object plus the typed columns Chrome has no field for. Args that are not a JSON
# object (the store does not forbid it) travel as a string under "args" rather than failing the export.
_EXTRA = "json_object('correlation', s.corr_id, 'bytes', s.bytes, 'direction', s.direction, 'host_mem', s.host_mem)"
_ARGS = f"""CASE WHEN s.args IS NULL THEN json_merge_patch('{{}}', {_EXTRA})
        WHEN try(json_type(s.args)) = 'OBJECT' THEN json_merge_patch(s.args, {_EXTRA})
        ELSE json_merge_patch(json_object('args', s.args), {_EXTRA}) END"""

# One Chrome process per track group, numbered in the order the groups' first tracks appear.
PIDS_SQL = (
    "SELECT track_id, dense_rank() OVER (ORDER BY first_track) AS pid FROM"
    " (SELECT track_id, min(track_id) OVER (PARTITION BY group_name) AS first_track FROM tracks)"
)


def _us(expr: str) -> str:
    """SQL text for a non-negative ns expression as a JSON number in us with three decimals."""
    return f"(({expr}) // 1000)::VARCHAR || '.' || lpad((({expr}) % 1000)::VARCHAR, 3, '0')"


def _track_ids(con: duckdb.DuckDBPyConnection) -> list[tuple]:
    return con.execute(
        "SELECT t.track_id, t.lane, t.group_name, t.name, t.device, t.process, t.thread, t.unit, t.sort_key, p.pid"
        f" FROM tracks t JOIN ({PIDS_SQL}) p USING (track_id) ORDER BY t.track_id"
    ).fetchall()


def _header(con: duckdb.DuckDBPyConnection, start_ns: int) -> Iterator[bytes]:
    meta = dict(con.execute("SELECT key, value FROM trace_meta").fetchall())
    # exported_by first: readers recognise an acceltrace export by it within the first bytes
    other = {"exported_by": f"acceltrace (ingest version {schema.INGEST_VERSION})"}
    other.update({k: meta[k] for k in ("format", "start_ns", "end_ns", "lost_events", "clock") if k in meta})
    # the rest of trace_meta (what ingest derives again, such as warnings, is left out)
    other["trace_meta"] = {k: v for k, v in sorted(meta.items()) if k not in META_DERIVED}
    yield (
        '{"displayTimeUnit": "ns", "otherData": ' + json.dumps(other)
        + ', "traceEvents": [\n'
    ).encode()
    events = []
    seen_pids = set()
    for track_id, lane, group, name, device, process, thread, unit, sort_key, pid in _track_ids(con):
        tid = track_id + 1
        if pid not in seen_pids:
            seen_pids.add(pid)
            events.append({"ph": "M", "name": "process_name", "pid": pid, "args": {"name": group}})
            events.append({"ph": "M", "name": "process_sort_index", "pid": pid, "args": {"sort_index": pid}})
        events.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": name}})
        events.append({"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": tid,
                       "args": {"sort_index": sort_key}})
        info = {"lane": lane, "group": group, "name": name, "device": device, "process": process,
                "thread": thread, "unit": unit, "sort_key": sort_key}
        events.append({"ph": "M", "name": "acceltrace_track", "pid": pid, "tid": tid,
                       "args": {k: v for k, v in info.items() if v is not None}})
    if not events:  # every later line starts with a comma, so one element must come first
        events.append({"ph": "M", "name": "process_name", "pid": 0, "args": {"name": "empty trace"}})
    yield ",\n".join(json.dumps(e) for e in events).encode()


def _slices_sql(start_ns: int) -> str:
    rel = f"(s.ts - {start_ns})"
    return f"""
    WITH {V2_CTES},
    bind AS (
        SELECT src_slice AS slice_id, flow_id, '"flow_out":true' AS side FROM v2
        UNION ALL SELECT dst_slice, flow_id, '"flow_in":true' FROM v2
    ),
    pids AS ({PIDS_SQL})
    SELECT ',' || chr(10) || '{{"ph":"X","cat":' || to_json(coalesce(s.category, ''))
        || ',"name":' || to_json(s.name)
        || ',"pid":' || p.pid || ',"tid":' || (s.track_id + 1)
        || ',"ts":' || {_us(rel)} || ',"dur":' || {_us("s.dur")}
        || coalesce(',"bind_id":' || b.flow_id || ',' || b.side, '')
        || ',"args":' || {_ARGS}
        || '}}' AS line
    FROM slices s JOIN pids p USING (track_id)
    LEFT JOIN bind b ON b.slice_id = s.slice_id
    ORDER BY s.ts, s.slice_id
    """


def _v1_flows_sql(start_ns: int, ids: tuple[int, int] | None = None) -> str:
    # args: the flow's kind and its two slices as ordinals of the X events in the file (null for a
    # missing end), so acceltrace's reader (ingest/acceltrace_chrome/importer.py) rebuilds every flow exactly;
    # viewers ignore flow args and bind by time
    return f"""
    WITH {V2_CTES},
    pids AS ({PIDS_SQL}),
    ord AS (SELECT slice_id, row_number() OVER (ORDER BY ts, slice_id) - 1 AS k FROM slices),
    v1 AS (
        SELECT f.*, CASE WHEN f.kind IN ({_CHAIN}) THEN '{CORRELATION_CAT}'
                         WHEN f.kind = 'dependency' THEN '{DEPENDENCY_CAT}' ELSE 'other' END AS cat,
               oa.k AS src_k, ob.k AS dst_k
        FROM flows f LEFT JOIN ord oa ON oa.slice_id = f.src_slice LEFT JOIN ord ob ON ob.slice_id = f.dst_slice
        WHERE f.flow_id NOT IN (SELECT flow_id FROM v2){'' if ids is None else f' AND f.flow_id BETWEEN {ids[0]} AND {ids[1]}'}
    ),
    ends AS (
        SELECT *, 's' AS ph, src_slice AS slice_id FROM v1 WHERE src_slice IS NOT NULL
        UNION ALL
        SELECT *, 'f', dst_slice FROM v1 WHERE dst_slice IS NOT NULL
    )
    SELECT ',' || chr(10) || '{{"ph":"' || e.ph || '","cat":' || to_json(e.cat)
        || ',"name":' || to_json(coalesce(e.raw_kind, e.kind)) || ',"id":' || e.flow_id
        || ',"pid":' || p.pid || ',"tid":' || (s.track_id + 1)
        || ',"ts":' || {_us(f"s.ts - {start_ns}")}
        || CASE WHEN e.ph = 'f' THEN ',"bp":"e"' ELSE '' END
        || ',"args":' || json_object('kind', e.kind, 'raw_kind', e.raw_kind, 'src', e.src_k, 'dst', e.dst_k)
        || '}}' AS line
    FROM ends e JOIN slices s ON s.slice_id = e.slice_id JOIN pids p ON p.track_id = s.track_id
    ORDER BY e.flow_id, e.ph DESC
    """


def _counters_sql(start_ns: int) -> str:
    return f"""
    WITH pids AS ({PIDS_SQL})
    SELECT ',' || chr(10) || '{{"ph":"C","name":' || to_json(t.name) || ',"pid":' || p.pid
        || ',"ts":' || {_us(f"c.ts - {start_ns}")}
        || ',"args":{{' || to_json(coalesce(t.unit, t.name)) || ':' || to_json(c.value) || '}}}}' AS line
    FROM counters c JOIN tracks t USING (track_id) JOIN pids p USING (track_id)
    ORDER BY c.track_id, c.ts
    """


def _lines(con: duckdb.DuckDBPyConnection, sql: str, batch_rows: int, parts=None) -> Iterator[bytes]:
    """The query's lines in order. Its sort runs before the first line; where it runs out of DuckDB's memory there
    (an 830 MB Kineto trace's 1.6 M flows at the CLI's 1 GB and two threads: the sorted runs did not spill), the same
    lines come from `parts()`, queries over consecutive parts of the rows (each sort small, each part itself run this
    way), else from the query again at one thread, the DuckDB threads set back after it."""
    try:
        reader = con.sql(sql).to_arrow_reader(batch_rows)  # the sort runs here, before any line is yielded
    except duckdb.OutOfMemoryException:
        if parts is not None:
            for part in parts():
                yield from _lines(con, part, batch_rows)
            return
        (threads,) = con.execute("SELECT current_setting('threads')").fetchall()[0]
        if int(threads) == 1:
            raise
        con.execute("SET threads = 1")
        try:
            yield from _reader_lines(con.sql(sql).to_arrow_reader(batch_rows))
        finally:
            con.execute(f"SET threads = {int(threads)}")
        return
    yield from _reader_lines(reader)


def _reader_lines(reader) -> Iterator[bytes]:
    for batch in reader:
        if batch.num_rows:
            yield _string_bytes(batch.column(0))


def _string_bytes(arr: pa.Array) -> bytes:
    """The concatenated values of a null-free string array, straight from its data buffer."""
    if arr.null_count:
        raise ValueError("an export line is NULL (exporter bug)")
    if arr.type not in (pa.string(), pa.large_string()):
        arr = arr.cast(pa.large_string())
    width = 8 if arr.type == pa.large_string() else 4
    _validity, offsets_buf, data = arr.buffers()
    first, last = arr.offset * width, (arr.offset + len(arr)) * width
    start = int.from_bytes(offsets_buf[first:first + width].to_pybytes(), "little", signed=True)
    end = int.from_bytes(offsets_buf[last:last + width].to_pybytes(), "little", signed=True)
    return data[start:end].to_pybytes()


def _flow_parts(con: duckdb.DuckDBPyConnection, start_ns: int) -> list[str]:
    """The flow lines' query over consecutive flow_id ranges of FLOW_PART flows: the same lines in the same order."""
    lo, hi = con.execute("SELECT min(flow_id), max(flow_id) FROM flows").fetchall()[0]
    if lo is None:
        return []
    return [_v1_flows_sql(start_ns, (a, min(a + FLOW_PART - 1, hi))) for a in range(lo, hi + 1, FLOW_PART)]


def chrome_chunks(con: duckdb.DuckDBPyConnection, batch_rows: int | None = None) -> Iterator[bytes]:
    """The whole Chrome JSON document as a sequence of byte chunks (bounded memory)."""
    n = batch_rows or BATCH_ROWS
    (start_ns,) = con.execute("SELECT value::BIGINT FROM trace_meta WHERE key = 'start_ns'").fetchall()[0]
    yield from _header(con, start_ns)
    yield from _lines(con, _slices_sql(start_ns), n)
    yield from _lines(con, _v1_flows_sql(start_ns), n, parts=lambda: _flow_parts(con, start_ns))
    yield from _lines(con, _counters_sql(start_ns), n)
    yield b"\n]}\n"
