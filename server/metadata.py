"""The trace metadata document (GET /api/traces/{id} and the trace page's context)."""

from __future__ import annotations

import json

from acceltrace.tiles.build import lane_rank_sql
from acceltrace.store.link import link_peak_bytes_per_s
from acceltrace.server.deps import TraceHandle

CATALOG_FIELDS = ("id", "name", "format", "status", "created", "source_bytes", "db_bytes", "counts",
                  "progress", "error")
LINK_KEYS = ("link_gen", "link_width", "max_payload_bytes")


def catalog_entry(row: dict) -> dict:
    return {k: row.get(k) for k in CATALOG_FIELDS}


def link_peaks(meta: dict[str, str]) -> dict[str, dict]:
    """Per device suffix ('' for a single device): link facts and the effective peak bytes/s.

    The peak is store.link.link_peak_bytes_per_s (the one definition of "100 %").
    """
    out: dict[str, dict] = {}
    for key, value in meta.items():
        base, _, dev = key.partition(":")
        if base in LINK_KEYS:
            out.setdefault(dev, {})[base] = value
    for dev, d in out.items():
        try:
            gen, width = int(float(d["link_gen"])), int(float(d["link_width"]))
            mps = int(float(d.get("max_payload_bytes", 256)))
            d["link_peak_bytes_per_s"] = link_peak_bytes_per_s(gen, width, mps)
        except (KeyError, ValueError):
            pass
    return out


def trace_metadata(h: TraceHandle, row: dict) -> dict:
    """The metadata document (cached per open trace: a published trace never changes)."""
    doc = h.cache.get("metadata")
    if doc is None:
        doc = _build(h)
        h.cache["metadata"] = doc
    return {**catalog_entry(row), **doc}


def _build(h: TraceHandle) -> dict:
    cur = h.cursor()
    try:
        meta = dict(cur.execute("SELECT key, value FROM trace_meta").fetchall())
        has_lod = h.info is not None
        if has_lod:
            track_rows = cur.execute(
                "SELECT t.track_id, t.lane, t.group_name, t.name, t.device, t.process, t.thread, t.unit, t.sort_key,"
                " l.max_depth, l.grp FROM tracks t JOIN lod_tracks l USING (track_id) ORDER BY l.ui_order"
            ).fetchall()
            group_rows = cur.execute(
                "SELECT grp, lane, group_name, part, parts FROM lod_groups ORDER BY grp").fetchall()
            lod_kv = dict(cur.execute("SELECT key, value FROM lod_info").fetchall())
        else:
            track_rows = cur.execute(
                "SELECT t.track_id, t.lane, t.group_name, t.name, t.device, t.process, t.thread, t.unit, t.sort_key,"
                f" coalesce(d.m, 0), 0 FROM tracks t LEFT JOIN (SELECT track_id, max(depth) m FROM slices GROUP BY 1) d"
                f" USING (track_id) ORDER BY {lane_rank_sql('t.lane')}, t.group_name, t.sort_key, t.track_id"
            ).fetchall()
            group_rows = [(0, "", "all tracks", 0, 1)]
            lod_kv = {}
    finally:
        cur.close()
    cols = ("track_id", "lane", "group_name", "name", "device", "process", "thread", "unit", "sort_key", "max_depth")
    tracks = []
    members: dict[int, list[int]] = {}
    for r in track_rows:
        t = dict(zip(cols, r[:10]))
        t["group"] = f"g{r[10]}"
        members.setdefault(r[10], []).append(t["track_id"])
        tracks.append(t)
    groups = []
    for grp, lane, group_name, part, parts in group_rows:
        label = f"{lane} · {group_name}" if group_name else lane
        if parts > 1:
            label += f" ({part + 1}/{parts})"
        groups.append({"id": f"g{grp}", "name": label, "lane": lane, "group_name": group_name,
                       "track_ids": members.get(grp, [])})
    start_ns, end_ns = int(meta["start_ns"]), int(meta["end_ns"])
    info = h.info
    levels = ({"min": 0, "max": info.max_level, "buckets_per_tile": 1024, "pyramid_from": info.base_level,
               "lod_build_ms": int(lod_kv["build_ms"]) if "build_ms" in lod_kv else None}
              if info else None)
    links = link_peaks(meta)
    public_meta = {k: v for k, v in meta.items() if k != "warnings"}
    try:
        warnings = json.loads(meta.get("warnings", "[]"))
    except ValueError:
        warnings = []
    return {
        "start_abs_ns": str(start_ns),
        "duration_ns": end_ns - start_ns,
        "warning_count": int(meta.get("warning_count", 0)),
        "warnings": warnings[:50],
        "dropped_events": int(meta.get("dropped_events", 0)),
        "lost_events": int(meta.get("lost_events", 0)),
        "links": links,
        "meta": public_meta,
        "levels": levels,
        "min_level": 0,
        "max_level": info.max_level if info else None,
        "groups": groups,
        "tracks": tracks,
    }
