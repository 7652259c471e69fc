"""Check the nvml source against a copy loop whose bandwidth we know, on a real NVIDIA GPU.

    .venv/bin/python bench/nvml_pcie_check.py [--gpu 0] [--mb 256] [--seconds 5] [--rate 100]

Samples the nvml source (PCIe RX throughput gauge and, where the driver has them, the
RX byte counters) in a background thread while PyTorch copies a pinned host buffer to
the GPU in a loop; ingests the .actr the way `acceltrace ingest` does; prints the PCIe
RX rate the counters saw during the loop next to the loop's own bytes / time. NVML counts
the link's bytes, TLP framing and headers included: the GPU pulls the buffer as read
completions of up to the Max Payload Size (256 B assumed), each 20 B more on the link (4 B
framing and sequence number, a 3-DW header, 4 B LCRC; Gen1-5), so a counter of link bytes
is checked against payload x (256 + 20) / 256 and a payload counter against the payload.
They should agree within 10 %. Needs only the project, nvidia-ml-py and torch with CUDA.
On an H200 (driver 580, Gen5 x16; docs/counters.md): payload 55.3 GB/s, link anchor 59.6,
rx_bytes 59.6 GB/s (ratio 1.000).
Exit codes: 0 agree, 1 disagree, 2 cannot run here (no driver, no torch, no GPU).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from acceltrace.collect.counters.base import SourceUnavailable  # noqa: E402
from acceltrace.collect.sampler import Sampler, WallClock  # noqa: E402

TOLERANCE = 0.10
COMPLETION_OVERHEAD_BYTES = 20  # per read-completion TLP on the link, Gen1-5 (see the docstring)


def counter_means(actr_path: Path, names: list[str], t0_ns: int, t1_ns: int, work_dir: Path) -> dict[str, float]:
    """Time-weighted mean of each named counter track (as ingest stores it) over [t0, t1]."""
    import duckdb

    from acceltrace.ingest.native.actr import ingest_actr
    from acceltrace.ingest.builder import TraceBuilder

    db = work_dir / "check.duckdb"
    b = TraceBuilder(db)
    ingest_actr(actr_path, b)
    b.finish("actr", actr_path.name)
    con = duckdb.connect(str(db), read_only=True)
    out = {}
    for name in names:
        rows = con.execute("SELECT c.ts, c.value FROM counters c JOIN tracks t USING (track_id) "
                           "WHERE t.name = ? ORDER BY c.ts", [name]).fetchall()
        if not rows:
            continue
        ts = np.array([r[0] for r in rows], dtype=np.int64)
        v = np.array([r[1] for r in rows])
        # each value covers the interval since the previous sample (stamped at its end); clip to the window
        starts = np.insert(ts[:-1], 0, ts[0] - (ts[1] - ts[0] if len(ts) > 1 else 1))
        lo, hi = np.maximum(starts, t0_ns), np.minimum(ts, t1_ns)
        w = np.clip(hi - lo, 0, None).astype(np.float64)
        if w.sum() > 0:
            out[name] = float((v * w).sum() / w.sum())
    con.close()
    return out


def copy_loop(gpu: int, mb: int, seconds: float):
    """Pinned host -> GPU copies for `seconds`; returns (bytes, t0_ns, t1_ns) on CLOCK_MONOTONIC."""
    import torch

    dev = torch.device(f"cuda:{gpu}")
    n = mb << 20
    src = torch.empty(n, dtype=torch.uint8, pin_memory=True)
    dst = torch.empty(n, dtype=torch.uint8, device=dev)
    for _ in range(3):  # warm up: first copies map the buffer
        dst.copy_(src, non_blocking=True)
    torch.cuda.synchronize(dev)
    moved = 0
    t0 = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
    end = t0 + int(seconds * 1e9)
    while time.clock_gettime_ns(time.CLOCK_MONOTONIC) < end:
        for _ in range(4):
            dst.copy_(src, non_blocking=True)
            moved += n
        torch.cuda.synchronize(dev)
    t1 = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
    return moved, t0, t1


def verdict(copy_bps: float, seen: dict[str, float], link_bps: float | None = None,
            link_bytes: frozenset = frozenset()) -> tuple[bool, list[str]]:
    """Each counter's rate against its anchor: the link's bytes (link_bps) for the names in link_bytes,
    else the loop's payload."""
    lines, ok = [], bool(seen)
    for name, bps in seen.items():
        anchor = link_bps if name in link_bytes and link_bps else copy_bps
        ratio = bps / anchor if anchor else float("nan")
        good = abs(ratio - 1) <= TOLERANCE
        ok = ok and good
        lines.append(f"  {name:34} {bps / 1e9:8.2f} GB/s   ratio {ratio:5.3f}   {'ok' if good else 'OFF BY > 10%'}")
    return ok, lines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gpu", type=int, default=0)
    ap.add_argument("--mb", type=int, default=256, help="copy size in MiB")
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--rate", type=float, default=100.0,
                    help="samples/s; NVML's throughput gauge is a 20 ms window, so ~50-100 Hz is its useful limit")
    a = ap.parse_args(argv)
    try:
        import torch

        if not torch.cuda.is_available():
            print("nvml_pcie_check: torch sees no CUDA GPU; nothing to check here", file=sys.stderr)
            return 2
    except ImportError:
        print("nvml_pcie_check: PyTorch is not installed; it drives the copy loop", file=sys.stderr)
        return 2
    from acceltrace.collect.counters.nvml import NvmlSource

    try:
        src = NvmlSource()
    except SourceUnavailable as e:
        print(f"nvml_pcie_check: {e}", file=sys.stderr)
        return 2
    dev = f"gpu{a.gpu}"
    offered = {s.name for s in src.specs()}
    names = [n for n in (f"{dev}.pcie.rx_throughput", f"{dev}.pcie.rx_bytes") if n in offered]
    if not names:
        print(f"nvml_pcie_check: {dev} offers no PCIe RX counter ({sorted(offered)})", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as d:
        work = Path(d)
        out = work / "nvml.actr"
        sampler = Sampler(src, out, rate_hz=a.rate, counters=names, clock=WallClock())
        th = threading.Thread(target=sampler.run, args=(None,), daemon=True)
        th.start()
        time.sleep(0.3)  # a baseline before the loop starts
        moved, t0, t1 = copy_loop(a.gpu, a.mb, a.seconds)
        time.sleep(0.1)
        sampler.stop()
        th.join(timeout=5)
        sampler.close()
        st = sampler.stats
        # the gauge averages the 20 ms before each read: skip the loop's first and last 50 ms
        seen = counter_means(out, names, t0 + 50_000_000, t1 - 50_000_000, work)
    copy_bps = moved / ((t1 - t0) / 1e9)
    link = src.devices()[a.gpu].links.get("link") or {}
    mps = int(link.get("max_payload_bytes", 256))
    link_bps = copy_bps * (mps + COMPLETION_OVERHEAD_BYTES) / mps
    on_link = frozenset(s.name for s in src.specs() if s.pcie_bytes == "link")
    print(f"GPU {a.gpu} ({src.devices()[a.gpu].props.get('model')}), link {link}; sampler {a.rate:g} Hz, "
          f"{st.samples} samples, missed deadlines {st.missed_deadlines}")
    for note in src.notes():
        print(f"  note: {note}")
    print(f"  copy loop (pinned H2D, {a.mb} MiB)      {copy_bps / 1e9:8.2f} GB/s   (payload anchor)")
    print(f"  the same on the link ({mps} B completions) {link_bps / 1e9:8.2f} GB/s   (link-bytes anchor)")
    ok, lines = verdict(copy_bps, seen, link_bps, on_link)
    print("\n".join(lines))
    print("agree within 10%" if ok else "DISAGREE")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
