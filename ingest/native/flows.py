"""Flows of an .atrace trace: explicit (flow ids) and by correlation id (docs/formats.md, "Flows")."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from acceltrace.formats import record as R


class FlowEnds:
    """Explicit flow ends (FLOW_OUT/FLOW_IN records), staged in DuckDB so memory stays bounded at any size.

    link() matches them by (stream, flow id): one source may feed several destinations (fan-out);
    a destination without a source is kept with an empty source end (its source fell outside the
    file), as the store allows; unmatched ends and reused source ids are counted in warnings.
    """

    def __init__(self, b):
        self.b = b
        self.n = 0

    def add(self, key: np.ndarray, is_out: np.ndarray, kind: np.ndarray, slice_id: np.ndarray) -> None:
        con = self.b.con
        if not self.n:
            con.execute("CREATE OR REPLACE TEMP TABLE _atrace_flow_ends "
                        "(key UBIGINT, is_out BOOLEAN, kind UTINYINT, slice_id BIGINT)")
        con.register("_atrace_ends_batch", pa.table({"key": key, "is_out": is_out, "kind": kind,
                                                     "slice_id": slice_id}))
        try:
            con.execute("INSERT INTO _atrace_flow_ends SELECT * FROM _atrace_ends_batch")
        finally:
            con.unregister("_atrace_ends_batch")
        self.n += len(key)

    def link(self, label: str) -> None:
        if not self.n:
            return
        b = self.b
        b.con.execute("""CREATE OR REPLACE TEMP TABLE _atrace_flow_src AS
                         SELECT key, min(slice_id) AS sid, arg_min(kind, slice_id) AS kind, count(*) AS n
                         FROM _atrace_flow_ends WHERE is_out GROUP BY key""")
        names = " ".join(f"WHEN {i} THEN '{n}'" for i, n in enumerate(R.FLOW_KINDS) if n)
        b.add_flows_sql(f"""
            SELECT s.sid AS src_slice, d.slice_id AS dst_slice,
                   CASE CASE WHEN s.kind > 0 THEN s.kind ELSE d.kind END {names} ELSE 'other' END AS kind,
                   'atrace' AS raw_kind
            FROM _atrace_flow_ends d LEFT JOIN _atrace_flow_src s USING (key)
            WHERE NOT d.is_out ORDER BY d.slice_id""")
        reused, = b.con.execute("SELECT coalesce(sum(n - 1), 0) FROM _atrace_flow_src").fetchall()[0]
        no_src, = b.con.execute("""SELECT count(*) FROM _atrace_flow_ends d ANTI JOIN _atrace_flow_src s USING (key)
                                   WHERE NOT d.is_out""").fetchall()[0]
        no_dst, = b.con.execute("""SELECT count(*) FROM _atrace_flow_src s ANTI JOIN
                                   (SELECT key FROM _atrace_flow_ends WHERE NOT is_out) d USING (key)""").fetchall()[0]
        if reused:
            b.warn(label, f"{reused} flow sources reuse a flow id already used in their stream; "
                          "the first source is kept")
        if no_src:
            b.warn(label, f"{no_src} flow destinations have no source in the file (kept with an empty source end)")
        if no_dst:
            b.warn(label, f"{no_dst} flow sources have no destination in the file")
        b.con.execute("DROP TABLE IF EXISTS _atrace_flow_src")
        b.con.execute("DROP TABLE IF EXISTS _atrace_flow_ends")


def corr_flows(b, lo: int, hi: int) -> None:
    """Correlation flows among slices lo..hi (docs/formats.md), skipping explicit destinations."""
    if hi < lo:
        return
    rows = b.track_rows
    lanes = pa.table({"track_id": pa.array([r[0] for r in rows], pa.int32()),
                      "lane": pa.array([r[1] for r in rows], pa.string())})
    # a temp table, not a registered view: add_flows_sql leaves a result open that unregister trips on
    b.con.register("_atrace_lanes_arrow", lanes)
    b.con.execute("CREATE OR REPLACE TEMP TABLE _atrace_lanes AS SELECT * FROM _atrace_lanes_arrow")
    b.con.unregister("_atrace_lanes_arrow")
    try:
        b.add_flows_sql(f"""
            WITH s AS (
                SELECT x.slice_id, x.corr_id, x.ts, l.lane FROM _slices_staging x
                JOIN _atrace_lanes l USING (track_id)
                WHERE x.slice_id BETWEEN {lo} AND {hi} AND x.corr_id IS NOT NULL
                  AND l.lane IN ('cpu', 'driver', 'pcie', 'eu')),
            firsts AS (SELECT corr_id, lane, arg_min(slice_id, ts) AS sid FROM s
                       WHERE lane IN ('cpu', 'driver') GROUP BY corr_id, lane),
            cpu AS (SELECT corr_id, sid FROM firsts WHERE lane = 'cpu'),
            drv AS (SELECT corr_id, sid FROM firsts WHERE lane = 'driver'),
            taken AS (SELECT DISTINCT dst_slice FROM flows WHERE dst_slice BETWEEN {lo} AND {hi})
            SELECT cpu.sid AS src_slice, drv.sid AS dst_slice, 'submit' AS kind, 'corr' AS raw_kind
            FROM cpu JOIN drv USING (corr_id) ANTI JOIN taken ON taken.dst_slice = drv.sid
            UNION ALL
            SELECT coalesce(drv.sid, cpu.sid), s.slice_id,
                   CASE WHEN drv.sid IS NULL THEN 'launch' WHEN s.lane = 'pcie' THEN 'dma' ELSE 'exec' END,
                   'corr'
            FROM s LEFT JOIN drv USING (corr_id) LEFT JOIN cpu USING (corr_id)
            ANTI JOIN taken ON taken.dst_slice = s.slice_id
            WHERE s.lane IN ('pcie', 'eu') AND coalesce(drv.sid, cpu.sid) IS NOT NULL
            ORDER BY 2""")
    finally:
        b.con.execute("DROP TABLE IF EXISTS _atrace_lanes")
