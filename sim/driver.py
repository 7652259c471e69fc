"""The driver and the device's command processors: bounded rings, doorbells, execution, interrupts.

A submission takes a ring slot (the host blocks while the ring is full), writes a descriptor
and rings the doorbell (an MMIO write). The device's command processor for that queue
fetches descriptors in order (a fetch costs a PCIe round trip only when the queue had run
dry), runs DMA commands on a free DMA engine of their direction and kernels on a free
execution unit of their kind, records start/end in its trace buffer, writes the fence and
frees the slot. A completion interrupt is raised only for commands a host thread waits on
(as runtimes arm it for blocking waits); interrupts are coalesced per queue: one handler run
covers every completion that arrived while it was pending, and wakes the host waiters.
"""

from __future__ import annotations

from dataclasses import dataclass

from acceltrace.sim.engine import Event, Fifo, Pool
from acceltrace.sim.trace import FLOW_IN, FLOW_OUT, INSTANT, SPAN


@dataclass(frozen=True)
class DriverConfig:
    ring_depth: int = 256
    submit_ns: float = 900.0  # descriptor build and ring write
    doorbell_ns: float = 250.0  # the MMIO write itself (posted, uncached)
    irq_latency_ns: float = 2_500.0  # device end -> handler start
    irq_handler_ns: float = 1_200.0
    irq_per_completion_ns: float = 150.0
    wake_ns: float = 2_000.0  # handler end -> the blocked host thread runs again


class Command:
    """One descriptor: a DMA, a kernel, an event marker or a wait on another queue's marker.

    `finished` is the device's fence; `notify` asks for a completion interrupt (set when a host
    thread blocks on the command, as a runtime arms the interrupt only for waiters).
    """

    __slots__ = ("kind", "corr", "nbytes", "direction", "mem", "kernel", "finished", "notify", "_dev_ev",
                 "_host_ev", "flow", "doorbell_ns", "wait_for", "tag", "sim")

    def __init__(self, sim, kind: str, corr: int, nbytes: int = 0, direction=None, mem=None, kernel=None,
                 wait_for: "Command | None" = None, tag: str | None = None):
        self.sim = sim
        self.kind = kind
        self.corr = corr
        self.nbytes = nbytes
        self.direction = direction
        self.mem = mem
        self.kernel = kernel
        self.wait_for = wait_for
        self.tag = tag
        self.finished = False
        self.notify = False
        self._dev_ev = None
        self._host_ev = None
        self.flow = 0
        self.doorbell_ns = 0.0

    def dev_event(self) -> Event:
        """Fires when the device finished the command (the fence)."""
        if self._dev_ev is None:
            self._dev_ev = Event(self.sim)
            if self.finished:
                self._dev_ev.succeed()
        return self._dev_ev

    def host_event(self) -> Event:
        """Fires when the completion interrupt's handler has run (requires notify)."""
        if self._host_ev is None:
            self._host_ev = Event(self.sim)
        return self._host_ev


class Queue:
    """One submission queue of one device: its ring, its command processor and its interrupt."""

    def __init__(self, machine, device, index: int):
        self.m = machine
        self.dev = device
        self.index = index
        sim = machine.sim
        cfg = machine.cfg.driver
        self.ring = Pool(sim, list(range(cfg.ring_depth)))
        self.fifo = Fifo(sim)
        rec = machine.rec
        d = device.index
        self.track = rec.track_id("driver", f"dev{d} queue {index}", d, index)
        self.irq_track = rec.track_id("driver", f"dev{d} queue {index} completions", d, 64 + index)
        self.occupancy_counter = f"dev{d}.q{index}.occupancy"
        # (t, +1/-1, corr) ring occupancy changes, fed to the bank at the end (kept for the scale path)
        self.occ: list[tuple[float, float, int]] = []
        self.sim = sim
        self.rec = rec
        self.submit_ns = cfg.submit_ns
        self.submit_dur = cfg.submit_ns + cfg.doorbell_ns
        self.last: Command | None = None
        self._irq_pending: list[Command] = []
        sim.process(self._run())

    # -- host side ------------------------------------------------------------------------------
    def submit(self, cmd: Command, flow_in: int, pre_ns: float, post_ns: float, api_tag: str | None = None):
        """Generator run in the submitting host thread: pre_ns of runtime work, then a ring slot,
        the descriptor and the doorbell, then post_ns. Only this thread takes this queue's slots,
        so a slot free now is still free after pre_ns and the common case needs one wait."""
        sim = self.sim
        ring = self.ring
        if ring.free and not ring.waiters:
            ring.free.popleft()
            t0 = sim.now + pre_ns
        else:
            yield pre_ns
            if ring.free and not ring.waiters:
                ring.free.popleft()
            else:
                yield ring.acquire()  # ring full: the host blocks until a completion frees a slot
            t0 = sim.now
        dur = self.submit_dur
        rec = self.rec
        tag = cmd.tag or api_tag
        rec.add(SPAN, self.track, t0, dur, "submit", cmd.corr, -1, None, None, None, flow_in,
                "submit" if flow_in else None, FLOW_IN if flow_in else 0, tag)
        doorbell_ns = t0 + self.submit_ns
        if cmd.kind == "dma" or cmd.kind == "kernel":
            cmd.flow = rec.new_flow()
            rec.add(INSTANT, self.track, doorbell_ns, 0.0, "doorbell", cmd.corr, -1, None, None, None, cmd.flow,
                    "dma" if cmd.kind == "dma" else "exec", FLOW_OUT, tag)
        else:
            rec.add(INSTANT, self.track, doorbell_ns, 0.0, "doorbell", cmd.corr, -1, None, None, None, 0, None, 0, tag)
        cmd.doorbell_ns = doorbell_ns
        self.occ.append((t0, 1.0, cmd.corr))
        self.last = cmd
        # handed over now; the command processor waits for doorbell + fetch before acting on it
        self.fifo.put(cmd)
        yield t0 + dur + post_ns - sim.now

    # -- device side ----------------------------------------------------------------------------
    def _run(self):
        m = self.m
        sim = m.sim
        dev = self.dev
        fetch_ns = m.cfg.device.fetch_ns
        items = self.fifo.items
        while True:
            cmd = items.popleft() if items else (yield self.fifo.get())
            ready = cmd.doorbell_ns + fetch_ns
            if ready > sim.now:
                yield ready - sim.now
            kind = cmd.kind
            if kind == "kernel":
                yield from dev.run_kernel(cmd)
            elif kind == "dma":
                yield from dev.run_dma(cmd)
            elif kind == "wait":
                if not cmd.wait_for.finished:
                    yield cmd.wait_for.dev_event()
            cmd.finished = True
            if cmd._dev_ev is not None:
                cmd._dev_ev.succeed()
            self.ring.release(0)
            self.occ.append((sim.now, -1.0, cmd.corr))
            if cmd.notify:
                if not self._irq_pending:
                    sim.at(sim.now + m.cfg.driver.irq_latency_ns, self._irq, None)
                self._irq_pending.append(cmd)

    def flush_counters(self) -> None:
        if self.occ:
            t, delta, _corr = zip(*self.occ)
            self.m.bank.extend_levels(self.occupancy_counter, t, delta)

    def _irq(self, _arg) -> None:
        m = self.m
        cfg = m.cfg.driver
        done, self._irq_pending = self._irq_pending, []
        t0 = m.sim.now
        dur = cfg.irq_handler_ns + cfg.irq_per_completion_ns * len(done)
        tag = None
        for c in done:
            tag = tag or c.tag
        m.rec.add(SPAN, self.irq_track, t0, dur, "complete", 0, -1, None, None, m.completions_args(len(done)),
                  0, None, 0, tag)
        m.sim.at(t0 + dur, _wake_all, done)


def _wake_all(cmds: list[Command]) -> None:
    for c in cmds:
        c.host_event().succeed()
