"""Where the builder keeps slices until finish(), and how finish() writes them.

Each slice's columns that SQL reads before finish (ids, track, times, depth, correlation id: the
links, the time check, the depth pass) are staged in an attached in-memory DuckDB database; unlike
a TEMP table it is seen by every cursor of the connection, and it is on the builder connection's
search path, so ingesters name `_slices_staging` without its catalog. The other columns (name,
category, args, ...) stay in the Arrow batches the ingester gave, never copied into DuckDB.

finalize() fills in the depths and works out the stored order (track_id, ts, depth) in numpy;
write_slices_and_lod() then writes `slices` in that order on one cursor while another builds the
level-of-detail tables from the same rows (which need no order): the two cores share the two
biggest steps of time-to-viewable. docs/ingest.md has the numbers that chose this. A trace past
spill.SPILL_FROM_SLICES leaves this path part way for the bounded-memory one (ingest/spill.py).
"""

from __future__ import annotations

import mmap
import threading
from pathlib import Path
from typing import Callable

import duckdb
import numpy as np
import pyarrow as pa

from acceltrace.ingest.gather import Gather, plain
from acceltrace.ingest.made_ahead import MadeAhead
from acceltrace.store import schema
from acceltrace.store.duck import cursor_like, quote_ident

NAME = "_stage"
# the columns of a slice the staging table holds: what ingesters' SQL (links), the builder's time check
# and the depth pass read. The others are held as the Arrow batches they came in (append).
STAGED = ("slice_id", "track_id", "ts", "dur", "depth", "corr_id")


def attach(con: duckdb.DuckDBPyConnection) -> None:
    """The staging database and its table (depth may be unknown, NULL, until finish())."""
    (db,) = con.execute("SELECT current_database()").fetchone()
    con.execute(f"ATTACH ':memory:' AS {NAME}")
    con.execute(f"SET search_path = '{quote_ident(db)},{NAME}'")
    cols = [(c, t.replace(" NOT NULL", "") if c == "depth" else t) for c, t in schema.TABLES["slices"] if c in STAGED]
    con.execute(schema.create_sql("slices", cols, name="_slices_staging").replace(
        "CREATE TABLE ", f"CREATE TABLE {NAME}.", 1))


# args text held in memory up to this many bytes a trace; past it each batch's args go to a file in the
# builder's work folder and come back mapped (page cache, which the kernel may drop and read again, not
# the process's own memory): held whole, 2.5 GB of JSON peaked at 2.4 GB of its own memory, 1.9 so
ARGS_MEMORY_BYTES = 384 << 20


class Held(list):
    """The held columns: one table per batch the builder was given, whose rows are slice ids 0, 1, ...
    in turn. Args past ARGS_MEMORY_BYTES wait in an Arrow IPC stream in `folder` until mapped()."""

    def __init__(self, folder: Path | None = None):
        super().__init__()
        self.folder = folder
        self.args_bytes = 0  # args text held in memory
        self._path: Path | None = None
        self._sink = self._writer = None
        self._spilled: dict[int, int] = {}  # index of a table whose args are in the file -> its batches there
        self._map: mmap.mmap | None = None

    def add(self, table: pa.Table) -> None:
        if self.folder is not None and "args" in table.column_names:
            args = table.column("args")
            if self.args_bytes + args.nbytes > ARGS_MEMORY_BYTES:
                self._spill(args)
                self._spilled[len(self)] = args.num_chunks
                table = table.drop_columns(["args"])
            else:
                self.args_bytes += args.nbytes
        self.append(table)

    def _spill(self, args: pa.ChunkedArray) -> None:
        if self._writer is None:
            self.folder.mkdir(parents=True, exist_ok=True)
            self._path = self.folder / "held-args.arrows"
            self._sink = pa.OSFile(str(self._path), "wb")
            self._writer = pa.ipc.new_stream(self._sink, pa.schema([("args", pa.string())]))
        for chunk in args.chunks:
            self._writer.write_batch(pa.record_batch([plain(chunk).cast(pa.string())], names=["args"]))

    def mapped(self) -> None:
        """Every table with its args again: those from the file as arrays over its mapping (no copy;
        a page is read in when the write takes a row of it)."""
        if self._writer is None:
            return
        self.close()
        with open(self._path, "rb") as f:
            self._map = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        batches = iter(pa.ipc.open_stream(pa.BufferReader(pa.py_buffer(self._map))))
        for i, n in sorted(self._spilled.items()):
            chunks = [next(batches).column(0) for _ in range(n)]
            self[i] = self[i].append_column("args", pa.chunked_array(chunks, type=pa.string()))
        self._spilled = {}

    @property
    def is_mapped(self) -> bool:
        return self._map is not None

    def release(self) -> None:
        """Unmap the pages of the file read so far from this process (they stay in the page cache: a row
        read again is a minor fault, not a disk read), so its resident size stays bounded too."""
        if self._map is not None and hasattr(mmap, "MADV_DONTNEED"):  # Linux, macOS
            self._map.madvise(mmap.MADV_DONTNEED)

    def discard(self) -> None:
        """Every table let go, and the file of spilled args with them (the bounded regime, ingest/spill.py,
        moved them into DuckDB)."""
        self.clear()
        self.close()
        if self._map is not None:
            try:
                self._map.close()
            except BufferError:  # an array over it still lives somewhere: unmapped once that is gone
                pass
            self._map = None
        if self._path is not None:
            self._path.unlink(missing_ok=True)
            self._path = None
        self._spilled, self.args_bytes = {}, 0

    def close(self) -> None:
        """The file written out (an aborted build's too: its folder is removed with it)."""
        if self._writer is not None:
            self._writer.close()
            self._sink.close()
            self._writer = None


def append(con: duckdb.DuckDBPyConnection, table: pa.Table, held: Held) -> None:
    """Stage a batch of slices (slice_id given): its STAGED columns into DuckDB, the rest onto `held`."""
    insert(con, table, STAGED)
    held.add(table.select([c for c in table.column_names if c in _SLICE_TYPES and c not in STAGED]))


def insert(con: duckdb.DuckDBPyConnection, table: pa.Table, columns) -> None:
    """A batch's `columns` into the staging table, in that order (NULL for those the batch lacks)."""
    select = ", ".join(f'"{c}"' if c in table.column_names else f'NULL AS "{c}"' for c in columns)
    con.register("_batch", table)
    try:
        con.execute(f"INSERT INTO _slices_staging SELECT {select} FROM _batch")
    finally:
        con.unregister("_batch")


class Final:
    """The finished slices: `rows`, the columns the level-of-detail build and the builder's checks read,
    in the order held (they need no order); `rest`, the other columns (args above all), which only the
    write of `slices` reads; `order`, the permutation of `rows` into stored order (None: they are in
    it). The columns of `rest` named in `held` still have every row the builder was given (the time
    check's drops included: they are skipped by the take, not copied out first); `held_order` takes
    theirs into stored order (None: they are in it). Each cursor that calls use() names `rows`
    `_slices_final`."""

    def __init__(self, rows: pa.Table, rest: dict[str, pa.ChunkedArray], order: np.ndarray | None,
                 held_order: np.ndarray | None = None, held: frozenset = frozenset(),
                 release: Callable | None = None):
        self.rows = rows
        self.rest = rest
        self.order = order
        self.held_order = held_order
        self.held = held
        self.release = release  # Held.release: called as the write goes, while it reads mapped args
        # large: the sorted rows are streamed to the write; a smaller trace is sorted whole (DuckDB then
        # scans it on both cores)
        self.large = rows.nbytes + sum(c.nbytes for c in rest.values()) > STREAM_BYTES
        self._taken: pa.Table | None = None  # in_stored_order's table, made ahead (take_ahead)
        self._handed = False  # in_stored_order has answered: take_ahead comes too late
        self._lock = threading.Lock()  # the write's thread waits for a take_ahead under way on another

    def use(self, cur: duckdb.DuckDBPyConnection) -> None:
        cur.register("_slices_final", self.rows)  # a registered view lives on one connection

    def take_ahead(self) -> None:
        """in_stored_order()'s table made now, on this thread, for the write to take later, unless the write
        has taken it already (not for `large` rows: those are taken as the write reads them)."""
        with self._lock:
            if not self.large and self._taken is None and not self._handed:
                self._taken = self._in_stored_order()

    def in_stored_order(self) -> pa.Table | pa.RecordBatchReader:
        """Every column in stored order, once: the rows themselves when they are in it, else batches taken
        as they are read (the sorted copy never exists whole: at 830 MB it would be 700 MB more). `rest`
        then belongs to what this returns, so its columns are freed as soon as the write is done, while
        the level-of-detail build may still run. Made ahead (take_ahead), that table."""
        with self._lock:
            self._handed = True
            taken, self._taken = self._taken, None
            return taken if taken is not None else self._in_stored_order()

    def _in_stored_order(self) -> pa.Table | pa.RecordBatchReader:
        rest, self.rest = self.rest, {}
        cols = [self.rows.column(name) if name in self.rows.column_names else rest.pop(name)
                for name in _SLICE_TYPES]
        # each column's rows in stored order: None where it is in that order already
        order = self.order
        picks = [self.held_order if name in self.held else order for name in _SLICE_TYPES]
        if all(p is None for p in picks):
            return pa.table(cols, names=list(_SLICE_TYPES))
        if not self.large:
            return pa.table([col if p is None else Gather(col).take(p) for col, p in zip(cols, picks)],
                            names=list(_SLICE_TYPES))
        gathers = [Gather(col) for col in cols]
        del cols
        shape = pa.schema([pa.field(name, g.type) for name, g in zip(_SLICE_TYPES, gathers)])
        n = self.rows.num_rows

        release = self.release

        def batches():
            for lo in range(0, n, BATCH_ROWS):
                hi = min(n, lo + BATCH_ROWS)
                yield pa.record_batch([g.take(np.arange(lo, hi) if p is None else p[lo:hi])
                                       for g, p in zip(gathers, picks)], schema=shape)
                if release is not None:  # a batch's rows lie all over the file (RELEASE, below)
                    release()

        # taken on a thread of their own, two batches ahead of the insert: beside DuckDB's append, on the core
        # the LOD build leaves when it ends before the write (Nsight 1.5 M slices: 0.36 s of takes in the write)
        return pa.RecordBatchReader.from_batches(shape, MadeAhead(batches(), name="slices-take"))


BATCH_ROWS = 30_720  # a quarter of a DuckDB row group: what the stream holds at once stays small
STREAM_BYTES = 256 << 20  # slices of more bytes are streamed to the write (Final.large)
# RELEASE: the write unmaps the pages of spilled args it has read after each batch. A batch's rows lie all
# over the file (each slice's args on a page of its own, as a rule): up to ~120 MB of pages a batch. Every
# 4 batches let 2.5 GB of JSON map 480 MB of it at once (RSS 2.18 GB; after each batch 2.01 GB).


TIME_LIMIT_NS = 1 << 62  # |ts| and ts + dur bound (store invariant, docs/schema.md)
# out of range: the end in 128 bits, so no stored ts or dur can overflow it
_OUT = f"ts < -{TIME_LIMIT_NS} OR ts > {TIME_LIMIT_NS} OR ts::HUGEINT + dur > {TIME_LIMIT_NS}"
_COUNTER_OUT = f"ts < -{TIME_LIMIT_NS} OR ts > {TIME_LIMIT_NS}"


def time_problems(con: duckdb.DuckDBPyConnection, counters: bool) -> tuple[int, int, int | None, int]:
    """(staged slices with a negative duration, staged slices out of range, the first one's ts, counter
    samples out of range): one scan of the staged slices, one of the counters where there are some."""
    ((neg, n, first),) = con.execute(f"SELECT count(*) FILTER (WHERE dur < 0), count(*) FILTER (WHERE {_OUT}),"
                                     f" min(ts) FILTER (WHERE {_OUT}) FROM _slices_staging").fetchall()
    ((c,),) = con.execute(f"SELECT count(*) FROM counters WHERE {_COUNTER_OUT}").fetchall() if counters else ((0,),)
    return neg, n, first, c


def drop_out_of_range(con: duckdb.DuckDBPyConnection, slices: bool, counters: bool) -> None:
    """Deletes the staged slices out of range with every flow that touches one, and the counter samples."""
    if slices:
        con.execute(f"DELETE FROM flows WHERE src_slice IN (SELECT slice_id FROM _slices_staging WHERE {_OUT})"
                    f" OR dst_slice IN (SELECT slice_id FROM _slices_staging WHERE {_OUT})")
        con.execute(f"DELETE FROM _slices_staging WHERE {_OUT}")
    if counters:
        con.execute(f"DELETE FROM counters WHERE {_COUNTER_OUT}")


def finalize(con: duckdb.DuckDBPyConnection, ordered, held: Held, keep_staging: bool = False) -> Final:
    """The slices with their depths filled in, and the order they are stored in (track_id, ts, depth);
    the staging table is dropped (`keep_staging`: later, by the caller, once the links have read it).

    `ordered` (ingest/ordered.py): the staged rows in slice_id order, the order of the held rows, with their
    depths and that order. The staging table holds the columns SQL reads before this (STAGED); it decides
    which slices are left (the time check deletes some) and their times. `held`: the other columns, one table
    per batch the builder was given, whose rows are slice_ids 0, 1, ... in turn.

    No column is sorted here: the write takes each column's rows in that order (Final.in_stored_order,
    in the write's own thread). Sorting in DuckDB instead (all columns staged there, an UPDATE of the depths, then ORDER
    BY on the way into the file) moved every row's args text through a join and a sort: 2.5 of the
    830 MB trace's 4 s of finish."""
    held.mapped()
    if not keep_staging:
        con.execute(f"DROP TABLE {NAME}._slices_staging")
    staged, depth, order = ordered.staged, ordered.depth, ordered.order
    del ordered
    sid = staged["slice_id"].to_numpy()
    columns = {name: staged[name] for name in staged.column_names}
    columns["depth"] = pa.chunked_array([pa.array(depth)])
    # the held row of each staged one where the time check dropped some (slice ids are held positions)
    kept = None if sum(t.num_rows for t in held) == len(sid) else sid
    from_held = set()
    for name, typ in _SLICE_TYPES.items():
        if name in columns:
            continue
        chunks = [c for t in held for c in (t.column(name).chunks if name in t.column_names
                                            else [pa.nulls(t.num_rows, typ)])]
        held[:] = [t.drop_columns([name]) if name in t.column_names else t for t in held]
        types = {c.type for c in chunks}
        if len(types) > 1:  # dictionary-encoded in one batch, plain in another
            chunks = [c.cast(typ) for c in chunks]
        col = pa.chunked_array(chunks, type=chunks[0].type if chunks else typ)
        if kept is not None and name in _FOR_LOD:  # the LOD build reads them beside the staged columns
            col = pa.chunked_array([Gather(col).take(kept)])
        else:
            from_held.add(name)
        columns[name] = col
    lod = {name: columns.pop(name) for name in _FOR_LOD}
    # the held rows' way into stored order: through the staged rows' (kept[order]) where some were dropped
    held_order = order if kept is None else kept if order is None else kept[order]
    return Final(pa.table(lod), columns, order, held_order, frozenset(from_held),
                 held.release if held.is_mapped else None)


_SLICE_TYPES = {c: schema.arrow_type(t) for c, t in schema.TABLES["slices"]}
# what tiles/build.py and the builder's checks read of the slices
_FOR_LOD = ("slice_id", "track_id", "ts", "dur", "depth", "name", "bytes")


def write_slices(cur: duckdb.DuckDBPyConnection, final: Final, spare: threading.Event | None) -> None:
    """`slices` from the finished rows in stored order, on `cur`; `spare` set at its end (a core for the LOD
    build: tiles/pyramid.py). write_slices_and_lod's write, or the one an LOD build's head start begins beside
    an importer's flows (ingest/lod_ahead.py)."""
    cur.register("_slices_sorted", final.in_stored_order())
    # Under one row group (122,880 rows) `slices` went to the WAL at its commit, then close_synced's
    # checkpoint compressed it: written twice (A100: 21 MB of WAL). A commit of over 100 kB (DuckDB's
    # auto_checkpoint_skip_wal_threshold) past this threshold checkpoints instead, where no other write
    # is under way (else the WAL, as before): A100 and V100 10 ms sooner.
    cur.execute("SET checkpoint_threshold = '1KB'")
    try:
        cur.execute("INSERT INTO slices SELECT * FROM _slices_sorted")
    finally:
        cur.execute("RESET checkpoint_threshold")
    cur.unregister("_slices_sorted")  # the last reference to the columns only the write reads
    pa.default_memory_pool().release_unused()  # ... which the allocator would keep otherwise
    if spare is not None:
        spare.set()


def write_slices_and_lod(con: duckdb.DuckDBPyConnection, final: Final, build_lod: Callable,
                         parallel: bool = True, ahead=None) -> None:
    """`slices` from the finished rows in stored order, and build_lod over the same rows (in any
    order: each of its tables is sorted in its own), at once; then detach.

    Each runs on a cursor of its own in a thread of its own (DuckDB releases the GIL; the write's batches
    are taken in its thread), and the write's end frees a core for the build (`spare`, tiles/pyramid.py);
    without `parallel` (a one-thread build: a fleet runs one per core) one after the other. `ahead`: the
    build already running (ingest/lod_ahead.py): the write runs here beside it, unless it runs already
    too (LodAhead.writes), then waits for it."""
    spare = ahead.spare if ahead is not None else threading.Event() if parallel else None

    def write(cur):
        write_slices(cur, final, spare)

    def lod(cur):  # the numpy pyramid beside the write: it holds at most a bounded part of the slices
        final.use(cur)
        build_lod(cur, slices="_slices_final", keep_order_setting=True, rows=final.rows, spare=spare)

    con.execute("SET preserve_insertion_order = true")  # both writes store rows in their order
    try:
        if ahead is not None:  # the LOD build runs already (ingest/lod_ahead.py): the write here, beside it
            try:
                if not ahead.writes:
                    write(con)
            finally:
                ahead.join()
        elif parallel:
            _in_parallel(write, lod, con)
        else:
            write(con)
            lod(con)
    finally:
        con.execute("SET preserve_insertion_order = false")
        con.unregister("_slices_final")
        con.unregister("_slices_sorted")
    detach(con)


def detach(con: duckdb.DuckDBPyConnection) -> None:
    """The staging database let go (attach's undoing): the connection names the database it named before
    attach, the first of the search path attach set, alone again (a RESET would name the connection's own
    catalog, where the build's file may be attached beside it: ingest/opening.py)."""
    ((db,),) = con.execute("SELECT current_database()").fetchall()
    con.execute(f"USE {quote_ident(db)}")
    con.execute(f"DETACH {NAME}")


def _in_parallel(first, second, con: duckdb.DuckDBPyConnection) -> None:
    """first(cursor) in a thread and second(cursor) here, each on a cursor of its own; the first
    error of either is raised once both are done."""
    errors: list[BaseException] = []

    def run(job, cur):
        try:
            job(cur)
        except BaseException as e:  # re-raised below, in the caller's thread
            errors.append(e)
        finally:
            cur.close()

    # a cursor is a new connection: made here, both, as it reads `con`'s search path to name tables as `con` does
    curs = cursor_like(con), cursor_like(con)
    t = threading.Thread(target=run, args=(first, curs[0]), name="slices-write")
    t.start()
    try:
        run(second, curs[1])
    finally:
        t.join()
    if errors:
        raise errors[0]
