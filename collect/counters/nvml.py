"""NVIDIA GPUs through NVML (nvidia-ml-py's `pynvml`).

Counters per GPU `gpuN` (each probed once at start; one the GPU or driver does not
support is left out with a note): PCIe RX/TX throughput (NVML's own 20 ms window, KB/s,
gauges), PCIe RX/TX byte counters (field values, cumulative, where the driver has them),
PCIe replay counter, current link generation and width, GPU and memory utilisation,
memory used, SM and memory clocks, power. NVML has no device clock: samples carry host
time only. With no NVIDIA driver the source raises SourceUnavailable, which the CLI
reports and exits non-zero.
"""

from __future__ import annotations

import importlib
import time
from typing import Callable

from acceltrace.collect.counters.base import CounterSource, CounterSpec, DeviceInfo, Reading, SourceUnavailable

NVML_KB = 1024  # NVML reports PCIe throughput in KB/s; taken as KiB/s


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

        candidates = [
            (S("pcie.rx_throughput", "B/s", raw_unit="KB/s", scale=NVML_KB, role="pcie_h2d_rate", link="link",
               description="PCIe bytes received by the GPU, NVML's 20 ms window"),
             lambda: nv.nvmlDeviceGetPcieThroughput(h, nv.NVML_PCIE_UTIL_RX_BYTES)),
            (S("pcie.tx_throughput", "B/s", raw_unit="KB/s", scale=NVML_KB, role="pcie_d2h_rate", link="link",
               description="PCIe bytes sent by the GPU, NVML's 20 ms window"),
             lambda: nv.nvmlDeviceGetPcieThroughput(h, nv.NVML_PCIE_UTIL_TX_BYTES)),
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
            spec = S(local, "B/s", kind="cumulative", bits=64, raw_unit="B", role=role, link="link",
                     description="PCIe byte counter (NVML field value)")
            self._specs.append(spec)
            self._field[spec.name] = (h, fid)

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
        n = len(names)

        def read() -> Reading:
            out = [0] * n
            try:
                if fids:
                    vals = nv.nvmlDeviceGetFieldValues(handle, fids)
                    for (i, _), v in zip(fields, vals):
                        out[i] = int(v.value.ullVal)
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
