"""What a Chrome/Kineto event is on our timeline: its lane, and for copies their direction.

The mapping follows DESIGN.md (lanes are about what a track shows):
  cpu     cpu_op, python_function, user_annotation, cuda_runtime (+ old-schema Operator, Runtime)
  driver  cuda_driver, mtia_runtime, privateuse1_* (accelerator runtimes that submit work)
  pcie    gpu_memcpy HtoD / DtoH / PtoP, MTIA dma_request (one track per device and direction)
  eu      kernel, gpu_memset, DtoD copies, other MTIA device events (per stream)
  annotation  gpu_user_annotation (device ranges such as CUDA-graph capture markers: rows of that
          device, per stream), cuda_sync (a synchronisation drawn on a stream: a wait, not
          work) and the profiler's own span ("PyTorch Profiler (0)", category Trace):
          ranges that mark time, never counted as work
Categories we do not know fall back on the thread: a thread id like "stream 7" is a
device stream (eu), anything else a CPU thread.
"""

from __future__ import annotations

import re

# codes 4 and 5 are both the annotation lane: host-side (a process's span) and device-side
LANE_CODES = ("cpu", "driver", "pcie", "eu", "annotation", "annotation")
CPU, DRIVER, PCIE, EU, ANNOTATION, DEVICE_ANNOTATION = range(6)

_BY_CATEGORY = {
    "cpu_op": CPU, "operator": CPU, "python_function": CPU, "user_annotation": CPU,
    "cuda_runtime": CPU, "runtime": CPU, "cpu_instant_event": CPU, "overhead": CPU, "trace": ANNOTATION,
    "external_correlation": CPU, "cuda_sync": DEVICE_ANNOTATION, "cuda_event": CPU, "python_op": CPU,
    "cuda_driver": DRIVER, "mtia_runtime": DRIVER, "privateuse1_runtime": DRIVER, "privateuse1_driver": DRIVER,
    "driver": DRIVER,
    "kernel": EU, "gpu_memset": EU, "memset": EU, "gpu_user_annotation": DEVICE_ANNOTATION, "mtia_ccp_events": EU,
    "hardware_counters": EU,
    # copies: the direction decides (see copy_kind)
    "gpu_memcpy": PCIE, "memcpy": PCIE,
}
COPY_CATEGORIES = frozenset({"gpu_memcpy", "memcpy"})
DMA_CATEGORIES = frozenset({"mtia_ccp_events"})

# Kineto copy names: "Memcpy HtoD (Pageable -> Device)", "Memcpy DtoD (Device -> Device)"
_COPY_RE = re.compile(r"\b(HtoD|DtoH|DtoD|PtoP|HtoH|AtoD|DtoA|AtoH|HtoA|AtoA)\b(?:\s*\(([^)]*)\))?")
_DIRECTIONS = {"HtoD": "h2d", "DtoH": "d2h", "DtoD": "d2d", "PtoP": "p2p"}
_DMA_DIRECTIONS = {
    "HOST_TO_DEVICE": "h2d", "DEVICE_TO_HOST": "d2h", "DEVICE_TO_DEVICE": "d2d", "PEER_TO_PEER": "p2p",
    "H2D": "h2d", "D2H": "d2h", "D2D": "d2d", "HTOD": "h2d", "DTOH": "d2h", "DTOD": "d2d",
}
PCIE_TRACK_NAMES = {"h2d": "PCIe HtoD", "d2h": "PCIe DtoH", "p2p": "PCIe PtoP", "": "PCIe"}


def category_lane(cat: str | None) -> int | None:
    """The lane a category implies, or None when it does not say."""
    if not cat:
        return None
    return _BY_CATEGORY.get(cat.lower())


def thread_lane(tid: str) -> int:
    """Lane of an event whose category says nothing: device streams are EU, the rest CPU."""
    return EU if tid.lower().startswith("stream") else CPU


def copy_kind(name: str) -> tuple[str | None, str | None]:
    """(direction, host_mem) from a Kineto copy name; host_mem only when the host side is named."""
    m = _COPY_RE.search(name or "")
    if not m:
        return None, None
    direction = _DIRECTIONS.get(m.group(1))
    host_mem = None
    sides = (m.group(2) or "").lower()
    if "pageable" in sides:
        host_mem = "pageable"
    elif "pinned" in sides:
        host_mem = "pinned"
    return direction, host_mem


def dma_direction(value) -> str | None:
    """Direction of an accelerator DMA request from its args (e.g. MTIA "HOST_TO_DEVICE")."""
    if not isinstance(value, str):
        return None
    return _DMA_DIRECTIONS.get(value.strip().upper().replace("-", "_"))


def is_dma_name(name: str) -> bool:
    n = (name or "").lower()
    return n.startswith("dma") or "dma_request" in n


def lane_for(cat: str | None, name: str, tid: str, direction: str | None) -> int:
    """Final lane: copies with a host side go to PCIe, device-to-device copies stay on the EU."""
    lane = category_lane(cat)
    if lane is None:
        lane = thread_lane(tid)
    c = (cat or "").lower()
    if c in COPY_CATEGORIES:
        return PCIE if direction in ("h2d", "d2h", "p2p") else EU
    if c in DMA_CATEGORIES and direction is not None:
        return PCIE
    return lane


def is_device_process(labels: str | None, name: str | None) -> bool:
    text = f"{labels or ''} {name or ''}".lower()
    return bool(re.search(r"\b(gpu|mtia|npu|tpu|xpu|accelerator|device)\b", text))
