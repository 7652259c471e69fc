"""From a finished model run to files: run.atrace through collect's writer, run.actr through its sampler.

The model's records become formats.record RECORD_DTYPE arrays in bulk (one numpy pass per
column, no per-event Python call into the writer) and go out with AtraceWriter.add_records.
Device records are stamped in their device's ticks (clock domain = device index + 1) and
clock-sync pairs are taken every millisecond, as the driver's trace-buffer reader would.
Everything that would vary between runs (wall clock, host name, pid) is fixed by the seed,
so the same seed gives the same bytes.
"""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np

from acceltrace.formats import record as R
from acceltrace.formats.atrace.writer import AtraceWriter, default_header
from acceltrace.sim.trace import FLOW_IN, FLOW_OUT, INSTANT

SYNC_INTERVAL_NS = 1_000_000
SYNC_JITTER_NS = 40.0  # read latency asymmetry of one (host ns, device ticks) sample

_LANE = R.LANE_CODES
_DIR = {None: 0, **R.DIRECTION_CODES}
_MEM = {None: 0, **R.MEM_CODES}
_FLOW = {None: 0, **R.FLOW_CODES}


def app_pid(seed: int) -> int:
    return 1000 + random.Random(f"pid:{seed}").randrange(1, 60000)


def header_for(machine, seed: int, extra_header: dict | None = None) -> dict:
    cfg = machine.cfg
    devices, domains = [], [{"id": 0, "name": "host", "kind": "host", "unit": "ns"}]
    for dev in machine.devices:
        d = dev.index
        domains.append({"id": d + 1, "name": f"dev{d}", "kind": "device", "device": d, "hz": dev.clock.hz})
        devices.append({
            "id": d, "name": f"dev{d}", "link_gen": cfg.link.gen, "link_width": cfg.link.width,
            "max_payload_bytes": cfg.link.mps, "max_read_request_bytes": cfg.link.mrrs,
            "clock_domain": d + 1, "clock_hz": dev.clock.hz, "behind_switch": cfg.uplink is not None,
            "execution_units": [n for _k, n in cfg.device.unit_names()],
            "hbm_bytes_per_s": cfg.device.hbm_bytes_per_ns * 1e9,
        })
    extra = {
        "host": {"hostname": "acceltrace-sim", "pid": app_pid(seed)},
        "host_clock": "virtual",
        "created_unix_ns": 0,
        "clock_domains": domains,
        "devices": devices,
        "producer": "acceltrace device model",
    }
    extra.update(extra_header or {})
    if cfg.uplink is not None:
        extra["switch"] = {"uplink_gen": cfg.uplink.gen, "uplink_width": cfg.uplink.width,
                           "max_payload_bytes": cfg.uplink.mps}
    return default_header(**extra)


def to_records(machine, writer: AtraceWriter, pid: int, start: int = 0, stop: int | None = None) -> np.ndarray:
    """The recorder's rows [start, stop) as RECORD_DTYPE (strings interned into `writer`)."""
    rec = machine.rec
    rows = rec.rows[start:stop]
    n = len(rows)
    out = np.zeros(n, dtype=R.RECORD_DTYPE)
    if n == 0:
        return out
    (kind, track, ts, dur, name, corr, nbytes, direction, mem, args, flow, flow_kind, flow_end) = zip(*rows)
    tracks = rec.tracks
    lane_of = np.array([_LANE[t.lane] for t in tracks], dtype=np.uint8)
    dev_of = np.array([R.NO_DEVICE if t.device is None else t.device for t in tracks], dtype=np.uint8)
    tid_of = np.array([t.tid for t in tracks], dtype=np.uint32)
    clock_of = np.array([(t.device + 1) if t.device_clock else 0 for t in tracks], dtype=np.uint8)
    tr = np.asarray(track, dtype=np.int64)
    out["kind"] = np.asarray(kind, dtype=np.uint8)
    out["lane"] = lane_of[tr]
    clock = clock_of[tr]
    out["clock"] = clock
    out["device"] = dev_of[tr]
    out["tid"] = tid_of[tr]
    out["pid"] = pid
    intern = writer.intern
    cache: dict = {}

    def ids(values) -> np.ndarray:
        got = []
        for v in values:
            i = cache.get(v)
            if i is None:
                i = cache[v] = 0 if v is None else intern(v)
            got.append(i)
        return np.asarray(got, dtype=np.uint32)

    out["name"] = ids(name)
    out["args"] = ids(args)
    out["direction"] = np.asarray([_DIR[v] for v in direction], dtype=np.uint8)
    out["mem"] = np.asarray([_MEM[v] for v in mem], dtype=np.uint8)
    out["flow_kind"] = np.asarray([_FLOW[v] for v in flow_kind], dtype=np.uint8)
    fe = np.asarray(flow_end, dtype=np.uint8)
    nb = np.asarray(nbytes, dtype=np.int64)
    co = np.asarray(corr, dtype=np.int64)
    flags = np.where(fe == FLOW_OUT, R.FLAG_FLOW_OUT, 0) | np.where(fe == FLOW_IN, R.FLAG_FLOW_IN, 0)
    flags |= np.where(nb >= 0, R.FLAG_HAS_BYTES, 0) | np.where(co > 0, R.FLAG_HAS_CORR, 0)
    out["flags"] = flags.astype(np.uint8)
    out["bytes"] = np.maximum(nb, 0).astype(np.uint64)
    out["corr"] = co.astype(np.uint64)
    out["flow"] = np.asarray(flow, dtype=np.uint32)
    t0 = np.asarray(ts, dtype=np.float64)
    t1 = t0 + np.asarray(dur, dtype=np.float64)
    host_t0 = np.round(t0).astype(np.int64)
    host_t1 = np.round(t1).astype(np.int64)
    out_ts = host_t0 + machine.origin_ns
    out_dur = host_t1 - host_t0
    for dev in machine.devices:
        sel = clock == dev.index + 1
        if sel.any():
            a = dev.clock.ticks(t0[sel])
            b = dev.clock.ticks(t1[sel])
            out_ts[sel] = a
            out_dur[sel] = b - a
    out["ts"] = out_ts
    out["dur"] = np.where(out["kind"] == INSTANT, 0, out_dur)
    return out


def naming_records(machine, writer: AtraceWriter, pid: int, process_name: str) -> np.ndarray:
    """PROCESS_NAME and one TRACK_NAME per track (the names ground_truth.json refers to)."""
    recs = [R.encode(R.PROCESS_NAME, writer.intern(process_name), 0, lane=_LANE["cpu"], pid=pid)]
    for t in machine.rec.tracks:
        recs.append(R.encode(R.TRACK_NAME, writer.intern(t.name), 0, lane=_LANE[t.lane], pid=pid, tid=t.tid,
                             device=R.NO_DEVICE if t.device is None else t.device))
    return np.frombuffer(b"".join(recs), dtype=R.RECORD_DTYPE)


def sync_pairs(machine, seed: int, end_rel_ns: float) -> list[tuple[int, np.ndarray, np.ndarray]]:
    """(domain, host ns, device ticks) every SYNC_INTERVAL_NS across the run, with read jitter."""
    rng = np.random.default_rng(seed + 4242)
    out = []
    t = np.arange(-SYNC_INTERVAL_NS, end_rel_ns + 2 * SYNC_INTERVAL_NS, SYNC_INTERVAL_NS, dtype=np.float64)
    for dev in machine.devices:
        ticks = dev.clock.ticks(t)
        host = np.round(t + rng.normal(0.0, SYNC_JITTER_NS, len(t))).astype(np.int64) + machine.origin_ns
        out.append((dev.index + 1, host, ticks))
    return out


def write_atrace(result, path: Path, seed: int, process_name: str = "python3",
                 extra_header: dict | None = None) -> int:
    """Write run.atrace; returns the number of event records. extra_header: more header facts
    (a fleet rank's `distributed` block and host)."""
    m = result.machine
    pid = app_pid(seed)
    writer = AtraceWriter(path, header=header_for(m, seed, extra_header))
    try:
        writer.add_records(naming_records(m, writer, pid, process_name))
        step = 1 << 18
        for start in range(0, len(m.rec), step):
            writer.add_records(to_records(m, writer, pid, start, start + step))
        for domain, host, ticks in sync_pairs(m, seed, result.end_ns):
            writer.add_clock_sync(domain, host, ticks)
        n = writer.events_written
        writer.close(lost_events=0, producers=[{"stream": 0, "pid": pid, "name": process_name, "lost": 0}],
                     closed_unix_ns=0)
    except BaseException:
        writer.close(lost_events=0, closed_unix_ns=0)
        raise
    return writer.events_written or n


def sample_rate_hz(duration_ns: float, n_events: int = 0) -> float:
    """Up to 10 kHz (Nsight's default GPU-metrics rate); the number of samples grows with the trace
    (1200 at least, one per 40 events, 50 k at most), so counters never outweigh the events."""
    ticks = min(50_000, max(1200, n_events // 40))
    return float(max(10.0, min(10_000.0, ticks / max(duration_ns * 1e-9, 1e-9))))


def write_actr(result, path: Path, seed: int, n_events: int = 0) -> dict:
    """Sample the register bank on a virtual clock with collect's sampler into run.actr."""
    from acceltrace.collect.counters.sim import SimSource
    from acceltrace.collect.sampler import Sampler, VirtualClock

    m = result.machine
    start = m.origin_ns
    end = m.origin_ns + int(result.end_ns)
    clock = VirtualClock(start)
    source = SimSource(m.bank, clock=clock)
    sampler = Sampler(source, path, sample_rate_hz(result.end_ns, n_events), clock=clock,
                      header_extra={"host": "acceltrace-sim", "pid": app_pid(seed)})
    stats = sampler.run_until(end)
    # wall-clock costs of sampling say nothing about a simulated run and would make its bytes vary
    stats.busy_ns = 0
    stats.cpu_ns = 0
    sampler.close()
    return {"ticks": stats.ticks, "samples": stats.samples, "rate_hz": sampler.rate_hz}
