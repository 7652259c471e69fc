"""The trace metadata document (GET /api/traces/{id} and the trace page's context)."""

from __future__ import annotations

import json

from acceltrace.store import queries
from acceltrace.store.link import link_peak_bytes_per_s
from acceltrace.server.deps import TraceHandle
from acceltrace.tiles import layout
from acceltrace.tiles.query import DEPTH_PAGE

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
    return {**catalog_entry(row), **h.once("metadata", lambda: _build(h))}


def _build(h: TraceHandle) -> dict:
    lod = h.info is not None
    with h.cursor() as cur:
        meta = queries.trace_meta(cur)
        track_rows = layout.tracks_in_ui_order(cur, lod)
        group_rows = layout.tile_groups(cur, lod)
        build_ms = layout.build_ms(cur) if lod else None
    tracks = []
    members: dict[int, list[int]] = {}
    for t in track_rows:
        grp = t.pop("grp")
        t["group"] = f"g{grp}"
        members.setdefault(grp, []).append(t["track_id"])
        tracks.append(t)
    groups = []
    for g in group_rows:
        label = f"{g['lane']} · {g['group_name']}" if g["group_name"] else g["lane"]
        if g["parts"] > 1:
            label += f" ({g['part'] + 1}/{g['parts']})"
        groups.append({"id": f"g{g['grp']}", "name": label, "lane": g["lane"], "group_name": g["group_name"],
                       "track_ids": members.get(g["grp"], [])})
    start_ns, end_ns = int(meta["start_ns"]), int(meta["end_ns"])
    info = h.info
    levels = ({"min": 0, "max": info.max_level, "buckets_per_tile": 1024, "pyramid_from": info.base_level,
               "lod_build_ms": build_ms, "depth_page": DEPTH_PAGE}
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
