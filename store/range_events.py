"""The events of a range (the aggregate views' events table and its CSV export), one sorted page at a time."""

from __future__ import annotations

import duckdb

from acceltrace.store.queries import args_cut_sql, cut_args

EVENTS_PAGE_MAX = 1000
EVENTS_CSV_MAX = 1_000_000
EVENT_SORTS = {"name": "s.name", "lane": "t.lane", "track": "t.name", "ts": "s.ts", "dur": "s.dur",
               "bytes": "s.bytes", "depth": "s.depth"}
EVENT_COLUMNS = ("slice_id", "track_id", "lane", "track", "ts", "dur", "depth", "name", "category", "bytes", "args")
# characters of args a page of events carries per row: a preview (one event's args can be 100 MB; its
# details have more, and a download of all of it); a row whose args are longer has `args_chars`
ARGS_CELL_MAX = 4096


def _events_sql(t0: int, t1: int, tracks: list[int] | None, text: str | None, sort: str, desc: bool,
                lanes: list[str] | None, args: str = "s.args") -> tuple[str, str, list]:
    """(select of the rows, select of their count, parameters) over slices overlapping [t0, t1); `args`:
    the SQL of the last column(s), the args."""
    if sort not in EVENT_SORTS:
        raise ValueError(f"sort must be one of {', '.join(EVENT_SORTS)}")
    where, params = [f"s.ts < {int(t1)}", f"s.ts + s.dur >= {int(t0)}"], []  # instants at t0 count
    if tracks:
        where.append(f"s.track_id IN ({', '.join('?' for _ in tracks)})")
        params += [int(t) for t in tracks]
    if lanes:
        where.append(f"t.lane IN ({', '.join('?' for _ in lanes)})")
        params += list(lanes)
    if text:
        escaped = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        where.append("s.name ILIKE ? ESCAPE '\\'")
        params.append(f"%{escaped}%")
    base = "FROM slices s JOIN tracks t USING (track_id) WHERE " + " AND ".join(where)
    order = f"{EVENT_SORTS[sort]} {'DESC' if desc else 'ASC'} NULLS LAST, s.ts, s.slice_id"
    cols = f"s.slice_id, s.track_id, t.lane, t.name AS track, s.ts, s.dur, s.depth, s.name, s.category, s.bytes, {args}"
    return f"SELECT {cols} {base} ORDER BY {order}", f"SELECT count(*) {base}", params


def range_events(cur: duckdb.DuckDBPyConnection, t0: int, t1: int, *, tracks: list[int] | None = None,
                 text: str | None = None, sort: str = "ts", desc: bool = False, offset: int = 0,
                 limit: int = 200, lanes: list[str] | None = None) -> tuple[list[dict], int]:
    """One page of the slices overlapping [t0, t1) (absolute ns; name substring `text`, case-insensitive,
    wildcards literal), sorted by `sort`, and how many match in all: (rows of EVENT_COLUMNS, total)."""
    rows_sql, count_sql, params = _events_sql(t0, t1, tracks, text, sort, desc, lanes,
                                              args=args_cut_sql(ARGS_CELL_MAX, "s."))
    limit = max(0, min(int(limit), EVENTS_PAGE_MAX))
    rows = [dict(zip(EVENT_COLUMNS + ("args_chars",), r)) for r in cur.execute(
        f"{rows_sql} LIMIT {limit} OFFSET {max(0, int(offset))}", params).fetchall()]
    for r in rows:
        cut_args(r, ARGS_CELL_MAX)
    (total,) = cur.execute(count_sql, params).fetchone()
    return rows, int(total)


def range_events_arrow(cur: duckdb.DuckDBPyConnection, t0: int, t1: int, start_ns: int, *,
                       tracks: list[int] | None = None, text: str | None = None, sort: str = "ts",
                       desc: bool = False, lanes: list[str] | None = None, limit: int = EVENTS_CSV_MAX):
    """The same rows as range_events, all of them up to `limit`, as an Arrow table with ts relative to
    `start_ns` (for CSV export), and whether more matched."""
    rows_sql, _, params = _events_sql(t0, t1, tracks, text, sort, desc, lanes)
    rel = rows_sql.replace("s.ts, s.dur, s.depth", f"s.ts - {int(start_ns)} AS ts, s.dur, s.depth", 1)
    table = cur.sql(f"{rel} LIMIT {int(limit) + 1}", params=params).to_arrow_table()
    return table.slice(0, int(limit)), table.num_rows > int(limit)
