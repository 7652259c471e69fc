"""Fast synthetic traces straight into the TraceBuilder (numpy + Arrow, no per-event Python).

Shape: ~200 tracks over the cpu, driver, pcie and eu lanes (plus a few counter tracks),
root slices with log-normal durations and gaps, each slice splitting into 0-3 children
placed inside it, recursively, so trees reach depth 8 and beyond. Names come from a
vocabulary of 300 with a Zipf-like frequency. pcie slices carry bytes, direction and host_mem.

    python bench/gen_synthetic.py --slices 1000000 --store /tmp/st    # prints the trace id

Used by bench/tiles.py, bench/load.py and (at small sizes) tests/conftest.py.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

from acceltrace.ingest.builder import TraceBuilder
from acceltrace.store.catalog import Store

LANES = ("cpu", "driver", "pcie", "eu")
MAX_DEPTH = 12
# children per slice: P(0..3); mean 1.12, so a root carries ~10 descendants on average
CHILD_P = np.array([0.30, 0.35, 0.28, 0.07])
START_ABS_NS = 1_700_000_000_000_000_000


def _expected_tree_size() -> float:
    # measured (slices per root with these parameters): short slices stop splitting, so the
    # geometric sum of CHILD_P's mean (28) overestimates; callers get about the size asked for
    return 18.2


def _vocab(n: int = 300) -> pa.Array:
    kinds = ("gemm", "conv", "memcpy", "launch", "submit", "softmax", "layernorm", "allreduce", "dma", "op")
    return pa.array([f"{kinds[i % len(kinds)]}_{i:03d}" for i in range(n)])


def generate(builder: TraceBuilder, n_slices: int, n_tracks: int = 200, seed: int = 0,
             n_counter_tracks: int = 4, counter_period_ns: int = 10_000, batch_rows: int = 2_000_000) -> dict:
    """Add about n_slices slices (and counter samples) to builder; returns what was made."""
    rng = np.random.default_rng(seed)
    vocab = _vocab()
    zipf_w = 1.0 / np.arange(1, len(vocab) + 1)
    zipf_w /= zipf_w.sum()
    tracks = np.array([
        builder.track(LANES[i % 4], f"{LANES[i % 4]} {i}", group_name=f"{LANES[i % 4]} group {i // 80}",
                      device=None if LANES[i % 4] == "cpu" else str(i % 2), sort_key=i)
        for i in range(n_tracks)
    ], dtype=np.int32)
    lane_of = np.array([i % 4 for i in range(n_tracks)], dtype=np.int8)
    roots_per_track = max(1, int(round(n_slices / n_tracks / _expected_tree_size())))
    made = 0
    end_ns = 0
    # one batch of roots for a slice of the tracks at a time keeps memory bounded at 100M
    tracks_per_batch = max(1, int(batch_rows / (roots_per_track * _expected_tree_size())))
    for t0 in range(0, n_tracks, tracks_per_batch):
        tsel = np.arange(t0, min(n_tracks, t0 + tracks_per_batch))
        n_roots = roots_per_track * len(tsel)
        # roots: log-normal durations (median ~40 us) and gaps (median ~8 us)
        dur = rng.lognormal(np.log(40_000), 1.0, n_roots).astype(np.int64) + 1
        gap = rng.lognormal(np.log(8_000), 1.2, n_roots).astype(np.int64)
        track_idx = np.repeat(tsel, roots_per_track)
        step = (dur + gap).reshape(len(tsel), roots_per_track)
        ts = (np.cumsum(step, axis=1) - step).reshape(-1) + START_ABS_NS
        levels_ts, levels_dur, levels_track, levels_depth = [ts], [dur], [track_idx], [np.zeros(n_roots, np.int32)]
        p_ts, p_dur, p_track = ts, dur, track_idx
        for depth in range(1, MAX_DEPTH + 1):
            k = rng.choice(4, size=len(p_ts), p=CHILD_P)
            k[p_dur < 8] = 0
            total = int(k.sum())
            if total == 0:
                break
            parent = np.repeat(np.arange(len(p_ts)), k)
            # child j of k gets segment j of the parent's interval, and a random part inside it
            j = np.arange(total) - np.repeat(np.cumsum(k) - k, k)
            seg = p_dur[parent] // k[parent]
            frac = rng.beta(4, 2, total)
            c_dur = np.maximum(1, (seg * frac).astype(np.int64))
            c_off = ((seg - c_dur) * rng.random(total)).astype(np.int64)
            c_ts = p_ts[parent] + j * seg + c_off
            c_track = p_track[parent]
            levels_ts.append(c_ts)
            levels_dur.append(c_dur)
            levels_track.append(c_track)
            levels_depth.append(np.full(total, depth, np.int32))
            p_ts, p_dur, p_track = c_ts, c_dur, c_track
        s_ts = np.concatenate(levels_ts)
        s_dur = np.concatenate(levels_dur)
        s_track = np.concatenate(levels_track)
        s_depth = np.concatenate(levels_depth)
        n = len(s_ts)
        names = pa.DictionaryArray.from_arrays(
            pa.array(rng.choice(len(vocab), size=n, p=zipf_w).astype(np.int32)), vocab)
        lane = lane_of[s_track]
        is_pcie = lane == 2
        nbytes = np.where(is_pcie, (s_dur * rng.uniform(2.0, 20.0, n)).astype(np.int64), 0)
        direction = pa.DictionaryArray.from_arrays(
            pa.array(np.where(is_pcie, rng.integers(0, 2, n), -1).astype(np.int32), mask=~is_pcie),
            pa.array(["h2d", "d2h"]))
        host_mem = pa.DictionaryArray.from_arrays(
            pa.array(np.where(is_pcie, rng.integers(0, 2, n), -1).astype(np.int32), mask=~is_pcie),
            pa.array(["pinned", "pageable"]))
        builder.add_slices({
            "track_id": tracks[s_track], "ts": s_ts, "dur": s_dur, "depth": s_depth,
            "name": names.cast(pa.string()),
            "bytes": pa.array(nbytes, mask=~is_pcie),
            "direction": direction.cast(pa.string()), "host_mem": host_mem.cast(pa.string()),
        })
        made += n
        end_ns = max(end_ns, int((s_ts + s_dur).max()))
    # counters: one sample every counter_period_ns over the whole span, random walk in 0..100
    n_samples = 0
    span = end_ns - START_ABS_NS
    for c in range(n_counter_tracks):
        tid = builder.track("counter", f"util {c}", group_name="device counters", device=str(c % 2),
                            unit="%", sort_key=c)
        c_ts = np.arange(START_ABS_NS, START_ABS_NS + span, counter_period_ns, dtype=np.int64)
        val = np.clip(50 + np.cumsum(rng.normal(0, 2, len(c_ts))), 0, 100)
        builder.add_counters(np.full(len(c_ts), tid, np.int32), c_ts, val)
        n_samples += len(c_ts)
    return {"slices": made, "tracks": n_tracks + n_counter_tracks, "counters": n_samples, "span_ns": span}


def build_trace(store: Store, n_slices: int, name: str | None = None, seed: int = 0, **kw) -> tuple[str, dict]:
    """Generate, finish (runs the LOD steps) and publish one synthetic trace; returns (id, info)."""
    label = name or f"synthetic-{n_slices}"
    trace_id, tmp = store.begin(label, None, None)
    builder = TraceBuilder(tmp)
    try:
        t0 = time.perf_counter()
        info = generate(builder, n_slices, seed=seed, **kw)
        info["generate_s"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        counts = builder.finish("synthetic", label)
        info["finish_s"] = time.perf_counter() - t0
    except BaseException:
        builder.abort()
        store.fail(trace_id, tmp, "synthetic generation failed", keep_row=False)
        raise
    store.publish(trace_id, tmp, "synthetic", counts)
    info["counts"] = counts
    return trace_id, info


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--slices", type=int, default=1_000_000)
    ap.add_argument("--tracks", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--store", type=Path, required=True)
    ap.add_argument("--name")
    args = ap.parse_args(argv)
    trace_id, info = build_trace(Store(args.store), args.slices, args.name, seed=args.seed, n_tracks=args.tracks)
    print(trace_id)
    print(f"slices={info['slices']} counters={info['counters']} span_ns={info['span_ns']} "
          f"generate_s={info['generate_s']:.1f} finish_s={info['finish_s']:.1f}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
