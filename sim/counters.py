"""The device model as a live counter source: `acceltrace collect --source sim` with no model running.

The model first simulates the requested span, then the sampler reads its frozen register bank
as wall-clock time passes: model time = bank.start_ns + (CLOCK_MONOTONIC now - when collection
began). The source itself (collect/counters/sim.py) reads any register bank and knows nothing of
the model; this module is the model's side, so collect/ never imports sim/.
"""

from __future__ import annotations

import math

from acceltrace.collect.counters.base import SourceUnavailable
from acceltrace.collect.counters.sim import SimSource
from acceltrace.collect.sampler import WallClock

REALTIME_SCENARIO = "llm-inference"


def realtime_sim_source(duration_s: float, scenario: str = REALTIME_SCENARIO, seed: int = 0,
                        progress=None) -> SimSource:
    """A source over a model run simulated up front, read as wall-clock time passes."""
    need_ns = int((duration_s * 1.02 + 0.05) * 1e9)  # the last tick must still read inside the run
    src = SimSource(_bank_from_scenario(scenario, seed, need_ns, progress), WallClock())
    src.realtime_anchor = True
    return src


def _bank_from_scenario(scenario: str, seed: int, duration_ns: int, progress=None):
    """Simulate `scenario` long enough to cover duration_ns of model time; its frozen register bank.

    Uses the model's public entry points (sim.scenarios.build, sim.run.run_plan): one run at
    the scenario's own length tells the model time per step, a second run takes enough steps.
    """
    from acceltrace.sim.run import run_plan
    from acceltrace.sim.scenarios import build

    try:
        plan = build(scenario, seed)
    except (ValueError, KeyError) as e:
        raise SourceUnavailable(f"sim: {e}") from None
    res = run_plan(plan)
    if res.duration_ns < duration_ns:
        steps = int(math.ceil(plan.steps * duration_ns / max(res.duration_ns, 1.0) * 1.05))
        if progress:
            progress(f"simulating {scenario}: {steps} steps for {duration_ns / 1e9:.1f} s of model time")
        res = run_plan(plan, steps=steps)
    return res.bank
