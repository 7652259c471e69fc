"""One simulated machine: host, PCIe topology (devices, optional switch), devices with queues.

Builds the fabric's link directions and the register bank's counters, and runs DMA and kernel
commands for the command processors in sim/driver.py.
"""

from __future__ import annotations

import json
import random

import numpy as np
from dataclasses import dataclass, field

from acceltrace.sim.device import DeviceClock, DeviceConfig
from acceltrace.sim.driver import Command, DriverConfig, Queue
from acceltrace.sim.engine import Pool, Sim
from acceltrace.sim.pcie import Fabric, LinkConfig, Resource
from acceltrace.sim.registers import CounterSpec, RegisterBank
from acceltrace.sim.trace import FLOW_IN, SPAN, Recorder

H2D_ENGINE_TID, D2H_ENGINE_TID = 0, 16  # pcie track ids per device: h2d engines 0.., d2h engines 16..


@dataclass(frozen=True)
class HostConfig:
    launch_ns: float = 4_000.0  # acLaunchKernel CPU cost (argument marshalling + submit)
    memcpy_ns: float = 4_500.0  # acMemcpyAsync CPU cost outside the driver
    event_ns: float = 1_500.0
    sync_ns: float = 1_000.0  # entering a blocking call
    malloc_ns: float = 25_000.0
    free_ns: float = 8_000.0
    pin_ns_per_byte: float = 0.12  # page pinning (acHostAlloc): ~0.12 s per GB
    host_memcpy_bytes_per_ns: float = 9.0  # CPU copy into / out of the staging buffer
    staging_chunk_bytes: int = 2 << 20
    fence_poll_ns: float = 800.0  # the runtime sees a staging chunk's DMA done by polling a fence


@dataclass(frozen=True)
class ClockParams:
    hz: float
    offset_ticks: float
    drift_ppm: float
    wander_ppm: float
    wander_period_ns: float


@dataclass(frozen=True)
class MachineConfig:
    n_devices: int
    link: LinkConfig
    uplink: LinkConfig | None  # None: every device on its own root port
    device: DeviceConfig
    host: HostConfig
    driver: DriverConfig
    clocks: tuple[ClockParams, ...]
    n_queues: int = 2
    start_ns: float = 0.0
    jitter: float = 0.02  # relative spread of CPU costs and kernel times
    seed: int = 0
    extra: dict = field(default_factory=dict)


class Device:
    def __init__(self, m: "Machine", index: int):
        self.m = m
        self.index = index
        cfg = m.cfg
        dcfg = cfg.device
        sim = m.sim
        rec = m.rec
        bank = m.bank
        d = index
        name = f"dev{d}"
        cp = cfg.clocks[d]
        self.clock = DeviceClock(cp.hz, cp.offset_ticks, 0.0, cp.drift_ppm, cp.wander_ppm,
                                 cp.wander_period_ns)
        bank.set_clock(name, self.clock)
        link = cfg.link
        bank.links[name] = {"gen": link.gen, "width": link.width, "max_payload_bytes": link.mps}
        peak = link.payload_bytes_per_ns * 1e9
        for direction in ("h2d", "d2h"):
            bank.define(CounterSpec(f"{name}.pcie.{direction}_bytes", "bytes", 32, "cumulative", name, "fixed",
                                    f"payload bytes {direction} on the device link", peak))
            bank.define(CounterSpec(f"{name}.pcie.{direction}_tlps", "tlps", 32, "cumulative", name, "programmable",
                                    f"TLPs {direction} on the device link", peak / link.mps))
        self.down = m.fabric.add_resource(Resource(f"{name} down", link, f"{name}.pcie.h2d_bytes",
                                                   f"{name}.pcie.h2d_tlps"))
        self.up = m.fabric.add_resource(Resource(f"{name} up", link, f"{name}.pcie.d2h_bytes",
                                                 f"{name}.pcie.d2h_tlps"))
        bank.define(CounterSpec(f"{name}.dma.h2d_busy_ns", "ns", 48, "cumulative", name, "programmable",
                                "busy time summed over the H2D DMA engines", dcfg.h2d_engines * 1e9))
        bank.define(CounterSpec(f"{name}.dma.d2h_busy_ns", "ns", 48, "cumulative", name, "programmable",
                                "busy time summed over the D2H DMA engines", dcfg.d2h_engines * 1e9))
        hbm_peak = dcfg.hbm_bytes_per_ns * 1e9
        bank.define(CounterSpec(f"{name}.hbm.read_bytes", "bytes", 48, "cumulative", name, "fixed",
                                "bytes read from HBM (whole access granules)", hbm_peak))
        bank.define(CounterSpec(f"{name}.hbm.write_bytes", "bytes", 48, "cumulative", name, "fixed",
                                "bytes written to HBM", hbm_peak))
        bank.define(CounterSpec(f"{name}.hbm.requested_bytes", "bytes", 48, "cumulative", name, "programmable",
                                "bytes the kernels' loads asked for", hbm_peak))
        self.units: dict[str, Pool] = {}
        self.unit_tracks: dict[str, int] = {}
        for i, (kind, uname) in enumerate(dcfg.unit_names()):
            self.unit_tracks[uname] = rec.track_id("eu", f"{name} {uname}", d, i, device_clock=True)
            self.units.setdefault(kind, Pool(sim, [])).free.append(uname)
            bank.define(CounterSpec(f"{name}.eu.{uname.replace(' ', '')}.busy_cycles", "cycles", 48, "cumulative",
                                    name, "fixed" if i == 0 else "programmable",
                                    f"cycles {uname} was executing", cp.hz))
        self.engines: dict[str, Pool] = {}
        self.engine_tracks: dict[tuple[str, int], int] = {}
        for direction, n, base in (("h2d", dcfg.h2d_engines, H2D_ENGINE_TID), ("d2h", dcfg.d2h_engines, D2H_ENGINE_TID)):
            self.engines[direction] = Pool(sim, list(range(n)))
            for e in range(n):
                self.engine_tracks[(direction, e)] = rec.track_id(
                    "pcie", f"{name} {direction} engine {e}", d, base + e, device_clock=True)
        self.queues = []
        for q in range(cfg.n_queues):
            bank.define(CounterSpec(f"{name}.q{q}.occupancy", "entries", 16, "gauge", name, "fixed",
                                    f"descriptors in submission ring {q}", None))
            self.queues.append(Queue(m, self, q))
        bank.programmable_slots[name] = 4
        self._kernel_info: dict = {}
        self._paths: dict = {}
        self.kernel_log: list[tuple] = []

    def path(self, direction: str):
        """(resource, wire weight, TLPs per byte, carries payload) for a DMA of this direction."""
        cached = self._paths.get(direction)
        if cached is None:
            cached = self._paths[direction] = self._path(direction)
        return cached

    def _path(self, direction: str):
        link = self.m.cfg.link
        data_w, req_w = link.data_weight, link.request_weight
        m = self.m
        if direction == "h2d":
            uses = [(self.down, data_w, 1.0 / link.mps, True), (self.up, req_w, 1.0 / link.mrrs, False)]
            if m.uplink_down is not None:
                up = m.cfg.uplink
                uses += [(m.uplink_down, up.data_weight, 1.0 / up.mps, True),
                         (m.uplink_up, up.request_weight, 1.0 / up.mrrs, False)]
            extra = ((f"dev{self.index}.hbm.write_bytes", 1.0),)
        else:
            uses = [(self.up, data_w, 1.0 / link.mps, True)]
            if m.uplink_up is not None:
                up = m.cfg.uplink
                uses.append((m.uplink_up, up.data_weight, 1.0 / up.mps, True))
            extra = ((f"dev{self.index}.hbm.read_bytes", 1.0),)
        return uses, extra

    def run_dma(self, cmd: Command):
        m = self.m
        sim = m.sim
        pool = self.engines[cmd.direction]
        if pool.free and not pool.waiters:
            engine = pool.free.popleft()
        else:
            engine = yield pool.acquire()
        t0 = sim.now
        yield m.cfg.device.dma_latency_ns
        uses, extra = self.path(cmd.direction)
        yield m.fabric.start(cmd.nbytes, uses, extra)
        t1 = sim.now
        m.rec.add(SPAN, self.engine_tracks[(cmd.direction, engine)], t0, t1 - t0,
                  "DMA " + ("HtoD" if cmd.direction == "h2d" else "DtoH"), cmd.corr, cmd.nbytes, cmd.direction,
                  cmd.mem, flow=cmd.flow, flow_kind="dma", flow_end=FLOW_IN, tag=cmd.tag)
        m.bank.add_rate(f"dev{self.index}.dma.{cmd.direction}_busy_ns", t0, t1, 1.0)
        pool.release(engine)

    def run_kernel(self, cmd: Command):
        m = self.m
        k = cmd.kernel
        pool = self.units[k.unit_kind]
        if pool.free and not pool.waiters:
            unit = pool.free.popleft()
        else:
            unit = yield pool.acquire()
        dcfg = m.cfg.device
        t0 = m.sim.now + dcfg.dispatch_ns
        info = self._kernel_info.get(id(k))  # kernels live in the workload's params for the whole run
        if info is None:
            fetched = k.bytes_fetched(dcfg)
            args = json.dumps({"bytes_requested": int(k.bytes_requested), "bytes_fetched": int(fetched),
                               "flops": int(k.flops)}, separators=(",", ":"))
            info = self._kernel_info[id(k)] = (k.duration_ns(dcfg), fetched, args, k)
        dur = info[0] * m.jitter()
        yield dcfg.dispatch_ns + dur
        m.rec.add(SPAN, self.unit_tracks[unit], t0, dur, k.name, cmd.corr, -1, None, None, info[2], cmd.flow,
                  "exec", FLOW_IN, cmd.tag)
        # counters are fed in bulk at the end of the run (flush_counters), one append per kernel here
        self.kernel_log.append((unit, t0, t0 + dur, info[1], k.bytes_requested))
        pool.release(unit)

    def flush_counters(self) -> None:
        """Kernel activity -> EU busy cycles and HBM bytes, vectorised per unit."""
        if not self.kernel_log:
            return
        bank = self.m.bank
        name = f"dev{self.index}"
        units, t0, t1, fetched, requested = zip(*self.kernel_log)
        t0 = np.asarray(t0)
        t1 = np.asarray(t1)
        span = np.maximum(t1 - t0, 1.0)
        units = np.asarray(units)
        per_ns = self.clock.hz * 1e-9
        for uname in set(units.tolist()):
            sel = units == uname
            bank.extend_segments(f"{name}.eu.{uname.replace(' ', '')}.busy_cycles", t0[sel], t1[sel],
                                 np.full(int(sel.sum()), per_ns))
        bank.extend_segments(f"{name}.hbm.read_bytes", t0, t1, np.asarray(fetched) / span)
        bank.extend_segments(f"{name}.hbm.requested_bytes", t0, t1, np.asarray(requested) / span)
        self.kernel_log = []


class Machine:
    def __init__(self, cfg: MachineConfig, rec: Recorder | None = None):
        self.cfg = cfg
        # the model runs in ns since the run's start (float keeps sub-ns resolution there);
        # cfg.start_ns, the host clock's value at that moment, is added when times leave the model
        self.sim = Sim(0.0)
        self.origin_ns = int(cfg.start_ns)
        self.rec = rec or Recorder()
        self.bank = RegisterBank(origin_ns=int(cfg.start_ns))
        self.fabric = Fabric(self.sim, self.bank)
        self.rng = random.Random(cfg.seed * 7919 + 17)
        self.uplink_down = self.uplink_up = None
        if cfg.uplink is not None:
            up = cfg.uplink
            self.bank.links["switch0"] = {"gen": up.gen, "width": up.width, "max_payload_bytes": up.mps}
            peak = up.payload_bytes_per_ns * 1e9
            for direction in ("h2d", "d2h"):
                self.bank.define(CounterSpec(f"switch0.uplink.{direction}_bytes", "bytes", 48, "cumulative", "switch0",
                                             "fixed", f"payload bytes {direction} on the switch uplink", peak))
                self.bank.define(CounterSpec(f"switch0.uplink.{direction}_tlps", "tlps", 48, "cumulative", "switch0",
                                             "fixed", f"TLPs {direction} on the switch uplink", peak / up.mps))
            self.bank.programmable_slots["switch0"] = 0
            self.uplink_down = self.fabric.add_resource(
                Resource("uplink down", up, "switch0.uplink.h2d_bytes", "switch0.uplink.h2d_tlps"))
            self.uplink_up = self.fabric.add_resource(
                Resource("uplink up", up, "switch0.uplink.d2h_bytes", "switch0.uplink.d2h_tlps"))
        self.devices = [Device(self, i) for i in range(cfg.n_devices)]
        self._completion_args: dict[int, str] = {}
        self._launch_args: dict[str, str] = {}
        self.step_marks: dict[int, list[float]] = {}

    def jitter(self) -> float:
        j = self.cfg.jitter
        return 1.0 + j * (2.0 * self.rng.random() - 1.0)

    def launch_args(self, kernel) -> str:
        a = self._launch_args.get(kernel.name)
        if a is None:
            a = self._launch_args[kernel.name] = json.dumps({"kernel": kernel.name}, separators=(",", ":"))
        return a

    def completions_args(self, n: int) -> str:
        a = self._completion_args.get(n)
        if a is None:
            a = self._completion_args[n] = '{"completions":%d}' % n
        return a

    def run(self) -> float:
        """Run the agenda to the end; returns the virtual end time."""
        self.sim.run()
        self.fabric.close()
        for d in self.devices:
            d.flush_counters()
            for q in d.queues:
                q.flush_counters()
        return self.sim.now
