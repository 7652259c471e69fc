"""A stand-in for nvidia-ml-py's pynvml: one or two GPUs whose counters the test controls."""

from __future__ import annotations

import types


class NVMLError(Exception):
    def __init__(self, value):
        self.value = value

    def __str__(self):
        return {3: "Not Supported", 9: "Driver Not Loaded", 12: "NVML Shared Library Not Found"}.get(self.value, "Unknown")


def make(n_gpus: int = 1, driver: bool = True, rx_kib_s: int = 1_000_000, replay_supported: bool = False,
         byte_fields: bool = True, byte_field_bits: int = 64, rx_bytes_start: int = 0):
    """A module object with the pynvml functions the nvml source uses. byte_field_bits 32: the byte
    counters come as NVML_VALUE_TYPE_UNSIGNED_INT (in uiVal, wrapping at 2**32), as an H200's did."""
    m = types.ModuleType("pynvml")
    m.NVMLError = NVMLError
    m.NVML_PCIE_UTIL_TX_BYTES, m.NVML_PCIE_UTIL_RX_BYTES = 0, 1
    m.NVML_CLOCK_SM, m.NVML_CLOCK_MEM = 1, 2
    m.NVML_FI_DEV_PCIE_COUNT_TX_BYTES, m.NVML_FI_DEV_PCIE_COUNT_RX_BYTES = 197, 198
    state = {"init": 0, "shutdown": 0, "reads": 0, "rx_bytes": rx_bytes_start}
    m.state = state

    def nvmlInit():
        if not driver:
            raise NVMLError(12)
        state["init"] += 1

    def nvmlShutdown():
        state["shutdown"] += 1

    m.nvmlInit, m.nvmlShutdown = nvmlInit, nvmlShutdown
    m.nvmlDeviceGetCount = lambda: n_gpus
    m.nvmlDeviceGetHandleByIndex = lambda i: ("h", i)
    m.nvmlDeviceGetName = lambda h: b"Fake GPU H0"
    m.nvmlDeviceGetCurrPcieLinkGeneration = lambda h: 5
    m.nvmlDeviceGetCurrPcieLinkWidth = lambda h: 16
    m.nvmlDeviceGetMaxPcieLinkGeneration = lambda h: 5
    m.nvmlDeviceGetMaxPcieLinkWidth = lambda h: 16

    def throughput(h, which):
        state["reads"] += 1
        return rx_kib_s if which == 1 else rx_kib_s // 10

    m.nvmlDeviceGetPcieThroughput = throughput

    def replay(h):
        if not replay_supported:
            raise NVMLError(3)
        return 7

    m.nvmlDeviceGetPcieReplayCounter = replay
    m.nvmlDeviceGetUtilizationRates = lambda h: types.SimpleNamespace(gpu=87, memory=40)
    m.nvmlDeviceGetMemoryInfo = lambda h: types.SimpleNamespace(used=5 << 30, total=80 << 30)
    m.nvmlDeviceGetClockInfo = lambda h, which: 1980 if which == 1 else 2619
    m.nvmlDeviceGetPowerUsage = lambda h: 312_000

    def field_values(h, ids):
        if not byte_fields:
            return [types.SimpleNamespace(nvmlReturn=3, value=types.SimpleNamespace(ullVal=0)) for _ in ids]
        # the RX byte counter advances by rx_kib_s * 1024 / 1000 per call (a 1 ms "tick")
        state["rx_bytes"] += rx_kib_s * 1024 // 1000
        shown = state["rx_bytes"] % (1 << byte_field_bits)
        return [types.SimpleNamespace(nvmlReturn=0, valueType=1 if byte_field_bits == 32 else 3,
                                      value=types.SimpleNamespace(ullVal=shown if i == 198 else 0,
                                                                  uiVal=shown if i == 198 else 0))
                for i in ids]

    m.nvmlDeviceGetFieldValues = field_values
    return m
