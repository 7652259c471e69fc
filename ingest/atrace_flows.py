"""Flows of an .atrace trace: explicit (flow ids) and by correlation id (docs/formats.md, "Flows")."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from collect import record as R


def explicit_flows(b, label: str, flow_parts: list[dict]) -> None:
    """Flows from FLOW_OUT/FLOW_IN records matched by (stream, flow id); unmatched ends are counted.

    One source may feed several destinations (fan-out); a destination without a source is kept
    with an empty source end (its source fell outside the file), as the store allows.
    """
    if not flow_parts:
        return
    key = np.concatenate([p["key"] for p in flow_parts])
    out = np.concatenate([p["out"] for p in flow_parts])
    kind = np.concatenate([p["kind"] for p in flow_parts])
    sl = np.concatenate([p["slice"] for p in flow_parts])
    src_keys, first = np.unique(key[out], return_index=True)
    src_slice, src_kind = sl[out][first], kind[out][first]
    if out.sum() > len(src_keys):
        b.warn(label, f"{int(out.sum()) - len(src_keys)} flow sources reuse a flow id already used in their "
                      "stream; the first source is kept")
    dst_key, dst_slice, dst_kind = key[~out], sl[~out], kind[~out]
    if not len(dst_key):
        b.warn(label, f"{len(src_keys)} flow sources have no destination in the file")
        return
    if len(src_keys):
        pos = np.minimum(np.searchsorted(src_keys, dst_key), len(src_keys) - 1)
        found = src_keys[pos] == dst_key
    else:
        pos, found = np.zeros(len(dst_key), np.int64), np.zeros(len(dst_key), bool)
    src = np.where(found, src_slice[pos] if len(src_keys) else 0, 0)
    # the source's flow kind wins; a destination's own kind covers a missing or unspecified source
    k = np.where(found & ((src_kind[pos] if len(src_keys) else 0) > 0), src_kind[pos] if len(src_keys) else 0,
                 dst_kind)
    if (~found).any():
        b.warn(label, f"{int((~found).sum())} flow destinations have no source in the file "
                      "(kept with an empty source end)")
    used = np.zeros(len(src_keys), bool)
    used[pos[found]] = True
    if (~used).any():
        b.warn(label, f"{int((~used).sum())} flow sources have no destination in the file")
    names = np.array([n or "other" for n in R.FLOW_KINDS], dtype=object)
    b.add_flows(pa.array(src, pa.int64(), mask=~found), pa.array(dst_slice, pa.int64()),
                pa.array(names[np.clip(k, 0, len(names) - 1)].tolist(), pa.string()),
                pa.array(["atrace"] * len(dst_slice), pa.string()))


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
