"""Named queries over a live trace's segments: one slice with its correlation chain across segments,
and name search.

A live capture (server/live.py) is a sequence of small DuckDB files of the store's schema, each
with its own ids; every segment object passed here carries `con` (read-only), `slice_base`
(global id of its slice 0), `n_slices`, `track_map` (local -> global track id) and the capture's
start. Global ids go in and out; times out are ns relative to the capture's start. A chain that
crosses a segment boundary is joined by correlation id, with the rule ingest uses inside one file
(ingest/native/flows.py): cpu -> driver is `submit`; driver -> pcie is `dma`, driver -> eu `exec`;
without a driver slice, cpu -> device work is `launch`.
"""

from __future__ import annotations

from acceltrace.store import queries

CORR_MAX_SLICES = 1000
_CHAIN_COLS = ("slice_id", "track_id", "lane", "ts", "dur", "depth", "name")


def merged_meta(cons: list) -> dict[str, str]:
    """trace_meta of the newest segment (device link facts, formats) without per-segment counters."""
    out: dict[str, str] = {}
    for con in cons:
        cur = con.cursor()
        try:
            out.update(queries.trace_meta(cur))
        finally:
            cur.close()
    for k in ("warnings", "warning_count", "dropped_events", "start_ns", "end_ns", "lost_events"):
        out.pop(k, None)
    return out


def _segment_of(segments: list, slice_id: int):
    for seg in segments:
        if seg.slice_base <= slice_id < seg.slice_base + seg.n_slices:
            return seg
    return None


def _global(seg, row: dict, start_ns: int) -> dict:
    row = dict(row)
    row["slice_id"] = int(row["slice_id"]) + seg.slice_base
    row["track_id"] = int(seg.track_map[int(row["track_id"])])
    row["ts"] = int(row["ts"]) - start_ns
    return row


def slice_detail(segments: list, slice_id: int, start_ns: int) -> dict | None:
    """The slice detail document of GET /api/traces/{id}/slices/{sid} for a live trace, or None."""
    seg = _segment_of(segments, slice_id)
    if seg is None:
        return None
    local = slice_id - seg.slice_base
    cur = seg.con.cursor()
    try:
        s = queries.slice_row(cur, local)
        if s is None:
            return None
        track = queries.track_row(cur, s["track_id"])
        direct = queries.flows_touching(cur, local)
        chain = queries.correlation_chain(cur, local)
        ends = queries.flow_ends(cur, local, direct, {c["slice_id"] for c in chain.slices})
    finally:
        cur.close()
    s = _global(seg, s, start_ns)
    track = {**track, "track_id": s["track_id"]} if track else None
    slices = {r["slice_id"]: r for r in (_global(seg, c, start_ns) for c in chain.slices)}
    flows = [_global_flow(seg, f) for f in chain.flows]
    if s.get("corr_id") is not None:
        _corr_across(segments, seg, s, slices, flows, start_ns)
    s["id"] = s.pop("slice_id")
    s["end"] = s["ts"] + s["dur"]
    s["track"] = track
    direct = [_global_flow(seg, f) for f in direct]
    hits = sorted(slices.values(), key=lambda r: (r["ts"], r["slice_id"]))
    return {"slice": s,
            "chain": {"slices": [{"id": r["slice_id"], **r} for r in hits], "flows": flows, "truncated": chain.truncated},
            "flows": {"in": [f for f in direct if f["dst_slice"] == slice_id],
                      "out": [f for f in direct if f["src_slice"] == slice_id]},
            "flow_ends": [{"id": r["slice_id"], **r} for r in (_global(seg, e, start_ns) for e in ends)]}


def _global_flow(seg, f: dict) -> dict:
    f = dict(f)
    for k in ("src_slice", "dst_slice"):
        if f[k] is not None:
            f[k] = int(f[k]) + seg.slice_base
    f["flow_id"] = None  # ids are per segment; the pair of slices is what identifies it here
    return f


def _corr_across(segments: list, home, s: dict, slices: dict, flows: list, start_ns: int) -> None:
    """Slices of other segments with the selected slice's correlation id join its chain."""
    corr = int(s["corr_id"])
    found = []
    for seg in segments:
        cur = seg.con.cursor()
        try:
            rows = cur.execute(
                "SELECT s.slice_id, s.track_id, t.lane, s.ts, s.dur, s.depth, s.name FROM slices s"
                f" JOIN tracks t USING (track_id) WHERE s.corr_id = ? ORDER BY s.ts LIMIT {CORR_MAX_SLICES}",
                [corr]).fetchall()
        finally:
            cur.close()
        found += [_global(seg, dict(zip(_CHAIN_COLS, r)), start_ns) for r in rows]
    if not any(r["slice_id"] not in slices for r in found):
        return  # the home segment already held the whole chain
    by_lane: dict[str, list[dict]] = {}
    for r in sorted(found, key=lambda r: (r["ts"], r["slice_id"])):
        by_lane.setdefault(r["lane"], []).append(r)
    cpu = by_lane.get("cpu", [None])[0]
    drv = by_lane.get("driver", [None])[0]
    have = {(f["src_slice"], f["dst_slice"]) for f in flows}
    edges = []
    if cpu and drv:
        edges.append((cpu, drv, "submit"))
    for lane in ("pcie", "eu"):
        for r in by_lane.get(lane, []):
            src = drv or cpu
            if src is not None:
                edges.append((src, r, "launch" if drv is None else ("dma" if lane == "pcie" else "exec")))
    for a, b, kind in edges:
        if (a["slice_id"], b["slice_id"]) in have:
            continue
        flows.append({"flow_id": None, "src_slice": a["slice_id"], "dst_slice": b["slice_id"], "kind": kind,
                      "raw_kind": "corr"})
        for r in (a, b):
            slices.setdefault(r["slice_id"], {**r, "hops": 1})


def search(segments: list, q: str, offset: int, limit: int, start_ns: int, names: str | None = None) -> dict:
    """Name search over every segment in time order (segments are in time order; a page is cut from
    the concatenation); `names` as for queries.search_slices (each segment's name dictionary)."""
    results, total = [], 0
    want = offset + limit
    for seg in segments:
        cur = seg.con.cursor()
        try:
            page = queries.search_slices(cur, q, offset=0, limit=max(1, want - len(results)) if len(results) < want else 1,
                                         names=names)
        finally:
            cur.close()
        total += page.total
        if len(results) < want:
            results += [_global(seg, r, start_ns) for r in page.rows]
    rows = sorted(results, key=lambda r: (r["ts"], r["slice_id"]))[offset:offset + limit]
    more = offset + len(rows) < total
    return {"q": q, "offset": offset, "limit": limit, "total": total, "total_capped": False,
            "results": [{"id": r["slice_id"], **r} for r in rows], "has_more": more,
            "next_offset": offset + len(rows) if more else None}
