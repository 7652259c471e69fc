"""The merged-slice pyramid (`lod_merged`) in numpy, for traces whose lod_slices fit in memory.

tiles/build.py builds the pyramid in SQL, three statements per level; at 10-25 levels that is
dozens of statements, each a full DuckDB query with its own fixed cost, and on the real traces
in sample_traces it was a third of the time to a viewable trace. Here the same rows come from
one read of lod_slices and one sort per level, and go back to DuckDB as one Arrow batch in
(level, grp, b, track_id, depth) order. The result is the same table, row for row (tested
against the SQL build): per (level, grp, b, track_id, depth) the count, busy ns and bytes of
the slices shorter than the level's bucket, the longest of them (ties to the smaller id), and
whether the row is the deepest of its (level, grp, b, track_id) (what a depth page's fold reads).

Memory is that of lod_slices' columns (about 50 bytes a slice): a trace of more than
NUMPY_MAX_SLICES slices is built in parts of at most that many (runs of (grp, ts >> max_level) keys,
or of lod_slices' chunks where those are wider: every bucket of every level lies inside one such
key, so the parts' rows are the whole table's); a trace of PARALLEL_MIN_SLICES or more in at least
two, built on both cores. Each level's rows of every part go into lod_merged in one append at the
end, in part order (build_merged). Only when a sum could overflow int64 does build.py take the SQL
build.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import duckdb
import numpy as np
import pyarrow as pa

from acceltrace.store.duck import cursor_like, search_path

NUMPY_MAX_SLICES = 1_500_000
_I64_MAX = np.iinfo(np.int64).max


def fits(con: duckdb.DuckDBPyConnection) -> bool:
    """Whether the numpy build may run: no sum that could overflow int64 (any number of slices: a
    large trace is built in parts)."""
    total_dur, total_bytes = con.execute(
        "SELECT coalesce(sum(dur), 0), coalesce(sum(abs(bytes::HUGEINT)), 0) FROM lod_slices").fetchone()
    return total_dur <= _I64_MAX and total_bytes <= _I64_MAX


def _parts(con: duckdb.DuckDBPyConnection, max_level: int, limit: int,
           chunk_log2: int | None = None) -> list[tuple[str, list]]:
    """lod_slices in parts of at most `limit` slices, each a run of consecutive (grp, ts >> shift)
    keys, shift = max_level or lod_slices' chunk width where that is wider (a single key holding more
    is a part of its own): [(WHERE clause, its parameters)], in key order. lod_slices is sorted by
    (grp, chunk, ...), so with its chunk width known each key's rows lie in one stretch of the table
    (checked): a part is then a rowid range, read without a scan of the rest; else a filter on keys."""
    shift = max(max_level, chunk_log2 if chunk_log2 is not None else max_level)
    keys = con.execute(f"SELECT grp, ts >> {shift} AS tp, count(*), min(rowid), max(rowid) FROM lod_slices"
                       " GROUP BY ALL ORDER BY ALL").fetchall()
    runs = _runs([c for _, _, c, _, _ in keys], limit)
    stretch = all(c == hi - lo_ + 1 for _, _, c, lo_, hi in keys) and all(
        a[4] + 1 == b[3] for a, b in zip(keys, keys[1:]))
    if stretch:
        return [("rowid BETWEEN ? AND ?", [keys[a][3], keys[b][4]]) for a, b in runs]
    return [(f"grp BETWEEN ? AND ? AND (grp > ? OR ts >> {shift} >= ?) AND (grp < ? OR ts >> {shift} <= ?)",
             [keys[a][0], keys[b][0], keys[a][0], keys[a][1], keys[b][0], keys[b][1]]) for a, b in runs]


def _spans(rows: pa.Table, max_level: int, limit: int, chunk_log2: int | None) -> list[tuple[int, int]] | None:
    """_parts over lod_slices' rows in hand: [(first row, end row)], runs of whole (grp, ts >> shift) keys of at
    most `limit` rows (a key holding more is a span of its own); None where the rows are not in key order
    (stored by (grp, chunk, ...), they are: a chunk is the top bits of ts) or the chunk width is unknown."""
    n = rows.num_rows
    if chunk_log2 is None:
        return None
    if n <= limit:
        return [(0, n)]
    shift = max(max_level, chunk_log2)
    grp = rows.column("grp").to_numpy()
    tp = rows.column("ts").to_numpy() >> shift
    same_grp = grp[1:] == grp[:-1]
    if not np.all((grp[1:] > grp[:-1]) | (same_grp & (tp[1:] >= tp[:-1]))):
        return None
    starts = np.flatnonzero(np.concatenate(([True], ~same_grp | (tp[1:] != tp[:-1])))).tolist() + [n]
    return [(starts[a], starts[b + 1]) for a, b in _runs(np.diff(starts).tolist(), limit)]


def _runs(counts: list[int], limit: int) -> list[tuple[int, int]]:
    """Consecutive keys, given the rows of each, in runs of at most `limit` rows (a key holding more is a run
    of its own): [(first key, last key)]."""
    runs, lo, n = [], None, 0
    for i, c in enumerate(counts):
        if lo is not None and n + c > limit:
            runs.append((lo, i - 1))
            lo, n = None, 0
        if lo is None:
            lo = i
        n += c
    if lo is not None:
        runs.append((lo, len(counts) - 1))
    return runs


def _columns(rows: pa.Table) -> dict:
    """Rows of lod_slices' columns the pyramid reads as numpy arrays, `bytes` with a `has_bytes` mask (rows in
    hand: no copy but of `bytes`)."""
    out = {name: rows.column(name).to_numpy() for name in _COLUMNS.split(", ") if name != "bytes"}
    by = rows.column("bytes")
    out["has_bytes"] = by.is_valid().to_numpy()
    out["bytes"] = by.fill_null(0).to_numpy()
    return out


class _Rows:
    """Rows of one level: keys (grp, b, track, depth) and values, all numpy arrays."""

    __slots__ = ("grp", "b", "track", "depth", "count", "busy", "bytes", "nbytes", "ldur", "lid", "lname")

    def __init__(self, **cols):
        for k in self.__slots__:
            setattr(self, k, cols[k])

    @staticmethod
    def concat(a: "_Rows", b: "_Rows") -> "_Rows":
        return _Rows(**{k: np.concatenate([getattr(a, k), getattr(b, k)]) for k in _Rows.__slots__})

    def __len__(self) -> int:
        return len(self.grp)


def _from_slices(s: dict, rows: np.ndarray, shift: int) -> _Rows:
    """Each selected slice as a row of its own at bucket ts >> shift."""
    by = s["bytes"][rows]
    has = s["has_bytes"][rows]
    return _Rows(grp=s["grp"][rows], b=s["ts"][rows] >> shift, track=s["track"][rows], depth=s["depth"][rows],
                 count=np.ones(len(rows), np.int64), busy=s["dur"][rows], bytes=np.where(has, by, 0),
                 nbytes=has.astype(np.int64), ldur=s["dur"][rows], lid=s["id"][rows], lname=s["name"][rows])


def _reduce(r: _Rows) -> _Rows:
    """One row per (grp, b, track, depth), in that order: sums, and the longest row (ties: smaller id)."""
    if not len(r):
        return r
    key = _packed(r.grp, r.b, r.track, r.depth)
    if key is None:  # keys too wide for one int64: sort on all of them, longest first in each group
        order = np.lexsort((r.lid, -r.ldur, r.depth, r.track, r.b, r.grp))
        grp, b, track, depth = r.grp[order], r.b[order], r.track[order], r.depth[order]
        new = np.empty(len(order), dtype=bool)
        new[0] = True
        new[1:] = (grp[1:] != grp[:-1]) | (b[1:] != b[:-1]) | (track[1:] != track[:-1]) | (depth[1:] != depth[:-1])
        starts = np.flatnonzero(new)
        first = order[starts]  # the longest of each group: the sort put it first
    else:  # one sort of one int64 key; each group's longest found by two reductions, not by the sort
        # stable (a merge sort): above the base level the rows are the previous level's, still in key
        # order, then the few slices of one class: runs it merges rather than sorts (2 M slices, ten
        # levels: 0.44-0.63 -> 0.24-0.34 s); the base level's classes are runs in time order too
        order = np.argsort(key, kind="stable")
        k = key[order]
        new = np.empty(len(order), dtype=bool)
        new[0] = True
        new[1:] = k[1:] != k[:-1]
        starts = np.flatnonzero(new)
        ldur = r.ldur[order]
        sizes = np.diff(np.append(starts, len(order)))
        top = ldur == np.repeat(np.maximum.reduceat(ldur, starts), sizes)
        lid = np.where(top, r.lid[order], np.iinfo(np.int64).max)
        win = top & (lid == np.repeat(np.minimum.reduceat(lid, starts), sizes))  # one row per group (ids differ)
        first = order[np.flatnonzero(win)]
    lead = order[starts]  # a row of each group: its keys (not every row's keys gathered, then four taken)
    return _Rows(grp=r.grp[lead], b=r.b[lead], track=r.track[lead], depth=r.depth[lead],
                 count=np.add.reduceat(r.count[order], starts), busy=np.add.reduceat(r.busy[order], starts),
                 bytes=np.add.reduceat(r.bytes[order], starts), nbytes=np.add.reduceat(r.nbytes[order], starts),
                 ldur=r.ldur[first], lid=r.lid[first], lname=r.lname[first])


def _packed(*keys: np.ndarray) -> np.ndarray | None:
    """The keys (most significant first) packed into one int64 that sorts as they do, or None when
    their ranges need more than 63 bits together."""
    out = np.zeros(len(keys[0]), np.int64)
    bits = 0
    for k in reversed(keys):
        lo, hi = int(k.min()), int(k.max())
        width = max(1, (hi - lo).bit_length())
        if bits + width > 63:
            return None
        out |= (k.astype(np.int64) - lo) << bits
        bits += width
    return out


_COLUMNS = "grp, ts, dur, track_id, depth, slice_id, name_id, bytes, cls"
_CREATE = ("CREATE TABLE {name} (level TINYINT, grp INTEGER, b BIGINT, track_id INTEGER, depth SMALLINT,"
           " count BIGINT, busy BIGINT, bytes BIGINT, l_dur BIGINT, l_id BIGINT, l_name INTEGER, deepest BOOLEAN)")


def build_merged(con: duckdb.DuckDBPyConnection, base: int, max_level: int,
                 limit: int | None = None, chunk_log2: int | None = None,
                 spare: threading.Event | None = None, rows: pa.Table | None = None) -> None:
    """Create and fill lod_merged (the same table tiles/build.py's SQL pyramid makes); `limit`: the
    most slices read into memory at once (NUMPY_MAX_SLICES by default); `chunk_log2`: lod_slices'
    chunk width, when known (a large trace's parts are then read as row ranges); `spare`: set once the
    job this build shares the cores with (the write of `slices`) has ended: where DuckDB runs one thread
    the parts are then built on a second thread too, from that moment (_second_when_free).

    A trace of PARALLEL_MIN_SLICES slices or more is cut into at least two parts, of at most `limit` / 2
    slices each, built two at a time on two threads where the database may use two (numpy and DuckDB's reads release the GIL; a one-thread
    build, a fleet's worker, stays on one). Each part's levels wait as Arrow batches, up to
    HELD_BYTES of them (past it, in a temp table per level), and each level goes into lod_merged in
    one append, in part order: lod_merged stays in (level, grp, b, ...) order.

    `rows`: lod_slices' rows as the build stored them (tiles/lod_slices.py, with `chunk_log2`): the parts are
    then stretches of these columns, not read back from the file (2 M slices: 0.23 s of reads)."""
    limit = NUMPY_MAX_SLICES if limit is None else limit
    (n,) = con.execute("SELECT count(*) FROM lod_slices").fetchone()
    create_table(con, "lod_merged")
    threads, gated = 1, False
    if n >= PARALLEL_MIN_SLICES:
        ((threads,),) = con.execute("SELECT current_setting('threads')").fetchall()  # all: the result is done
        threads = max(1, min(2, int(threads)))
        if threads == 1 and spare is not None:
            threads, gated = 2, True
        # parts of at most limit / threads slices: the parts built at once hold what one part of `limit` would
        limit = min(max(1, limit // threads), -(-n // threads))
    spans = _spans(rows, max_level, limit, chunk_log2) if rows is not None and rows.num_rows == n else None
    if spans is not None:
        parts = spans
    else:
        parts = [("true", ())] if n <= limit else _parts(con, max_level, limit, chunk_log2)
    levels = _Levels(con, range(base, max_level + 1))
    # the parts' cursors name tables as con does; con's path is read here, as this thread keeps con busy
    # (levels.add) while they read
    path = search_path(con) if spans is None else None

    def one(part) -> list[pa.RecordBatch]:
        if spans is not None:  # a stretch of the rows in hand
            return _levels(_columns(rows.slice(part[0], part[1] - part[0])), base, max_level)
        cur = cursor_like(con, path)  # a cursor a thread: reads of lod_slices on both at once
        try:
            return _levels(_fetch(cur, *part), base, max_level)
        finally:
            cur.close()

    try:
        if gated and len(parts) > 1:
            _second_when_free(one, parts, spare, levels.add)
        elif threads > 1 and len(parts) > 1:
            with ThreadPoolExecutor(threads, thread_name_prefix="pyramid") as pool:
                for lo in range(0, len(parts), threads):  # `threads` parts at a time: as many in memory
                    for batches in pool.map(one, parts[lo:lo + threads]):  # in part order
                        levels.add(batches)
        else:
            for part in parts:
                levels.add(one(part))
        levels.insert_into("lod_merged")
    finally:
        levels.drop()


def create_table(con: duckdb.DuckDBPyConnection, name: str) -> None:
    """An empty lod_merged (the SQL build's columns and types) named `name`."""
    con.execute(_CREATE.format(name=name))


def _second_when_free(one, parts: list, spare: threading.Event, add) -> None:
    """add(one(part)) for every part, in part order: one(part) on this thread in turn and, from when `spare`
    is set, on a second thread as well (each takes the next part not begun). add runs on this thread only
    (it may write to the database), as soon as the results before it are in."""
    out: dict[int, list] = {}
    order = iter(range(len(parts)))
    lock = threading.Lock()
    errors: list[BaseException] = []
    stop = threading.Event()

    def take() -> int | None:  # none once either thread has failed (stop: this one, whose error is on its way)
        with lock:
            return None if errors or stop.is_set() else next(order, None)

    def second() -> None:
        while not spare.wait(0.005):
            if stop.is_set():
                return
        while (i := take()) is not None:
            try:
                out[i] = one(parts[i])
            except BaseException as e:  # raised on the caller's thread
                errors.append(e)
                return

    helper = threading.Thread(target=second, name="pyramid-spare")
    helper.start()
    added = 0
    try:
        while (i := take()) is not None:
            out[i] = one(parts[i])
            while added in out:
                add(out.pop(added))
                added += 1
    finally:
        stop.set()
        helper.join()
    if errors:
        raise errors[0]
    while added in out:
        add(out.pop(added))
        added += 1


# each level's rows of the parts built so far wait as Arrow batches up to this many bytes; past it they
# are staged in a temp table per level (a 5 GB trace's pyramid, held whole, would be ~400 MB)
HELD_BYTES = 192 << 20
PARALLEL_MIN_SLICES = 400_000  # below this the pyramid is one part on one thread


class _Levels:
    """The parts' batches of each level, in part order, until they go into lod_merged."""

    def __init__(self, con: duckdb.DuckDBPyConnection, levels: range):
        self.con, self.levels = con, levels
        self.held: list[list[pa.RecordBatch]] = [[] for _ in levels]
        self.bytes = 0
        self.staged = False

    def add(self, batches: list[pa.RecordBatch]) -> None:
        for held, batch in zip(self.held, batches):
            if batch.num_rows:
                held.append(batch)
                self.bytes += batch.nbytes
        if self.bytes > HELD_BYTES:
            self._stage()

    def _stage(self) -> None:
        if not self.staged:
            for level in self.levels:
                self.con.execute(_CREATE.format(name=f"_merged_l{level}").replace("CREATE TABLE", "CREATE TEMP TABLE", 1))
            self.staged = True
        for level, held in zip(self.levels, self.held):
            _insert(self.con, f"_merged_l{level}", held)
            held.clear()
        self.bytes = 0

    def insert_into(self, table: str) -> None:
        if not self.staged:  # one append of every level's batches, in level order: DuckDB splits it over its threads
            _insert(self.con, table, [b for held in self.held for b in held])
        else:
            for level, held in zip(self.levels, self.held):
                self.con.execute(f"INSERT INTO {table} SELECT * FROM _merged_l{level}")
                _insert(self.con, table, held)
        for held in self.held:
            held.clear()

    def drop(self) -> None:
        if self.staged:
            for level in self.levels:
                self.con.execute(f"DROP TABLE IF EXISTS _merged_l{level}")


def _fetch(con: duckdb.DuckDBPyConnection, where: str, params) -> dict:
    """lod_slices' columns the pyramid reads, of the rows `where` selects, as numpy arrays (`bytes`
    with a `has_bytes` mask); through Arrow, a third of fetchnumpy's time."""
    return _columns(con.sql(f"SELECT {_COLUMNS} FROM lod_slices WHERE {where}", params=list(params) or None
                            ).to_arrow_table())


def _levels(cols: dict, base: int, max_level: int) -> list[pa.RecordBatch]:
    """One batch per level base..max_level of the slices in `cols` (columns of lod_slices)."""
    s = {
        "grp": np.asarray(cols["grp"], np.int32), "ts": np.asarray(cols["ts"], np.int64),
        "dur": np.asarray(cols["dur"], np.int64), "track": np.asarray(cols["track_id"], np.int32),
        "depth": np.asarray(cols["depth"], np.int16), "id": np.asarray(cols["slice_id"], np.int64),
        "name": np.asarray(cols["name_id"], np.int32),
        "bytes": np.asarray(cols["bytes"], np.int64), "has_bytes": np.asarray(cols["has_bytes"], bool),
    }
    cls = np.asarray(cols["cls"], np.int16)
    # slices by class, so each level picks up its class without a scan of all of them
    by_cls = np.argsort(cls, kind="stable")
    bounds = np.searchsorted(cls[by_cls], np.arange(max(max_level, base) + 2))
    level_rows = _reduce(_from_slices(s, by_cls[:bounds[base]], base))  # classes below the base level
    out: list[pa.RecordBatch] = []
    for level in range(base, max_level + 1):
        if level > base:
            prev = level_rows
            prev.b = prev.b >> 1
            longs = by_cls[bounds[level - 1]:bounds[level]]  # class level-1: short from this level on
            level_rows = _reduce(_Rows.concat(prev, _from_slices(s, longs, level)))
        out.append(_batch(level, level_rows))
    return out


def _insert(con: duckdb.DuckDBPyConnection, table: str, batches: list[pa.RecordBatch]) -> None:
    if not batches or not sum(b.num_rows for b in batches):
        return
    con.register("_merged_rows", pa.Table.from_batches(batches))
    try:
        con.execute(f"INSERT INTO {table} SELECT * FROM _merged_rows")
    finally:
        con.unregister("_merged_rows")


def _batch(level: int, r: _Rows) -> pa.RecordBatch:
    n = len(r)
    # rows come in (grp, b, track, depth) order: the last of each (grp, b, track) run is its deepest
    deepest = np.ones(n, dtype=bool)
    deepest[:-1] = (r.grp[1:] != r.grp[:-1]) | (r.b[1:] != r.b[:-1]) | (r.track[1:] != r.track[:-1])
    return pa.record_batch({
        "level": pa.array(np.full(n, level, np.int8)), "grp": pa.array(r.grp), "b": pa.array(r.b),
        "track_id": pa.array(r.track), "depth": pa.array(r.depth), "count": pa.array(r.count),
        "busy": pa.array(r.busy), "bytes": pa.array(r.bytes, mask=r.nbytes == 0),
        "l_dur": pa.array(r.ldur), "l_id": pa.array(r.lid), "l_name": pa.array(r.lname),
        "deepest": pa.array(deepest),
    })
