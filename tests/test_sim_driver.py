"""Driver and runtime behaviour of the model: bounded rings, pageable staging, interrupts only for waiters."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from acceltrace.sim.config import fixed_machine
from acceltrace.sim.device import Kernel
from acceltrace.sim.machine import Machine
from acceltrace.sim.pcie import LinkConfig
from acceltrace.sim.runtime import Runtime
from acceltrace.sim.trace import COLUMNS

MB = 1 << 20
TS, DUR, TRACK, NAME, NBYTES, MEM = (COLUMNS.index(c) for c in ("ts", "dur", "track", "name", "nbytes", "mem"))


def _run(cfg, body):
    m = Machine(cfg)
    rt = Runtime(m, 0, "main", 0)
    m.sim.process(body(rt))
    m.run()
    m.bank.freeze(0.0, m.sim.now)
    rows = m.rec.rows
    lane = {i: t.lane for i, t in enumerate(m.rec.tracks)}
    name = {i: t.name for i, t in enumerate(m.rec.tracks)}
    return m, rows, lane, name


def test_a_full_ring_blocks_the_launching_thread_and_bounds_occupancy():
    cfg = fixed_machine(LinkConfig(4, 16))
    cfg = replace(cfg, driver=replace(cfg.driver, ring_depth=4))
    k = Kernel("long", "matrix", 200_000.0 * 50_000, 1 * MB)  # 50 us of compute each

    def body(rt):
        for _ in range(12):
            yield from rt.launch(0, k)
        yield from rt.device_synchronize()

    m, rows, lane, _ = _run(cfg, body)
    launches = [r for r in rows if lane[r[TRACK]] == "cpu" and r[NAME] == "acLaunchKernel"]
    # the first four fit in the ring; later ones wait for a completion to free a slot
    assert max(r[DUR] for r in launches[:4]) < 10_000
    assert max(r[DUR] for r in launches[5:]) > 30_000
    every_us = m.bank.origin_ns + 1000 * np.arange(int(m.sim.now) // 1000, dtype=np.int64)
    assert m.bank.read_raw_many("dev0.q0.occupancy", every_us).max() == 4


def test_pageable_copy_is_staged_in_chunks_and_blocks_the_async_call():
    cfg = fixed_machine(LinkConfig(4, 16))
    nbytes = 16 * MB

    def body(rt):
        buf = yield from rt.host_alloc(nbytes, pinned=False)
        yield from rt.memcpy(1, buf, nbytes, "h2d")
        yield from rt.device_synchronize()

    _m, rows, lane, _ = _run(cfg, body)
    chunk = cfg.host.staging_chunk_bytes
    dmas = [r for r in rows if lane[r[TRACK]] == "pcie"]
    assert [r[NBYTES] for r in dmas] == [chunk] * (nbytes // chunk)
    assert all(r[MEM] == "pageable" for r in dmas)
    (call,) = [r for r in rows if r[NAME] == "acMemcpyAsync"]
    # the "async" call returned only after the CPU copied everything into staging
    assert call[DUR] >= nbytes / cfg.host.host_memcpy_bytes_per_ns


def test_completion_interrupts_only_for_commands_a_thread_waits_on():
    cfg = fixed_machine(LinkConfig(4, 16))
    k = Kernel("short", "vector", 1e6, 1 * MB)

    def body(rt):
        for _ in range(20):
            yield from rt.launch(0, k)
        yield from rt.queue_synchronize(0)

    _m, rows, lane, name = _run(cfg, body)
    irqs = [r for r in rows if name[r[TRACK]].endswith("completions")]
    assert len(irqs) == 1
    (sync,) = [r for r in rows if r[NAME] == "acQueueSynchronize"]
    # the host wakes after the handler ran
    assert sync[TS] + sync[DUR] >= irqs[0][TS] + irqs[0][DUR]


@pytest.mark.parametrize("sync", [False, True])
def test_pinned_copy_returns_at_once_unless_synchronous(sync):
    cfg = fixed_machine(LinkConfig(4, 16))

    def body(rt):
        buf = yield from rt.host_alloc(64 * MB, pinned=True)
        yield from rt.memcpy(1, buf, 64 * MB, "h2d", sync=sync)
        yield from rt.device_synchronize()

    _m, rows, lane, _ = _run(cfg, body)
    (call,) = [r for r in rows if r[NAME] in ("acMemcpy", "acMemcpyAsync")]
    (dma,) = [r for r in rows if lane[r[TRACK]] == "pcie"]
    if sync:
        assert call[NAME] == "acMemcpy" and call[TS] + call[DUR] > dma[TS] + dma[DUR]
    else:
        assert call[NAME] == "acMemcpyAsync" and call[DUR] < 20_000 < dma[DUR]
