"""A batch-inference pipeline, well behaved by default, with one switch per inefficiency.

Clean shape per device: weights and a lookup table resident (uploaded once); each step the
host fills a pinned input buffer, copies it on the H2D queue, the compute queue waits for it
with an event, runs L layers (a matmul on a matrix unit and a contiguous gather on a vector
unit), and the D2H queue copies the result back; the host runs two steps ahead and waits only
for results it needs. Copies overlap compute, the link is busy well under half the time, one
transfer at a time. Each issue switch changes exactly one of those properties.
"""

from __future__ import annotations

import random
from dataclasses import replace

from acceltrace.sim.config import random_machine, with_link_scale
from acceltrace.sim.device import Kernel
from acceltrace.sim.scenarios.base import KIND_OF, Plan

MB = 1 << 20
COMPUTE_Q, H2D_Q, D2H_Q, H2D_Q2 = 0, 1, 2, 3
PAGEABLE, SMALL, SATURATION = "pageable_memory", "small_transfers", "pcie_saturation"
STRIDED, SERIAL, GAPS, SYNCS, REDUNDANT = ("memory_access_inefficiency", "copy_compute_serialization",
                                           "launch_gaps", "sync_stalls", "redundant_transfers")
# `mixed` needs three issues whose costs add up rather than hide one another. In a pipelined run
# the slowest stage sets the pace, so a host-side issue hides a device-side one; an issue that
# serialises host and device (sync stalls) or copy and compute (copy/compute serialisation)
# puts everything on one critical path, so it leads each combination.
MIX_WITH = {SYNCS: (SMALL, STRIDED, REDUNDANT), SERIAL: (STRIDED, REDUNDANT)}
CONFLICTS = {frozenset((REDUNDANT, SMALL))}  # many small copies keep the host busy while the table moves


def _u(rng, lo, hi):
    return lo + (hi - lo) * rng.random()


def build(scenario: str, seed: int) -> Plan:
    rng = random.Random(f"pipeline:{scenario}:{seed}")
    if scenario == "clean":
        issues: tuple[str, ...] = ()
    elif scenario == "mixed":
        issues = _pick_three(rng)
    else:
        issues = (KIND_OF[scenario],)
    n_dev, switch = None, "auto"
    if SATURATION in issues:
        n_dev = rng.choice((1, 2, 2, 4))
        switch = "narrow" if n_dev > 1 else "none"
    elif issues:
        n_dev = 1 if scenario == "mixed" else None
    cfg = random_machine(seed, n_devices=n_dev, switch=switch)
    dev, host, link = cfg.device, cfg.host, cfg.link
    link_bw = link.payload_bytes_per_ns
    if PAGEABLE in issues and host.host_memcpy_bytes_per_ns > link_bw / 2.5:
        # staging must be the slower stage (true on any Gen4+ x16 host); keep it so on slow links too
        cfg = replace(cfg, host=replace(host, host_memcpy_bytes_per_ns=link_bw / 2.5))
        host = cfg.host
    layers = rng.randrange(4, 11)
    if SMALL in issues:
        in_bytes = rng.choice((512 << 10, 1 * MB, 2 * MB))
    else:
        in_bytes = rng.randrange(8, 49) * MB
    h2d_ns = dev.dma_latency_ns + in_bytes / link_bw
    compute_ns = h2d_ns / _u(rng, 0.35, 0.55)
    if PAGEABLE in issues:
        staging_ns = in_bytes / host.host_memcpy_bytes_per_ns
        compute_ns = max(h2d_ns / 0.55, _u(rng, 0.3, 0.6) * staging_ns)
    if SATURATION in issues:
        if cfg.n_devices == 1:
            in_bytes = int(compute_ns * _u(rng, 1.6, 2.5) * link_bw) // MB * MB  # the link cannot keep up
        else:
            compute_ns = h2d_ns / _u(rng, 0.55, 0.75)  # each link fine alone, n of them overload the uplink
    # never launch-bound when clean: host cost per step well under device time
    compute_ns = max(compute_ns, layers * 2 * host.launch_ns * 2.5)
    t_mm = compute_ns * 0.8 / layers
    t_vec = compute_ns * 0.2 / layers
    mm_flops = (t_mm - 600) * dev.matrix_flops_per_ns
    matmul = Kernel("matmul_bf16", "matrix", mm_flops, (t_mm - 600) * dev.hbm_bytes_per_ns * 0.25, 2, 2)
    gather_bytes = (t_vec - 600) * dev.hbm_bytes_per_ns
    elem = 4
    gather = Kernel("gather_rows", "vector", gather_bytes / elem, gather_bytes, elem, elem)
    strided = Kernel("gather_rows", "vector", gather_bytes / elem, gather_bytes, elem,
                     rng.choice((64, 128, 256)))
    # device time per step as the issues leave it (strided gathers are slower): the other issues are
    # sized against it so that none hides another
    amp = strided.bytes_fetched(dev) / strided.bytes_requested if STRIDED in issues else 1.0
    device_ns = compute_ns * (0.8 + 0.2 * amp)
    kernel_ns = device_ns / (2 * layers)
    params = {
        "layers": layers,
        "in_bytes": in_bytes,
        "out_bytes": rng.randrange(1, 5) * MB,
        "weights_bytes": rng.randrange(32, 129) * MB,
        # re-sent every step, the table makes the copies outlast the compute they used to hide under
        "table_bytes": max(MB, int(device_ns * link_bw * _u(rng, 1.3, 1.6) - in_bytes) // MB * MB),
        "piece_bytes": rng.choice((4096, 8192, 16384)),
        "prep_ns": _u(rng, 10_000, 40_000),
        "gap_ns": kernel_ns * _u(rng, 1.5, 3.0),
        "matmul": matmul,
        "gather": gather,
        "gather_strided": strided,
    }
    removers = {}
    if SATURATION in issues:
        if cfg.n_devices == 1:
            removers[SATURATION] = lambda p: replace(p, cfg=with_link_scale(p.cfg, 2.0),
                                                     issues=tuple(k for k in p.issues if k != SATURATION))
        else:
            removers[SATURATION] = lambda p: replace(p, cfg=replace(p.cfg, uplink=None),
                                                     issues=tuple(k for k in p.issues if k != SATURATION))
    per_step = 10 * layers + 40 + (params["in_bytes"] // params["piece_bytes"] * 4 if SMALL in issues else 0)
    names = tuple("main" if d == 0 else f"worker {d}" for d in range(cfg.n_devices))
    return Plan(cfg=replace(cfg, n_queues=4), params=params, program=program, steps=30, issues=issues,
                removers=removers, events_per_step=per_step * cfg.n_devices, thread_names=names,
                # pinning the counterfactual's buffers costs time up front; enough steps pay it back
                min_steps=12 if PAGEABLE in issues else 3)


def _pick_three(rng: random.Random) -> tuple[str, ...]:
    lead = SYNCS if rng.random() < 0.5 else SERIAL
    while True:
        pair = rng.sample(MIX_WITH[lead], 2)
        if frozenset(pair) not in CONFLICTS:
            return (lead, *pair)


def program(rt, p: dict, issues: tuple[str, ...], steps: int):
    """One device's host thread."""
    on = set(issues)
    tag = {k: k for k in on}.get
    split = SATURATION in on and rt.m.cfg.n_devices == 1
    yield from rt.malloc(p["weights_bytes"])
    yield from rt.malloc(p["table_bytes"])
    yield from rt.malloc(p["in_bytes"] * 2)
    yield from rt.malloc(p["out_bytes"] * 2)
    weights = yield from rt.host_alloc(p["weights_bytes"], pinned=True)
    table = yield from rt.host_alloc(p["table_bytes"], pinned=True)
    inputs, outputs = [], []
    for _ in range(2):
        inputs.append((yield from rt.host_alloc(p["in_bytes"], pinned=PAGEABLE not in on)))
        outputs.append((yield from rt.host_alloc(p["out_bytes"], pinned=PAGEABLE not in on)))
    yield from rt.memcpy(H2D_Q, weights, p["weights_bytes"], "h2d")
    if REDUNDANT not in on:
        yield from rt.memcpy(H2D_Q, table, p["table_bytes"], "h2d")
    yield from rt.device_synchronize()

    copy_q = COMPUTE_Q if SERIAL in on else H2D_Q
    out_q = COMPUTE_Q if SERIAL in on else D2H_Q
    gather = p["gather_strided"] if STRIDED in on else p["gather"]
    done = []
    for s in range(steps):
        rt.step_begin()
        inb, outb = inputs[s % 2], outputs[s % 2]
        inb.write()
        outb.write()
        yield from rt.host_work(p["prep_ns"])
        if s >= 2:
            yield from rt.event_synchronize(done[s - 2])
        if REDUNDANT in on:
            # the table never changes, yet goes over the link again every step
            yield from rt.memcpy(copy_q, table, p["table_bytes"], "h2d", tag=REDUNDANT if s > 0 else None)
        if SMALL in on:
            for i in range(p["in_bytes"] // p["piece_bytes"]):
                yield from rt.memcpy(copy_q, inb, p["piece_bytes"], "h2d", tag=SMALL, offset=i * p["piece_bytes"])
        elif split:
            half = p["in_bytes"] // 2
            yield from rt.memcpy(H2D_Q, inb, half, "h2d", tag=SATURATION)
            yield from rt.memcpy(H2D_Q2, inb, p["in_bytes"] - half, "h2d", tag=SATURATION, offset=half)
        else:
            yield from rt.memcpy(copy_q, inb, p["in_bytes"], "h2d",
                                 tag=tag(PAGEABLE) or tag(SERIAL) or tag(SATURATION))
        if copy_q != COMPUTE_Q:
            ev = yield from rt.event_record(H2D_Q)
            yield from rt.queue_wait_event(COMPUTE_Q, ev)
            if split:
                ev2 = yield from rt.event_record(H2D_Q2)
                yield from rt.queue_wait_event(COMPUTE_Q, ev2)
        for _layer in range(p["layers"]):
            if GAPS in on:
                t0 = rt.sim.now
                yield from rt.host_work(p["gap_ns"])  # per-kernel host work the device waits for
                rt.m.rec.mark(GAPS, rt.track, t0, rt.sim.now)
            yield from rt.launch(COMPUTE_Q, p["matmul"], tag=tag(GAPS))
            if GAPS in on:
                t0 = rt.sim.now
                yield from rt.host_work(p["gap_ns"])
                rt.m.rec.mark(GAPS, rt.track, t0, rt.sim.now)
            yield from rt.launch(COMPUTE_Q, gather, tag=tag(STRIDED) or tag(GAPS))
            if SYNCS in on:
                yield from rt.queue_synchronize(COMPUTE_Q, tag=SYNCS)
        if out_q != COMPUTE_Q:
            ev = yield from rt.event_record(COMPUTE_Q)
            yield from rt.queue_wait_event(out_q, ev)
        yield from rt.memcpy(out_q, outb, p["out_bytes"], "d2h", tag=tag(PAGEABLE) or tag(SERIAL))
        done.append((yield from rt.event_record(out_q)))
    yield from rt.device_synchronize()
    for _ in range(4):
        yield from rt.free()
