"""`acceltrace sim SCENARIO --live`: the model's run replayed in real time through a tracing daemon.

The model runs first (it is much faster than real time); then every record is handed to the
Python tracing client at the wall-clock moment it completes in the run, mapped onto the
host's CLOCK_MONOTONIC, exactly as an instrumented runtime and the driver's trace-buffer
reader would emit them. Device records keep their device ticks, with clock-sync pairs sent as
time passes. Counters are sampled from the register bank on the wall clock into DIR/run.actr
while the replay runs. The daemon writes the events into its own --out file; DIR gets
run.actr and ground_truth.json (its times on the same monotonic clock).
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from pathlib import Path

from acceltrace.sim import ground_truth, output, scenarios
from acceltrace.sim.run import run_plan
from acceltrace.sim.session import steps_for
from acceltrace.sim.trace import COLUMNS, FLOW_IN, FLOW_OUT, INSTANT

LEAD_NS = 100_000_000  # start the replay this far after setup, so the first records are not late


def run_live(name: str, seed: int, events: int | None, out_dir: Path) -> int:
    sock = os.environ.get("ACCELTRACE_SOCKET")
    if not sock:
        print("acceltrace sim --live: no tracing daemon; start `acceltrace traced --socket PATH --out FILE` "
              "and set ACCELTRACE_SOCKET=PATH", file=sys.stderr)
        return 2
    from acceltrace.collect import client
    from acceltrace.collect.client import ClientError

    plan = scenarios.build(name, seed)
    steps = steps_for(plan, events)
    result = run_plan(plan, steps)
    truth = ground_truth.build(result, name, seed, steps)
    m = result.machine
    pid = output.app_pid(seed)
    header = output.header_for(m, seed)
    try:
        tracer = client.connect(sock, header={k: header[k] for k in ("devices", "clock_domains")},
                                process_name="python3", pid=pid)
    except (ClientError, OSError) as e:
        print(f"acceltrace sim --live: cannot reach the daemon at {sock}: {e}", file=sys.stderr)
        return 1
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    for t in m.rec.tracks:
        tracer.name_track(t.lane, t.tid, t.name, device=t.device, pid=pid)
    live0 = time.monotonic_ns() + LEAD_NS
    shift = live0 - m.origin_ns
    sampler_thread, sampler = _start_counters(result, out_dir / "run.actr", seed, shift)
    lost: ClientError | None = None
    try:
        _replay(result, tracer, pid, live0)
    except ClientError as e:  # the daemon went away mid-run: say so, still stop the sampler cleanly
        lost = e
    finally:
        try:
            tracer.close()
        except ClientError as e:
            lost = lost or e
        if sampler is not None:
            sampler.stop()
            sampler_thread.join()
            sampler.close()
    if lost is not None:
        print(f"acceltrace sim --live: the tracing daemon stopped taking events ({lost}); the trace it wrote "
              "is missing the rest of the run", file=sys.stderr)
        return 1
    _shift_truth(truth, shift)
    (out_dir / "ground_truth.json").write_text(json.dumps(truth, separators=(",", ":")) + "\n")
    print(json.dumps({"out": str(out_dir), "events": len(m.rec), "run_ns": truth["run_ns"], "live": True}))
    return 0


def _replay(result, tracer, pid: int, live0: int) -> None:
    m = result.machine
    rec = m.rec
    cols = {c: i for i, c in enumerate(COLUMNS)}
    order = sorted(range(len(rec.rows)), key=lambda i: rec.rows[i][cols["ts"]] + rec.rows[i][cols["dur"]])
    next_sync = 0.0
    for i in order:
        row = rec.rows[i]
        t_rel = row[cols["ts"]]
        end_rel = t_rel + row[cols["dur"]]
        while next_sync <= end_rel:
            for dev in m.devices:
                tracer.clock_sync(dev.index + 1, live0 + int(next_sync), int(dev.clock.ticks([next_sync])[0]))
            next_sync += output.SYNC_INTERVAL_NS
        wait = live0 + end_rel - time.monotonic_ns()
        if wait > 0:
            time.sleep(wait / 1e9)
        track = rec.tracks[row[cols["track"]]]
        kw = {"pid": pid, "tid": track.tid}
        if track.device is not None:
            kw["device"] = track.device
        if track.device_clock:
            dev = m.devices[track.device]
            a, b = dev.clock.ticks([t_rel, end_rel])
            kw["clock"] = track.device + 1
            ts, dur = int(a), int(b - a)
        else:
            ts, dur = live0 + int(round(t_rel)), int(round(end_rel)) - int(round(t_rel))
        if row[cols["corr"]]:
            kw["corr"] = row[cols["corr"]]
        if row[cols["nbytes"]] >= 0:
            kw["bytes"] = row[cols["nbytes"]]
        for c, k in (("direction", "direction"), ("mem", "mem")):
            if row[cols[c]]:
                kw[k] = row[cols[c]]
        if row[cols["flow_end"]] == FLOW_OUT:
            kw["flow_out"], kw["flow_kind"] = row[cols["flow"]], row[cols["flow_kind"]]
        elif row[cols["flow_end"]] == FLOW_IN:
            kw["flow_in"], kw["flow_kind"] = row[cols["flow"]], row[cols["flow_kind"]]
        if row[cols["args"]]:
            kw.update(json.loads(row[cols["args"]]))
        if row[cols["kind"]] == INSTANT:
            tracer.instant(row[cols["name"]], lane=track.lane, ts=ts, **kw)
        else:
            tracer.complete(row[cols["name"]], ts, dur, lane=track.lane, **kw)


def _start_counters(result, path: Path, seed: int, shift: int):
    """The sampler on the wall clock, reading the registers at (now - shift) in model time."""
    from acceltrace.collect.counters.sim import SimSource
    from acceltrace.collect.sampler import Sampler, WallClock

    clock = WallClock()
    source = SimSource(result.machine.bank, clock=clock, model_offset_ns=-shift)
    sampler = Sampler(source, path, min(1000.0, output.sample_rate_hz(result.end_ns, len(result.rec))), clock=clock,
                      header_extra={"pid": output.app_pid(seed)})
    end = result.machine.origin_ns + shift + int(result.end_ns)
    start = result.machine.origin_ns + shift

    def run():
        clock.sleep_until(start)
        sampler.run_until(end)

    th = threading.Thread(target=run, name="sim-counters", daemon=True)
    th.start()
    return th, sampler


def _shift_truth(truth: dict, shift: int) -> None:
    truth["run_start_ns"] += shift
    truth["run_end_ns"] += shift
    for issue in truth["issues"]:
        issue["start_ns"] += shift
        issue["end_ns"] += shift
        for a in issue["affected"]:
            a[1] += shift
            a[2] += shift
