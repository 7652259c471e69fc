"""training-step: forward, backward and optimizer steps fed by the host.

Per device (one host thread each, independent replicas): the next batch (token ids and labels)
is prefetched on the H2D queue while the current step computes; forward and backward run L
layers of matrix and vector kernels, a vector-unit optimizer updates the weights, and the loss
is copied back on the D2H queue; the host reads the previous step's loss, so one step stays
queued ahead. Gradient exchange between devices is not modelled (no device-to-device DMA yet).
Nothing is injected.
"""

from __future__ import annotations

import random

from acceltrace.sim.config import random_machine
from acceltrace.sim.device import Kernel
from acceltrace.sim.scenarios.base import Plan

COMPUTE_Q, H2D_Q, D2H_Q = 0, 1, 2
BF16 = 2


def build(seed: int) -> Plan:
    rng = random.Random(f"training:{seed}")
    cfg = random_machine(seed)
    layers = rng.choice((6, 8, 12, 16))
    d = rng.choice((1024, 1536, 2048))
    tokens = rng.choice((4096, 8192, 16384))
    params = {
        "layers": layers, "d": d, "tokens": tokens,
        "batch_bytes": tokens * 4 * 2,  # token ids and labels
    }
    names = tuple("main" if i == 0 else f"worker {i}" for i in range(cfg.n_devices))
    per_step = layers * 5 * 4 + 80
    return Plan(cfg=cfg, params=params, program=program, steps=6, events_per_step=per_step * cfg.n_devices,
                thread_names=names)


def program(rt, p: dict, issues: tuple[str, ...], steps: int):
    L, d, t = p["layers"], p["d"], p["tokens"]
    w_layer = 12 * d * d * BF16
    act = t * d * BF16
    fwd = [Kernel("layer_fwd_matmul", "matrix", 2 * t * 12 * d * d, w_layer + 8 * act, BF16, BF16),
           Kernel("layer_fwd_norm_act", "vector", 10 * t * d, 4 * act, BF16, BF16)]
    bwd = [Kernel("layer_bwd_dgrad", "matrix", 2 * t * 12 * d * d, w_layer + 8 * act, BF16, BF16),
           Kernel("layer_bwd_wgrad", "matrix", 2 * t * 12 * d * d, w_layer + 8 * act, BF16, BF16),
           Kernel("layer_bwd_norm_act", "vector", 12 * t * d, 5 * act, BF16, BF16)]
    loss = Kernel("cross_entropy", "vector", 8 * t * 32000, t * 32000 * 4, 4, 4)
    opt = Kernel("adamw_update", "vector", 12 * L * w_layer // BF16, 8 * L * w_layer, 4, 4)
    yield from rt.malloc(L * w_layer * 4)
    batches = []
    for _ in range(2):
        batches.append((yield from rt.host_alloc(p["batch_bytes"], pinned=True)))
    loss_host = yield from rt.host_alloc(4, pinned=True)
    batches[0].write()
    yield from rt.memcpy(H2D_Q, batches[0], p["batch_bytes"], "h2d")
    prev_loss = None
    for s in range(steps):
        rt.step_begin()
        ev = yield from rt.event_record(H2D_Q)
        yield from rt.queue_wait_event(COMPUTE_Q, ev)
        for _ in range(L):
            for k in fwd:
                yield from rt.launch(COMPUTE_Q, k)
        yield from rt.launch(COMPUTE_Q, loss)
        # prefetch the next batch during this step's compute
        nxt = batches[(s + 1) % 2]
        nxt.write()
        yield from rt.memcpy(H2D_Q, nxt, p["batch_bytes"], "h2d")
        for _ in range(L):
            for k in bwd:
                yield from rt.launch(COMPUTE_Q, k)
        yield from rt.launch(COMPUTE_Q, opt)
        ev = yield from rt.event_record(COMPUTE_Q)
        yield from rt.queue_wait_event(D2H_Q, ev)
        loss_host.write()
        yield from rt.memcpy(D2H_Q, loss_host, 4, "d2h")
        got = yield from rt.event_record(D2H_Q)
        if prev_loss is not None:
            # reading the previous step's loss keeps one step queued ahead of the host
            yield from rt.event_synchronize(prev_loss)
        prev_loss = got
    yield from rt.device_synchronize()
