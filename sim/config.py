"""Per-seed machine configurations drawn from realistic ranges (nothing downstream may rely on one setup)."""

from __future__ import annotations

import random
from dataclasses import replace

from acceltrace.sim.device import DeviceConfig
from acceltrace.sim.driver import DriverConfig
from acceltrace.sim.machine import ClockParams, HostConfig, MachineConfig
from acceltrace.sim.pcie import LinkConfig


def _u(rng: random.Random, lo: float, hi: float) -> float:
    return lo + (hi - lo) * rng.random()


def random_link(rng: random.Random) -> LinkConfig:
    gen = rng.choice((3, 4, 4, 4, 5, 5, 6))
    width = rng.choice((8, 16, 16, 16))
    mps = rng.choice((128, 256, 256, 256, 512))
    mrrs = rng.choice((512, 512, 1024, 4096))
    return LinkConfig(gen, width, mps, mrrs)


def wide_uplink(link: LinkConfig, n_devices: int) -> LinkConfig | None:
    """The narrowest standard uplink that carries n devices' links at full rate, or None (no switch)."""
    need = link.wire_bytes_per_ns * n_devices
    for gen in range(link.gen, 7):
        for width in (8, 16):
            up = LinkConfig(gen, width, link.mps, link.mrrs)
            if up.wire_bytes_per_ns >= need * 0.999:
                return up
    return None


def random_device(rng: random.Random) -> DeviceConfig:
    return DeviceConfig(
        n_matrix=rng.choice((1, 2, 2, 4)),
        n_vector=rng.choice((1, 2, 2)),
        matrix_flops_per_ns=_u(rng, 100_000, 400_000),
        vector_flops_per_ns=_u(rng, 10_000, 40_000),
        hbm_bytes_per_ns=_u(rng, 1_200, 3_300),
        hbm_granule_bytes=rng.choice((32, 64, 64)),
        clock_hz=_u(rng, 1.0e9, 1.8e9),
        dispatch_ns=_u(rng, 800, 1_600),
        fetch_ns=_u(rng, 700, 1_200),
        dma_latency_ns=_u(rng, 2_000, 5_000),
        h2d_engines=2,
        d2h_engines=rng.choice((1, 2)),
    )


def random_machine(seed: int, n_devices: int | None = None, switch: str = "auto") -> MachineConfig:
    """A machine for this seed. switch: 'auto' (a switch wide enough not to limit, or none),
    'none', or 'narrow' (one shared uplink no wider than a device link: it saturates first)."""
    rng = random.Random(f"machine:{seed}")
    link = random_link(rng)
    n = n_devices if n_devices is not None else rng.choice((1, 1, 1, 2, 2, 4))
    if switch == "narrow":
        uplink = LinkConfig(link.gen, link.width, link.mps, link.mrrs)
    elif switch == "none" or n == 1 and rng.random() < 0.6:
        uplink = None
    else:
        uplink = wide_uplink(link, n)
    dev = random_device(rng)
    host = HostConfig(
        launch_ns=_u(rng, 3_000, 6_000),
        memcpy_ns=_u(rng, 3_500, 6_000),
        event_ns=_u(rng, 1_000, 2_000),
        sync_ns=_u(rng, 700, 1_500),
        malloc_ns=_u(rng, 15_000, 40_000),
        free_ns=_u(rng, 5_000, 12_000),
        pin_ns_per_byte=_u(rng, 0.05, 0.15),
        host_memcpy_bytes_per_ns=_u(rng, 6.0, 12.0),
        staging_chunk_bytes=rng.choice((1 << 20, 2 << 20, 4 << 20)),
        fence_poll_ns=_u(rng, 500, 1_500),
    )
    drv = DriverConfig(
        ring_depth=rng.choice((64, 128, 256, 512)),
        submit_ns=_u(rng, 600, 1_400),
        doorbell_ns=_u(rng, 150, 400),
        irq_latency_ns=_u(rng, 1_500, 4_000),
        irq_handler_ns=_u(rng, 800, 2_000),
        irq_per_completion_ns=_u(rng, 100, 250),
        wake_ns=_u(rng, 1_000, 4_000),
    )
    clocks = tuple(
        ClockParams(
            hz=dev.clock_hz * (1.0 + _u(rng, -1e-4, 1e-4)),
            offset_ticks=float(rng.randrange(1 << 36, 1 << 44)),
            drift_ppm=_u(rng, -40.0, 40.0),
            wander_ppm=_u(rng, 1.0, 5.0),
            wander_period_ns=_u(rng, 2e9, 20e9),  # temperature: seconds, not milliseconds
        )
        for _ in range(n)
    )
    start_ns = float(rng.randrange(10**12, 10**15))  # a host CLOCK_MONOTONIC-like origin (hours of uptime)
    return MachineConfig(n_devices=n, link=link, uplink=uplink, device=dev, host=host, driver=drv, clocks=clocks,
                         n_queues=3, start_ns=start_ns, seed=seed)


def with_link_scale(cfg: MachineConfig, factor: float) -> MachineConfig:
    """The same machine with the device links' bandwidth multiplied (a counterfactual, not a real part)."""
    link = cfg.link
    wider = _ScaledLink(link.gen, link.width, link.mps, link.mrrs, factor)
    return replace(cfg, link=wider)


class _ScaledLink(LinkConfig):
    """A LinkConfig whose wire rate is scaled; used only to ask "what if this link were not the limit"."""

    def __init__(self, gen, width, mps, mrrs, factor):
        super().__init__(gen, width, mps, mrrs)
        object.__setattr__(self, "_factor", factor)

    @property
    def wire_bytes_per_ns(self) -> float:
        return LinkConfig.wire_bytes_per_ns.fget(self) * self._factor


def fixed_machine(link: LinkConfig, n_devices: int = 1, uplink: LinkConfig | None = None,
                  device: DeviceConfig | None = None, jitter: float = 0.0, n_queues: int = 4) -> MachineConfig:
    """A machine with default parts and no randomness (physics tests and benchmarks)."""
    dev = device or DeviceConfig()
    clocks = tuple(ClockParams(hz=dev.clock_hz, offset_ticks=float(1 << 40), drift_ppm=25.0, wander_ppm=3.0,
                               wander_period_ns=4e9) for _ in range(n_devices))
    return MachineConfig(n_devices=n_devices, link=link, uplink=uplink, device=dev, host=HostConfig(),
                         driver=DriverConfig(), clocks=clocks, n_queues=n_queues, start_ns=1e12, jitter=jitter)
