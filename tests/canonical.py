"""A canonical text summary of a trace's tables, for snapshot tests and round trips.

It names no ids and no file paths, so the same input under another name, or exported
and ingested again, gives the same text.
"""

from __future__ import annotations

import duckdb


def canonical_summary(con: duckdb.DuckDBPyConnection) -> str:
    q = lambda sql: con.execute(sql).fetchall()  # noqa: E731
    meta = dict(q("SELECT key, value FROM trace_meta"))
    start, end = int(meta["start_ns"]), int(meta["end_ns"])
    lines = [f"duration_ns {end - start}", f"lost_events {meta.get('lost_events', '0')}"]
    lines.append("tracks per lane:")
    for lane, n in q("SELECT lane, count(*) FROM tracks GROUP BY lane ORDER BY lane"):
        lines.append(f"  {lane} {n}")
    lines.append("slices per lane and category:")
    for lane, cat, n, dur, nbytes in q(
        "SELECT t.lane, coalesce(s.category, ''), count(*), sum(s.dur), coalesce(sum(s.bytes), 0)"
        " FROM slices s JOIN tracks t USING (track_id) GROUP BY ALL ORDER BY 1, 2"
    ):
        lines.append(f"  {lane} {cat!r} n={n} dur_ns={dur} bytes={nbytes}")
    lines.append("copies by direction and host memory:")
    for d, h, n in q(
        "SELECT coalesce(direction, '-'), coalesce(host_mem, '-'), count(*) FROM slices"
        " WHERE direction IS NOT NULL OR host_mem IS NOT NULL GROUP BY ALL ORDER BY 1, 2"
    ):
        lines.append(f"  {d} {h} {n}")
    lines.append("flows by kind (src lane -> dst lane):")
    for kind, sl, dl, n in q(
        "SELECT f.kind, coalesce(ts.lane, '-'), coalesce(td.lane, '-'), count(*) FROM flows f"
        " LEFT JOIN slices a ON a.slice_id = f.src_slice LEFT JOIN tracks ts ON ts.track_id = a.track_id"
        " LEFT JOIN slices b ON b.slice_id = f.dst_slice LEFT JOIN tracks td ON td.track_id = b.track_id"
        " GROUP BY ALL ORDER BY ALL"
    ):
        lines.append(f"  {kind} {sl}->{dl} {n}")
    lines.append("counter tracks:")
    for name, unit, n, lo, hi in q(
        "SELECT t.name, coalesce(t.unit, ''), count(*), min(c.value), max(c.value)"
        " FROM counters c JOIN tracks t USING (track_id) GROUP BY ALL ORDER BY 1, 2"
    ):
        lines.append(f"  {name!r} [{unit}] n={n} min={lo:.6g} max={hi:.6g}")
    (maxd,) = q("SELECT coalesce(max(depth), 0) FROM slices")[0]
    lines.append(f"max depth {maxd}")
    return "\n".join(lines) + "\n"
