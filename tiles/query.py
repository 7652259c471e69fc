"""Tiles from the level-of-detail tables (tiles/build.py), encoded as the typed-array binary of docs/api.md.

Every query reads a bounded range: the long slices of each duration class from a ts range
that looks back no further than the class's length, the merged short slices from one pyramid
level (or, below the pyramid's base, from the tile's own window of raw slices), and the same
for instants and counters. Nothing here loops over events in Python.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import duckdb
import numpy as np

from acceltrace.tiles.build import FIRST_KEY, LONGEST_KEY, TILE_BUCKETS_LOG2, key_dur_sql, key_id_sql
# the encoding (tiles/encoding.py), re-exported: tiles/live.py, the server and the tests take it from here
from acceltrace.tiles.encoding import (COLUMNS, FOLD_COLUMNS, TILE_FORMAT_VERSION, _NP, _col,  # noqa: F401
                                       decode_tile, encode_tile)
from acceltrace.tiles.rows import DEPTH_PAGE, _order, _page_fold, _split_sorted, window_sections

MAX_LEVEL = 62
CLASS_BAND = 4
WINDOW_SCAN = True  # a fine page's slices and merged rows from one scan (_window_sql); tests compare both ways
# A paged tile carries the exact rows of DEPTH_PAGE depths of its group's tracks (page p: depths
# [p*DEPTH_PAGE, (p+1)*DEPTH_PAGE)) and, per track, the coverage of every deeper depth (the "fold"
# sections), so its size is bounded by tracks x (DEPTH_PAGE + 1) x buckets, whatever the depth
# or the size of the trace (docs/api.md "Depth pages").
MAX_PAGE = (1 << 15) // DEPTH_PAGE


@dataclass(frozen=True)
class LodInfo:
    start_ns: int
    duration_ns: int
    max_level: int
    base_level: int
    instant_base_level: int
    counter_base_level: int
    max_cls: int
    chunk_log2: int
    merged_deepest: int = 0  # lod_merged has its `deepest` column (traces built before it have not)
    long_cls: int = -1  # slices of this class and longer are also in lod_long (-1: no lod_long)

    @classmethod
    def load(cls, con: duckdb.DuckDBPyConnection) -> "LodInfo":
        kv = dict(con.execute("SELECT key, value FROM lod_info").fetchall())
        return cls(**{f: int(kv[f]) for f in cls.__dataclass_fields__ if f in kv})


def _grp_filter(grp: int | None) -> str:
    return "" if grp is None else f"grp = {int(grp)} AND "


def _chunks(info: LodInfo, lo_ns: int, hi_ns: int) -> str:
    """The chunk range holding starts in [lo_ns, hi_ns) (lod_slices' leading order key)."""
    return f"chunk BETWEEN {max(0, lo_ns) >> info.chunk_log2} AND {max(0, hi_ns - 1) >> info.chunk_log2} AND "


def _long_branches(info: LodInfo, L: int, t0: int) -> list[tuple[int, int, int]]:
    """(lowest class, highest class, look-back start) of each long-slice scan of a level-L tile at t0.

    One scan for the classes whose look-back (2^(c+1)) fits in one chunk of lod_slices (the chunk
    range it reads is then one or two chunks: the window's own), and one per band of CLASS_BAND
    longer classes, each looking back by its longest class's length: a class-c slice is >= 2^c
    long, so per track and depth a band's look-back holds at most 2^CLASS_BAND of them."""
    branches = []
    if L <= info.max_cls:
        near_top = min(info.max_cls, max(L, info.chunk_log2 - 1, L + TILE_BUCKETS_LOG2 - 1))
        branches.append((L, near_top, t0 - (1 << (near_top + 1))))
        for c in range(near_top + 1, info.max_cls + 1, CLASS_BAND):
            hi = min(info.max_cls, c + CLASS_BAND - 1)
            branches.append((c, hi, t0 - (1 << (hi + 1))))
    return branches


def _class_scans(info: LodInfo, L: int, t0: int, t1: int) -> list[tuple[str, str, int, int, int]]:
    """_long_branches as (table, chunk range SQL, lowest class, highest class, look-back start): a branch
    of classes all at or above info.long_cls reads lod_long (ordered by group, class, ts: a range per
    class, however wide the window), any other lod_slices' chunks. That is every branch of a tile wider
    than two chunks (level >= long_cls) and the long-look-back bands of the others, whose windows span
    many chunks of lod_slices, every class mixed in each: without lod_long their few long slices cost a
    scan of every slice in the window (at 100 M slices, 2.5 M rows for ~120 at level 20). A finer tile's
    first branch looks back at most a chunk: it stays on lod_slices (one scan, not two)."""
    long_cls = info.long_cls if info.long_cls >= 0 else MAX_LEVEL + 1
    return [("lod_long", "", lo, hi, look) if lo >= long_cls else ("lod_slices", _chunks(info, look, t1), lo, hi, look)
            for lo, hi, look in _long_branches(info, L, t0)]


def _depth_sql(depths: tuple[int, int] | None) -> str:
    return "" if depths is None else f"depth BETWEEN {int(depths[0])} AND {int(depths[1])} AND "


def _queries(info: LodInfo, level: int, index: int, grp: int | None,
             depths: tuple[int, int] | None = None, order: bool = True) -> dict[str, str]:
    """One SQL per section; all bounds are integers computed here (no user text reaches SQL).
    `depths` (lo, hi): only the slice and instant rows of those depths (a depth page); None: all.
    `order`: rows in the encoding's order (by track, then ts or bucket); without it the caller
    sorts (_section_arrays does, in numpy: DuckDB's ORDER BY was half of a coarse tile's query)."""
    L = level
    t0 = index << (L + TILE_BUCKETS_LOG2)
    t1 = (index + 1) << (L + TILE_BUCKETS_LOG2)
    b0 = index << TILE_BUCKETS_LOG2
    g = _grp_filter(grp)
    d = _depth_sql(depths)
    out = {}

    branches = _class_scans(info, L, t0, t1)
    cols = "track_id, slice_id::DOUBLE, (ts)::DOUBLE, dur::DOUBLE, depth, name_id, coalesce(bytes, 0)::DOUBLE"
    if branches:
        out["slices"] = " UNION ALL ".join(
            f"SELECT {cols} FROM {table} WHERE {g}{chunks}{d}cls BETWEEN {lo} AND {hi}"
            f" AND ts >= {max(0, look)} AND ts < {t1} AND ts + dur > {t0}"
            for table, chunks, lo, hi, look in branches
        ) + (" ORDER BY 1, 3, 5" if order else "")
    else:
        out["slices"] = f"SELECT {cols} FROM lod_slices WHERE false"

    if L >= info.base_level:
        out["merged"] = (
            f"SELECT track_id, b - {b0}, depth, count, busy::DOUBLE, coalesce(bytes, 0)::DOUBLE, l_id::DOUBLE,"
            f" l_dur::DOUBLE, l_name FROM lod_merged WHERE level = {L} AND {g}{d}b >= {b0} AND b < {b0 + 1024}"
            + (" ORDER BY 1, 2, 3" if order else "")
        )
    else:
        out["merged"] = (
            f"SELECT track_id, bucket, depth, n, busy, bytes, {key_id_sql('k')}::DOUBLE, {key_dur_sql('k')}::DOUBLE,"
            f" name FROM (SELECT track_id, (ts >> {L}) - {b0} AS bucket, depth, count(*) AS n,"
            f" sum(dur)::DOUBLE AS busy, coalesce(sum(bytes), 0)::DOUBLE AS bytes, max({LONGEST_KEY}) AS k,"
            f" arg_max(name_id, {LONGEST_KEY}) AS name"
            f" FROM lod_slices WHERE {g}{_chunks(info, t0, t1)}{d}cls < {L} AND ts >= {t0} AND ts < {t1}"
            " GROUP BY ALL)" + (" ORDER BY 1, 2, 3" if order else "")
        )

    if L >= info.instant_base_level:
        out["instants"] = (
            f"SELECT track_id, b - {b0}, depth, count, slice_id::DOUBLE, ts::DOUBLE, name_id FROM lod_instant_merged"
            f" WHERE level = {L} AND {g}{d}b >= {b0} AND b < {b0 + 1024}" + (" ORDER BY 1, 2, 3" if order else "")
        )
    else:
        out["instants"] = (
            "SELECT track_id, bucket, depth, n, id::DOUBLE, ts::DOUBLE, name FROM ("
            f"SELECT track_id, (ts >> {L}) - {b0} AS bucket, depth, count(*) AS n, arg_min(slice_id, {FIRST_KEY}) AS id,"
            f" min(ts) AS ts, arg_min(name_id, {FIRST_KEY}) AS name"
            f" FROM lod_instants WHERE {g}{d}ts >= {t0} AND ts < {t1} GROUP BY ALL)"
            + (" ORDER BY 1, 2, 3" if order else "")
        )

    if L >= info.counter_base_level:
        out["counters"] = (
            f"SELECT track_id, b - {b0}, count, vmin, vmax, vfirst, vlast FROM lod_counter_merged"
            f" WHERE level = {L} AND {g}b >= {b0} AND b < {b0 + 1024}" + (" ORDER BY 1, 2" if order else "")
        )
    else:
        out["counters"] = (
            f"SELECT track_id, (ts >> {L}) - {b0} AS bucket, count(*), min(value), max(value),"
            f" arg_min(value, ts), arg_max(value, ts) FROM lod_counters"
            f" WHERE {g}ts >= {t0} AND ts < {t1} GROUP BY ALL" + (" ORDER BY 1, 2" if order else "")
        )
    return out




def page_key(group: str | None, page: int) -> str | None:
    """The name of one depth page of a group's tiles in cache keys, ETags and file names (g3, g3.p1)."""
    return group if not page else f"{group or 'all'}.p{int(page)}"


def page_depths(page: int) -> tuple[int, int]:
    """The depths (lo, hi) whose rows a depth page carries exactly."""
    return page * DEPTH_PAGE, page * DEPTH_PAGE + DEPTH_PAGE - 1


def build_tile(con: duckdb.DuckDBPyConnection, info: LodInfo, level: int, index: int,
               grp: int | None, group_name: str | None = None, empty: frozenset[str] = frozenset(),
               names: list[str] | None = None, page: int | None = 0, max_depth: int | None = None) -> bytes:
    """The encoded tile (docs/api.md). `con` is a cursor of its own (not shared between threads);
    `empty` names sections known to have no rows in this group (their queries are skipped);
    `names` is the whole lod_names table by name_id when the caller keeps it in memory.
    `page`: the depth page (page_depths) whose rows the tile carries, with the fold sections for
    every deeper depth (build_page); None: every depth and no fold (the unpaged tile). `max_depth`:
    the group's deepest slice depth when known (no fold query past it)."""
    if page is None:
        arrays = _section_arrays(con, info, level, index, grp, empty)
        return encode_tile(arrays, level, index, group_name, _strings(con, names))
    return build_page(con, info, level, index, grp, page, group_name, empty, names, max_depth)


def build_pages(con: duckdb.DuckDBPyConnection, info: LodInfo, level: int, index: int,
                grp: int | None, group_name: str | None = None, empty: frozenset[str] = frozenset(),
                names: list[str] | None = None, max_depth: int | None = None,
                only: int | None = None) -> dict[int, bytes]:
    """{page: encoded tile} for the depth pages 0 .. max_depth // DEPTH_PAGE of one tile (max_depth:
    the group's deepest depth; read from the tile's rows when None), each page from its own queries
    (build_page); `only`: just that page."""
    if only is not None:
        return {only: build_page(con, info, level, index, grp, only, group_name, empty, names, max_depth)}
    if max_depth is None:
        max_depth = _deepest(con, info, level, index, grp, empty)
    return {p: build_page(con, info, level, index, grp, p, group_name, empty, names, max_depth)
            for p in range(max_depth // DEPTH_PAGE + 1)}


def _deepest(con, info: LodInfo, level: int, index: int, grp: int | None, empty: frozenset[str]) -> int:
    """The deepest depth of any row of a tile (0 when it has none)."""
    sqls = [f"SELECT max(depth) FROM ({sql})" for s, sql in _queries(info, level, index, grp, order=False).items()
            if s != "counters" and s not in empty]
    return max([r[0] for sql in sqls for r in con.execute(sql).fetchall() if r[0] is not None], default=0)


def build_page(con: duckdb.DuckDBPyConnection, info: LodInfo, level: int, index: int, grp: int | None,
               page: int, group_name: str | None = None, empty: frozenset[str] = frozenset(),
               names: list[str] | None = None, max_depth: int | None = None,
               stats: dict[str, int] | None = None) -> bytes:
    """One depth page of a tile from its own queries, bounded by its depths: the rows of depths
    page_depths(page) in full, and of every deeper depth only what the fold draws (one row per
    (track, bucket) for merged slices and instants, start and end of the exact slices); nothing of
    the shallower depths. `max_depth` (the group's deepest depth, when known) skips the fold's part
    of the queries on the last page. `stats`, when given, gets the rows each query returned
    ("<section>" and "<section>_fold"): what the page read out of DuckDB."""
    lo, hi = page_depths(page)
    skip = set(empty)
    if page:
        skip.add("counters")  # counters have no depth: page 0 carries them
    if max_depth is not None and lo > max_depth:
        skip |= {"slices", "merged", "instants"}  # past the deepest depth: an empty page, its fold empty
    fold = max_depth is None or hi < max_depth
    arrays, folds = {}, {}
    window = None  # a fine page: its exact slices and merged rows from one scan of the window
    if WINDOW_SCAN and not {"slices", "merged"} & skip:
        window = _window_sql(info, level, index, grp, lo, hi, fold)
    if window is not None:
        window = window_sections(con.execute(window).fetchnumpy(), level, index, hi, fold)
    for section, sql in _page_queries(info, level, index, grp, lo, hi, fold).items():
        if section in skip:
            arrays[section] = [np.zeros(0, _NP[dt]) for _, dt in COLUMNS[section]]
            folds[section] = [c[:0] for c in arrays[section]]
            continue
        if window is not None and section in ("slices", "merged"):  # every class's rows came with the window
            cols = window[0] if section == "slices" else window[1]
        else:
            cols = [np.asarray(v) for v in con.execute(sql).fetchnumpy().values()]
        arrays[section], folds[section] = _split_sorted(section, cols, lo, hi)
        if stats is not None:
            stats[section] = stats.get(section, 0) + len(arrays[section][0])
            stats[section + "_fold"] = stats.get(section + "_fold", 0) + len(folds[section][0])
    arrays.update(_page_fold(folds, level, index))
    extra = {"page": page, "depth_page": DEPTH_PAGE, "depths": [lo, hi], "fold_from": hi + 1}
    return encode_tile(arrays, level, index, group_name, _strings(con, names), extra)


def _page_depth_sql(lo: int, hi: int, fold: bool) -> str:
    """A page scan's depth test over raw rows: its depths, and with `fold` every deeper one too (none
    on page 0 then: it holds for every row); written after the selective class and time tests."""
    return ("" if lo == 0 else f"depth >= {lo} AND ") if fold else f"depth BETWEEN {lo} AND {hi} AND "


def _window_sql(info: LodInfo, level: int, index: int, grp: int | None, lo: int, hi: int, fold: bool) -> str | None:
    """Below the pyramid, where a tile's window holds at most ~RAW_WINDOW_ROWS raw rows: one scan of
    lod_slices for the page's merged rows (classes < level, aggregated in numpy: tiles/rows.py
    window_sections) and the exact slices of its first class branch, which reads the same chunks, and
    (column part = 1) the exact slices of the longer class branches, UNION ALL: one DuckDB query for the
    page's slices and merged rows instead of three (most of a fine page's time is DuckDB's cost per
    query, ~1.5-2 ms each). None where that does not hold (the pyramid's levels, or a first branch read
    from lod_long)."""
    t0, t1 = index << (level + TILE_BUCKETS_LOG2), (index + 1) << (level + TILE_BUCKETS_LOG2)
    branches = _class_scans(info, level, t0, t1)
    if level >= info.base_level or not branches or branches[0][0] != "lod_slices":
        return None
    _, chunks, _, c_hi, look = branches[0]
    depths = _page_depth_sql(lo, hi, fold)
    g, cols = _grp_filter(grp), "track_id, slice_id, ts, dur, depth, name_id, bytes, cls"
    # the longer classes' exact slices (part 1) in the same query: one DuckDB query per fine page, not two
    return " UNION ALL ".join(
        [f"SELECT {cols}, 0 AS part FROM lod_slices WHERE {g}{chunks}cls <= {c_hi} AND ts >= {max(0, look)}"
         f" AND ts < {t1} AND {depths}ts + dur > {t0}"]
        + [f"SELECT {cols}, 1 FROM {table} WHERE {g}{ch}cls BETWEEN {c_lo} AND {c_hi2} AND ts >= {max(0, look2)}"
           f" AND ts < {t1} AND {depths}ts + dur > {t0}" for table, ch, c_lo, c_hi2, look2 in branches[1:]])


def _page_queries(info: LodInfo, level: int, index: int, grp: int | None, lo: int, hi: int,
                  fold: bool) -> dict[str, str]:
    """One SQL per section of a depth page (all bounds integers computed here): its rows of depths
    [lo, hi] in the encoding's columns, then (`fold`) the deeper ones as fold rows, all given depth
    hi + 1: merged slices and instants one row per (track, bucket) (an instant's ts: the first one's),
    exact slices each (their start and end). Rows come unordered (_split_sorted orders them)."""
    L = level
    t0 = index << (L + TILE_BUCKETS_LOG2)
    t1 = (index + 1) << (L + TILE_BUCKETS_LOG2)
    b0 = index << TILE_BUCKETS_LOG2
    g = _grp_filter(grp)
    lo, hi = int(lo), int(hi)
    # one scan where the rows come from a window of raw rows: the fold's rows are its deeper depths
    # folded into one (least(depth, hi + 1)) by the same GROUP BY; none when there is no fold
    depths = _page_depth_sql(lo, hi, fold)
    as_depth = f"least(depth, {hi + 1})::SMALLINT" if fold else "depth"
    out = {}
    branches = _class_scans(info, L, t0, t1)
    if branches:
        out["slices"] = " UNION ALL ".join(
            f"SELECT track_id, slice_id, ts, dur, {as_depth}, name_id, coalesce(bytes, 0) FROM {table} WHERE"
            f" {g}{chunks}cls BETWEEN {c_lo} AND {c_hi} AND ts >= {max(0, look)}"
            f" AND ts < {t1} AND {depths}ts + dur > {t0}" for table, chunks, c_lo, c_hi, look in branches)
    else:
        out["slices"] = "SELECT track_id, slice_id, ts, dur, depth, name_id, bytes FROM lod_slices WHERE false"

    none = "0::BIGINT"
    rows, deeper = f" AND depth BETWEEN {lo} AND {hi}", f" AND depth > {hi}"  # after the range tests
    if L >= info.base_level and fold and info.merged_deepest:
        # the pyramid: the page's rows and, as the fold, each (track, bucket)'s deepest row where it is
        # deeper than the page, in one range scan (no GROUP BY; rows of depth > hi are the fold's)
        out["merged"] = (
            f"SELECT track_id, b - {b0}, depth, count, busy, coalesce(bytes, 0), l_id, l_dur, l_name FROM lod_merged"
            f" WHERE level = {L} AND {g}b >= {b0} AND b < {b0 + 1024}{f' AND depth >= {lo}' if lo else ''}"
            f" AND (depth <= {hi} OR (deepest AND depth > {hi}))")
    elif L >= info.base_level:  # the pyramid: each (track, bucket, depth) once, ordered by b; exact range scans
        win = f"FROM lod_merged WHERE level = {L} AND {g}b >= {b0} AND b < {b0 + 1024}{{d}}"
        out["merged"] = (
            f"SELECT track_id, b - {b0}, depth, count, busy, coalesce(bytes, 0), l_id, l_dur, l_name"
            f" {win.format(d=rows)}"
            + (f" UNION ALL SELECT track_id, b - {b0}, {hi + 1}::SMALLINT, {none}, {none}, {none}, {none}, {none}, 0"
               f" {win.format(d=deeper)} GROUP BY track_id, b" if fold else ""))
    else:
        out["merged"] = (
            f"SELECT track_id, bucket, d, n, busy, bytes, {key_id_sql('k')}, {key_dur_sql('k')}, name FROM ("
            f"SELECT track_id, (ts >> {L}) - {b0} AS bucket, {as_depth} AS d, count(*) AS n,"
            f" sum(dur)::DOUBLE AS busy, coalesce(sum(bytes), 0)::DOUBLE AS bytes, max({LONGEST_KEY}) AS k,"
            f" arg_max(name_id, {LONGEST_KEY}) AS name"
            f" FROM lod_slices WHERE {g}{_chunks(info, t0, t1)}cls < {L} AND ts >= {t0} AND {depths}ts < {t1}"
            " GROUP BY ALL)")

    if L >= info.instant_base_level:
        win = f"FROM lod_instant_merged WHERE level = {L} AND {g}b >= {b0} AND b < {b0 + 1024}{{d}}"
        out["instants"] = (
            f"SELECT track_id, b - {b0}, depth, count, slice_id, ts, name_id {win.format(d=rows)}"
            + (f" UNION ALL SELECT track_id, b - {b0}, {hi + 1}::SMALLINT, {none}, {none}, min(ts), 0"
               f" {win.format(d=deeper)} GROUP BY track_id, b" if fold else ""))
    else:
        out["instants"] = (
            f"SELECT track_id, bucket, d, n, id, ts, name FROM (SELECT track_id, (ts >> {L}) - {b0} AS bucket,"
            f" {as_depth} AS d, count(*) AS n, arg_min(slice_id, {FIRST_KEY}) AS id, min(ts) AS ts,"
            f" arg_min(name_id, {FIRST_KEY}) AS name FROM lod_instants WHERE {g}ts >= {t0} AND {depths}ts < {t1}"
            " GROUP BY ALL)")
    # counters have no depth (page 0 only): the unpaged tile's query
    out["counters"] = _queries(info, level, index, grp, order=False)["counters"]
    return out






def _strings(con, names: list[str] | None) -> Callable[[np.ndarray], list[str]]:
    def strings_of(ids: np.ndarray) -> list[str]:
        if names is not None:
            return [names[i] for i in ids.tolist()]
        return [r[0] for r in con.execute(
            "SELECT name FROM lod_names WHERE name_id IN (SELECT unnest(?::INTEGER[])) ORDER BY name_id",
            [ids.tolist()]).fetchall()]
    return strings_of


def _section_arrays(con, info: LodInfo, level: int, index: int, grp: int | None,
                    skip: frozenset[str] | set[str]) -> dict[str, list[np.ndarray]]:
    """Every depth's rows of each section (the unpaged tile), in the encoding's order."""
    arrays: dict[str, list[np.ndarray]] = {}
    for section, sql in _queries(info, level, index, grp, order=False).items():
        if section in skip:
            arrays[section] = [np.zeros(0, _NP[dt]) for _, dt in COLUMNS[section]]
            continue
        res = con.execute(sql).fetchnumpy()
        cols = [np.asarray(v) for v in res.values()]
        if len(cols[0]) > 1:
            o = _order(section, cols)
            cols = [c[o] for c in cols]
        arrays[section] = cols
    return arrays

