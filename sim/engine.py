"""A small discrete-event core in virtual time: generator processes, one-shot events, FIFO pools.

Processes are generators that yield a delay in ns (a number), an Event, or another Process
(wait for it to finish). Everything at one virtual time runs in scheduling order, so a run is
a pure function of its inputs and seed. Kept lean because every simulated API call, descriptor
and kernel passes through it several times (the model's throughput target is 300 k events/s).
"""

from __future__ import annotations

import heapq
import itertools
from collections import deque


class Event:
    """Fires once with a value; processes waiting on it resume at the virtual time it fired."""

    __slots__ = ("sim", "callbacks", "triggered", "value")

    def __init__(self, sim: "Sim"):
        self.sim = sim
        self.callbacks: list = []
        self.triggered = False
        self.value = None

    def succeed(self, value=None) -> None:
        if self.triggered:
            return
        self.triggered = True
        self.value = value
        at = self.sim.at
        now = self.sim.now
        for cb in self.callbacks:
            at(now, cb, value)
        self.callbacks = []


class Process:
    __slots__ = ("sim", "gen", "done")

    def __init__(self, sim: "Sim", gen):
        self.sim = sim
        self.gen = gen
        self.done = Event(sim)
        sim.at(sim.now, self._resume, None)

    def _resume(self, value) -> None:
        send = self.gen.send
        while True:
            try:
                y = send(value)
            except StopIteration as stop:
                self.done.succeed(stop.value)
                return
            if y.__class__ is Event and y.triggered:
                value = y.value  # already happened: continue at once, no trip through the agenda
                continue
            break
        sim = self.sim
        if y.__class__ is Event:
            y.callbacks.append(self._resume)
        elif y.__class__ is Process:
            d = y.done
            if d.triggered:
                sim.at(sim.now, self._resume, d.value)
            else:
                d.callbacks.append(self._resume)
        else:
            heapq.heappush(sim._agenda, (sim.now + y, next(sim._seq), self._resume, None))


class Sim:
    """Virtual clock (host ns, float) and the agenda."""

    def __init__(self, start_ns: float = 0.0):
        self.now = float(start_ns)
        self._agenda: list = []
        self._seq = itertools.count()  # ties at one time run in scheduling order
        self.steps = 0

    def at(self, t_ns: float, fn, arg=None) -> None:
        heapq.heappush(self._agenda, (t_ns, next(self._seq), fn, arg))

    def event(self) -> Event:
        return Event(self)

    def process(self, gen) -> Process:
        return Process(self, gen)

    def run(self, until_ns: float | None = None) -> None:
        agenda = self._agenda
        pop = heapq.heappop
        steps = 0
        while agenda:
            if until_ns is not None and agenda[0][0] > until_ns:
                break
            t, _seq, fn, arg = pop(agenda)
            self.now = t
            fn(arg)
            steps += 1
        self.steps += steps


class Pool:
    """A counting semaphore with FIFO waiters (DMA engines of one direction, ring slots, EUs)."""

    __slots__ = ("sim", "free", "waiters")

    def __init__(self, sim: Sim, items: list):
        self.sim = sim
        self.free = deque(items)
        self.waiters: deque = deque()

    def acquire(self) -> Event:
        ev = Event(self.sim)
        if self.free and not self.waiters:
            ev.succeed(self.free.popleft())
        else:
            self.waiters.append(ev)
        return ev

    def release(self, item) -> None:
        if self.waiters:
            self.waiters.popleft().succeed(item)
        else:
            self.free.append(item)


class Fifo:
    """An unbounded FIFO whose get() waits when empty (a device queue's fetched descriptors)."""

    __slots__ = ("sim", "items", "getters")

    def __init__(self, sim: Sim):
        self.sim = sim
        self.items: deque = deque()
        self.getters: deque = deque()

    def put(self, item) -> None:
        if self.getters:
            self.getters.popleft().succeed(item)
        else:
            self.items.append(item)

    def get(self) -> Event:
        ev = Event(self.sim)
        if self.items:
            ev.succeed(self.items.popleft())
        else:
            self.getters.append(ev)
        return ev
