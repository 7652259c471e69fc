"""acceltrace's own Chrome JSON exports, read back without loss (export/chrome.py writes them).

A generic Chrome reader places events by category and thread. An acceltrace export carries
more: one `acceltrace_track` metadata event per track (lane, group, name, device, process,
thread, unit, sort key), the typed columns in each slice's args, each flow's kind and exact
end slices in the flow events' args, and the absolute start in otherData. This module is
listed before the generic Chrome ingester and claims only files that begin the way the
exporter begins them, so an exported trace comes back with the same tracks, lanes, flows and
counters (canonical.canonical_summary is equal). Any other Chrome file goes to
ingest/chrome/importer.py as before.

The exporter writes one event per line. Lines are read in blocks, split by pyarrow and
parsed by DuckDB in SQL (times exactly from their digits, never through a float), so no
Python runs per event.
"""

from __future__ import annotations

import json

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from acceltrace.store import schema
from acceltrace.store.errors import IngestError
from acceltrace.ingest.importer import Importer, per_source

NAME = "acceltrace-chrome"
SUFFIXES = (".json",)
MAGIC = b'{"displayTimeUnit": "ns", "otherData": {'
BLOCK_BYTES = 8 << 20
_EVENTS_KEY = '"traceEvents": ['
_FIELDS = json.dumps({"ph": "VARCHAR", "name": "VARCHAR", "cat": "VARCHAR", "pid": "BIGINT", "tid": "BIGINT",
                      "bind_id": "VARCHAR", "flow_in": "BOOLEAN", "flow_out": "BOOLEAN", "args": "JSON"})
_TYPED_FIELDS = json.dumps({"correlation": "BIGINT", "bytes": "BIGINT", "direction": "VARCHAR", "host_mem": "VARCHAR"})
_FLOW_FIELDS = json.dumps({"kind": "VARCHAR", "raw_kind": "VARCHAR", "src": "BIGINT", "dst": "BIGINT"})
# the typed slice columns the exporter merges into args (taken out again here)
_TYPED = "'{\"correlation\": null, \"bytes\": null, \"direction\": null, \"host_mem\": null}'"


def sniff(head: bytes) -> bool:
    return head.startswith(MAGIC + b'"exported_by": "acceltrace')


def ingest(source, builder, block_bytes: int | None = None) -> None:
    with source.open() as f:
        header = f.readline()
        meta = _header(source.name, header)
        st = duckdb.connect(":memory:")
        try:
            _Reader(source, builder, st, meta).run(f, block_bytes or BLOCK_BYTES)
        finally:
            st.close()


def _header(name: str, line: bytes) -> dict:
    text = line.decode("utf-8", "replace").rstrip()
    if not text.endswith(_EVENTS_KEY):
        raise IngestError(name, "the first line does not end with the event array's opening"
                          f" ({_EVENTS_KEY!r}); expected the header line acceltrace's export writes", "line 1")
    try:
        doc = json.loads(text[: -len(_EVENTS_KEY)].rstrip().rstrip(",") + "}")
        other = doc["otherData"]
        int(other["start_ns"])
    except (ValueError, KeyError, TypeError):
        raise IngestError(name, "the header's otherData lacks a start_ns (expected the absolute start in ns)",
                          "line 1") from None
    return other


class _Reader:
    def __init__(self, source, builder, st: duckdb.DuckDBPyConnection, meta: dict):
        self.src, self.b, self.st, self.meta = source, builder, st, meta
        self.start_ns = int(meta["start_ns"])
        self.prefix = f"{source.group}: " if getattr(source, "group", None) else ""
        self.tracks: dict[int, int] = {}  # Chrome tid -> track id
        self.counter_tracks: dict[tuple[int, str], int] = {}  # (pid, name) -> track id
        self.first_slice: int | None = None
        self.n_slices = 0
        self.line_no = 1
        st.execute("CREATE TABLE v2 (bind_id VARCHAR, k BIGINT, flow_in BOOLEAN, flow_out BOOLEAN)")
        st.execute("CREATE TABLE fl (src_k BIGINT, dst_k BIGINT, kind VARCHAR, raw_kind VARCHAR)")

    def run(self, f, block_bytes: int) -> None:
        rest = b""
        closed = False
        while True:
            data = f.read(block_bytes)
            if not data:
                break
            data = rest + data
            cut = data.rfind(b"\n")
            if cut < 0:
                rest = data
                continue
            block, rest = data[:cut], data[cut + 1:]
            closed = self._block(block) or closed
        if rest.strip():
            closed = self._block(rest, last=True) or closed
        if not closed:
            self.b.warn(self.src.name, "the file ends without closing its event array (cut short?); read what is there",
                        f"line {self.line_no}")
        self._flows()
        kept = self.meta.get("trace_meta")
        for key, value in (kept.items() if isinstance(kept, dict) else ()):
            self.b.set_meta(str(key), str(value))
        for key in ("lost_events", "clock"):
            if key in self.meta:
                self.b.set_meta(key, str(self.meta[key]))
        if "format" in self.meta:
            self.b.set_meta("exported_from_format", str(self.meta["format"]))

    def _block(self, block: bytes, last: bool = False) -> bool:
        lines = pc.list_flatten(pc.split_pattern(pa.array([block], pa.binary()), b"\n"))
        try:
            lines = lines.cast(pa.string())
        except pa.ArrowInvalid:
            raise IngestError(self.src.name, "is not valid UTF-8 text", f"lines {self.line_no}-") from None
        first_line = self.line_no
        self.line_no += len(lines)
        st = self.st
        numbers = np.arange(first_line + 1, first_line + 1 + len(lines))
        st.register("_raw", pa.table({"line": lines, "n": pa.array(numbers)}))
        try:
            (closed,) = st.execute("SELECT count(*) > 0 FROM _raw WHERE trim(line) = ']}'").fetchall()[0]
            st.execute("CREATE OR REPLACE TEMP TABLE l AS SELECT n, rtrim(trim(line), ',') AS j FROM _raw"
                       " WHERE trim(line) NOT IN ('', ']}')")
        finally:
            st.unregister("_raw")
        # one parse per line into the fields every event kind uses
        parse = (f"CREATE OR REPLACE TEMP TABLE e AS SELECT n, j, v.* FROM"
                 f" (SELECT n, j, from_json(j, '{_FIELDS}') AS v FROM l)")
        try:
            st.execute(parse)
        except duckdb.Error:  # only now look for the line that is not JSON
            bad_n, n_bad = st.execute("SELECT min(n), count(*) FROM l WHERE NOT json_valid(j)").fetchall()[0]
            (last_n,) = st.execute("SELECT max(n) FROM l").fetchall()[0]
            if not n_bad:
                raise IngestError(self.src.name, "events whose fields have unexpected types", f"lines {first_line}-")
            if last and n_bad == 1 and bad_n == last_n and not closed:
                self.b.warn(self.src.name, "the last event is cut short; dropped", f"line {bad_n}", dropped=1)
                st.execute(f"DELETE FROM l WHERE n = {int(bad_n)}")
                st.execute(parse)
            else:
                raise IngestError(self.src.name, "is not one JSON event per line as acceltrace's export writes it",
                                  f"line {bad_n}") from None
        self._metadata()
        self._slices()
        self._flow_events()
        self._counters()
        return bool(closed)

    # -- tracks ------------------------------------------------------------------------------
    def _metadata(self) -> None:
        rows = self.st.execute(
            "SELECT n, pid, tid, args::VARCHAR FROM e WHERE ph = 'M' AND name = 'acceltrace_track'").fetchall()
        for n, pid, tid, args in rows:
            info = json.loads(args)
            lane = info.get("lane")
            if lane not in schema.TRACK_LANES or "name" not in info:
                raise IngestError(self.src.name, "acceltrace_track metadata without a valid lane and name",
                                  f"line {n}")
            track = self.b.track(lane, info["name"], group_name=self.prefix + info.get("group", ""),
                                 device=info.get("device"), process=info.get("process"), thread=info.get("thread"),
                                 unit=info.get("unit"), sort_key=int(info.get("sort_key", 0)),
                                 key=(NAME, self.prefix, tid))
            self.tracks[tid] = track
            if lane == "counter":
                self.counter_tracks[(pid, info["name"])] = track

    def _map(self, name: str, keys: list, values: list) -> None:
        self.st.register("_m", pa.table({"key": pa.array(keys, pa.int64()), "track_id": pa.array(values, pa.int64())}))
        self.st.execute(f"CREATE OR REPLACE TEMP TABLE {name} AS SELECT * FROM _m")
        self.st.unregister("_m")

    # -- events ------------------------------------------------------------------------------
    def _slices(self) -> None:
        st = self.st
        (n,) = st.execute("SELECT count(*) FROM e WHERE ph = 'X'").fetchall()[0]
        if not n:
            return
        self._map("tmap", list(self.tracks), list(self.tracks.values()))
        (orphan,) = st.execute("SELECT min(x.n) FROM e x ANTI JOIN tmap t ON t.key = x.tid"
                               " WHERE x.ph = 'X'").fetchall()[0]
        if orphan is not None:
            raise IngestError(self.src.name, "event on a thread with no acceltrace_track metadata", f"line {orphan}")
        st.execute(f"""
            CREATE OR REPLACE TEMP TABLE xs AS
            SELECT n, k, track_id, name, category, a, bind_id, flow_in, flow_out,
                   CASE WHEN tm.a = '' THEN NULL ELSE tm.a::BIGINT * 1000 + tm.b::BIGINT + {self.start_ns} END AS ts,
                   CASE WHEN tm.c = '' THEN NULL ELSE tm.c::BIGINT * 1000 + tm.d::BIGINT END AS dur
            FROM (
                SELECT x.n, row_number() OVER (ORDER BY x.n) - 1 + {self.n_slices} AS k, t.track_id,
                       x.name, nullif(x.cat, '') AS category, x.args AS a, x.bind_id,
                       coalesce(x.flow_in, false) AS flow_in, coalesce(x.flow_out, false) AS flow_out,
                       {_TS_DUR} AS tm
                FROM e x JOIN tmap t ON t.key = x.tid WHERE x.ph = 'X')
        """)
        (bad,) = st.execute("SELECT min(n) FROM xs WHERE ts IS NULL OR dur IS NULL OR name IS NULL").fetchall()[0]
        if bad is not None:
            raise IngestError(self.src.name, "slice without a name, or a ts/dur that is not microseconds with"
                              " three decimals", f"line {bad}")
        table = st.sql(f"""
            SELECT track_id, ts, dur, name, category, ty.correlation AS corr_id, ty.bytes,
                   ty.direction, ty.host_mem, args
            FROM (SELECT *, from_json(a, '{_TYPED_FIELDS}') AS ty,
                         CASE WHEN a IS NULL THEN NULL ELSE json_merge_patch(a, {_TYPED})::VARCHAR END AS args
                  FROM xs)
            ORDER BY n
        """).to_arrow_table()
        args = table["args"]
        table = table.set_column(table.schema.get_field_index("args"), "args",
                                 pc.if_else(pc.equal(args, "{}"), pa.scalar(None, pa.string()), args))
        first = self.b.add_slices(table)
        if self.first_slice is None:
            self.first_slice = first
        st.execute("INSERT INTO v2 SELECT bind_id, k, flow_in, flow_out FROM xs WHERE bind_id IS NOT NULL")
        self.n_slices += table.num_rows

    def _flow_events(self) -> None:
        # one row per flow: its s event, or its f event when the source end is missing
        self.st.execute(f"""
            INSERT INTO fl SELECT f.src, f.dst, f.kind, f.raw_kind
            FROM (SELECT ph, from_json(args, '{_FLOW_FIELDS}') AS f FROM e WHERE ph IN ('s', 'f'))
            WHERE ph = 's' OR f.src IS NULL
        """)

    def _counters(self) -> None:
        st = self.st
        (n,) = st.execute("SELECT count(*) FROM e WHERE ph = 'C'").fetchall()[0]
        if not n:
            return
        keys = list(self.counter_tracks)
        st.register("_cm", pa.table({"pid": pa.array([k[0] for k in keys], pa.int64()),
                                     "name": pa.array([k[1] for k in keys], pa.string()),
                                     "track_id": pa.array(list(self.counter_tracks.values()), pa.int64())}))
        st.execute("CREATE OR REPLACE TEMP TABLE cmap AS SELECT * FROM _cm")
        st.unregister("_cm")
        rows = st.sql(f"""
            SELECT c.n, m.track_id, {_exact_ns("c.j", "ts")} + {self.start_ns} AS ts,
                   TRY_CAST(json_extract(c.args, '$.*')[1] AS DOUBLE) AS value
            FROM e c LEFT JOIN cmap m ON m.pid = c.pid AND m.name = c.name
            WHERE c.ph = 'C' ORDER BY c.n
        """).to_arrow_table()
        bad = pc.or_(pc.or_(pc.is_null(rows["track_id"]), pc.is_null(rows["ts"])), pc.is_null(rows["value"]))
        if pc.any(bad).as_py():
            first_bad = rows["n"].filter(bad)[0].as_py()
            raise IngestError(self.src.name, "counter sample without its counter track, a valid ts or a numeric value",
                              f"line {first_bad}")
        self.b.add_counters(rows["track_id"], rows["ts"], rows["value"])

    def _flows(self) -> None:
        if self.first_slice is None:
            return
        base = self.first_slice
        rows = self.st.sql(f"""
            SELECT {base} + src_k AS src, {base} + dst_k AS dst, kind, raw_kind FROM fl
            UNION ALL
            SELECT {base} + o.k, {base} + i.k, 'other', 'flow_v2'
            FROM v2 o JOIN v2 i ON i.bind_id = o.bind_id AND i.flow_in AND i.k <> o.k WHERE o.flow_out
        """).to_arrow_table()
        (outside,) = self.st.execute(
            f"SELECT count(*) FROM fl WHERE src_k >= {self.n_slices} OR dst_k >= {self.n_slices}"
            " OR src_k < 0 OR dst_k < 0").fetchall()[0]
        if outside:
            raise IngestError(self.src.name, f"{outside} flow events name slices the file does not have")
        if rows.num_rows:
            self.b.add_flows(rows["src"], rows["dst"], rows["kind"], rows["raw_kind"])


# X lines carry "ts":<us>.<3 digits>,"dur":<us>.<3 digits> side by side: one regex pass for both
_TS_DUR = ("regexp_extract(x.j, '\"ts\":([0-9]+)\\.([0-9]{3}),\"dur\":([0-9]+)\\.([0-9]{3})[,}]',"
           " ['a', 'b', 'c', 'd'])")


def _exact_ns(j: str, key: str) -> str:
    """SQL: the value of "key" (microseconds written with three decimals) as exact integer ns, NULL otherwise."""
    txt = f"regexp_extract({j}, '\"{key}\":([0-9]+\\.[0-9]{{3}})[,}}]', 1)"
    return (f"CASE WHEN {txt} = '' THEN NULL ELSE split_part({txt}, '.', 1)::BIGINT * 1000"
            f" + split_part({txt}, '.', 2)::BIGINT END")


IMPORTER = Importer(name=NAME, suffixes=SUFFIXES, sniff=sniff, session=per_source(ingest))
