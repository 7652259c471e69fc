"""Synthetic Kineto pairs with known injected changes, for the comparison tests.

Per step (ProfilerStep#k on the main thread), A and B both hold:
  aten::linear [10, 110) us  > cudaLaunchKernel [20, 30)  -> gemm_kernel   at 40 us, GEMM_US long
  aten::relu   [200, 260) us > cudaLaunchKernel [210, 220) -> relu_kernel at 300 us, 50 us
A only: cudaMemcpyAsync [400, 420) us -> "Memcpy HtoD (Pageable -> Device)" [430, 530) us (B removes the copy)
B only: aten::dropout [600, 650) us (B adds the op); gemm_kernel takes twice as long; the step lasts
STEP_B_US instead of STEP_A_US.
"""

from __future__ import annotations

import json
from pathlib import Path

STEPS = 3
STEP_A_US, STEP_B_US = 1000, 1100
GEMM_A_US, GEMM_B_US = 100, 200
STEP_GAP_US = 300
T0_US = 1_700_000_000_000_000 // 1000
COPY = "Memcpy HtoD (Pageable -> Device)"


def _x(cat, name, pid, tid, ts, dur, **args):
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args}


def _launch(events, corr, host_ts, host_name, dev_cat, dev_name, dev_ts, dev_dur, **dev_args):
    events.append(_x("cuda_runtime", host_name, 100, 1, host_ts, 10, correlation=corr))
    events.append(_x(dev_cat, dev_name, 0, 7, dev_ts, dev_dur, device=0, stream=7, correlation=corr, **dev_args))
    events.append({"ph": "s", "id": corr, "pid": 100, "tid": 1, "ts": host_ts, "cat": "ac2g", "name": "ac2g"})
    events.append({"ph": "f", "id": corr, "pid": 0, "tid": 7, "ts": dev_ts, "cat": "ac2g", "name": "ac2g", "bp": "e"})


def trace(side: str, step_name: str = "ProfilerStep#{k}") -> dict:
    b = side == "b"
    step_us = STEP_B_US if b else STEP_A_US
    events = [{"ph": "M", "name": "process_name", "pid": 100, "tid": 0, "args": {"name": "python"}},
              {"ph": "M", "name": "process_name", "pid": 0, "tid": 0, "args": {"name": "GPU 0"}}]
    corr = 1
    for k in range(STEPS):
        t = T0_US + k * (step_us + STEP_GAP_US)
        events.append(_x("user_annotation", step_name.format(k=100 + k), 100, 1, t, step_us))
        events.append(_x("cpu_op", "aten::linear", 100, 1, t + 10, 100))
        _launch(events, corr, t + 20, "cudaLaunchKernel", "kernel", "gemm_kernel", t + 40, GEMM_B_US if b else GEMM_A_US)
        events.append(_x("cpu_op", "aten::relu", 100, 1, t + 200, 60))
        _launch(events, corr + 1, t + 210, "cudaLaunchKernel", "kernel", "relu_kernel", t + 300, 50)
        if not b:
            events.append(_x("cuda_runtime", "cudaMemcpyAsync", 100, 1, t + 400, 20, correlation=corr + 2))
            events.append(_x("gpu_memcpy", COPY, 0, 7, t + 430, 100, device=0, stream=7, correlation=corr + 2,
                             bytes=1 << 20))
            events.append({"ph": "s", "id": corr + 2, "pid": 100, "tid": 1, "ts": t + 400, "cat": "ac2g", "name": "ac2g"})
            events.append({"ph": "f", "id": corr + 2, "pid": 0, "tid": 7, "ts": t + 430, "cat": "ac2g", "name": "ac2g",
                           "bp": "e"})
        else:
            events.append(_x("cpu_op", "aten::dropout", 100, 1, t + 600, 50))
        corr += 3
    return {"schemaVersion": 1, "traceEvents": events}


def write_pair(directory: Path, step_name: str = "ProfilerStep#{k}", tag: str = "synthetic") -> tuple[Path, Path]:
    """The pair as two JSON files; step_name (with {k}) names the step annotations."""
    directory.mkdir(parents=True, exist_ok=True)
    out = []
    for side in ("a", "b"):
        p = directory / f"{tag}-{side}.json"
        p.write_text(json.dumps(trace(side, step_name)))
        out.append(p)
    return out[0], out[1]
