"""The Linux host: per-CPU utilisation (/proc/stat), memory (/proc/meminfo), and hardware
counters (cycles, instructions, cache misses) through perf_event_open where the kernel permits.

perf events are opened system-wide, one kernel perf group per CPU (cycles leading, so the
three share enabled/running time); the kernel multiplexes them when the PMU is short of
counters, and each read returns raw counts with time_enabled/time_running for ingest to
scale. Summed over CPUs, running time is the CPUs' mean. Where perf_event_open is refused
(perf_event_paranoid, seccomp in containers, no PMU in VMs), the source says so in a note
and offers the /proc counters alone.
"""

from __future__ import annotations

import ctypes
import os
import platform
import struct
import time
from typing import Callable

from acceltrace.collect.counters.base import CounterSource, CounterSpec, DeviceInfo, Reading, SourceUnavailable

DEV = "host"
_PROC_STAT = "/proc/stat"
_PROC_MEMINFO = "/proc/meminfo"
_SYSCALL_PERF_EVENT_OPEN = {"x86_64": 298, "aarch64": 241, "arm64": 241, "riscv64": 241, "ppc64le": 319}

PERF_TYPE_HARDWARE = 0
PERF_FORMAT_TOTAL_TIME_ENABLED, PERF_FORMAT_TOTAL_TIME_RUNNING, PERF_FORMAT_GROUP = 1, 2, 8
PERF_ATTR_SIZE = 112  # PERF_ATTR_SIZE_VER5; the kernel accepts any size it knows
PERF_EVENTS = (("cycles", 0, "cycles"), ("instructions", 1, "instructions"), ("cache_misses", 3, "misses"))
_FLAG_EXCLUDE_HV = 1 << 6


def _perf_attr(config: int, read_format: int) -> ctypes.Array:
    buf = ctypes.create_string_buffer(PERF_ATTR_SIZE)
    # type u32, size u32, config u64, sample_period u64, sample_type u64, read_format u64, flag bits u64
    struct.pack_into("<IIQQQQQ", buf, 0, PERF_TYPE_HARDWARE, PERF_ATTR_SIZE, config, 0, 0, read_format, _FLAG_EXCLUDE_HV)
    return buf


class PerfGroups:
    """One perf group (cycles, instructions, cache misses) per online CPU; read() sums them."""

    def __init__(self):
        nr = _SYSCALL_PERF_EVENT_OPEN.get(platform.machine())
        if nr is None:
            raise OSError(f"perf_event_open: unknown syscall number on {platform.machine()}")
        libc = ctypes.CDLL(None, use_errno=True)
        libc.syscall.restype = ctypes.c_long
        fmt = PERF_FORMAT_GROUP | PERF_FORMAT_TOTAL_TIME_ENABLED | PERF_FORMAT_TOTAL_TIME_RUNNING
        self.fds: list[int] = []
        self.leaders: list[int] = []
        try:
            for cpu in sorted(os.sched_getaffinity(0)):
                leader = -1
                for _, config, _ in PERF_EVENTS:
                    attr = _perf_attr(config, fmt)
                    fd = libc.syscall(nr, attr, ctypes.c_int(-1), ctypes.c_int(cpu), ctypes.c_int(leader),
                                      ctypes.c_ulong(0))
                    if fd < 0:
                        err = ctypes.get_errno()
                        raise OSError(err, f"perf_event_open (cpu {cpu}): {os.strerror(err)}")
                    self.fds.append(fd)
                    if leader == -1:
                        leader = fd
                        self.leaders.append(fd)
        except OSError:
            self.close()
            raise
        self._size = 8 * (3 + len(PERF_EVENTS))
        self._fmt = struct.Struct(f"<{3 + len(PERF_EVENTS)}Q")

    def read(self) -> tuple[list[int], int, int]:
        """(summed raw counts, mean enabled ns, mean running ns) over the CPUs."""
        totals = [0] * len(PERF_EVENTS)
        en = run = 0
        for fd in self.leaders:
            nr, enabled, running, *vals = self._fmt.unpack(os.read(fd, self._size))
            en += enabled
            run += running
            for i, v in enumerate(vals[:nr]):
                totals[i] += v
        n = max(1, len(self.leaders))
        return totals, en // n, run // n

    def close(self) -> None:
        for fd in self.fds:
            try:
                os.close(fd)
            except OSError:
                pass
        self.fds, self.leaders = [], []


def _perf_hint(err: int | None) -> str:
    """Why perf_event_open said no, in words a user can act on."""
    import errno

    if err in (errno.EACCES, errno.EPERM):
        return ("system-wide counting needs kernel.perf_event_paranoid <= 0 "
                "(sysctl kernel.perf_event_paranoid=0) or CAP_PERFMON")
    if err in (errno.ENOENT, errno.EOPNOTSUPP, errno.ENODEV):
        return "this CPU or kernel exposes no hardware PMU events, as in most VMs and sandboxes"
    if err == errno.ENOSYS:
        return "the perf_event_open system call is blocked here (a container's seccomp profile?)"
    return "see perf_event_open(2)"


def _cpu_lines() -> list[list[str]]:
    with open(_PROC_STAT, "rb") as f:
        return [ln.split() for ln in f.read().decode().splitlines() if ln.startswith("cpu")]


def _busy_jiffies(fields: list[str]) -> int:
    """user + nice + system + irq + softirq + steal (guest time is already inside user)."""
    v = [int(x) for x in fields[1:9]] + [0] * 8
    return v[0] + v[1] + v[2] + v[5] + v[6] + v[7]


def _all_jiffies(fields: list[str]) -> int:
    """Every state of the first eight (guest is already inside user)."""
    return sum(int(x) for x in fields[1:9])


class HostSource(CounterSource):
    NAME = "host"

    def __init__(self, perf: bool = True, **_):
        self._notes: list[str] = []
        try:
            self.hz = os.sysconf("SC_CLK_TCK")
            lines = _cpu_lines()
        except (OSError, ValueError, AttributeError) as e:
            raise SourceUnavailable(f"host: cannot read {_PROC_STAT} ({e}); the host source needs Linux /proc") from None
        self.cpus = [ln[0] for ln in lines if ln[0] != "cpu"]
        # busy jiffies per second of wall time, as % (quantised to 1/USER_HZ per interval), and the
        # jiffies counted in all states, so ingest can also show busy / all per interval (bounded 0..100)
        self._specs = []
        for c in ["cpu"] + self.cpus:
            n = max(1, len(self.cpus)) if c == "cpu" else 1
            what = "all CPUs" if c == "cpu" else c
            self._specs += [
                CounterSpec(f"{c}.busy", "%", kind="cumulative", device=DEV, raw_unit="jiffies",
                            scale=100.0 / self.hz / n, role="cpu_busy_jiffies",
                            description=f"busy time of {what} (user+nice+system+irq+softirq+steal) per wall second"),
                CounterSpec(f"{c}.jiffies", "%", kind="cumulative", device=DEV, raw_unit="jiffies",
                            scale=100.0 / self.hz / n, role="cpu_total_jiffies",
                            description=f"time {what} accounted in any state per wall second"),
            ]
        self._specs += [
            CounterSpec("memory.used", "B", kind="gauge", device=DEV, raw_unit="kB", scale=1024,
                        description="MemTotal - MemAvailable"),
            CounterSpec("memory.available", "B", kind="gauge", device=DEV, raw_unit="kB", scale=1024),
        ]
        self.perf: PerfGroups | None = None
        if perf:
            try:
                self.perf = PerfGroups()
            except OSError as e:
                self._notes.append(
                    f"host hardware counters (cycles, instructions, cache misses) unavailable: {e} "
                    f"({_perf_hint(e.errno)}); the /proc counters are still collected")
        if self.perf is not None:
            self._specs += [CounterSpec(f"perf.{n}", f"{u}/s", kind="cumulative", bits=64, device=DEV, raw_unit=u,
                                        read_group="perf", description=f"{n} on all CPUs (perf_event)")
                            for n, _, u in PERF_EVENTS]

    def devices(self) -> list[DeviceInfo]:
        return [DeviceInfo(DEV, clock_hz=None, props={"cpus": len(self.cpus), "user_hz": self.hz,
                                                       "machine": platform.machine()})]

    def specs(self) -> list[CounterSpec]:
        return list(self._specs)

    def notes(self) -> list[str]:
        return list(self._notes)

    def _now(self) -> int:
        return self.clock.now_ns() if self.clock is not None else time.clock_gettime_ns(time.CLOCK_MONOTONIC)

    def reader(self, device: str, names: list[str]) -> Callable[[], Reading]:
        if names and names[0].startswith("perf."):
            idx = [[n for n, _, _ in PERF_EVENTS].index(n[5:]) for n in names]
            perf = self.perf

            def read_perf() -> Reading:
                totals, enabled, running = perf.read()
                return Reading(self._now(), -1, [totals[i] for i in idx], (enabled, running))

            return read_perf
        want_stat = any(n.endswith((".busy", ".jiffies")) for n in names)
        want_mem = any(n.startswith("memory.") for n in names)

        def read() -> Reading:
            vals: dict[str, int] = {}
            if want_stat:
                for ln in _cpu_lines():
                    vals[f"{ln[0]}.busy"] = _busy_jiffies(ln)
                    vals[f"{ln[0]}.jiffies"] = _all_jiffies(ln)
            if want_mem:
                mem = {}
                with open(_PROC_MEMINFO, "rb") as f:
                    for ln in f.read().decode().splitlines():
                        k, _, rest = ln.partition(":")
                        if k in ("MemTotal", "MemAvailable"):
                            mem[k] = int(rest.split()[0])
                vals["memory.used"] = mem.get("MemTotal", 0) - mem.get("MemAvailable", 0)
                vals["memory.available"] = mem.get("MemAvailable", 0)
            # a CPU that went offline since the start reads as 0 (no busy time), never a crash
            return Reading(self._now(), -1, [vals.get(n, 0) for n in names])

        return read

    def close(self) -> None:
        if self.perf is not None:
            self.perf.close()
