"""What the level-of-detail tables say about a trace's layout, read at serve time: the tracks in UI
order with their tile group, the tile groups, each group's row counts, the name dictionary.

A trace written before LOD tables existed (`lod=False`) is answered from its stored tables alone:
tracks in lane order, one group holding every track. Tiles themselves are tiles/query.py's.
"""

from __future__ import annotations

import duckdb

from acceltrace.tiles.build import lane_rank_sql

NAMES_TABLE = "lod_names"  # name_id, name: every distinct slice name (store.queries.search_slices' `names`)
TRACK_COLUMNS = ("track_id", "lane", "group_name", "name", "device", "process", "thread", "unit", "sort_key",
                 "max_depth", "grp")
ALL_TRACKS_GROUP = {"grp": 0, "lane": "", "group_name": "all tracks", "part": 0, "parts": 1}

_TRACK_SELECT = "SELECT t.track_id, t.lane, t.group_name, t.name, t.device, t.process, t.thread, t.unit, t.sort_key,"


def tracks_in_ui_order(cur: duckdb.DuckDBPyConnection, lod: bool = True) -> list[dict]:
    """Every track (TRACK_COLUMNS: the tracks table's columns, its deepest slice depth, its tile
    group number) in the order the UI stacks them."""
    if lod:
        sql = (f"{_TRACK_SELECT} l.max_depth, l.grp FROM tracks t JOIN lod_tracks l USING (track_id)"
               " ORDER BY l.ui_order")
    else:
        sql = (f"{_TRACK_SELECT} coalesce(d.m, 0), 0 FROM tracks t"
               " LEFT JOIN (SELECT track_id, max(depth) m FROM slices GROUP BY 1) d USING (track_id)"
               f" ORDER BY {lane_rank_sql('t.lane')}, t.group_name, t.sort_key, t.track_id")
    return [dict(zip(TRACK_COLUMNS, r)) for r in cur.execute(sql).fetchall()]


def tile_groups(cur: duckdb.DuckDBPyConnection, lod: bool = True) -> list[dict]:
    """The tile groups by number: grp, lane, group_name, and part of parts (a large lane group is
    split into parts)."""
    if not lod:
        return [dict(ALL_TRACKS_GROUP)]
    cols = ("grp", "lane", "group_name", "part", "parts")
    return [dict(zip(cols, r)) for r in cur.execute(
        f"SELECT {', '.join(cols)} FROM lod_groups ORDER BY grp").fetchall()]


def build_ms(cur: duckdb.DuckDBPyConnection) -> int | None:
    """How long the LOD build took at ingest (ms), when the trace recorded it."""
    row = cur.execute("SELECT value FROM lod_info WHERE key = 'build_ms'").fetchone()
    return int(row[0]) if row else None


def group_counts(cur: duckdb.DuckDBPyConnection) -> dict[int, tuple[int, int, int]]:
    """Per tile group number: its (slices, instants, counters) row counts."""
    return {g: (s, i, c) for g, s, i, c in cur.execute(
        "SELECT grp, slices, instants, counters FROM lod_group_counts").fetchall()}


def group_depths(cur: duckdb.DuckDBPyConnection) -> dict[int, int]:
    """Per tile group number: the deepest slice depth of its tracks (how many depth pages it has)."""
    return dict(cur.execute("SELECT grp, max(max_depth) FROM lod_tracks GROUP BY grp").fetchall())


def name_dictionary(cur: duckdb.DuckDBPyConnection, max_names: int) -> list[str] | None:
    """Every slice name by name_id (build_tile's `names`), or None when there are over max_names."""
    (n,) = cur.execute(f"SELECT count(*) FROM {NAMES_TABLE}").fetchone()
    if n > max_names:
        return None
    return [r[0] for r in cur.execute(f"SELECT name FROM {NAMES_TABLE} ORDER BY name_id").fetchall()]
