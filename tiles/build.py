"""Level-of-detail tables for the tile server, built into every trace at ingest (a derive step).

A tile at level L covers 1024 buckets of 2^L ns. What it needs, and where it comes from:

- Tile groups: tracks in UI order, cut into runs of one lane and one group_name of at most
  GROUP_MAX_TRACKS tracks (`lod_groups`, `lod_tracks`). Every LOD table is ordered by group
  first, so a group's tile reads only its own rows.
- `lod_slices`: every slice with dur > 0, times relative to the trace start, keyed by its
  duration class cls = floor(log2(dur)) and ordered by (grp, time chunk, cls, ts). A slice of
  class c is shorter than 2^(c+1), so the slices of class c overlapping [t0, t1) all start in
  [t0 - 2^(c+1), t1): per class, one ts range scan that looks back no further than the
  class's own length.
- `lod_long`: the slices of class `long_cls` and up (lod_info; about 1/512 of a chunk and longer,
  at most a quarter of the slices) again, ordered by (grp, cls, ts): a coarse tile's window spans
  many chunks of lod_slices, each holding every class, so its long slices come from here.
- `lod_merged`: the pyramid of merged short slices, per level from `base_level` to
  `max_level`, per (grp, bucket, track, depth): count, busy ns, bytes, the longest
  slice, and `deepest` (the row is its (grp, bucket, track)'s deepest: a depth page's fold
  of the deeper depths is those rows, read without a GROUP BY; lod_info `merged_deepest`).
  Level L+1 is built from level L plus the slices of class L (the ones that stop being long):
  in numpy from one read of lod_slices where it fits in memory (tiles/pyramid.py, the same
  rows), else in SQL. Below base_level a tile aggregates lod_slices of its window
  directly; base_level is chosen so that window holds at most ~RAW_WINDOW_ROWS rows
  (see _base_level). A trace none of whose groups holds more than RAW_TRACE_ROWS short slices
  has no pyramid (base_level = max_level + 1, lod_merged empty): every tile aggregates its window.
- Instants (`lod_instants`, `lod_instant_merged`) and counter samples (`lod_counters`,
  `lod_counter_merged`) get the same treatment with their own base levels.
- `lod_names`: the name dictionary (name_id -> name); tiles carry name ids.
"""

from __future__ import annotations

import math
import threading
import time

import duckdb
import pyarrow as pa

from acceltrace.store.duck import insert_rows
from acceltrace.tiles import pyramid
from acceltrace.tiles.lod_slices import ShortSlices

LOD_VERSION = "1"
BUCKETS_PER_TILE = 1024
TILE_BUCKETS_LOG2 = 10
GROUP_MAX_TRACKS = 16
LANE_ORDER = ("cpu", "driver", "pcie", "eu", "counter")
# below the pyramid a tile aggregates its raw window: at most about this many rows per group
RAW_WINDOW_ROWS = 30_000
# no pyramid where no group holds more short slices than this: any tile, at any level, then aggregates at most this
# many raw rows (MTIA's group of 109 k: 7-11 ms a cold tile, 5-7 ms from its pyramid, the same bytes), and the build
# saves the pyramid (MTIA: 312 k rows, 0.16 of its 1.0 CPU-s to viewable; docs/performance.md, twenty-seventh stop)
RAW_TRACE_ROWS = 250_000
# about one DuckDB row group (122880 rows)
CHUNK_ROWS = 100_000
# lod_long: the slices of at least 2^(chunk_log2 - LONG_BELOW_CHUNK_LOG2) ns, at most this share of them
LONG_BELOW_CHUNK_LOG2 = 9
LONG_MAX_SHARE = 0.25
# lod_merged from numpy where it fits (tiles/pyramid.py); False forces the SQL build (tests compare both)
MERGED_IN_NUMPY = True
# lod_slices ordered in numpy where the caller holds the slices as Arrow (tiles/lod_slices.py); False: by SQL
SLICES_IN_NUMPY = True

_CLS_SQL = (
    "(floor(log2({d}))::INTEGER - CASE WHEN (1::BIGINT << floor(log2({d}))::INTEGER) > {d} THEN 1 ELSE 0 END)"
)


def dur_class_sql(col: str) -> str:
    """SQL for floor(log2(col)) exactly (the float log2 rounds up just below powers of two)."""
    return _CLS_SQL.format(d=col)


def lane_rank_sql(col: str = "lane") -> str:
    whens = " ".join(f"WHEN '{lane}' THEN {i}" for i, lane in enumerate(LANE_ORDER))
    return f"(CASE {col} {whens} ELSE {len(LANE_ORDER)} END)"


def build(con: duckdb.DuckDBPyConnection, slices: str = "slices", keep_order_setting: bool = False,
          rows: pa.Table | None = None, bounds: tuple[int, int] | None = None,
          spare: threading.Event | None = None) -> None:
    """Create every lod_* table in the builder's connection (before the trace is published).

    slices: the table or view to read the slices from (the builder passes its staged rows, so
    this runs while `slices` itself is being written). keep_order_setting: the caller has set
    preserve_insertion_order (a setting of the whole database) and resets it itself.
    rows: the same slices as an Arrow table (slice_id, track_id, ts, dur, depth, name, bytes), when the
    caller holds them: lod_slices is then ordered in numpy (tiles/lod_slices.py) instead of by a DuckDB sort.
    bounds: (start, end) ns of the trace, where trace_meta does not hold them yet (ingest/lod_ahead.py).
    spare: set when the job sharing the cores with this build ends (tiles/pyramid.py build_merged)."""
    if not keep_order_setting:
        con.execute("SET preserve_insertion_order = true")  # CTAS ... ORDER BY must store rows in order
    t0 = time.perf_counter()
    try:
        _build(con, slices, rows, bounds, spare)
    finally:
        if not keep_order_setting:
            con.execute("SET preserve_insertion_order = false")
    con.execute("INSERT INTO lod_info VALUES ('build_ms', ?)", [str(round((time.perf_counter() - t0) * 1000))])


def _build(con: duckdb.DuckDBPyConnection, slices: str, rows: pa.Table | None = None,
           bounds: tuple[int, int] | None = None, spare: threading.Event | None = None) -> None:
    start_ns, end_ns = bounds if bounds is not None else (int(v) for v in con.execute(
        "SELECT (SELECT value FROM trace_meta WHERE key = 'start_ns'), (SELECT value FROM trace_meta WHERE key = 'end_ns')"
    ).fetchone())
    duration_ns = max(1, end_ns - start_ns)
    max_level = max(0, math.ceil(math.log2(duration_ns / BUCKETS_PER_TILE))) if duration_ns > BUCKETS_PER_TILE else 0

    _build_groups(con, slices)
    con.execute(
        "CREATE TABLE lod_names AS SELECT (row_number() OVER (ORDER BY name) - 1)::INTEGER AS name_id, name"
        f" FROM (SELECT DISTINCT name FROM {slices}) ORDER BY name_id"
    )
    cls = dur_class_sql("s.dur")
    short = ShortSlices(con, rows, start_ns) if rows is not None and SLICES_IN_NUMPY else None
    if short is not None and not short.usable:
        short = None
    # the same rows lod_slices will hold: their rate sets both its chunk width and its base level
    slice_rate = short.peak_rate_per_ns(max_level) if short is not None else _peak_rate_per_ns(
        con, f"(SELECT t.grp, s.ts - {start_ns} AS ts FROM {slices} s JOIN lod_tracks t USING (track_id) WHERE s.dur > 0)",
        max_level)
    chunk_log2 = _chunk_log2(slice_rate, max_level)
    stored = short.create(con, chunk_log2) if short is not None else None  # lod_slices' rows, in memory
    if stored is None:
        con.execute(
            f"""CREATE TABLE lod_slices AS
            SELECT t.grp, ((s.ts - {start_ns}) >> {chunk_log2})::INTEGER AS chunk, {cls}::TINYINT AS cls,
                   s.ts - {start_ns} AS ts, s.dur, s.track_id, s.depth::SMALLINT AS depth, s.slice_id, n.name_id, s.bytes
            FROM {slices} s JOIN lod_tracks t USING (track_id) JOIN lod_names n USING (name)
            WHERE s.dur > 0
            ORDER BY t.grp, chunk, cls, ts, s.slice_id"""
        )
    del short
    long_cls = _long_class(con, chunk_log2)
    con.execute(f"CREATE TABLE lod_long AS SELECT * FROM lod_slices WHERE cls >= {long_cls} ORDER BY grp, cls, ts, slice_id")
    con.execute(
        f"""CREATE TABLE lod_instants AS
        SELECT t.grp, s.ts - {start_ns} AS ts, s.track_id, s.depth::SMALLINT AS depth, s.slice_id, n.name_id
        FROM {slices} s JOIN lod_tracks t USING (track_id) JOIN lod_names n USING (name)
        WHERE s.dur = 0
        ORDER BY t.grp, ts, s.slice_id"""
    )
    con.execute(
        f"""CREATE TABLE lod_counters AS
        SELECT t.grp, c.ts - {start_ns} AS ts, c.track_id, c.value
        FROM counters c JOIN lod_tracks t USING (track_id)
        ORDER BY t.grp, ts, c.track_id"""
    )
    # one grouped count per table, joined (as correlated subqueries, 5.5 against 3.2 ms on vLLM's tables)
    counted = {t: f"(SELECT grp, count(*) AS n FROM lod_{t} GROUP BY grp)" for t in ("slices", "instants", "counters")}
    con.execute(
        "CREATE TABLE lod_group_counts AS SELECT g.grp, coalesce(s.n, 0) AS slices, coalesce(i.n, 0) AS instants,"
        f" coalesce(c.n, 0) AS counters FROM lod_groups g LEFT JOIN {counted['slices']} s ON s.grp = g.grp"
        f" LEFT JOIN {counted['instants']} i ON i.grp = g.grp LEFT JOIN {counted['counters']} c ON c.grp = g.grp"
        " ORDER BY g.grp"
    )
    base = _base_level(slice_rate, max_level)
    (densest,) = con.execute("SELECT coalesce(max(slices), 0) FROM lod_group_counts").fetchone()
    if base <= max_level and densest <= RAW_TRACE_ROWS:
        base = max_level + 1  # no level from the pyramid: each tile aggregates its window's raw rows
    ibase = _base_level(_peak_rate_per_ns(con, "lod_instants", max_level), max_level)
    cbase = _base_level(_peak_rate_per_ns(con, "lod_counters", max_level), max_level)
    if base > max_level:
        pyramid.create_table(con, "lod_merged")  # empty: no tile reads it
    elif MERGED_IN_NUMPY and pyramid.fits(con):  # the same table, without a dozen SQL passes (tiles/pyramid.py)
        pyramid.build_merged(con, base, max_level, chunk_log2=chunk_log2, spare=spare, rows=stored)
    else:
        _build_merged_pyramid(con, base, max_level)
    del stored
    _build_instant_pyramid(con, ibase, max_level)
    _build_counter_pyramid(con, cbase, max_level)
    (max_cls,) = con.execute("SELECT coalesce(max(cls), 0) FROM lod_slices").fetchone()
    info = {
        "lod_version": LOD_VERSION, "start_ns": start_ns, "duration_ns": duration_ns,
        "max_level": max_level, "base_level": base, "instant_base_level": ibase,
        "counter_base_level": cbase, "max_cls": int(max_cls), "buckets_per_tile": BUCKETS_PER_TILE,
        "chunk_log2": chunk_log2, "merged_deepest": 1, "long_cls": long_cls,
    }
    con.execute("CREATE TABLE lod_info (key VARCHAR, value VARCHAR)")
    insert_rows(con, "lod_info", [(k, str(v)) for k, v in info.items()])


def _build_groups(con: duckdb.DuckDBPyConnection, slices: str = "slices") -> None:
    """Tile groups: UI-ordered runs of one (lane, group_name), at most GROUP_MAX_TRACKS tracks."""
    con.execute(
        f"""CREATE TEMP TABLE _ordered AS
        SELECT t.*, coalesce(d.max_depth, 0) AS max_depth,
               row_number() OVER (ORDER BY {lane_rank_sql('t.lane')}, t.group_name, t.sort_key, t.track_id) - 1 AS ui_order,
               row_number() OVER (PARTITION BY t.lane, t.group_name
                                  ORDER BY t.sort_key, t.track_id) - 1 AS pos_in_run,
               count(*) OVER (PARTITION BY t.lane, t.group_name) AS run_len
        FROM tracks t LEFT JOIN (SELECT track_id, max(depth) AS max_depth FROM {slices} GROUP BY track_id) d
             USING (track_id)"""
    )
    con.execute(
        f"""CREATE TABLE lod_tracks AS
        SELECT track_id, ui_order::INTEGER AS ui_order, max_depth::INTEGER AS max_depth,
               (dense_rank() OVER (ORDER BY {lane_rank_sql()}, group_name, pos_in_run // {GROUP_MAX_TRACKS}) - 1)::INTEGER AS grp,
               (pos_in_run // {GROUP_MAX_TRACKS})::INTEGER AS part,
               ((run_len + {GROUP_MAX_TRACKS - 1}) // {GROUP_MAX_TRACKS})::INTEGER AS parts
        FROM _ordered ORDER BY ui_order"""
    )
    con.execute(
        """CREATE TABLE lod_groups AS
        SELECT l.grp, any_value(t.lane) AS lane, any_value(t.group_name) AS group_name,
               any_value(l.part) AS part, any_value(l.parts) AS parts,
               count(*) FILTER (WHERE t.lane = 'counter') > 0 AS has_counters
        FROM lod_tracks l JOIN tracks t USING (track_id) GROUP BY l.grp ORDER BY l.grp"""
    )
    con.execute("DROP TABLE _ordered")


def _peak_rate_per_ns(con, table: str, max_level: int) -> float:
    """Events per ns of the densest (group, coarse bucket) of `table`, a bucket being 1/1024 of the
    trace; 0 when `table` is empty."""
    (peak,) = con.execute(
        f"SELECT max(n) FROM (SELECT count(*) AS n FROM {table} GROUP BY grp, ts >> {max_level})"
    ).fetchone()
    return peak / float(1 << max_level) if peak else 0.0


def _chunk_log2(rate_per_ns: float, max_level: int) -> int:
    """Width (log2 ns) of the time chunks lod_slices is ordered by, within a group.

    Rows are ordered by (grp, chunk, cls, ts): a chunk of the densest group holds about one
    DuckDB row group, so a window inside one chunk touches a row group or two whatever the
    number of duration classes, while zonemaps on cls and ts still prune inside it.
    """
    if not rate_per_ns:
        return max_level + TILE_BUCKETS_LOG2
    return int(max(10, min(max_level + TILE_BUCKETS_LOG2, math.floor(math.log2(CHUNK_ROWS / rate_per_ns)))))


def _long_class(con: duckdb.DuckDBPyConnection, chunk_log2: int) -> int:
    """The shortest class lod_long holds: slices of at least 1/512 of a chunk (a tile whose window spans
    more than a couple of chunks reads its long slices there, never the chunks), raised until lod_long
    holds at most LONG_MAX_SHARE of the slices (a trace of uniformly long slices is not copied whole)."""
    hist = con.execute("SELECT cls, count(*) FROM lod_slices GROUP BY cls").fetchall()
    total = sum(n for _, n in hist)
    c = max(0, chunk_log2 - LONG_BELOW_CHUNK_LOG2)
    while sum(n for k, n in hist if k >= c) > LONG_MAX_SHARE * total:
        c += 1
    return c


def _base_level(rate_per_ns: float, max_level: int) -> int:
    """Lowest pyramid level: below it, a group's tile window holds at most RAW_WINDOW_ROWS events.

    The densest (group, coarse bucket) of the trace, at 1/1024 of its duration, gives the
    peak event rate; a tile at level L spans 1024 x 2^L ns, so levels under the returned
    one read at most about RAW_WINDOW_ROWS raw rows, and levels from it up read the pyramid.
    """
    if not rate_per_ns:
        return max_level
    limit = RAW_WINDOW_ROWS / (rate_per_ns * BUCKETS_PER_TILE)
    if limit < 1:
        return 0
    return int(min(max_level, math.floor(math.log2(limit)) + 1))


def _pyramid(con, table: str, columns: str, base_sql: str, up_sql: str, base: int, max_level: int) -> None:
    """Build `table` level by level: base_sql at `base`, then up_sql(prev level table, level) above.

    Each level is sorted on its own and appended in level order, so the whole table ends up
    ordered by (level, grp, b, ...) without one big sort at the end.
    """
    con.execute(f"CREATE TABLE {table} AS SELECT {columns} FROM (SELECT 0::TINYINT AS level, * FROM ({base_sql})) WHERE false")
    con.execute(f"CREATE TEMP TABLE _lvl_prev AS {base_sql}")
    for level in range(base, max_level + 1):
        if level > base:
            con.execute(f"CREATE TEMP TABLE _lvl_next AS {up_sql(level)}")
            con.execute("DROP TABLE _lvl_prev")
            con.execute("ALTER TABLE _lvl_next RENAME TO _lvl_prev")
        con.execute(f"INSERT INTO {table} SELECT {columns} FROM (SELECT {level}::TINYINT AS level, * FROM _lvl_prev)"
                    " ORDER BY grp, b, track_id")
    con.execute("DROP TABLE _lvl_prev")


# The longest slice of a bucket, ties to the smaller id, as one orderable key (dur, then -id):
# key = dur * 2^40 + (2^40 - 1 - slice_id) in a HUGEINT (slice ids < 2^40). max(key) and
# arg_max(name_id, key) are 2-3x cheaper in DuckDB than max() over a struct.
ID_BITS = 40
LONGEST_KEY = f"((dur::HUGEINT << {ID_BITS}) + ({(1 << ID_BITS) - 1} - slice_id))"
FIRST_KEY = f"((ts::HUGEINT << {ID_BITS}) + slice_id)"


def key_dur_sql(key: str) -> str:
    return f"({key} >> {ID_BITS})::BIGINT"


def key_id_sql(key: str) -> str:
    return f"({(1 << ID_BITS) - 1} - ({key} & {(1 << ID_BITS) - 1}))::BIGINT"


def _build_merged_pyramid(con, base: int, max_level: int) -> None:
    _pyramid(
        con, "lod_merged",
        f"level, grp, b, track_id, depth::SMALLINT AS depth, count, busy, bytes, {key_dur_sql('lkey')} AS l_dur,"
        f" {key_id_sql('lkey')} AS l_id, l_name, depth = max(depth) OVER (PARTITION BY grp, b, track_id) AS deepest",
        f"SELECT grp, ts >> {base} AS b, track_id, depth, count(*)::BIGINT AS count, sum(dur)::BIGINT AS busy,"
        f" sum(bytes)::BIGINT AS bytes, max({LONGEST_KEY}) AS lkey, arg_max(name_id, {LONGEST_KEY}) AS l_name"
        f" FROM lod_slices WHERE cls < {base} GROUP BY ALL",
        # level L = level L-1 merged pairwise, plus the slices of class L-1 (long at L-1, short at L)
        lambda level: (
            "SELECT grp, b >> 1 AS b, track_id, depth, sum(count)::BIGINT AS count, sum(busy)::BIGINT AS busy,"
            " sum(bytes)::BIGINT AS bytes, max(lkey) AS lkey, arg_max(l_name, lkey) AS l_name FROM ("
            " SELECT grp, b, track_id, depth, count, busy, bytes, lkey, l_name FROM _lvl_prev UNION ALL"
            f" SELECT grp, ts >> {level - 1}, track_id, depth, 1, dur, bytes, {LONGEST_KEY}, name_id FROM lod_slices"
            f" WHERE cls = {level - 1}) GROUP BY ALL"),
        base, max_level)


def _build_instant_pyramid(con, base: int, max_level: int) -> None:
    columns = (f"level, grp, b, track_id, depth::SMALLINT AS depth, count, (fkey >> {ID_BITS})::BIGINT AS ts,"
               f" (fkey & {(1 << ID_BITS) - 1})::BIGINT AS slice_id, f_name AS name_id")
    agg = f"count(*)::BIGINT AS count, min({FIRST_KEY}) AS fkey, arg_min(name_id, {FIRST_KEY}) AS f_name"
    if _one_pass(con, "lod_instants", base, max_level):
        _pyramid_one_pass(con, "lod_instant_merged", columns, "lod_instants", "track_id, depth", agg, base, max_level)
        return
    _pyramid(
        con, "lod_instant_merged", columns,
        f"SELECT grp, ts >> {base} AS b, track_id, depth, {agg} FROM lod_instants GROUP BY ALL",
        lambda level: "SELECT grp, b >> 1 AS b, track_id, depth, sum(count)::BIGINT AS count, min(fkey) AS fkey,"
                      " arg_min(f_name, fkey) AS f_name FROM _lvl_prev GROUP BY ALL",
        base, max_level)


def _build_counter_pyramid(con, base: int, max_level: int) -> None:
    agg = ("count(*)::BIGINT AS count, min(value) AS vmin, max(value) AS vmax, arg_min(value, ts) AS vfirst,"
           " arg_max(value, ts) AS vlast, min(ts) AS ts_first, max(ts) AS ts_last")
    if _one_pass(con, "lod_counters", base, max_level):
        _pyramid_one_pass(con, "lod_counter_merged", "*", "lod_counters", "track_id", agg, base, max_level)
        return
    _pyramid(
        con, "lod_counter_merged", "*",
        f"SELECT grp, ts >> {base} AS b, track_id, {agg} FROM lod_counters GROUP BY ALL",
        lambda level: "SELECT grp, b >> 1 AS b, track_id, sum(count)::BIGINT AS count, min(vmin) AS vmin,"
                      " max(vmax) AS vmax, arg_min(vfirst, ts_first) AS vfirst, arg_max(vlast, ts_last) AS vlast,"
                      " min(ts_first) AS ts_first, max(ts_last) AS ts_last FROM _lvl_prev GROUP BY ALL",
        base, max_level)


# a pyramid of at most this many (row, level) pairs is built by one statement (_pyramid_one_pass)
ONE_PASS_ROWS = 2_000_000


def _one_pass(con, table: str, base: int, max_level: int) -> bool:
    (n,) = con.execute(f"SELECT count(*) FROM {table}").fetchone()
    return n * (max_level - base + 1) <= ONE_PASS_ROWS


def _pyramid_one_pass(con, name: str, columns: str, source: str, keys: str, agg: str, base: int, max_level: int) -> None:
    """The same table as _pyramid's level-by-level build, from one statement (`keys`: the grouping
    columns after grp and the bucket; `agg`: base-level aggregates): every level aggregates the
    source rows directly (level L's bucket of a row is ts >> L, the bucket its lower levels merge into).
    Level by level costs four statements a level, most of a small trace's LOD build; this reads the
    source once per level in one query, so it is kept to small tables (ONE_PASS_ROWS)."""
    con.execute(
        f"CREATE TABLE {name} AS SELECT {columns} FROM ("
        f" SELECT l.level::TINYINT AS level, grp, ts >> l.level AS b, {keys}, {agg}"
        f" FROM {source} CROSS JOIN (SELECT range AS level FROM range({base}, {max_level + 1})) l"
        f" GROUP BY l.level, grp, b, {keys}) ORDER BY level, grp, b, track_id"
    )
