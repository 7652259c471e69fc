"""The accelerator runtime's API as a host thread sees it: each call costs CPU time and is traced.

Calls are generators run inside a host thread's process (``yield from rt.launch(...)``).
Every call becomes one cpu record on the thread's track, with a correlation id shared by its
driver submission and device work, and a `submit` flow to its (first) submission.
"""

from __future__ import annotations

import hashlib

from acceltrace.sim.device import Kernel
from acceltrace.sim.driver import Command
from acceltrace.sim.trace import FLOW_OUT, SPAN


class HostBuffer:
    """A host allocation: pinned or pageable, with a content version the runtime can hash."""

    __slots__ = ("id", "nbytes", "mem", "version", "_args")

    def __init__(self, buf_id: int, nbytes: int, mem: str):
        self.id = buf_id
        self.nbytes = nbytes
        self.mem = mem
        self.version = 0
        self._args: dict = {}

    def write(self) -> None:
        """The host changed the contents (a new batch, new tokens)."""
        self.version += 1

    def copy_args(self, nbytes: int, offset: int = 0) -> str:
        """Args of a copy of [offset, offset + nbytes) of this buffer: its id and a hash of those
        contents (what an instrumented runtime can compute); cached per version and range."""
        key = (self.version, offset, nbytes)
        a = self._args.get(key)
        if a is None:
            digest = hashlib.blake2b(f"{self.id}:{self.version}:{offset}:{nbytes}".encode(),
                                     digest_size=8).hexdigest()
            # the same text json.dumps(separators=(",", ":")) gives, without its cost per copy
            a = '{"host_buffer":%d,"content_hash":"%s"%s}' % (self.id, digest, ',"offset":%d' % offset if offset else "")
            self._args[key] = a
            if len(self._args) > 4096:  # old versions are never asked for again
                self._args = {key: a}
        return a


class Runtime:
    """One host thread's view of the runtime (the model has one such thread per device)."""

    def __init__(self, machine, thread_index: int, thread_name: str, device: int):
        self.m = machine
        self.sim = machine.sim
        self.h = machine.cfg.host
        self.dev = machine.devices[device]
        self.track = machine.rec.track_id("cpu", thread_name, None, 1000 + thread_index)
        self._next_buf = [thread_index * 1000]
        self.step_marks: list[float] = []  # when each workload step began (the scale path repeats steps)
        machine.step_marks[thread_index] = self.step_marks

    # -- helpers ---------------------------------------------------------------------------------
    def _api(self, t0: float, name: str, corr: int, flow: int, nbytes: int = -1, direction=None, mem=None,
             args=None, tag=None) -> None:
        self.m.rec.add(SPAN, self.track, t0, self.sim.now - t0, name, corr, nbytes, direction, mem, args,
                       flow, "submit" if flow else None, FLOW_OUT if flow else 0, tag)

    def _cost(self, ns: float) -> float:
        return ns * self.m.jitter()

    def queue(self, q: int):
        return self.dev.queues[q]

    # -- memory ----------------------------------------------------------------------------------
    def malloc(self, nbytes: int):
        t0 = self.sim.now
        yield self._cost(self.h.malloc_ns)
        self._api(t0, "acMalloc", self.m.rec.new_corr(), 0, nbytes)

    def host_alloc(self, nbytes: int, pinned: bool) -> "HostBuffer":
        """Pinned: acHostAlloc pays for pinning every page; pageable: plain malloc, not traced."""
        self._next_buf[0] += 1
        buf = HostBuffer(self._next_buf[0], nbytes, "pinned" if pinned else "pageable")
        t0 = self.sim.now
        if pinned:
            yield self._cost(self.h.malloc_ns) + nbytes * self.h.pin_ns_per_byte
            self._api(t0, "acHostAlloc", self.m.rec.new_corr(), 0, nbytes, mem="pinned")
        else:
            yield 2_000.0
        return buf

    def free(self):
        t0 = self.sim.now
        yield self._cost(self.h.free_ns)
        self._api(t0, "acFree", self.m.rec.new_corr(), 0)

    # -- copies ----------------------------------------------------------------------------------
    def memcpy(self, q: int, buf: HostBuffer, nbytes: int, direction: str, sync: bool = False,
               tag: str | None = None, offset: int = 0):
        """acMemcpyAsync (or acMemcpy with sync): pinned goes straight to DMA, pageable is staged."""
        if buf.mem == "pageable":
            yield from self._memcpy_staged(q, buf, nbytes, direction, sync, tag, offset)
            return
        sim, rec = self.sim, self.m.rec
        t0 = sim.now
        corr = rec.new_corr()
        flow = rec.new_flow()
        cost = self._cost(self.h.memcpy_ns)
        cmd = Command(sim, "dma", corr, nbytes, direction, "pinned", tag=tag)
        yield from self.queue(q).submit(cmd, flow, cost * 0.6, cost * 0.4)
        if sync:
            yield from self._wait_host(cmd)
        self._api(t0, "acMemcpy" if sync else "acMemcpyAsync", corr, flow, nbytes, direction, "pinned",
                  buf.copy_args(nbytes, offset), tag)
        return cmd

    def _memcpy_staged(self, q: int, buf: HostBuffer, nbytes: int, direction: str, sync: bool, tag, offset: int):
        """Pageable memory cannot be DMA'd: copy through two pinned staging buffers, chunk by chunk.

        H2D: the CPU fills a staging chunk, submits its DMA, and must wait for the DMA that used
        the same staging buffer two chunks ago; the call returns once everything is staged.
        D2H: DMA into staging, wait for it, CPU copies out; the call returns when all is copied.
        Either way the "async" call blocks the thread and the copy cannot overlap the host.
        """
        sim, rec, h = self.sim, self.m.rec, self.h
        t0 = sim.now
        corr = rec.new_corr()
        flow = rec.new_flow()
        yield self._cost(self.h.memcpy_ns * 0.6)
        chunk = h.staging_chunk_bytes
        sizes = [chunk] * (nbytes // chunk) + ([nbytes % chunk] if nbytes % chunk else [])
        cmds: list[Command] = []
        queue = self.queue(q)
        for i, size in enumerate(sizes):
            cmd = Command(sim, "dma", corr, size, direction, "pageable", tag=tag)
            if direction == "h2d":
                if i >= 2:
                    yield from self._wait_fence(cmds[i - 2])
                yield from queue.submit(cmd, flow if i == 0 else 0, size / h.host_memcpy_bytes_per_ns, 0.0)
            else:
                yield from queue.submit(cmd, flow if i == 0 else 0, 0.0, 0.0)
                if i >= 1:
                    yield from self._wait_fence(cmds[i - 1])
                    yield sizes[i - 1] / h.host_memcpy_bytes_per_ns
            cmds.append(cmd)
        if direction == "d2h":
            yield from self._wait_fence(cmds[-1])
            yield sizes[-1] / h.host_memcpy_bytes_per_ns
        elif sync:
            yield from self._wait_host(cmds[-1])
        yield self._cost(self.h.memcpy_ns * 0.4)
        self._api(t0, "acMemcpy" if sync else "acMemcpyAsync", corr, flow, nbytes, direction, "pageable",
                  buf.copy_args(nbytes, offset), tag)
        return cmds[-1]

    def _wait_fence(self, cmd: Command):
        """Spin on the command's fence in host memory (the staging loop does this)."""
        if not cmd.finished:
            yield cmd.dev_event()
        yield self.h.fence_poll_ns

    def _wait_host(self, cmd: Command):
        """Block until the command is done: a fence read if it already is, else sleep on its interrupt."""
        if cmd.finished and not cmd.notify:
            yield self.h.fence_poll_ns
            return
        cmd.notify = True
        ev = cmd.host_event()
        if not ev.triggered:
            yield ev
        yield self.m.cfg.driver.wake_ns

    # -- kernels, events, synchronisation ----------------------------------------------------------
    def launch(self, q: int, kernel: Kernel, tag: str | None = None):
        sim, rec = self.sim, self.m.rec
        t0 = sim.now
        corr = rec.new_corr()
        flow = rec.new_flow()
        cost = self._cost(self.h.launch_ns)
        cmd = Command(sim, "kernel", corr, kernel=kernel, tag=tag)
        yield from self.queue(q).submit(cmd, flow, cost * 0.7, cost * 0.3)
        self._api(t0, "acLaunchKernel", corr, flow, args=self.m.launch_args(kernel))
        return cmd

    def event_record(self, q: int):
        sim, rec = self.sim, self.m.rec
        t0 = sim.now
        corr = rec.new_corr()
        flow = rec.new_flow()
        cmd = Command(sim, "marker", corr)
        yield from self.queue(q).submit(cmd, flow, self._cost(self.h.event_ns * 0.5), 0.0)
        self._api(t0, "acEventRecord", corr, flow)
        return cmd

    def queue_wait_event(self, q: int, event: Command):
        """The queue waits on the device for another queue's marker (no host involvement)."""
        sim, rec = self.sim, self.m.rec
        t0 = sim.now
        corr = rec.new_corr()
        flow = rec.new_flow()
        cmd = Command(sim, "wait", corr, wait_for=event)
        yield from self.queue(q).submit(cmd, flow, self._cost(self.h.event_ns * 0.5), 0.0)
        self._api(t0, "acQueueWaitEvent", corr, flow)

    def event_synchronize(self, event: Command, tag: str | None = None):
        t0 = self.sim.now
        yield self._cost(self.h.sync_ns)
        yield from self._wait_host(event)
        self._api(t0, "acEventSynchronize", event.corr, 0, tag=tag)

    def queue_synchronize(self, q: int, tag: str | None = None):
        t0 = self.sim.now
        yield self._cost(self.h.sync_ns)
        last = self.queue(q).last
        if last is not None:
            yield from self._wait_host(last)
        self._api(t0, "acQueueSynchronize", self.m.rec.new_corr(), 0, tag=tag)

    def device_synchronize(self, tag: str | None = None):
        t0 = self.sim.now
        yield self._cost(self.h.sync_ns)
        waited = False
        for queue in self.dev.queues:
            last = queue.last
            if last is not None and not last.finished:
                last.notify = True
                yield last.host_event()
                waited = True
        yield self.m.cfg.driver.wake_ns if waited else self.h.fence_poll_ns
        self._api(t0, "acDeviceSynchronize", self.m.rec.new_corr(), 0, tag=tag)

    def step_begin(self) -> None:
        """The workload starts a step (not traced; the scale path uses step boundaries)."""
        self.step_marks.append(self.sim.now)

    def host_work(self, ns: float):
        """User code between API calls (not traced: only the runtime is instrumented)."""
        yield self._cost(ns)
