"""ground_truth.json: every injected issue, where it shows, and what it cost (a counterfactual re-run).

impact_ns = run time with the issue minus run time of the same seed with that one issue removed
(Plan.remove), both through the full model. Affected ranges are the records the issue produced
(tagged while the model ran, never written into the trace), host-side ranges it marked, and for
launch gaps and sync stalls the device idle gaps that overlap them, merged per track.
"""

from __future__ import annotations

import bisect
from collections import defaultdict

from acceltrace.sim.run import RunResult, run_plan
from acceltrace.sim.trace import COLUMNS

MERGE_GAP_NS = 100_000.0  # ranges on one track closer than this are one affected range
IDLE_KINDS = ("launch_gaps", "sync_stalls")

_TS, _DUR, _TRACK = COLUMNS.index("ts"), COLUMNS.index("dur"), COLUMNS.index("track")


def affected_ranges(result: RunResult, kind: str) -> list[tuple[int, float, float]]:
    """(track index, start, end) in model ns, merged per track."""
    rec = result.rec
    raw: list[tuple[int, float, float]] = []
    for i, k in rec.tags.items():
        if k == kind:
            row = rec.rows[i]
            raw.append((row[_TRACK], row[_TS], row[_TS] + row[_DUR]))
    host_ranges = [(t, a, b) for k, t, a, b in rec.ranges if k == kind]
    raw.extend(host_ranges)
    if kind in IDLE_KINDS:
        cpu = [r for r in raw if rec.tracks[r[0]].lane == "cpu"]
        raw.extend(_idle_gaps_overlapping(result, cpu))
    by_track: dict[int, list[tuple[float, float]]] = defaultdict(list)
    for t, a, b in raw:
        by_track[t].append((a, b))
    return merge_spans(by_track, MERGE_GAP_NS)


def merge_spans(by_track: dict[int, list[tuple[float, float]]], gap_ns: float) -> list[tuple[int, float, float]]:
    """(track, start, end) per track in track order, spans closer than gap_ns joined into one."""
    merged = []
    for t in sorted(by_track):
        spans = sorted(by_track[t])
        cur_a, cur_b = spans[0]
        for a, b in spans[1:]:
            if a <= cur_b + gap_ns:
                cur_b = max(cur_b, b)
            else:
                merged.append((t, cur_a, cur_b))
                cur_a, cur_b = a, b
        merged.append((t, cur_a, cur_b))
    return merged


def _idle_gaps_overlapping(result: RunResult, host: list[tuple[int, float, float]]):
    """Gaps between kernels on a device (all its units busy-merged) that overlap a host range."""
    rec = result.rec
    if not host:
        return []
    dev_of_thread = {}
    for r in host:
        name = rec.tracks[r[0]].name
        dev_of_thread[r[0]] = 0 if name == "main" else int(name.split()[-1])
    kernels: dict[int, list[tuple[float, float, int]]] = defaultdict(list)
    for row in rec.rows:
        t = rec.tracks[row[_TRACK]]
        if t.lane == "eu" and row[_DUR] > 0:
            kernels[t.device].append((row[_TS], row[_TS] + row[_DUR], row[_TRACK]))
    out = []
    for dev, ks in kernels.items():
        ks.sort()
        gaps = []
        busy_end = ks[0][1]
        for a, b, tr in ks[1:]:
            if a > busy_end:
                gaps.append((busy_end, a, tr))
            busy_end = max(busy_end, b)
        ranges = sorted((a, b) for t, a, b in host if dev_of_thread[t] == dev)
        if not ranges:
            continue
        starts = [a for a, _b in ranges]
        for g0, g1, tr in gaps:
            # one thread's ranges do not overlap: only the last one starting before the gap ends can
            j = bisect.bisect_left(starts, g1) - 1
            if j >= 0 and ranges[j][1] > g0:
                out.append((tr, g0, g1))
    return out


def build(result: RunResult, scenario: str, seed: int, steps: int | None = None, rerun=None) -> dict:
    """The ground-truth document for a finished run (re-runs each counterfactual)."""
    plan = result.plan
    rerun = rerun or (lambda p: run_plan(p, steps))
    issues = []
    for kind in plan.issues:
        without = rerun(plan.remove(kind))
        issues.append(issue_entry(result, kind, affected_ranges(result, kind),
                                  result.duration_ns - without.duration_ns))
    return document(result, scenario, seed, issues)


def issue_entry(result: RunResult, kind: str, ranges: list[tuple[int, float, float]], impact_ns: float) -> dict:
    """One issue of the ground truth: its merged (track, start, end) model-ns ranges named and made absolute."""
    origin = result.machine.origin_ns
    names = [t.name for t in result.rec.tracks]
    affected = [[names[t], origin + int(round(a)), origin + int(round(b))] for t, a, b in ranges]
    return {
        "kind": kind,
        "start_ns": min((a for _n, a, _b in affected), default=origin),
        "end_ns": max((b for _n, _a, b in affected), default=origin),
        "impact_ns": int(round(impact_ns)),
        "affected": affected,
    }


def document(result: RunResult, scenario: str, seed: int, issues: list[dict], run_end_ns: float | None = None) -> dict:
    """The ground-truth JSON object around a list of issues."""
    cfg = result.plan.cfg
    origin = result.machine.origin_ns
    end = result.end_ns if run_end_ns is None else run_end_ns
    return {
        "scenario": scenario,
        "seed": seed,
        "run_start_ns": origin,
        "run_end_ns": origin + int(round(end)),
        "run_ns": int(round(end - result.start_ns)),
        "config": {
            "devices": cfg.n_devices,
            "link_gen": cfg.link.gen, "link_width": cfg.link.width,
            "max_payload_bytes": cfg.link.mps, "max_read_request_bytes": cfg.link.mrrs,
            "uplink": None if cfg.uplink is None else {"gen": cfg.uplink.gen, "width": cfg.uplink.width},
            "link_payload_bytes_per_s": cfg.link.payload_bytes_per_ns * 1e9,
        },
        "issues": issues,
    }
