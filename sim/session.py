"""One `acceltrace sim` run: plan, size, model, files (run.atrace, run.actr, ground_truth.json)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from acceltrace.sim import ground_truth, output, scenarios
from acceltrace.sim.run import run_plan
from acceltrace.sim.scenarios.base import Plan

# Above this many events the scale path (sim/scale.py) repeats fully simulated steps.
FULL_MODEL_MAX_EVENTS = 1_000_000


def measure(plan: Plan) -> tuple[float, float]:
    """(records outside the steps, records per step), from 1- and 3-step runs of this plan."""
    e1 = len(run_plan(plan, 1).rec)
    e3 = len(run_plan(plan, 3).rec)
    per_step = max((e3 - e1) / 2.0, 1.0)
    return e1 - per_step, per_step


def steps_for(plan: Plan, events: int | None) -> int:
    """Steps that make about `events` records."""
    if events is None:
        return plan.steps
    fixed, per_step = measure(plan)
    return max(plan.min_steps, int(round((events - fixed) / per_step)))


def run_scenario(name: str, out_dir: Path, seed: int = 0, events: int | None = None) -> dict:
    """Run scenario `name` and write its three files into out_dir; returns a summary."""
    plan = scenarios.build(name, seed)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    if events is not None and events > FULL_MODEL_MAX_EVENTS:
        from acceltrace.sim.scale import run_scaled

        fixed, per_step = measure(plan)
        return run_scaled(name, plan, events, fixed, per_step, out_dir, seed)
    steps = steps_for(plan, events)
    result = run_plan(plan, steps)
    truth = ground_truth.build(result, name, seed, steps)
    return write_run(result, truth, out_dir, seed)


def write_run(result, truth: dict, out_dir: Path, seed: int, header_extra: dict | None = None) -> dict:
    """The three files, each written under a temporary name and renamed into place."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    atrace_tmp = out_dir / ".run.atrace.tmp"
    actr_tmp = out_dir / ".run.actr.tmp"
    n_events = output.write_atrace(result, atrace_tmp, seed, extra_header=header_extra)
    counters = output.write_actr(result, actr_tmp, seed, n_events)
    gt_tmp = out_dir / ".ground_truth.json.tmp"
    gt_tmp.write_text(json.dumps(truth, separators=(",", ":")) + "\n")
    os.replace(atrace_tmp, out_dir / "run.atrace")
    os.replace(actr_tmp, out_dir / "run.actr")
    os.replace(gt_tmp, out_dir / "ground_truth.json")
    return {
        "out": str(out_dir),
        "events": n_events,
        "run_ns": truth["run_ns"],
        "devices": truth["config"]["devices"],
        "counter_samples": counters["samples"],
        "issues": [{"kind": i["kind"], "impact_ns": i["impact_ns"]} for i in truth["issues"]],
    }
