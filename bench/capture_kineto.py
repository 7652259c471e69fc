"""Capture a small, real PyTorch profiler (Kineto) Chrome trace plus the ground truth it should show.

    python3 bench/capture_kineto.py OUTDIR [--iters 5]   # on a machine with torch and a GPU (it needs no acceltrace)

Workload per iteration (each step in its own record_function range, inside "iteration_N"):
  h2d_pinned    64 MiB pinned host -> device (non_blocking)
  h2d_pageable  64 MiB pageable host -> device
  matmul_bf16   4 x (4096x4096 @ 4096x4096) bf16 matmuls
  elementwise   relu, add, mul (3 elementwise ops)
  d2h_pinned    64 MiB device -> pinned host (non_blocking)
  d2h_pageable  64 MiB device -> pageable host
Writes OUTDIR/kineto_trace.json.gz and OUTDIR/kineto_truth.json (bytes and counts issued,
event-timed copy bandwidths from an unprofiled iteration, versions, PCIe link info, and
the counts the exported trace itself holds, by category and memcpy kind).
On a machine without CUDA it profiles CPU only with small tensors (a smoke test).
"""
from __future__ import annotations

import collections
import gzip
import json
import os
import platform
import shutil
import subprocess
import sys
import time

import torch
from torch.profiler import ProfilerActivity, profile, record_function

outdir = sys.argv[1] if len(sys.argv) > 1 else "."
iters = int(sys.argv[sys.argv.index("--iters") + 1]) if "--iters" in sys.argv else 5
os.makedirs(outdir, exist_ok=True)

cuda = torch.cuda.is_available()
dev = torch.device("cuda:0" if cuda else "cpu")
MIB = 1 << 20
COPY_BYTES = 64 * MIB if cuda else 1 * MIB
N = 4096 if cuda else 256
N_MATMUL = 4
ELEMENTWISE = ["relu", "add", "mul"]

truth: dict = {"script": os.path.basename(__file__), "cuda": cuda, "iters_profiled": iters,
               "python": sys.version.split()[0], "platform": platform.platform(),
               "torch": torch.__version__, "torch_cuda": torch.version.cuda}


def save():
    with open(os.path.join(outdir, "kineto_truth.json"), "w") as f:
        json.dump(truth, f, indent=1, default=str)


def sync():
    if cuda:
        torch.cuda.synchronize(dev)


# ---- buffers ----
pinned_src = torch.empty(COPY_BYTES, dtype=torch.uint8, pin_memory=cuda).fill_(1)
pageable_src = torch.empty(COPY_BYTES, dtype=torch.uint8).fill_(2)
dev_dst1 = torch.empty(COPY_BYTES, dtype=torch.uint8, device=dev)
dev_dst2 = torch.empty(COPY_BYTES, dtype=torch.uint8, device=dev)
dev_src = torch.full((COPY_BYTES,), 3, dtype=torch.uint8, device=dev)
pinned_dst = torch.empty(COPY_BYTES, dtype=torch.uint8, pin_memory=cuda)
pageable_dst = torch.empty(COPY_BYTES, dtype=torch.uint8)
mm_dtype = torch.bfloat16 if cuda else torch.float32
a = torch.randn(N, N, device=dev, dtype=mm_dtype)
b = torch.randn(N, N, device=dev, dtype=mm_dtype)
truth["buffers"] = {"copy_bytes": COPY_BYTES, "matmul_shape": [N, N, N], "matmul_dtype": str(mm_dtype),
                    "pinned_src_is_pinned": bool(pinned_src.is_pinned()),
                    "pinned_dst_is_pinned": bool(pinned_dst.is_pinned())}


def step(i: int, timers: dict | None = None):
    """One iteration; with timers, CUDA events bracket each copy (only used unprofiled)."""
    def timed(name, fn):
        if timers is not None and cuda:
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
            fn()
            e1.record()
            timers.setdefault(name, []).append((e0, e1))
        else:
            fn()

    with record_function(f"iteration_{i}"):
        with record_function("h2d_pinned"):
            timed("h2d_pinned", lambda: dev_dst1.copy_(pinned_src, non_blocking=True))
        with record_function("h2d_pageable"):
            timed("h2d_pageable", lambda: dev_dst2.copy_(pageable_src))
        with record_function("matmul_bf16"):
            c = a
            for _ in range(N_MATMUL):
                c = torch.matmul(c, b)
                c = c * (1.0 / N)  # keep values finite; counted as elementwise below
        with record_function("elementwise"):
            r = torch.relu(c)
            s = r + a
            m = s * 0.5
        with record_function("d2h_pinned"):
            timed("d2h_pinned", lambda: pinned_dst.copy_(dev_src, non_blocking=True))
        with record_function("d2h_pageable"):
            timed("d2h_pageable", lambda: pageable_dst.copy_(dev_src))
        sync()
    return m


# ops issued per iteration (what the script asked for; kernels per op may differ, see trace_counts)
PER_ITER = {
    "h2d_pinned_copies": 1, "h2d_pageable_copies": 1, "d2h_pinned_copies": 1, "d2h_pageable_copies": 1,
    "matmul_bf16": N_MATMUL, "elementwise_ops": N_MATMUL + len(ELEMENTWISE),
    "elementwise_ops_detail": {"mul_scale_after_matmul": N_MATMUL, "relu": 1, "add": 1, "mul": 1},
}
truth["issued_per_iteration"] = PER_ITER
truth["issued_total_profiled"] = {k: (v * iters if isinstance(v, int) else {kk: vv * iters for kk, vv in v.items()})
                                  for k, v in PER_ITER.items()}
truth["bytes_per_copy"] = {"h2d_pinned": COPY_BYTES, "h2d_pageable": COPY_BYTES,
                           "d2h_pinned": COPY_BYTES, "d2h_pageable": COPY_BYTES}
truth["bytes_total_profiled"] = {"h2d": 2 * COPY_BYTES * iters, "d2h": 2 * COPY_BYTES * iters}
truth["matmul_flops_each"] = 2 * N ** 3

# ---- warm-up (cuBLAS handles, pinned mappings), unprofiled ----
t = time.perf_counter()
for i in range(2):
    step(-1)
sync()
truth["warmup_s"] = round(time.perf_counter() - t, 4)

# ---- one unprofiled iteration timed with CUDA events ----
if cuda:
    timers: dict = {}
    step(-2, timers)
    sync()
    ev = {}
    for name, pairs in timers.items():
        ms = [e0.elapsed_time(e1) for e0, e1 in pairs]
        ev[name] = {"ms": [round(x, 4) for x in ms], "GB_per_s": [round(COPY_BYTES / (x / 1e3) / 1e9, 3) for x in ms]}
    truth["event_timed_copies_unprofiled"] = ev

# ---- versions and PCIe link, read while the GPU is warm from the copies ----
if cuda:
    p = torch.cuda.get_device_properties(dev)
    truth["gpu"] = {"name": p.name, "capability": f"{p.major}.{p.minor}", "sm_count": p.multi_processor_count,
                    "total_memory_bytes": p.total_memory}
    try:
        truth["cudnn"] = torch.backends.cudnn.version()
    except Exception as e:  # noqa: BLE001
        truth["cudnn"] = repr(e)
    try:
        import pynvml as nv

        nv.nvmlInit()
        h = nv.nvmlDeviceGetHandleByIndex(0)

        def q(fn, *args):
            try:
                v = getattr(nv, fn)(*args)
                return v.decode() if isinstance(v, bytes) else v
            except Exception as e:  # noqa: BLE001
                return f"error: {e}"

        truth["nvml"] = {
            "driver_version": q("nvmlSystemGetDriverVersion"),
            "cuda_driver_version": q("nvmlSystemGetCudaDriverVersion"),
            "nvml_version": q("nvmlSystemGetNVMLVersion"),
            "pci_bus_id": (lambda pi: pi if isinstance(pi, str) else pi.busId)(q("nvmlDeviceGetPciInfo", h)),
            "pcie_link_gen_current": q("nvmlDeviceGetCurrPcieLinkGeneration", h),
            "pcie_link_gen_max": q("nvmlDeviceGetMaxPcieLinkGeneration", h),
            "pcie_link_gen_gpu_max": q("nvmlDeviceGetGpuMaxPcieLinkGeneration", h),
            "pcie_link_width_current": q("nvmlDeviceGetCurrPcieLinkWidth", h),
            "pcie_link_width_max": q("nvmlDeviceGetMaxPcieLinkWidth", h),
            "pcie_replay_counter": q("nvmlDeviceGetPcieReplayCounter", h),
        }
        if isinstance(truth["nvml"]["pci_bus_id"], bytes):
            truth["nvml"]["pci_bus_id"] = truth["nvml"]["pci_bus_id"].decode()
    except Exception as e:  # noqa: BLE001
        truth["nvml"] = f"error: {e!r}"

if shutil.which("nvidia-smi"):
    try:
        txt = subprocess.run(["nvidia-smi", "-q"], capture_output=True, text=True, timeout=60).stdout
        lines = txt.splitlines()
        keep = []
        for k, line in enumerate(lines):
            if line.strip() in ("PCI", "PCIe Generation", "Link Width") or line.strip().startswith(
                    ("Driver Version", "CUDA Version", "Product Name", "Bus Id", "Max", "Current",
                     "Device Current", "Device Max", "Host Max", "Tx Throughput", "Rx Throughput",
                     "Replays", "Replay", "Bus ", "Atomic Caps")):
                keep.append(line.rstrip())
        truth["nvidia_smi_q_pcie_lines"] = keep
    except Exception as e:  # noqa: BLE001
        truth["nvidia_smi_q_pcie_lines"] = f"error: {e!r}"

save()

# ---- the profiled iterations ----
acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
t = time.perf_counter()
with profile(activities=acts, record_shapes=True, with_stack=False, profile_memory=False) as prof:
    for i in range(iters):
        step(i)
    sync()
truth["profiled_wall_s"] = round(time.perf_counter() - t, 4)

raw = os.path.join(outdir, "kineto_trace.json")
prof.export_chrome_trace(raw)
with open(raw, "rb") as f:
    data = f.read()
with gzip.open(raw + ".gz", "wb", compresslevel=9) as f:
    f.write(data)
os.remove(raw)
truth["trace_file"] = "kineto_trace.json.gz"
truth["trace_json_bytes"] = len(data)
truth["trace_gz_bytes"] = os.path.getsize(raw + ".gz")

save()

# ---- what the exported trace holds (counted from the file itself) ----
tr = json.loads(data)
evs = tr.get("traceEvents", tr if isinstance(tr, list) else [])
by_cat = collections.Counter(e.get("cat") for e in evs if e.get("ph") == "X")
memcpy = collections.defaultdict(lambda: {"count": 0, "bytes": 0, "dur_us": 0.0})
kernels = collections.Counter()
ann = collections.Counter()
for e in evs:
    if e.get("ph") != "X":
        continue
    cat = e.get("cat")
    if cat in ("gpu_memcpy", "gpu_memset"):
        m = memcpy[e.get("name")]
        m["count"] += 1
        m["bytes"] += int((e.get("args") or {}).get("bytes", 0) or 0)
        m["dur_us"] += float(e.get("dur", 0))
    elif cat == "kernel":
        kernels[e.get("name")] += 1
    elif cat in ("user_annotation", "gpu_user_annotation"):
        nm = e.get("name", "")
        ann[(cat, "iteration_N" if nm.startswith("iteration_") else nm)] += 1
for v in memcpy.values():
    v["GB_per_s"] = round(v["bytes"] / (v["dur_us"] / 1e6) / 1e9, 3) if v["dur_us"] else None
truth["trace_counts"] = {
    "events_total": len(evs),
    "complete_events_by_cat": dict(by_cat),
    "memcpy_by_name": dict(memcpy),
    "kernels_total": sum(kernels.values()),
    "kernels_by_name": {k[:160]: v for k, v in kernels.most_common()},
    "annotations": {f"{c}:{n}": v for (c, n), v in sorted(ann.items())},
    "deviceProperties": tr.get("deviceProperties") if isinstance(tr, dict) else None,
    "top_level_keys": sorted(tr.keys()) if isinstance(tr, dict) else None,
}

save()
print(json.dumps({k: truth[k] for k in ("torch", "torch_cuda", "trace_gz_bytes", "profiled_wall_s")}))
print("memcpy:", json.dumps(truth["trace_counts"]["memcpy_by_name"]))
print("kernels_total:", truth["trace_counts"]["kernels_total"], "by_cat:", dict(by_cat))
if cuda:
    print("event-timed:", json.dumps(truth.get("event_timed_copies_unprofiled")))
    print("nvml:", json.dumps(truth.get("nvml"), default=str))
