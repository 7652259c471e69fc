"""The scenarios `acceltrace sim` runs: name -> Plan for a seed."""

from __future__ import annotations

from acceltrace.sim.scenarios.base import KIND_OF, Plan

PIPELINE_SCENARIOS = ("clean", *KIND_OF, "mixed")
SCENARIOS = ("llm-inference", "training-step", *PIPELINE_SCENARIOS)


def build(name: str, seed: int) -> Plan:
    """The plan of scenario `name` for `seed`; ValueError naming the choices for an unknown name."""
    if name == "llm-inference":
        from acceltrace.sim.scenarios import llm

        return llm.build(seed)
    if name == "training-step":
        from acceltrace.sim.scenarios import training

        return training.build(seed)
    if name in PIPELINE_SCENARIOS:
        from acceltrace.sim.scenarios import pipeline

        return pipeline.build(name, seed)
    raise ValueError(f"unknown scenario {name!r}; expected one of: {', '.join(SCENARIOS)}")
