"""NVIDIA GPUs through NVML (nvidia-ml-py's `pynvml`).

Counters per GPU `gpuN` (each probed once at start; one the GPU or driver does not
support is left out with a note): PCIe RX/TX byte counters (field values, cumulative, where the
driver has them), else PCIe RX/TX throughput (NVML's own 20 ms window, KB/s, gauges), PCIe replay
counter, current link generation and width, GPU and memory utilisation, memory used, SM and memory
clocks, power. NVML has no device clock: samples carry host time only. With no NVIDIA driver the
source raises SourceUnavailable, which the CLI reports and exits non-zero.

What the PCIe counters count, measured on an H200 (driver 580, Gen5 x16; bench/nvml_pcie_check.py,
docs/counters.md): bytes on the link, TLP framing, headers and LCRC included, not payload. A pinned
copy loop's 55.1 GB/s of payload read 59.4 GB/s host-to-device (x 1.078 = 276/256: read completions
of 256 B with 20 B each) and 60.3 GB/s device-to-host (x 1.094 = 280/256: writes with a 4-DW header);
the throughput gauge's KB is 1000 B (the byte counter over the gauge: 1003 B per KB); the byte
counters are 32-bit; and each gauge read blocks for its 20 ms window (21 ms a read), which capped a
sampler reading both gauges near 25 Hz. So the gauges are read only where the byte counters are
missing, and the counters carry `pcie_bytes="link"`: their utilisation is taken against the link's
raw rate (store/link.py), not its payload rate.
"""

from __future__ import annotations

import importlib
import time
from typing import Callable

from acceltrace.collect.counters.base import CounterSource, CounterSpec, DeviceInfo, Reading, SourceUnavailable

NVML_KB = 1000  # NVML's PCIe throughput is in KB/s of 1000 B (measured: module docstring)
# a field value's valueType -> the union member holding it and its width. The PCIe byte counters came as
# a 32-bit value on an H200 (driver 580): read as 64-bit, each 4 GiB wrap counted as one of 2**64 bytes
FIELD_TYPES = {1: ("uiVal", 32), 2: ("ulVal", 64), 3: ("ullVal", 64), 4: ("sllVal", 64), 5: ("siVal", 32),
               6: ("usVal", 16)}


def _load_pynvml():
    try:
        return importlib.import_module("pynvml")
    except ImportError as e:
        raise SourceUnavailable(f"nvml: the nvidia-ml-py package is not installed ({e}); pip install nvidia-ml-py") from None


class NvmlSource(CounterSource):
    NAME = "nvml"

    def __init__(self, **_):
        nv = self.nv = _load_pynvml()
        try:
            nv.nvmlInit()
        except nv.NVMLError as e:
            raise SourceUnavailable(
                f"nvml: no usable NVIDIA driver on this machine (NVML: {e}); "
                "the nvml source needs an NVIDIA GPU with its driver loaded") from None
        except OSError as e:  # a broken libnvidia-ml
            raise SourceUnavailable(f"nvml: the NVML library could not be loaded ({e})") from None
        self._notes: list[str] = []
        self._devices: list[DeviceInfo] = []
        self._specs: list[CounterSpec] = []
        self._get: dict[str, Callable] = {}  # counter name -> fn() -> int (plain getters)
        self._field: dict[str, tuple[object, int]] = {}  # counter name -> (handle, field id)
        try:
            for i in range(nv.nvmlDeviceGetCount()):
                self._probe_device(i)
        except nv.NVMLError as e:
            raise SourceUnavailable(f"nvml: listing GPUs failed ({e})") from None
        if not self._specs:
            raise SourceUnavailable("nvml: the driver is loaded but no GPU offers any counter")

    def _probe_device(self, i: int) -> None:
        nv = self.nv
        h = nv.nvmlDeviceGetHandleByIndex(i)
        dev = f"gpu{i}"
        name = nv.nvmlDeviceGetName(h)
        name = name.decode() if isinstance(name, bytes) else str(name)
        link = {}
        for key, fn in (("gen", "nvmlDeviceGetCurrPcieLinkGeneration"), ("width", "nvmlDeviceGetCurrPcieLinkWidth"),
                        ("max_gen", "nvmlDeviceGetMaxPcieLinkGeneration"), ("max_width", "nvmlDeviceGetMaxPcieLinkWidth")):
            try:
                link[key] = int(getattr(nv, fn)(h))
            except (nv.NVMLError, AttributeError):
                pass
        if link:
            # NVML does not report Max Payload Size; 256 B is what current GPUs and root ports negotiate
            link["max_payload_bytes"] = 256
            link["max_payload_assumed"] = True
        self._devices.append(DeviceInfo(name=dev, clock_hz=None, slots=0, links={"link": link} if link else {},
                                        props={"model": name, "index": i}))

        def S(local, unit, kind="gauge", **kw):
            return CounterSpec(name=f"{dev}.{local}", unit=unit, kind=kind, device=dev, **kw)

        counted = self._probe_byte_fields(h, dev, S)
        gauges = [
            (S("pcie.rx_throughput", "B/s", raw_unit="KB/s", scale=NVML_KB, role="pcie_h2d_rate", link="link",
               pcie_bytes="link", description="PCIe link bytes received by the GPU, NVML's 20 ms window"),
             lambda: nv.nvmlDeviceGetPcieThroughput(h, nv.NVML_PCIE_UTIL_RX_BYTES)),
            (S("pcie.tx_throughput", "B/s", raw_unit="KB/s", scale=NVML_KB, role="pcie_d2h_rate", link="link",
               pcie_bytes="link", description="PCIe link bytes sent by the GPU, NVML's 20 ms window"),
             lambda: nv.nvmlDeviceGetPcieThroughput(h, nv.NVML_PCIE_UTIL_TX_BYTES)),
        ]
        candidates = []
        for spec, fn in gauges:
            field_name = spec.name.replace("_throughput", "_bytes")
            if field_name in counted:  # the same bytes, without blocking for 20 ms a read
                self._notes.append(f"{spec.name} left out: {field_name} counts the same bytes, and a read of the "
                                   "gauge blocks for its 20 ms window")
            else:
                candidates.append((spec, fn))
        candidates += [
            (S("pcie.replays", "replays/s", kind="cumulative", bits=32, raw_unit="replays"),
             lambda: nv.nvmlDeviceGetPcieReplayCounter(h)),
            (S("pcie.link_gen", "gen"), lambda: nv.nvmlDeviceGetCurrPcieLinkGeneration(h)),
            (S("pcie.link_width", "lanes"), lambda: nv.nvmlDeviceGetCurrPcieLinkWidth(h)),
            (S("util.gpu", "%"), lambda: nv.nvmlDeviceGetUtilizationRates(h).gpu),
            (S("util.memory", "%"), lambda: nv.nvmlDeviceGetUtilizationRates(h).memory),
            (S("memory.used", "B", raw_unit="B"), lambda: nv.nvmlDeviceGetMemoryInfo(h).used),
            (S("clock.sm", "MHz"), lambda: nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM)),
            (S("clock.memory", "MHz"), lambda: nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_MEM)),
            (S("power", "W", raw_unit="mW", scale=1e-3), lambda: nv.nvmlDeviceGetPowerUsage(h)),
        ]
        for spec, fn in candidates:
            try:
                int(fn())
            except (nv.NVMLError, AttributeError) as e:
                self._notes.append(f"{spec.name} left out: {e}")
                continue
            self._specs.append(spec)
            self._get[spec.name] = fn

    def _probe_byte_fields(self, h, dev: str, S) -> set[str]:
        """The PCIe byte-count fields the driver has, as counters: their names."""
        nv, counted = self.nv, set()
        for local, fid_name, role in (("pcie.rx_bytes", "NVML_FI_DEV_PCIE_COUNT_RX_BYTES", "pcie_h2d_bytes"),
                                      ("pcie.tx_bytes", "NVML_FI_DEV_PCIE_COUNT_TX_BYTES", "pcie_d2h_bytes")):
            fid = getattr(nv, fid_name, None)
            if fid is None or not hasattr(nv, "nvmlDeviceGetFieldValues"):
                continue
            try:
                (v,) = nv.nvmlDeviceGetFieldValues(h, [fid])
                ok = v.nvmlReturn == 0
            except nv.NVMLError:
                ok = False
            if not ok:
                self._notes.append(f"{dev}.{local} left out: the driver has no PCIe byte-count field")
                continue
            member, bits = FIELD_TYPES.get(getattr(v, "valueType", None), ("ullVal", 64))
            if bits < 64:
                self._notes.append(f"{dev}.{local}: a {bits}-bit counter (it wraps every {(1 << bits) / 2**30:g} GiB, "
                                   f"every {(1 << bits) / 64e9 * 1e3:.0f} ms at 64 GB/s; sample it faster than that)")
            spec = S(local, "B/s", kind="cumulative", bits=bits, raw_unit="B", role=role, link="link",
                     pcie_bytes="link", description=f"PCIe link byte counter (NVML field value, {bits}-bit)")
            self._specs.append(spec)
            self._field[spec.name] = (h, fid, member)
            counted.add(spec.name)
        return counted

    def devices(self) -> list[DeviceInfo]:
        return list(self._devices)

    def specs(self) -> list[CounterSpec]:
        return list(self._specs)

    def notes(self) -> list[str]:
        return list(self._notes)

    def reader(self, device: str, names: list[str]) -> Callable[[], Reading]:
        nv = self.nv
        plain = [(i, self._get[n]) for i, n in enumerate(names) if n in self._get]
        fields = [(i, self._field[n]) for i, n in enumerate(names) if n in self._field]
        handle = fields[0][1][0] if fields else None
        fids = [f[1][1] for f in fields]
        members = [(i, f[2]) for i, f in fields]
        n = len(names)

        def read() -> Reading:
            out = [0] * n
            try:
                if fids:
                    vals = nv.nvmlDeviceGetFieldValues(handle, fids)
                    for (i, member), v in zip(members, vals):
                        out[i] = int(getattr(v.value, member))
                for i, fn in plain:
                    out[i] = int(fn())
            except nv.NVMLError as e:
                raise RuntimeError(f"NVML read failed: {e}") from None
            return Reading(self.clock.now_ns() if self.clock else time.clock_gettime_ns(time.CLOCK_MONOTONIC), -1, out)

        return read

    def close(self) -> None:
        try:
            self.nv.nvmlShutdown()
        except Exception:  # shutting down a library that is going away must not fail the run
            pass
