"""The one writer every ingester goes through; it enforces the store's invariants.

Ingesters hand over columnar batches (pyarrow Tables, or dicts of equal-length columns/numpy
arrays); the builder stages them (ingest/stage.py: the columns SQL reads in DuckDB, the rest kept
as the Arrow batches they came in), and finish() computes nesting depths where the input gave
none, puts slices in (track_id, ts, depth) order, fills trace_meta, builds the level-of-detail
tables (tiles/build.py) and leaves a complete file that the store then publishes atomically.

Slice ids are assigned in insertion order: add_slices returns the first id of the
batch, so an ingester knows the id of every slice it added (for flows).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa

from acceltrace.store import schema
from acceltrace.store.duck import close_synced, insert_rows
from acceltrace.ingest import lod_ahead, spill, stage
from acceltrace.ingest.batch import all_in, as_table
from acceltrace.store.errors import IngestError
from acceltrace.ingest import ordered
from acceltrace.ingest.depths import Ahead
from acceltrace.ingest.memory import use_small_pages
from acceltrace.ingest.opening import SMALL_ROW_GROUP_ROWS, Opening
from acceltrace.ingest.warned import Warnings
from acceltrace.tiles.build import build as build_lod

_SLICE_TYPES = {
    "track_id": pa.int32(), "ts": pa.int64(), "dur": pa.int64(), "depth": pa.int32(), "name": pa.string(),
    "category": pa.string(), "corr_id": pa.int64(), "bytes": pa.int64(), "direction": pa.string(),
    "host_mem": pa.string(), "args": pa.string(),
}


# args JSON in zstd, not dictionary + FSST: 830 MB 9.2-9.7 -> 8.7-8.9 s, 1.5 CPU-s less, file 122 -> 70 MB
_SLICES_STORED = [(c, t + " USING COMPRESSION zstd" * (c == "args")) for c, t in schema.TABLES["slices"]]
TIME_LIMIT_NS = stage.TIME_LIMIT_NS  # |ts| and ts + dur bound (store invariant, docs/schema.md)
LONG_SPAN_NS = 7 * 86400 * 10**9  # a longer trace is published with a warning


class TraceBuilder:
    """Collects one trace's tables into a DuckDB file at `path`."""

    def __init__(self, path: Path, memory_limit: str = "900MB", threads: int | None = None, small: bool = False):
        # memory_limit: DuckDB's, past which it spills; 900 MB leaves room under 1.5 GB at 830 MB for what
        # lives outside it (the parser's Arrow rows, the Chrome link rows, numpy pyramids). small: a small
        # build, DuckDB at one thread from the start unless `threads` says (ingest/opening.py)
        self.path = Path(path)
        use_small_pages()  # this process's Arrow and numpy memory in 4 KB pages (ingest/memory.py)
        # scratch space for ingesters needing real files (decompressed SQLite, spills): swept with the temp file
        self.work_dir = Path(str(self.path) + ".work")
        self.threads, self._duck_threads = threads, threads or (1 if small else None)
        self.sole_source = False  # the trace is one source (the pipeline says): its importer's end is the trace's
        self._group_rows = SMALL_ROW_GROUP_ROWS if small else None  # the file's rows per row group (None: DuckDB's)
        self._con, self._opening = None, Opening(self.path, memory_limit, self._duck_threads,  # ingest/opening.py
                                                 self._group_rows)
        self._new_state()

    @property
    def con(self) -> duckdb.DuckDBPyConnection:
        """The file's connection (waits for it to be opened the first time)."""
        con = self._con
        if con is None:
            con = self._con = self._opening.get()
        return con

    @con.setter
    def con(self, con: duckdb.DuckDBPyConnection) -> None:  # (a test's watcher)
        self._con = con

    def _new_state(self) -> None:
        """What the builder knows of a trace before anything is added (subclasses keep it too)."""
        self.meta: dict[str, str] = {}
        self.warnings = Warnings()
        self._tracks: dict[object, int] = {}
        self._track_rows: list[tuple] = []
        self._next_slice = 0
        self._held = stage.Held(self.work_dir)  # per add_slices batch, its columns not staged (ingest/stage.py)
        self.spilling = False  # past spill.threshold() slices: every column of a slice in DuckDB (ingest/spill.py)
        self._spill_from = spill.threshold()
        self._next_flow = 0
        self.n_counters = 0
        self.formats: list[str] = []
        self._in_order = True  # staged slices in stored order with their depths (see _note_order)
        self._depths_ahead: Ahead | None = None
        self._lod_ahead: lod_ahead.LodAhead | None = None
        self._last_key: tuple[int, int, int] | None = None

    # -- tracks ----------------------------------------------------------------------------
    def track(
        self,
        lane: str,
        name: str,
        group_name: str = "",
        device: str | None = None,
        process: str | None = None,
        thread: str | None = None,
        unit: str | None = None,
        sort_key: int = 0,
        key: object = None,
    ) -> int:
        """The id of the track with this key (default: lane, group, name), creating it once."""
        if lane not in schema.TRACK_LANES:
            raise ValueError(f"unknown lane {lane!r}; expected one of {schema.TRACK_LANES}")
        k = key if key is not None else (lane, group_name, name, device)
        tid = self._tracks.get(k)
        if tid is None:
            tid = len(self._track_rows)
            self._tracks[k] = tid
            self._track_rows.append((tid, lane, group_name or "", name, device, process, thread, unit, int(sort_key)))
        return tid

    def update_track(self, track_id: int, **fields) -> None:
        """Change a track's columns after creation (e.g. names from metadata seen later)."""
        cols = schema.column_names("tracks")
        row = list(self._track_rows[track_id])
        for k, v in fields.items():
            row[cols.index(k)] = v
        self._track_rows[track_id] = tuple(row)

    @property
    def track_rows(self) -> list[tuple]:
        return list(self._track_rows)

    # -- events ----------------------------------------------------------------------------
    def add_slices(self, batch: pa.Table | dict) -> int:
        """Append slices; returns the slice_id of the first row (ids are consecutive).

        Required columns: track_id, ts, dur, name. Optional: depth (computed when absent
        or null), category, corr_id, bytes, direction, host_mem, args (JSON text).
        """
        table = as_table(batch, _SLICE_TYPES)
        n = table.num_rows
        if n == 0:
            return self._next_slice
        if self._lod_ahead is not None:  # an importer's bug, not the input's: never a trace missing slices
            raise RuntimeError("add_slices after lod_ahead(): the LOD build has begun without these slices")
        for col in ("track_id", "ts", "dur", "name"):
            if col not in table.column_names:
                raise ValueError(f"add_slices: missing column {col}")
        first = self._next_slice
        ids = pa.array(np.arange(first, first + n, dtype=np.int64))
        table = table.append_column("slice_id", ids)
        self._note_order(table)
        if self.spilling:
            spill.append(self.con, table)
        else:
            stage.append(self.con, table, self._held)
        self._next_slice += n
        if not self.spilling and self._next_slice > self._spill_from:
            self._spill()
        return first

    def expect_slices(self, n: int) -> bool:
        """An importer that knows about how many slices it is about to add (an Nsight export's rows) says so: past
        the spill threshold the bounded regime starts now, with nothing held yet to move. True: the build is in it."""
        if not self.spilling and self._next_slice + n > self._spill_from:
            self._spill()
        return self.spilling

    def _spill(self) -> None:  # the bounded-memory regime from here on (ingest/spill.py)
        spill.start(self.con, self._held)
        self.spilling = True

    def _note_order(self, table: pa.Table) -> None:
        """Whether the staged slices are still in stored order (track_id, ts, depth) with every depth
        given: an ingester that adds them so (the native one) spares finish() the depth pass and the sort."""
        if not self._in_order:
            return
        if "depth" not in table.column_names or table["depth"].null_count:
            self._in_order = False
            return
        t, ts, d = (table[c].to_numpy() for c in ("track_id", "ts", "depth"))
        if self._last_key is not None:
            t, ts, d = (np.concatenate([[k], x]) for k, x in zip(self._last_key, (t, ts, d)))
        up = (t[1:] > t[:-1]) | ((t[1:] == t[:-1]) & ((ts[1:] > ts[:-1]) | ((ts[1:] == ts[:-1]) & (d[1:] >= d[:-1]))))
        self._in_order = bool(up.all())
        self._last_key = (int(t[-1]), int(ts[-1]), int(d[-1]))

    def add_flows(self, src_slice, dst_slice, kind, raw_kind=None) -> None:
        """Append flows (arrays of equal length; src/dst may hold nulls for a missing end)."""
        table = as_table(
            {"src_slice": src_slice, "dst_slice": dst_slice, "kind": kind, "raw_kind": raw_kind},
            {"src_slice": pa.int64(), "dst_slice": pa.int64(), "kind": pa.string(), "raw_kind": pa.string()},
        )
        if not all_in(table["kind"], schema.FLOW_KINDS):
            raise ValueError(f"add_flows: kind must be one of {schema.FLOW_KINDS}")
        self._insert_flows(table)

    def add_flows_sql(self, select_sql: str, params: list | None = None) -> int:
        """Append flows from a query over the staging tables yielding (src_slice, dst_slice, kind, raw_kind).

        This is how ingesters link by correlation id without a Python loop; staged slices
        are visible as `_slices_staging`. The rows come back as Arrow and get their ids from a
        numpy range: numbering them in SQL (row_number() OVER ()) made DuckDB run the query's
        result through a window, 0.15-0.2 s more on the 830 MB trace's 1.6 M flows."""
        table = self.con.sql(  # in one order (their ids): a join or a window hands rows on as its threads finish
            f"SELECT src_slice, dst_slice, kind, raw_kind FROM ({select_sql}) ORDER BY ALL", params=params or None
        ).to_arrow_table()
        self._insert_flows(table)
        return table.num_rows

    def _insert_flows(self, table: pa.Table) -> None:
        n = table.num_rows
        if n == 0:
            return
        table = table.append_column(
            "flow_id", pa.array(np.arange(self._next_flow, self._next_flow + n, dtype=np.int64))
        )
        self.con.register("_batch", table)
        try:
            self.con.execute(
                "INSERT INTO flows SELECT flow_id, src_slice, dst_slice, kind, "
                + ("raw_kind" if "raw_kind" in table.column_names else "NULL")
                + " FROM _batch"
            )
        finally:
            self.con.unregister("_batch")
        self._next_flow += n

    def add_counters(self, track_id, ts, value) -> None:
        table = as_table(
            {"track_id": track_id, "ts": ts, "value": value},
            {"track_id": pa.int32(), "ts": pa.int64(), "value": pa.float64()},
        )
        if table.num_rows == 0:
            return
        self.con.register("_batch", table)
        try:
            self.con.execute("INSERT INTO counters SELECT track_id, ts, value FROM _batch")
        finally:
            self.con.unregister("_batch")
        self.n_counters += table.num_rows

    def set_meta(self, key: str, value) -> None:
        self.meta[key] = value if isinstance(value, str) else json.dumps(value)

    def warn(self, file: str, message: str, position: str | None = None, dropped: int = 0) -> None:
        """A problem in the input that did not stop ingest; `dropped` events it cost, if any."""
        self.warnings.add(file, message, position, dropped)

    @property
    def n_slices(self) -> int:
        return self._next_slice

    # -- finish ----------------------------------------------------------------------------
    def start_depths(self) -> None:
        """Every slice is staged: compute their depths now, beside what the importer still does (its links)."""
        if self._depths_ahead is None and not self._in_order and self._next_slice and not self.spilling:
            self._depths_ahead = Ahead(self.con, ordered.made)  # and the rows finish() makes of them

    def lod_ahead(self, links_read_staging: bool = True, write_ahead: bool = False) -> None:
        """Every slice is staged and every track named (the caller's links still to come): the finished
        rows and the level-of-detail build start now, beside the links (ingest/lod_ahead.py: where not).
        From here the build's own two threads keep both cores busy: DuckDB's worker would only compete.
        Links that read `_slices_staging` keep it, up to lod_ahead.MAX_SLICES; others let it go, at any size.
        `write_ahead`: the write of `slices` begins beside the build too, as soon as the rows are made (for a
        row group of slices or more)."""
        too_many = links_read_staging and self._next_slice > lod_ahead.MAX_SLICES
        if self.spilling or self.threads == 1 or self._lod_ahead or not self._next_slice or too_many:
            return
        neg, n, _, c = stage.time_problems(self.con, bool(self.n_counters))
        if neg or n or c:  # finish() checks, drops and says so after the links, as before
            return
        self._one_duckdb_thread()
        self._write_tracks()
        self.con.execute(schema.create_sql("slices", _SLICES_STORED))
        self.con.execute("SET preserve_insertion_order = true")  # the LOD tables store rows in their order
        ahead, held, in_order, n_counters = self._depths_ahead, self._held, self._in_order, self.n_counters

        def prepare(cur):
            rows = ahead.result() if ahead is not None else ordered.made(cur, depths=not in_order)
            return lod_ahead.finish_rows(cur, rows, held, n_counters, keep_staging=links_read_staging)
        self._lod_ahead = lod_ahead.LodAhead(self.con, prepare, build_lod, self._group_rows,
                                             write=stage.write_slices if write_ahead else None)
        self._depths_ahead, self._held = None, stage.Held()  # the thread's now (abort() waits for it)

    def _finished_rows(self, source_name: str) -> tuple[stage.Final | None, tuple[int, int] | None]:
        """The time check, the tracks, the finished rows (None: spilled, every slice in DuckDB) and their
        bounds, after the caller's links: what lod_ahead() starts before them, in the same order."""
        con = self.con
        ahead = self._depths_ahead  # (abort() joins it if the check raises)
        if self._check_times(source_name) and ahead is not None:  # slices dropped: their depths and order again
            ahead.close()
            ahead = None
        self._depths_ahead = None
        self._write_tracks()
        con.execute(schema.create_sql("slices", _SLICES_STORED))
        if not self.spilling:
            in_order = self._in_order and self._next_slice > 0
            rows = ahead.result() if ahead is not None else ordered.made(con, depths=not in_order)
            held, self._held = self._held, stage.Held()  # finalize frees each column as it goes
            return lod_ahead.finish_rows(con, rows, held, self.n_counters)
        spill.fill_depths(con)  # every slice in DuckDB: depths a part at a time, no array of all of them
        if self.n_counters:
            lod_ahead.sort_counters(con)
        return None, lod_ahead.bounds(con, "_slices_staging")

    def _check_times(self, source_name: str) -> int:
        """No negative durations; and times every format must respect: |ts| and ts + dur within 2^62 ns (146
        years), so no sum or difference of two times can overflow int64 later (tiles, analysis, export). A
        slice outside is dropped and counted, and flows that touched it go with it; a counter sample likewise."""
        neg, n, first, c = stage.time_problems(self.con, bool(self.n_counters))
        if neg:
            raise IngestError(source_name, f"{neg} slices with negative duration reached the builder (ingester bug)")
        stage.drop_out_of_range(self.con, slices=bool(n), counters=bool(c))
        if n:
            self.warn(source_name, f"{n} slices with a start or end more than 2^62 ns (146 years) from the epoch were"
                      f" dropped (expected times in range; e.g. ts {first} ns)", dropped=n)
            if n == self._next_slice and self.n_counters == 0:
                raise IngestError(source_name, "every slice has a time out of range; nothing to show")
        if c:
            self.warn(source_name, f"{c} counter samples with a time more than 2^62 ns from the epoch were dropped",
                      dropped=c)
        return n

    def finish(self, fmt: str, source_name: str, start_ns: int | None = None) -> dict:
        """Complete the file (depths, order, meta, derived tables). Returns the counts.

        `start_ns`: the time origin when the caller knows it (a live capture's segments share the
        capture's start, so their tiles line up); by default the earliest event. The views' whole-trace
        aggregates are not built here: they are a side file made after publication (ingest/pipeline.py),
        so they never delay the time to a viewable trace."""
        con = self.con
        if self._next_slice == 0 and self.n_counters == 0:
            why = "contains no events (no slices and no counter samples); nothing to show"
            w = self.warnings
            if w.dropped_events:  # every event was dropped: the reasons are the error, not a footnote
                shown = "; ".join(w.kept[:3]) + (f"; ... ({w.total - 3} more)" if w.total > 3 else "")
                why = (f"no event could be kept ({w.dropped_events} dropped, {w.total} warnings); "
                       f"nothing to show. First problems: {shown}")
            raise IngestError(source_name, why)
        early = self._lod_ahead
        if early is not None:
            if start_ns is not None:
                raise ValueError("finish(start_ns=...) after lod_ahead(): its LOD tables start at the first event")
            final, span = early.rows()
            con.execute(f"DROP TABLE IF EXISTS {stage.NAME}._slices_staging")  # the links have read it
            final.use(con)
        else:
            final, span = self._finished_rows(source_name)
        rows = "_slices_staging" if final is None else "_slices_final"
        start, end = span or (None, None)
        if start is None or end is None:  # every event was dropped on the way: nothing to show
            dropped = self.warnings.dropped_events
            raise IngestError(source_name, "no slice or counter sample is left to show"
                              + (f" ({dropped} events were dropped: {self.warnings.kept[0]})"
                                 if dropped and self.warnings.kept else "")
                              + "; expected at least one event with a valid time")
        if end - start > LONG_SPAN_NS:  # a profile of weeks is nearly always a corrupt time, say where
            (longest,) = con.execute(f"SELECT max(dur) FROM {rows}").fetchone()
            self.warn(source_name, f"the trace spans {(end - start) / 86400e9:.1f} days (its longest slice"
                      f" {(longest or 0) / 86400e9:.1f} days); some times are probably corrupt")
        meta = dict(self.meta)
        meta.setdefault("format", fmt)
        meta["start_ns"] = str(int(start if start_ns is None else start_ns))
        meta["end_ns"] = str(int(end))
        meta["ingest_version"] = schema.INGEST_VERSION
        meta.setdefault("lost_events", "0")
        meta["warning_count"] = str(self.warnings.total)
        meta["dropped_events"] = str(self.warnings.dropped_events)
        meta["warnings"] = json.dumps(self.warnings.kept)
        insert_rows(con, "trace_meta", sorted(meta.items()))

        # slices into the file and the level-of-detail tables every published trace carries, at once
        if final is None:
            spill.write_slices_and_lod(con, build_lod)
        elif early is not None:
            self._lod_ahead = None
            stage.write_slices_and_lod(con, final, build_lod, ahead=early)
        else:
            self._one_duckdb_thread()
            stage.write_slices_and_lod(con, final, build_lod, parallel=self.threads != 1)
        counts = self.counts()
        close_synced(con, self.path)  # the file is on the disk before it is published
        shutil.rmtree(self.work_dir, ignore_errors=True)
        return counts

    def _one_duckdb_thread(self) -> None:
        """From here to publication the build's own two threads (the write of `slices` or the links, and
        the level-of-detail build) keep both cores busy: DuckDB at one thread (ingest/opening.py)."""
        if self._duck_threads is None:
            self.con.execute("SET threads = 1")
            self._duck_threads = 1

    def counts(self) -> dict:
        counted = {t: self.con.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
                   for t in ("tracks", "slices", "flows", "counters")}
        return {**counted, "warnings": self.warnings.total, "dropped_events": self.warnings.dropped_events}

    def abort(self) -> None:
        if self._lod_ahead is not None:  # its thread uses the connection: it ends first
            self._lod_ahead.join(quiet=True)
        if self._depths_ahead is not None:
            self._depths_ahead.close()
        self._held.close()
        try:
            self.con.close()
        except Exception:
            pass
        shutil.rmtree(self.work_dir, ignore_errors=True)

    def _write_tracks(self) -> None:
        if self._track_rows:
            insert_rows(self.con, "tracks", self._track_rows)
