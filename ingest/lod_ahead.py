"""The finished rows and the level-of-detail build, started before an importer's links.

Once every slice is staged and every track named, what an importer still does before finish() (the
Chrome importer's links: correlation ids, flow events, External ids) reads the staged slices and
writes only `flows`. Nothing the level-of-detail build reads changes any more: the slices, their
depths, the tracks, the counter samples. So the builder can start it then (TraceBuilder.lod_ahead),
on a thread and a cursor of its own, and the links run beside it instead of before it: the build's
longest chain starts 30-40 ms sooner after the scan (docs/performance.md, the twenty-second stop).

The native importer's links are its flows, joined in numpy on its own columns: it starts the build
once its slices are staged, and lets the staged slices go with it (TraceBuilder.lod_ahead's
`links_read_staging`), so the build runs beside the flows' insert (2 M events, docs/performance.md,
the thirtieth stop).

An Nsight export's flows run in the importer's own staging database after its slices, and outlast the
rows' making: its write of `slices` begins with the LOD build, on a third thread (TraceBuilder.lod_ahead's
`write_ahead`), for a row group of slices or more (under one, its commit would go to the WAL beside the
flows'). Begun by finish() after the flows, it ran alone once the LOD build was done: 0.42 s of a 1.5 M-slice
export's 3.25 s on one core (docs/performance.md, the thirty-ninth stop). The native importer's write waits
for finish(): its flows are done about when its rows are, and a third thread there only competed (2 M events
1.77 -> 1.87 s). Nor is it tried beside the Chrome importer's links.

Where it is not taken, finish() does the same steps in the same order after the links, as before:
a spilled build, past MAX_SLICES slices where the links read the staged slices (they are kept for
the links while the finished rows exist beside them), and any trace the time check would drop
slices from (the check deletes the flows that touch them, and the links make those).
"""

from __future__ import annotations

import threading
from typing import Callable

import duckdb

from acceltrace.ingest import stage
from acceltrace.store.duck import cursor_like
from acceltrace.tiles.build import RAW_TRACE_ROWS

MAX_SLICES = 1_000_000
ROW_GROUP_ROWS = 122_880  # DuckDB's rows per row group
# The rows the write of `slices` inserts are taken into stored order on this thread, before the LOD build, beside
# the links (the write would take them on the main thread after the links: 30-57 ms on the real traces), for a
# trace of at least a DuckDB row group of slices and with no pyramid (docs/performance.md, twenty-seventh stop):
# - no pyramid (tiles/build.py RAW_TRACE_ROWS): the LOD build is then the lighter of the two threads' work;
# - a row group or more: the insert writes its whole row groups as it goes. Under one, its rows wait for the
#   commit's checkpoint, which a statement of the LOD build running beside it turns into a WAL write (V100's
#   44 k slices in DuckDB's groups: 27 MB of WAL, the ingest 0.41 -> 0.45 s). Such a trace's rows are taken after
#   the LOD build instead, where the links outlast it (whichever thread comes first takes them: Final.take_ahead).
#   The row group is the build's own: a small build's is 16,384 rows (ingest/opening.py), so A100's 67 k slices
#   and V100's 44 k are taken ahead (0.303 -> 0.294 s and 0.327 -> 0.298 s; docs/performance.md, thirty-second
#   stop), only what is left past their last whole group waiting for the commit.
def takes_ahead(rows: int, group_rows: int | None = None) -> bool:
    """Whether a trace of `rows` finished slices has them taken before the LOD build, in a build whose row groups
    hold `group_rows` rows (None: DuckDB's own)."""
    return a_row_group(rows, group_rows) and rows <= RAW_TRACE_ROWS


def a_row_group(rows: int, group_rows: int | None = None) -> bool:
    """Whether `rows` fill a row group of a build whose groups hold `group_rows` (None: DuckDB's own): under one,
    the write's commit waits for a checkpoint, which another statement beside it turns into a WAL write."""
    return rows >= (group_rows or ROW_GROUP_ROWS)


def finish_rows(con: duckdb.DuckDBPyConnection, ordered, held: stage.Held, n_counters: int,
                keep_staging: bool = False) -> tuple[stage.Final, tuple[int, int] | None]:
    """The finished rows (stage.finalize of `ordered`, ingest/ordered.py) named `_slices_final` on `con`, the
    counters in order, and the bounds of both."""
    final = stage.finalize(con, ordered, held, keep_staging)
    del ordered, held  # the depths are in `final` now; finalize freed each held column as it went
    final.use(con)
    if n_counters:  # re-sorting an empty table still costs a table rewrite
        sort_counters(con)
    return final, bounds(con, "_slices_final")


def sort_counters(con: duckdb.DuckDBPyConnection) -> None:
    """`counters` in (track, ts) order: the order the file stores and the LOD build reads."""
    con.execute("CREATE TABLE _counters_sorted AS SELECT * FROM counters ORDER BY track_id, ts")
    con.execute("DROP TABLE counters")
    con.execute("ALTER TABLE _counters_sorted RENAME TO counters")


def bounds(con: duckdb.DuckDBPyConnection, rows: str) -> tuple[int, int] | None:
    """(first start, last end) of the slices in `rows` and the counter samples; None when there are none."""
    ((start, end),) = con.execute(
        f"SELECT min(s), max(e) FROM (SELECT min(ts) s, max(ts + dur) e FROM {rows}"
        " UNION ALL SELECT min(ts), max(ts) FROM counters)"
    ).fetchall()
    return None if start is None or end is None else (int(start), int(end))


class LodAhead:
    """prepare(cursor) -> (the finished rows, their bounds), then the level-of-detail build over them, on a
    thread and a cursor of their own. finish() takes the rows with rows() (the write of `slices` needs them)
    and waits for the build with join(); either raises what the thread raised."""

    def __init__(self, con: duckdb.DuckDBPyConnection, prepare: Callable, build_lod: Callable,
                 group_rows: int | None = None, write: Callable | None = None):
        self._errors: list[BaseException] = []
        # write(cursor, rows, spare): the write of `slices` (stage.write_slices), begun on a thread of its own as
        # soon as the rows are made, beside the build and whatever the importer still does (its flows), rather
        # than by finish() after them, for a row group of rows or more (the module's docstring). `writes`: it
        # was begun (set before rows() answers; finish() then leaves the write to it)
        self.writes = False
        self._write_cur = cursor_like(con) if write is not None else None
        self._writer = threading.Thread(target=self._write, args=(write,), name="slices-write",
                                        daemon=True) if write is not None else None
        self._group_rows = group_rows  # the build's rows per row group (None: DuckDB's own)
        self._ready = threading.Event()
        self.spare = threading.Event()  # set by the write of `slices` beside the build when it ends
        self._rows: tuple[stage.Final, tuple[int, int] | None] | None = None
        # held here, not in the thread's arguments: let go once called, with what it holds (the depth
        # pass's result, the held columns), rather than kept until the build ends
        self._prepare: Callable | None = prepare
        self._thread = threading.Thread(target=self._run, args=(cursor_like(con), build_lod), name="lod-ahead")
        self._thread.start()

    def _run(self, cur, build_lod: Callable) -> None:
        try:
            prepare, self._prepare = self._prepare, None
            final, span = prepare(cur)
            del prepare
            rows = final.rows.num_rows
            self.writes = self._writer is not None and span is not None and a_row_group(rows, self._group_rows)
            if not self.writes and takes_ahead(rows, self._group_rows):  # before rows() answers: the write finds
                final.take_ahead()  # it made
            self._rows = final, span
            self._ready.set()
            if self.writes:
                self._writer.start()
            if span is not None:  # none: nothing left to show, finish() says so
                build_lod(cur, slices="_slices_final", keep_order_setting=True, rows=final.rows, bounds=span,
                          spare=self.spare)
            if not self.writes:
                final.take_ahead()  # unless the write has begun: where the links still run (A100: ~8 ms off its end)
        except BaseException as e:  # raised again in the caller's thread
            self._errors.append(e)
        finally:
            self._ready.set()
            cur.close()

    def _write(self, write: Callable) -> None:
        try:
            write(self._write_cur, self._rows[0], self.spare)
        except BaseException as e:  # raised again in the caller's thread
            self._errors.append(e)
        finally:
            self._write_cur.close()

    def rows(self) -> tuple[stage.Final, tuple[int, int] | None]:
        self._ready.wait()
        if self._rows is None:
            self.join()
        return self._rows

    def join(self, quiet: bool = False) -> None:
        """Waits for the thread (and the write's); raises the first error unless `quiet` (an abort, already raising
        its own)."""
        self._thread.join()
        if self._writer is not None:
            if self._writer.ident is not None:  # started (by the build's thread, ended above)
                self._writer.join()
            else:
                self._write_cur.close()
        if self._errors and not quiet:
            raise self._errors[0]
