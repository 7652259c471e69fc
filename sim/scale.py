"""The scale path: simulate representative steps in full, then repeat them to reach N events.

A run of K workload steps goes through the full model. Its steps [k0, k1) (past warm-up, before
the tail) form a block; the block is repeated R times, each copy shifted by the block's period
plus a small random pause (0 to 0.4 % of the period: the host doing slightly different amounts
of work between steps), and the tail follows the last copy. Durations, sizes and rates inside
every copy are the fully simulated ones, so the physics of each step stays consistent; only
where the copies sit in time varies. Records are assigned to a step by their correlation id
(the step whose API call caused them); device timestamps are
re-derived from each copy's host time through the device clock, so clock drift continues
across copies. Counter registers map each read onto the simulated run (sim/scale_bank.py). Records go to the writer in bulk, one block copy at a time.

The counterfactual of each issue is scaled the same way (same K, same copies, same pauses),
so impact_ns compares like with like.
"""

from __future__ import annotations

import bisect
import json
import os
from pathlib import Path

import numpy as np

from acceltrace.formats import record as R
from acceltrace.formats.atrace.writer import AtraceWriter
from acceltrace.sim import ground_truth, output
from acceltrace.sim.registers import RegisterBank
from acceltrace.sim.scale_bank import PeriodicBank
from acceltrace.sim.run import RunResult, run_plan
from acceltrace.sim.scenarios.base import Plan
from acceltrace.sim.trace import COLUMNS

FULL_EVENTS = 150_000  # records simulated in full before repeating
PAUSE_MAX = 0.004
MAX_AFFECTED_RANGES = 20_000

_TS, _DUR, _TRACK, _CORR = (COLUMNS.index(c) for c in ("ts", "dur", "track", "corr"))


class Layout:
    """Where the block is in a K-step run and where its copies go."""

    def __init__(self, result: RunResult, n_copies: int, pauses: np.ndarray):
        marks = result.machine.step_marks
        n_marks = min(len(v) for v in marks.values())
        if n_marks < 3:
            raise ValueError("the scale path needs at least 3 workload steps")
        self.k0 = 1 if n_marks < 6 else 2
        self.k1 = n_marks - 1
        self.w0 = min(v[self.k0] for v in marks.values())
        self.w1 = max(v[self.k1] for v in marks.values())
        self.period = self.w1 - self.w0
        self.marks = marks
        self.n_copies = n_copies
        gaps = self.period * (1.0 + pauses[:n_copies])
        self.shifts = np.concatenate([[0.0], np.cumsum(gaps)[:-1]])  # copy r starts at w0 + shifts[r]
        self.suffix_shift = float(self.shifts[-1] + gaps[-1] - self.period)
        self.end_ns = result.end_ns + self.suffix_shift

    def step_of_thread(self, thread: int, t: float) -> int:
        return bisect.bisect_right(self.marks[thread], t) - 1


def _classify(result: RunResult, lay: Layout) -> np.ndarray:
    """Per record: 0 prefix, 1 block, 2 suffix (by the step of the API call that caused it)."""
    rec = result.rec
    tracks = rec.tracks
    thread_of_track = {}
    for i, t in enumerate(tracks):
        if t.lane == "cpu":
            thread_of_track[i] = t.tid - 1000
    corr_part: dict[int, int] = {}
    part = np.empty(len(rec.rows), dtype=np.int8)

    def by_step(step: int) -> int:
        return 0 if step < lay.k0 else (1 if step < lay.k1 else 2)

    rows = rec.rows
    for i, row in enumerate(rows):
        th = thread_of_track.get(row[_TRACK])
        if th is not None:
            p = by_step(lay.step_of_thread(th, row[_TS]))
            part[i] = p
            if row[_CORR]:
                corr_part.setdefault(row[_CORR], p)
    for i, row in enumerate(rows):
        if row[_TRACK] in thread_of_track:
            continue
        p = corr_part.get(row[_CORR]) if row[_CORR] else None
        if p is None:
            dev = tracks[row[_TRACK]].device or 0
            p = by_step(lay.step_of_thread(dev if dev in lay.marks else 0, row[_TS]))
        part[i] = p
    return part


def _shift_in_place(recs: np.ndarray, t0_ns: np.ndarray, t1_ns: np.ndarray, shift_ns: float,
                    host: np.ndarray, dev_masks: list) -> None:
    """Move records `shift_ns` later: host ns directly, device records re-ticked from their model ns
    (t0_ns, t1_ns) so each device clock's rate and drift still apply."""
    recs["ts"][host] += np.int64(round(shift_ns))
    for dev, sel in dev_masks:
        if sel.any():
            a = dev.clock.ticks(t0_ns[sel] + shift_ns)
            recs["ts"][sel] = a
            recs["dur"][sel] = np.where(recs["kind"][sel] == R.INSTANT, 0, dev.clock.ticks(t1_ns[sel] + shift_ns) - a)


def _write(result: RunResult, lay: Layout, part: np.ndarray, path: Path, seed: int) -> int:
    m = result.machine
    pid = output.app_pid(seed)
    writer = AtraceWriter(path, header=output.header_for(m, seed))
    writer.add_records(output.naming_records(m, writer, pid, "python3"))
    recs = output.to_records(m, writer, pid)
    t0 = np.asarray([r[_TS] for r in m.rec.rows], dtype=np.float64)
    t1 = t0 + np.asarray([r[_DUR] for r in m.rec.rows], dtype=np.float64)
    flow_stride = np.uint32(int(recs["flow"].max()) + 1 if len(recs) else 1)
    corr_stride = np.uint64(int(recs["corr"].max()) + 1 if len(recs) else 1)
    writer.add_records(recs[part == 0])
    blk = part == 1
    block, bt0, bt1 = recs[blk], t0[blk], t1[blk]
    dev_masks = [(dev, block["clock"] == dev.index + 1) for dev in m.devices]
    host = block["clock"] == 0
    has_flow = block["flow"] != 0
    has_corr = block["corr"] != 0
    for r, shift in enumerate(lay.shifts):
        copy = block.copy()
        _shift_in_place(copy, bt0, bt1, shift, host, dev_masks)
        if r:
            copy["flow"][has_flow] += flow_stride * np.uint32(r)
            copy["corr"][has_corr] += corr_stride * np.uint64(r)
        writer.add_records(copy)
    suf = part == 2
    tail = recs[suf]
    _shift_in_place(tail, t0[suf], t1[suf], lay.suffix_shift, tail["clock"] == 0,
                    [(dev, tail["clock"] == dev.index + 1) for dev in m.devices])
    writer.add_records(tail)
    for domain, host_ns, ticks in output.sync_pairs(m, seed, lay.end_ns):
        writer.add_clock_sync(domain, host_ns, ticks)
    writer.close(lost_events=0, producers=[{"stream": 0, "pid": pid, "name": "python3", "lost": 0}],
                 closed_unix_ns=0)
    return writer.events_written


def _scaled_ranges(result: RunResult, lay: Layout, kind: str) -> list[tuple[int, float, float]]:
    """The issue's affected ranges carried onto every copy and the suffix, merged per track (model ns)."""
    ranges = ground_truth.affected_ranges(result, kind)
    out: dict[int, list[tuple[float, float]]] = {}
    for t, a, b in ranges:
        if a < lay.w0:
            out.setdefault(t, []).append((a, b))
        elif a < lay.w1:
            out.setdefault(t, []).extend((a + s, b + s) for s in lay.shifts)
        else:
            out.setdefault(t, []).append((a + lay.suffix_shift, b + lay.suffix_shift))
    gap = ground_truth.MERGE_GAP_NS
    while True:
        merged = ground_truth.merge_spans(out, gap)
        if len(merged) <= MAX_AFFECTED_RANGES:
            break
        gap *= 4  # a 100 M-event run would list millions of ranges: coarsen until it is readable
    return merged


def run_scaled(name: str, plan: Plan, events: int, fixed: float, per_step: float, out_dir: Path, seed: int) -> dict:
    """Write a run of about `events` records by repeating fully simulated steps."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    k_steps = max(plan.min_steps, 6, int(FULL_EVENTS / max(per_step, 1.0)))
    result = run_plan(plan, k_steps)
    rng = np.random.default_rng(seed + 99)
    probe = Layout(result, 1, np.zeros(1))
    part = _classify(result, probe)
    n_block = int((part == 1).sum())
    n_copies = max(1, int(round((events - (len(part) - n_block)) / max(n_block, 1))))
    pauses = rng.uniform(0.0, PAUSE_MAX, n_copies)
    lay = Layout(result, n_copies, pauses)
    atrace_tmp, actr_tmp, gt_tmp = (out_dir / f".{n}.tmp" for n in ("run.atrace", "run.actr", "ground_truth.json"))
    n_events = _write(result, lay, part, atrace_tmp, seed)
    bank = PeriodicBank(result.bank, lay.w0, lay.w1, lay.shifts, lay.suffix_shift, lay.end_ns)
    scaled = _ScaledResult(result, bank, lay.end_ns)
    counters = output.write_actr(scaled, actr_tmp, seed, n_events)
    issues = []
    for kind in plan.issues:
        cf = run_plan(plan.remove(kind), k_steps)
        cf_lay = Layout(cf, n_copies, pauses)
        issues.append(ground_truth.issue_entry(result, kind, _scaled_ranges(result, lay, kind),
                                               lay.end_ns - cf_lay.end_ns))
    truth = ground_truth.document(result, name, seed, issues, run_end_ns=lay.end_ns)
    truth["scaled"] = {"simulated_steps": k_steps, "block_steps": lay.k1 - lay.k0, "copies": n_copies}
    gt_tmp.write_text(json.dumps(truth, separators=(",", ":")) + "\n")
    os.replace(atrace_tmp, out_dir / "run.atrace")
    os.replace(actr_tmp, out_dir / "run.actr")
    os.replace(gt_tmp, out_dir / "ground_truth.json")
    return {"out": str(out_dir), "events": n_events, "run_ns": truth["run_ns"], "devices": plan.cfg.n_devices,
            "counter_samples": counters["samples"], "scaled": truth["scaled"],
            "issues": [{"kind": i["kind"], "impact_ns": i["impact_ns"]} for i in issues]}


class _ScaledResult:
    """What output.write_actr needs from a run: the machine (origin, clocks), a bank, the end."""

    def __init__(self, result: RunResult, bank: RegisterBank, end_ns: float):
        self.machine = _MachineView(result.machine, bank)
        self.end_ns = end_ns


class _MachineView:
    def __init__(self, machine, bank):
        self.origin_ns = machine.origin_ns
        self.bank = bank
