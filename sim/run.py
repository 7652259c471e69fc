"""Run a plan through the model: one host thread per device, all starting together."""

from __future__ import annotations

from dataclasses import dataclass

from acceltrace.sim.machine import Machine
from acceltrace.sim.runtime import Runtime
from acceltrace.sim.scenarios.base import Plan
from acceltrace.sim.trace import Recorder


@dataclass
class RunResult:
    plan: Plan
    machine: Machine
    rec: Recorder
    start_ns: float  # model time (0) ...
    end_ns: float  # ... to when the last host thread finished its program

    @property
    def duration_ns(self) -> float:
        return self.end_ns - self.start_ns

    @property
    def bank(self):
        return self.machine.bank


def run_plan(plan: Plan, steps: int | None = None) -> RunResult:
    m = Machine(plan.cfg)
    steps = plan.steps if steps is None else steps
    ends: list[float] = []
    names = plan.thread_names or tuple("main" if d == 0 else f"worker {d}" for d in range(plan.cfg.n_devices))

    def thread(rt: Runtime):
        yield from plan.program(rt, plan.params, plan.issues, steps)
        ends.append(rt.sim.now)

    for d in range(plan.cfg.n_devices):
        rt = Runtime(m, d, names[d], d)
        m.sim.process(thread(rt))
    m.run()
    end = max(ends) if ends else m.sim.now
    m.bank.freeze(0.0, max(end, m.sim.now))
    return RunResult(plan, m, m.rec, 0.0, end)
