"""What a scenario is: a machine, workload sizes, a host program per device, and injected issues.

``Plan.issues`` are the injected problems (ground-truth kinds). ``remove(kind)`` gives the
counterfactual plan with that one issue gone (the buffer pinned, the transfers batched, the
saturated link not the limit, ...); the ground truth re-runs it with the same seed.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable

from acceltrace.sim.machine import MachineConfig

# scenario name -> ground-truth kind (= the id of the analysis pass that should find it)
KIND_OF = {
    "pageable-memory": "pageable_memory",
    "small-transfers": "small_transfers",
    "pcie-saturation": "pcie_saturation",
    "strided-access": "memory_access_inefficiency",
    "copy-compute-serialization": "copy_compute_serialization",
    "launch-gaps": "launch_gaps",
    "sync-stalls": "sync_stalls",
    "redundant-transfers": "redundant_transfers",
}


@dataclass
class Plan:
    cfg: MachineConfig
    params: dict
    program: Callable  # program(rt, params, issues, steps) -> generator, one per device's host thread
    steps: int
    issues: tuple[str, ...] = ()
    # kind -> fn(plan) -> plan without that issue; default drops the kind from `issues`
    removers: dict = field(default_factory=dict)
    events_per_step: float = 100.0
    min_steps: int = 1  # fewer steps would not show the issue (e.g. pinning costs not yet paid back)
    thread_names: tuple[str, ...] = ()

    def remove(self, kind: str) -> "Plan":
        fn = self.removers.get(kind)
        if fn is not None:
            return fn(self)
        return replace(self, issues=tuple(k for k in self.issues if k != kind))

    def with_steps(self, steps: int) -> "Plan":
        return replace(self, steps=max(1, int(steps)))
