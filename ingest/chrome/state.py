"""What the Chrome ingester remembers across chunks and sources of one trace.

Tracks are created with provisional names while events stream in; process and
thread names (M events) may come anywhere in the file, so chrome.finish names and
orders the tracks once everything is read. Staging tables (`_chrome_*`) hold what
needs the whole trace before it can be resolved; chrome.finish drops them.
"""

from __future__ import annotations

import queue
import threading
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from acceltrace.ingest.chrome import kineto as kin
from acceltrace.store import schema

IGNORED_PHASES = ("P", "O", "N", "D", "c", "V", "v")  # samples, snapshots, object lifetimes, memory dumps

STAGING = {
    "ext": [("src", "INTEGER"), ("slice_id", "BIGINT"), ("ext_id", "BIGINT"), ("ts", "BIGINT"), ("is_call", "TINYINT")],
    "flow_v2": [("src", "INTEGER"), ("bind_id", "VARCHAR"), ("slice_id", "BIGINT"), ("ts", "BIGINT"),
                ("flow_in", "BOOLEAN"), ("flow_out", "BOOLEAN")],
    # flow events, compact (they are most of a Kineto file's events): ph 0/1/2 = s/t/f, `key` codes
    # (cat, name) in ChromeState.flow_keys, numeric ids in fid and others in fid_text
    "flow_raw": [("src", "INTEGER"), ("thread_key", "BIGINT"), ("ts", "BIGINT"), ("ph", "UTINYINT"),
                 ("bp_e", "BOOLEAN"), ("key", "INTEGER"), ("fid", "BIGINT"), ("fid_text", "VARCHAR"),
                 ("seq", "BIGINT")],
    "be": [("src", "INTEGER"), ("thread_key", "BIGINT"), ("track_id", "INTEGER"), ("ts", "BIGINT"),
           ("seq", "BIGINT"), ("ph", "VARCHAR"), ("name", "VARCHAR"), ("cat", "VARCHAR"), ("args", "VARCHAR")],
    "async": [("src", "INTEGER"), ("pid", "VARCHAR"), ("cat", "VARCHAR"), ("aid", "VARCHAR"), ("name", "VARCHAR"),
              ("ph", "VARCHAR"), ("ts", "BIGINT"), ("seq", "BIGINT"), ("args", "VARCHAR")],
}
MAX_EXAMPLES = 3


@dataclass
class TrackInfo:
    src: int
    kind: str  # thread | pcie | global | process | async | counter | memory (tid 'device' or '' for host)
    lane: str
    pid: str = ""
    tid: str = ""
    sub: str = ""  # direction (pcie), category (async), series (counter), device|host (annotation)


@dataclass
class SourceState:
    idx: int
    name: str
    group: str | None
    offset_ns: int = 0
    first_slice: int | None = None
    n_slices: int = 0
    max_ts_ns: int | None = None
    meta: dict = field(default_factory=dict)
    counter_tracks: set = field(default_factory=set)
    memory_events: int = 0
    memory_running: dict = field(default_factory=dict)  # (device, pid) -> bytes, old-schema [memory] sums
    problems: dict = field(default_factory=dict)  # message -> [count, first position, examples, dropped]

    def _problem(self, message: str, count: int, position: int | None, example=None, dropped: bool = True,
                 counted: bool = True):
        p = self.problems.setdefault(message, [0, position, [], dropped, counted])
        p[0] += count
        if example is not None and len(p[2]) < MAX_EXAMPLES:
            if isinstance(example, (bytes, memoryview)) or type(example).__name__ == "Raw":
                example = bytes(example).decode("utf-8", "replace")
            p[2].append(example)

    def drop(self, message: str, mask: np.ndarray, seq: np.ndarray, sub: list, field_name: str) -> None:
        """Events left out, counted, with the first one's position and example values."""
        rows = np.flatnonzero(mask)
        if not len(rows):
            return
        first = int(rows[0])
        self._problem(message, len(rows), int(seq[first]), getattr(sub[first], field_name, None))

    def count_phase(self, ph: str, n: int, first_seq: int) -> None:
        what = "not shown on a timeline" if ph in IGNORED_PHASES else "unknown"
        self._problem(f"events with phase {ph!r} ({what}) were skipped", n, first_seq, None)

    def note(self, message: str, position: int | None, dropped: bool = False, count: int = 1) -> None:
        """A counted condition (count events, dropped or not)."""
        self._problem(message, count, position, None, dropped)

    def note_file(self, message: str, dropped: int = 0) -> None:
        """A condition of the file as a whole (the message says it all; `dropped` events lost)."""
        self._problem(message, dropped, None, None, dropped > 0, counted=False)

    def note_slices(self, first: int, n: int, ts_ns: np.ndarray) -> None:
        if self.first_slice is None:
            self.first_slice = first
        self.n_slices = first + n - self.first_slice
        if len(ts_ns):
            m = int(ts_ns.max())
            self.max_ts_ns = m if self.max_ts_ns is None else max(self.max_ts_ns, m)

    def flush(self, builder) -> None:
        for message, (count, pos, examples, dropped, counted) in self.problems.items():
            text = f"{count} {message}" if counted else message
            if examples:
                text += "; e.g. " + ", ".join(repr(e) for e in examples)
            builder.warn(self.name, text, f"event {pos}" if pos is not None else None,
                         dropped=count if dropped else 0)
        self.problems.clear()


STAGE_ROWS = 50_000  # the first run of slices handed to the builder; each next one twice as long ...
STAGE_ROWS_MAX = 200_000  # ... up to this (400 k: as fast, the 830 MB peak 40 MB higher)
# link rows (flow events, External ids, B/E, async) held as Arrow before they move into DuckDB
STAGE_ARROW_BYTES = 48 << 20


def _concat(batches: list[dict]) -> pa.Table:
    """Slice batches (dicts of columns, not all with the same columns) as one table: Arrow's own
    concatenation, a column a batch lacks null there."""
    return pa.concat_tables([_table(b) for b in batches], promote_options="permissive")


def _table(batch: dict) -> pa.Table:
    return pa.table({k: v if isinstance(v, (pa.Array, pa.ChunkedArray)) else pa.array(v)
                     for k, v in batch.items() if v is not None})


class Writer:
    """Runs one source's writes to the trace file in order on one thread.

    DuckDB releases the GIL while it appends, so the next chunk is parsed meanwhile.
    Slice ids stay known up front: they are consecutive from the builder's count.
    """

    def __init__(self, depth: int = 3):
        self.q: queue.Queue = queue.Queue(maxsize=depth)
        self.error: BaseException | None = None
        self.t = threading.Thread(target=self._run, daemon=True)
        self.t.start()

    def _run(self) -> None:
        while True:
            job = self.q.get()
            try:
                if job is None:
                    return
                if self.error is None:
                    job()
            except BaseException as e:  # raised again in the parsing thread
                self.error = e
            finally:
                self.q.task_done()

    def submit(self, job) -> None:
        self._raise()
        self.q.put(job)

    def drain(self) -> None:
        self.q.join()
        self._raise()

    def close(self) -> None:
        self.q.put(None)
        self.t.join()

    def _raise(self) -> None:
        if self.error is not None:
            e, self.error = self.error, None
            raise e


class ChromeState:
    """Per-trace state of the Chrome ingester (attached to the builder)."""

    def __init__(self, builder):
        self.builder = builder
        self.sources: list[SourceState] = []
        self._threads: dict[tuple, int] = {}
        self.tracks: dict[int, TrackInfo] = {}
        self.track_threads: set[tuple[int, int]] = set()
        self.proc: dict[tuple, dict] = {}
        self.thread_meta: dict[tuple, dict] = {}
        self.staged: set[str] = set()
        self._staged_rows: dict[str, list[pa.Table]] = {}  # STAGING table -> its batches held as Arrow
        self._arrow_bytes = 0  # their size
        self._in_duck: set[str] = set()  # STAGING tables with a DuckDB temp table (rows moved there)
        self._views: set[str] = set()  # STAGING tables seen by SQL as a view on their Arrow rows
        self.flow_keys: dict[tuple[str, str], int] = {}
        self.writer: Writer | None = None
        self.next_slice = 0
        self._pending: list[dict] = []  # slice batches not yet handed to the builder
        self._pending_rows = 0
        self._stage_rows = STAGE_ROWS  # the length of the next run of slices (add_slices)

    def begin_writes(self) -> None:
        self.next_slice = self.builder.n_slices
        self.writer = Writer()

    def end_writes(self, ok: bool = True) -> None:
        """Waits for the queued writes (raising their error when ok) and stops the writer."""
        if ok:
            self._flush_slices()
        self._pending, self._pending_rows = [], 0
        w, self.writer = self.writer, None
        if w is None:
            return
        try:
            if ok:
                w.drain()
        finally:
            w.close()

    def submit(self, job) -> None:
        if self.writer is None:
            job()
        else:
            self.writer.submit(job)

    def add_slices(self, batch: dict) -> int:
        """Queues a batch of slices; returns the id its first slice will get.

        Batches (one per chunk and kind of event) are handed to the builder in runs of at least
        STAGE_ROWS rows, doubling up to STAGE_ROWS_MAX: DuckDB's cost per append falls with its length
        (by a third from 20 k to 100 k rows; 830 MB in runs of 50 k: 10.2-10.3 s, of 200-400 k:
        9.2-9.5 s), and the appends were what held the parser back (its queue to the writer was
        full); a small trace keeps short first runs, so its appends still overlap its parse."""
        n = len(batch["ts"])
        first = self.next_slice
        self.next_slice += n
        self._pending.append(batch)
        self._pending_rows += n
        if self.writer is None or self._pending_rows >= self._stage_rows:
            self._flush_slices()
            self._stage_rows = min(STAGE_ROWS_MAX, 2 * self._stage_rows)
        return first

    def _flush_slices(self) -> None:
        if not self._pending:
            return
        batches, self._pending, n = self._pending, [], self._pending_rows
        self._pending_rows = 0
        first = self.next_slice - n
        builder = self.builder

        def job():
            got = builder.add_slices(_concat(batches))
            if got != first:
                raise RuntimeError(f"slice ids out of step: expected {first}, builder gave {got}")

        self.submit(job)

    def add_counters(self, track_ids, ts, values) -> None:
        builder = self.builder
        self.submit(lambda: builder.add_counters(track_ids, ts, values))

    def thread_key(self, src: int, pid: str, tid: str) -> int:
        k = (src, pid, tid)
        v = self._threads.get(k)
        if v is None:
            v = self._threads[k] = len(self._threads)
        return v

    def _track(self, src: SourceState, info: TrackInfo, key: tuple, name: str, unit: str | None = None) -> int:
        tid = self.builder.track(lane=info.lane, name=name, group_name=src.group or "", key=key, unit=unit)
        if tid not in self.tracks:
            self.tracks[tid] = info
        return tid

    def slice_track(self, src: SourceState, pid: str, tid: str, thread_key: int, lane_code: int, direction: str) -> int:
        lane = kin.LANE_CODES[lane_code]
        if lane == "annotation":
            side = "device" if lane_code == kin.DEVICE_ANNOTATION else "host"
            info = TrackInfo(src.idx, "thread", lane, pid, tid, side)
            key = ("chrome", src.idx, pid, tid, lane)
        elif lane == "pcie":
            info = TrackInfo(src.idx, "pcie", lane, pid, "", direction)
            key = ("chrome", src.idx, pid, "pcie", direction)
        else:
            info = TrackInfo(src.idx, "thread", lane, pid, tid)
            key = ("chrome", src.idx, pid, tid, lane)
        t = self._track(src, info, key, f"{pid}/{tid}/{lane}")
        self.track_threads.add((t, thread_key))
        return t

    def scope_track(self, src: SourceState, pid: str | None) -> int:
        if pid is None:
            return self._track(src, TrackInfo(src.idx, "global", "cpu"), ("chrome", src.idx, "global"), "global")
        return self._track(src, TrackInfo(src.idx, "process", "cpu", pid), ("chrome", src.idx, pid, "process"),
                           f"{pid}/process")

    def async_track(self, src: SourceState, pid: str, cat: str) -> int:
        return self._track(src, TrackInfo(src.idx, "async", "cpu", pid, "", cat),
                           ("chrome", src.idx, pid, "async", cat), f"{pid}/async/{cat}")

    def counter_track(self, src: SourceState, pid: str, series: str) -> int:
        return self._track(src, TrackInfo(src.idx, "counter", "counter", pid, "", series),
                           ("chrome", src.idx, pid, "counter", series), f"{pid}/{series}")

    def memory_track(self, src: SourceState, device: int, pid: str, series: str) -> int:
        """A device's (or, device -1, a host process's) memory level in bytes."""
        owner = str(device) if device >= 0 else pid
        return self._track(src, TrackInfo(src.idx, "memory", "counter", owner, "device" if device >= 0 else "", series),
                           ("chrome", src.idx, "memory", device, owner, series), f"{owner}/{series}", unit="B")

    def stage(self, table: str, columns: dict) -> None:
        """Keep rows for a staging table (through the writer: their conversions off the parser)."""
        self.submit(lambda: self._stage(table, columns))

    def _stage(self, table: str, columns: dict) -> None:
        """Rows are held as Arrow (no append per chunk: ~100 small appends cost the writer thread 1.5
        CPU-s at 830 MB) up to STAGE_ARROW_BYTES in all; past that, every table's rows move into its
        DuckDB temp table in one append each, so memory stays bounded (DuckDB spills, Arrow cannot)."""
        # each column as its declared type exactly (not batch.as_table, which keeps dictionary-encoded
        # columns: the batches of a table must share one schema to be concatenated)
        types = {c: schema.arrow_type(d) for c, d in STAGING[table]}
        arrays = []
        for c, t in types.items():
            v = columns[c]
            v = v if isinstance(v, (pa.Array, pa.ChunkedArray)) else pa.array(v, type=t)
            arrays.append(v if v.type == t else v.cast(t))
        batch = pa.table(arrays, names=list(types))
        if batch.num_rows == 0:
            return
        self._staged_rows.setdefault(table, []).append(batch)
        self.staged.add(table)
        self._arrow_bytes += batch.nbytes
        if self._arrow_bytes > STAGE_ARROW_BYTES:
            for t in list(self._staged_rows):
                self._to_duck(t)
            self._arrow_bytes = 0

    def _to_duck(self, table: str) -> None:
        """Append a table's Arrow rows to `_chrome_<table>` (a TEMP table, created on first use)."""
        batches = self._staged_rows.pop(table, None)
        if not batches:
            return
        con, name = self.builder.con, f"_chrome_{table}"
        if table not in self._in_duck:
            body = ", ".join(f'"{c}" {t}' for c, t in STAGING[table])
            con.execute(f"CREATE TEMP TABLE {name} ({body})")  # in memory, spills to the temp dir
            self._in_duck.add(table)
        con.register("_chrome_batch", pa.concat_tables(batches))
        try:
            con.execute(f"INSERT INTO {name} SELECT * FROM _chrome_batch")
        finally:
            con.unregister("_chrome_batch")

    def shift_staged(self, src: int, base: int) -> None:
        """Add `base` ns to the ts of one source's staged rows (its times were relative to a base seen late)."""
        for table in self._in_duck:
            if any(c == "ts" for c, _ in STAGING[table]):
                self.builder.con.execute(f"UPDATE _chrome_{table} SET ts = ts + ? WHERE src = ?", [base, src])
        for batches in self._staged_rows.values():
            for i, b in enumerate(batches):
                if "ts" in b.column_names and b["src"][0].as_py() == src:
                    batches[i] = b.set_column(b.schema.get_field_index("ts"), "ts",
                                              pc.add(b["ts"], pa.scalar(base, pa.int64())))

    def register_staged(self) -> None:
        """Make the staged rows visible to SQL as `_chrome_<table>`: the DuckDB table with the last rows
        appended, or, for rows that never left Arrow, a view on them (no copy)."""
        con = self.builder.con
        for table in list(self._staged_rows):
            if table in self._in_duck:
                self._to_duck(table)
            else:
                batches = self._staged_rows[table]
                con.register(f"_chrome_{table}", pa.concat_tables(batches) if len(batches) > 1 else batches[0])
                self._views.add(table)

    def drop_staging(self) -> None:
        con = self.builder.con
        for table in self.staged:
            if table in self._views:
                con.unregister(f"_chrome_{table}")
            else:
                con.execute(f"DROP TABLE IF EXISTS _chrome_{table}")
        self.staged.clear()
        self._in_duck.clear()
        self._views.clear()
        self._arrow_bytes = 0
        self._staged_rows.clear()
        # Arrow's allocator keeps the freed pages of the parse (slice runs, link rows) for reuse: they go
        # back before the write of `slices` and the LOD build, the ingest's peak
        pa.default_memory_pool().release_unused()
