"""A register bank with known, bursty rates for the sampler and ingest tests.

Built on the device model's RegisterBank data structure but fed by the test with its
own random piecewise-constant rates, so the truth is known independently of the model.
"""

from __future__ import annotations

import numpy as np

from acceltrace.sim.registers import CounterSpec, RegisterBank

GB = 1e9


def make_bank(seed: int = 1, span_s: float = 2.0, n_prog: int = 6, slots: int = 2,
              segment_ns: int = 3_000_000) -> RegisterBank:
    """dev0 with 32-bit byte counters that wrap several times, a gauge, and n_prog programmable counters."""
    rng = np.random.default_rng(seed)
    bank = RegisterBank()
    bank.define(CounterSpec("dev0.pcie.h2d_bytes", "bytes", 32, "cumulative", "dev0", "fixed", peak_per_s=25 * GB))
    bank.define(CounterSpec("dev0.pcie.d2h_bytes", "bytes", 32, "cumulative", "dev0", "fixed", peak_per_s=25 * GB))
    bank.define(CounterSpec("dev0.q0.occupancy", "entries", 16, "gauge", "dev0", "fixed"))
    for i in range(n_prog):
        bank.define(CounterSpec(f"dev0.eu.u{i}.busy_cycles", "cycles", 32, "cumulative", "dev0",
                                "programmable", peak_per_s=1.5e9))
    bank.programmable_slots["dev0"] = slots
    end_ns = int(span_s * 1e9)
    edges = np.arange(0, end_ns + segment_ns, segment_ns, dtype=np.float64)
    for s in bank.specs:
        if s.kind == "gauge":
            levels = rng.integers(0, 64, len(edges) - 1)
            bank.extend_levels(s.name, edges[:-1], np.diff(levels, prepend=0))  # the bank takes level changes
        else:
            # bursty: most segments idle-ish, some near peak, so 32-bit registers wrap within ~0.2 s
            per_s = rng.choice([0.02, 0.3, 0.9], size=len(edges) - 1) * s.peak_per_s
            bank.extend_segments(s.name, edges[:-1], edges[1:], per_s / 1e9)
    bank.freeze(0, end_ns)
    return bank
