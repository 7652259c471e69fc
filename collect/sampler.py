"""The sampler core: reads a counter source at a fixed rate into an .actr file.

Time comes from a pluggable clock: VirtualClock for the device model (sleeping moves
time forward at once, so a simulated run is sampled exactly on its deadlines) and
WallClock for real sources (CLOCK_MONOTONIC, the host clock of .atrace files).

Ticks are scheduled against absolute deadlines start + k * period, never "period after
the last sample", so there is no drift. A tick that cannot be taken before the next
deadline is counted as missed and skipped; the grid never shifts.

When more programmable counters are requested than a device has slots, the counters are
split into groups that take the slots round-robin, `mux_ticks` ticks each (default: 4 ms
of ticks, perf's default rotation interval; at least one tick). Each group's samples carry enabled and running time (perf's
time_enabled/time_running): enabled grows from the start, running only while the group
holds the slots. A group is read once more at the moment it is scheduled in, so the
pair (schedule-in, next tick) spans exactly the time it counted; ingest turns
delta(raw) / delta(running) into rates and skips pairs with no running time between.
"""

from __future__ import annotations

import os
import socket
import time
from dataclasses import dataclass
from typing import Callable

from acceltrace.formats.actr.layout import NO_DEV_TICKS
from acceltrace.formats.actr.writer import ActrWriter
from acceltrace.collect.counters.base import CounterSource, CounterSpec, Reading

MIN_RATE_HZ = 1.0
MAX_RATE_HZ = 10_000.0
DEFAULT_MUX_S = 0.004  # perf_event_mux_interval_ms defaults to 4


def use_realtime_priority(priority: int = 10) -> str:
    """Ask for SCHED_FIFO for this process, so timer wakeups are not queued behind other work.

    Returns what happened, in words; never raises (without the privilege the sampler still
    runs, it just competes with everything else for the CPU).
    """
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(priority))
        return f"SCHED_FIFO priority {priority}"
    except (OSError, AttributeError) as e:
        return f"normal scheduling (SCHED_FIFO refused: {e})"


class VirtualClock:
    """Simulated time in ns; sleep_until advances it instantly."""

    def __init__(self, start_ns: int = 0):
        self.t_ns = int(start_ns)

    def now_ns(self) -> int:
        return self.t_ns

    def sleep_until(self, t_ns: int) -> None:
        if t_ns > self.t_ns:
            self.t_ns = int(t_ns)

    def advance(self, dt_ns: int) -> None:
        self.t_ns += int(dt_ns)


class WallClock:
    """The host's CLOCK_MONOTONIC. spin_ns: busy-wait the last part of a sleep (sharper, costs CPU)."""

    def __init__(self, spin_ns: int = 0):
        self.spin_ns = int(spin_ns)

    @staticmethod
    def now_ns() -> int:
        return time.clock_gettime_ns(time.CLOCK_MONOTONIC)

    def sleep_until(self, t_ns: int) -> None:
        left = t_ns - self.now_ns()
        if left > self.spin_ns:
            time.sleep((left - self.spin_ns) / 1e9)
        # time.sleep takes float seconds and may wake a few ns early; a tick must never precede its deadline
        while self.now_ns() < t_ns:
            pass


@dataclass
class Group:
    """Counters read together, with the perf-style enabled/running bookkeeping."""

    id: int
    device: str
    names: list[str]
    multiplexed: bool
    read: Callable[[], Reading]
    running_before_ns: int = 0  # running time accumulated in earlier schedule periods
    since_ns: int | None = None  # when the current schedule period began (None: not scheduled)


@dataclass
class Stats:
    ticks: int = 0
    samples: int = 0
    missed_deadlines: int = 0
    late_ticks: int = 0  # taken after their deadline but before the next one
    max_late_ns: int = 0
    busy_ns: int = 0  # wall time spent in ticks (reading and writing)
    cpu_ns: int = 0  # CPU time of the sampling thread over the whole loop, wakeups included: its real cost
    start_ns: int = 0
    end_ns: int = 0
    read_errors: int = 0

    def as_dict(self) -> dict:
        return dict(self.__dict__)


class SamplerError(Exception):
    """A request the source cannot satisfy (unknown counter, rate out of range)."""


def plan_groups(source: CounterSource, names: list[str] | None) -> tuple[list[CounterSpec], list[tuple[str, list[str], bool]]]:
    """The counters to sample and their groups: (device, names, multiplexed) in group-id order."""
    specs = {s.name: s for s in source.specs()}
    if names:
        unknown = [n for n in names if n not in specs]
        if unknown:
            raise SamplerError(f"unknown counter(s) {', '.join(unknown)} for source {source.NAME!r} "
                               f"(see: acceltrace collect --list --source {source.NAME})")
        chosen = [specs[n] for n in dict.fromkeys(names)]
    else:
        chosen = list(specs.values())
    devices = {d.name: d for d in source.devices()}
    groups: list[tuple[str, list[str], bool]] = []
    for dev in dict.fromkeys(s.device for s in chosen):
        fixed = [s for s in chosen if s.device == dev and s.slot == "fixed"]
        prog = [s.name for s in chosen if s.device == dev and s.slot == "programmable"]
        for rg in dict.fromkeys(s.read_group for s in fixed):
            groups.append((dev, [s.name for s in fixed if s.read_group == rg], False))
        if prog:
            slots = devices[dev].slots if dev in devices else 0
            if slots <= 0:
                raise SamplerError(f"device {dev} has no programmable slots for {', '.join(prog)}")
            mux = len(prog) > slots
            for i in range(0, len(prog), slots):
                groups.append((dev, prog[i : i + slots], mux))
    return chosen, groups


def wrap_risks(specs: list[CounterSpec], period_ns: int) -> list[str]:
    """Counters that can wrap more than once between two reads at this period (ingest cannot tell)."""
    out = []
    for s in specs:
        if s.kind == "cumulative" and s.full_scale and s.bits < 64:
            wrap_s = (1 << s.bits) / float(s.full_scale)
            if period_ns / 1e9 >= wrap_s:
                out.append(f"{s.name}: a {s.bits}-bit register wraps in {wrap_s:.3g} s at its peak rate, sooner "
                           f"than one sampling period ({period_ns / 1e9:.3g} s); at full load its rate cannot be "
                           f"recovered; sample at {1.25 / wrap_s:.3g} Hz or more")
    return out


class Sampler:
    """Samples `source` at `rate_hz` into `out_path` (.actr). Call run()/run_until(), then close()."""

    def __init__(
        self,
        source: CounterSource,
        out_path,
        rate_hz: float,
        counters: list[str] | None = None,
        clock=None,
        mux_ticks: int | None = None,
        flush_records: int = 1024,
        header_extra: dict | None = None,
        flush_interval_s: float = 1.0,
    ):
        if not (MIN_RATE_HZ <= rate_hz <= MAX_RATE_HZ):
            raise SamplerError(f"rate {rate_hz} Hz outside {MIN_RATE_HZ:g}..{MAX_RATE_HZ:g} Hz")
        self.source = source
        self.clock = clock or WallClock()
        if getattr(source, "clock", None) is None:
            source.clock = self.clock
        self.rate_hz = float(rate_hz)
        self.period_ns = int(round(1e9 / self.rate_hz))
        # default rotation: every 4 ms of sampling, Linux perf's default multiplexing interval
        self.mux_ticks = max(1, int(mux_ticks if mux_ticks is not None else round(self.rate_hz * DEFAULT_MUX_S)))
        self.stats = Stats()
        # called after every sample with (group, reading, enabled_ns, running_ns)
        self.listeners: list[Callable[[Group, Reading, int, int], None]] = []
        self.stop_requested = False
        specs, plan = plan_groups(source, counters)
        self.specs = specs
        self.groups = [Group(i, dev, names, mux, source.reader(dev, names)) for i, (dev, names, mux) in enumerate(plan)]
        # a source that can read every group at one instant in one call (the model: one vectorised
        # pass) is read once per tick; only the groups scheduled now are recorded, as with slots
        batch = getattr(source, "tick_reader", None)
        self._batch = batch([(g.device, g.names) for g in self.groups]) if batch is not None else None
        self._batch_readings = None
        self.fixed = [g for g in self.groups if not g.multiplexed]
        # per device: the groups that take turns on its slots, and whose turn it is
        self.rotations: dict[str, list[Group]] = {}
        for g in self.groups:
            if g.multiplexed:
                self.rotations.setdefault(g.device, []).append(g)
        self.turn = {dev: 0 for dev in self.rotations}
        self.ticks_in = {dev: 0 for dev in self.rotations}
        group_of = {n: g.id for g in self.groups for n in g.names}
        header = {
            "source": source.NAME,
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "rate_hz": self.rate_hz,
            "period_ns": self.period_ns,
            "mux_ticks": self.mux_ticks,
            "host_clock": "virtual" if isinstance(self.clock, VirtualClock) else "monotonic",
            "devices": [d.header_entry() for d in source.devices()],
            "counters": [s.header_entry(group_of[s.name]) for s in specs],
            "groups": [{"id": g.id, "device": g.device, "counters": g.names, "multiplexed": g.multiplexed}
                       for g in self.groups],
        }
        if not isinstance(self.clock, VirtualClock):
            header["realtime_minus_monotonic_ns"] = time.time_ns() - WallClock.now_ns()
        header.update(source.header_extra())
        header.update(header_extra or {})
        self.writer = ActrWriter(out_path, header, flush_records=flush_records)
        self.wrap_risks = wrap_risks(specs, self.period_ns)
        for text in [*source.notes(), *self.wrap_risks]:
            self.writer.note({"message": text})
        self._k = 0
        self._t0: int | None = None
        # hand buffered samples to the OS at least this often, so a killed collector loses little
        self.flush_interval_ns = int(flush_interval_s * 1e9)
        self._last_flush_ns = 0

    # -- one tick ---------------------------------------------------------------------------
    def _emit(self, g: Group, r: Reading) -> None:
        if r.times is not None:
            enabled, running = r.times
        else:
            enabled = r.host_ns - self._t0
            if g.multiplexed:
                running = g.running_before_ns + (r.host_ns - g.since_ns if g.since_ns is not None else 0)
            else:
                running = enabled
        dev_ticks = NO_DEV_TICKS if r.dev_ticks is None else r.dev_ticks
        try:
            self.writer.append(g.id, r.host_ns, dev_ticks, max(0, enabled), max(0, running), r.values)
        except ValueError as e:  # a source bug (a value out of range) costs this sample, not the run
            self.stats.read_errors += 1
            if self.stats.read_errors <= 5:
                self.writer.note({"message": f"sample of group {g.id} ({g.device}) dropped: {e}"})
            return
        self.stats.samples += 1
        for fn in self.listeners:
            fn(g, r, enabled, running)

    def _read(self, g: Group) -> Reading | None:
        try:
            if self._batch is not None:
                if self._batch_readings is None:
                    self._batch_readings = self._batch()
                return self._batch_readings[g.id]
            return g.read()
        except (OSError, RuntimeError) as e:  # a transient read failure loses one sample, not the run
            self.stats.read_errors += 1
            if self.stats.read_errors <= 5:
                self.writer.note({"message": f"read of group {g.id} ({g.device}) failed: {e}"})
            return None

    def _tick(self) -> None:
        self._batch_readings = None  # a batch-reading source is read once per tick, on first use
        for g in self.fixed:
            r = self._read(g)
            if r is not None:
                self._emit(g, r)
        for dev, rot in self.rotations.items():
            cur = rot[self.turn[dev]]
            if cur.since_ns is None:  # first tick: schedule in the first group
                self._schedule_in(cur)
                continue
            r = self._read(cur)
            if r is not None:
                self._emit(cur, r)
            self.ticks_in[dev] += 1
            if self.ticks_in[dev] >= self.mux_ticks:
                out_ns = r.host_ns if r is not None else self.clock.now_ns()
                cur.running_before_ns += out_ns - cur.since_ns
                cur.since_ns = None
                self.turn[dev] = (self.turn[dev] + 1) % len(rot)
                self._schedule_in(rot[self.turn[dev]])
                self.ticks_in[dev] = 0

    def _schedule_in(self, g: Group) -> None:
        """Give g the slots; its read now is the start of its counting period."""
        r = self._read(g)
        g.since_ns = r.host_ns if r is not None else self.clock.now_ns()
        if r is not None:
            self._emit(g, r)

    # -- the loop ---------------------------------------------------------------------------
    def run_until(self, end_ns: int | None = None, on_tick: Callable[["Sampler"], None] | None = None) -> Stats:
        """Take ticks on the deadline grid up to and including end_ns (None: until stop())."""
        clock = self.clock
        if self._t0 is None:
            self._t0 = clock.now_ns()
            self.stats.start_ns = self._t0
            self._last_flush_ns = self._t0
        period = self.period_ns
        cpu0 = time.thread_time_ns()
        while not self.stop_requested:
            deadline = self._t0 + self._k * period
            if end_ns is not None and deadline > end_ns:
                break
            now = clock.now_ns()
            if now < deadline:
                clock.sleep_until(deadline)
                if self.stop_requested:
                    break
            else:
                behind = (now - deadline) // period
                if end_ns is not None:  # a stall past the run's end misses only the run's own deadlines
                    behind = min(behind, (end_ns - deadline) // period + 1)
                if behind:
                    # deadlines we could not meet are counted and skipped, never shifted
                    self.stats.missed_deadlines += behind
                    self._k += behind
                    deadline += behind * period
                    if end_ns is not None and deadline > end_ns:
                        break
                late = now - deadline
                if late > 0:
                    self.stats.late_ticks += 1
                    self.stats.max_late_ns = max(self.stats.max_late_ns, late)
            w0 = time.perf_counter_ns()
            self._tick()
            self.stats.busy_ns += time.perf_counter_ns() - w0
            self.stats.ticks += 1
            self._k += 1
            if deadline - self._last_flush_ns >= self.flush_interval_ns:
                self.writer.flush()
                self._last_flush_ns = deadline
            if on_tick is not None:
                on_tick(self)
        self.stats.end_ns = clock.now_ns()
        self.stats.cpu_ns += time.thread_time_ns() - cpu0
        return self.stats

    def run(self, duration_s: float | None, on_tick=None) -> Stats:
        """Sample for duration_s seconds from now (None: until stop())."""
        if self._t0 is None:
            self._t0 = self.clock.now_ns()
            self.stats.start_ns = self._t0
        end = None if duration_s is None else self._t0 + int(round(duration_s * 1e9))
        return self.run_until(end, on_tick)

    def stop(self) -> None:
        """Ask the loop to end after the current tick (safe from a signal handler)."""
        self.stop_requested = True

    def close(self, ended: str = "completed") -> None:
        """Write the TAIL chunk (totals and how it ended) and close the file."""
        tail = self.stats.as_dict()
        tail["ended"] = ended
        self.writer.close(tail)
        self.source.close()
