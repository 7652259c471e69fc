"""Writes a Kineto-like Chrome trace of about N events (for bench/ingest.py and big-input tests).

The shape follows what the PyTorch profiler writes for a training step loop: metadata
events, nested cpu_op / cuda_runtime slices with External ids, kernels and copies on
GPU streams linked by correlation ids and ac2g flow events, pretty-printed the way
Kineto prints (one key group per line), times in microseconds with three decimals
relative to "baseTimeNanoseconds".

    python bench/gen_chrome.py --events 2000000 --out /tmp/big.json [--gzip]
"""

from __future__ import annotations

import argparse
import gzip
import random
from pathlib import Path

BASE_NS = 1_767_189_312_000_000_000
PID = 4242
KERNELS = [
    "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>",
    "ampere_sgemm_128x64_tn", "void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_64x64_32x6_tn_align4>",
    "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::MeanOps<float, float>>>",
]
OPS = ["aten::linear", "aten::add", "aten::mul", "aten::relu", "aten::mean", "aten::copy_"]
COPIES = [("Memcpy HtoD (Pageable -> Device)", 1), ("Memcpy HtoD (Pinned -> Device)", 1),
          ("Memcpy DtoH (Device -> Pageable)", 2), ("Memcpy DtoD (Device -> Device)", 3)]


def _us(ns: int) -> str:
    return f"{ns // 1000}.{ns % 1000:03d}"


def _x(cat, name, pid, tid, ts_ns, dur_ns, args: str) -> str:
    return (f'  {{\n    "ph": "X", "cat": "{cat}", "name": "{name}", "pid": {pid}, "tid": {tid},\n'
            f'    "ts": {_us(ts_ns)}, "dur": {_us(dur_ns)},\n    "args": {{\n      {args}\n    }}\n  }}')


def _flow(ph, fid, pid, tid, ts_ns) -> str:
    bp = ', "bp": "e"' if ph == "f" else ""
    return (f'  {{\n    "ph": "{ph}", "id": {fid}, "pid": {pid}, "tid": {tid}, "ts": {_us(ts_ns)},\n'
            f'    "cat": "ac2g", "name": "ac2g"{bp}\n  }}')


def events(n: int, seed: int = 0):
    """Yields event texts until about n events were produced."""
    rng = random.Random(seed)
    yield f'  {{\n    "name": "process_name", "ph": "M", "ts": 0.000, "pid": {PID}, "tid": 0,\n    "args": {{\n      "name": "python"\n    }}\n  }}'
    yield '  {\n    "name": "process_labels", "ph": "M", "ts": 0.000, "pid": 0, "tid": 0,\n    "args": {\n      "labels": "GPU 0"\n    }\n  }'
    yield '  {\n    "name": "thread_name", "ph": "M", "ts": 0.000, "pid": 0, "tid": 7,\n    "args": {\n      "name": "stream 7 "\n    }\n  }'
    made = 3
    t_cpu = 1_365_627_000_000_000  # ns relative to the base, like recent Kineto
    t_gpu = t_cpu
    ext = corr = 0
    tid = PID
    while made < n:
        ext += 1
        op = OPS[ext % len(OPS)]
        calls = []  # the op's runtime calls and their device work, emitted after the op
        t = t_cpu + 2_000
        for _ in range(rng.randint(1, 3)):
            corr += 1
            copy = rng.random() < 0.08
            rt_dur = rng.randint(3_000, 9_000)
            rt_name = "cudaMemcpyAsync" if copy else "cudaLaunchKernel"
            calls.append(_x("cuda_runtime", rt_name, PID, tid, t, rt_dur,
                            f'"External id": {ext}, "cbid": 211, "correlation": {corr}'))
            calls.append(_flow("s", corr, PID, tid, t))
            t_gpu = max(t_gpu, t + rng.randint(5_000, 20_000))
            g_dur = rng.randint(2_000, 200_000)
            if copy:
                name, _ = COPIES[corr % len(COPIES)]
                nbytes = rng.choice((4096, 65536, 1 << 20, 8 << 20))
                args = (f'"device": 0, "context": 1,\n      "stream": 7, "correlation": {corr}, "External id": {ext},\n'
                        f'      "bytes": {nbytes}, "memory bandwidth (GB/s)": {nbytes / max(g_dur, 1):.3f}')
                calls.append(_x("gpu_memcpy", name, 0, 7, t_gpu, g_dur, args))
            else:
                args = (f'"queued": 0, "device": 0, "context": 1,\n      "stream": 7, "correlation": {corr},'
                        f' "External id": {ext},\n      "registers per thread": 32, "shared memory": 0,\n'
                        f'      "grid": [{rng.randint(1, 4096)}, 1, 1], "block": [256, 1, 1],'
                        f' "est. achieved occupancy %": {rng.randint(5, 100)}')
                calls.append(_x("kernel", KERNELS[corr % len(KERNELS)], 0, 7, t_gpu, g_dur, args))
            calls.append(_flow("f", corr, 0, 7, t_gpu))
            t_gpu += g_dur
            t += rt_dur + rng.randint(500, 3_000)
        op_dur = t - t_cpu + rng.randint(1_000, 5_000)  # the op encloses its calls
        yield _x("cpu_op", op, PID, tid, t_cpu, op_dur, f'"External id": {ext}, "Record function id": 0, "Ev Idx": {made}')
        yield from calls
        made += 1 + len(calls)
        t_cpu += op_dur + rng.randint(1_000, 10_000)


def write(path: Path, n: int, gz: bool = False, seed: int = 0) -> int:
    """Writes the trace; returns the number of bytes of JSON text."""
    opener = gzip.open if gz else open
    total = 0
    with opener(path, "wt") as f:
        head = ('{\n  "schemaVersion": 1,\n  "deviceProperties": [\n    {"id": 0, "name": "Generated GPU"}\n  ],\n'
                f'  "distributedInfo": {{"backend": "nccl", "rank": 0, "world_size": 1}},\n'
                f'  "displayTimeUnit": "ms",\n  "baseTimeNanoseconds": {BASE_NS},\n  "traceEvents": [\n')
        f.write(head)
        total += len(head)
        buf = []
        first = True
        for ev in events(n, seed):
            buf.append(ev if first else ",\n" + ev)
            first = False
            if len(buf) >= 4096:
                s = "".join(buf)
                f.write(s)
                total += len(s)
                buf = []
        tail = "".join(buf) + '\n  ],\n  "traceName": "generated"\n}\n'
        f.write(tail)
        total += len(tail)
    return total


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=200_000)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--gzip", action="store_true")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    n = write(a.out, a.events, a.gzip, a.seed)
    print(f"wrote {a.out}: about {a.events} events, {n / 1e6:.1f} MB of JSON")


if __name__ == "__main__":
    main()
