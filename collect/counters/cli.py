"""`acceltrace collect`: sample a counter source into an .actr file (docs/counters.md).

    acceltrace collect --source S [--counters a,b] [--rate HZ] [--duration S] --out FILE.actr
    acceltrace collect --source S --list
    acceltrace collect ... --socket PATH      also stream values to a running tracing daemon
    acceltrace collect ... --duration 0       until Ctrl-C
    acceltrace collect ... --realtime         ask for SCHED_FIFO (root or CAP_SYS_NICE)

Ctrl-C (SIGINT) or SIGTERM ends sampling after the current tick and still writes a
complete file (TAIL chunk with ended = "interrupted"). Exit codes: 0 done, 2 bad request
or source unavailable, 130 interrupted (the file is valid either way).
"""

from __future__ import annotations

import signal
import sys
import time
from pathlib import Path

from acceltrace.collect.counters import source_class
from acceltrace.collect.counters.base import CounterSource, SourceUnavailable
from acceltrace.collect.counters.live import LiveRates, human
from acceltrace.collect.sampler import MAX_RATE_HZ, MIN_RATE_HZ, Sampler, SamplerError, WallClock, use_realtime_priority

SUMMARY_EVERY_S = 0.5


def _err(msg: str) -> int:
    print(f"acceltrace collect: {msg}", file=sys.stderr)
    return 2


def open_source(name: str, duration_s: float | None, realtime_sim=None) -> CounterSource:
    """The named source, ready to read; the sim source builds its model for the duration.

    realtime_sim(duration_s, progress=...) makes the sim source (sim/counters.py): the command
    line passes it in, so collect/ never imports the device model.
    """
    if name == "sim":
        if realtime_sim is None:
            raise SourceUnavailable("sim: the device model is not available to this command")

        def progress(msg: str) -> None:
            print(f"acceltrace collect: {msg} (the model runs first, then is read in real time)", file=sys.stderr)

        return realtime_sim(duration_s=duration_s or 10.0, progress=progress)
    return source_class(name)()


def list_counters(src: CounterSource) -> None:
    devs = {d.name: d for d in src.devices()}
    print(f"source {src.NAME}:")
    for d in devs.values():
        extra = f", {d.slots} programmable slots" if d.slots else ""
        link = d.links.get("link") or d.links.get("uplink")
        if link:
            extra += f", PCIe gen {link.get('gen')} x{link.get('width')}"
        print(f"  device {d.name}{extra}")
    print(f"  {'counter':34} {'kind':10} {'bits':>4} {'slot':12} unit")
    for s in src.specs():
        print(f"  {s.name:34} {s.kind:10} {s.bits:>4} {s.slot:12} {s.unit}"
              + (f"  ({s.description})" if s.description else ""))
    for n in src.notes():
        print(f"  note: {n}")


class Live:
    """The terminal's one-line summary and the optional stream to the daemon."""

    def __init__(self, sampler: Sampler, duration_s: float | None, tty: bool, tracer=None):
        self.sampler, self.duration_s, self.tty, self.tracer = sampler, duration_s, tty, tracer
        self.rates = LiveRates(sampler.specs)
        self.units = {s.name: s.unit for s in sampler.specs}
        self.next_print = 0.0
        self.cpu0 = time.thread_time_ns()
        # a few telling counters for the live line: rates with a known role first, bookkeeping ones never
        ranked = sorted((s for s in sampler.specs if s.role != "cpu_total_jiffies"),
                        key=lambda s: (s.kind != "cumulative", not s.role))
        self.shown = [s.name for s in ranked[:3]]
        sampler.listeners.append(self.on_sample)

    def on_sample(self, g, r, enabled_ns, running_ns) -> None:
        values = self.rates.update(g.id, g.names, running_ns, r)
        if self.tracer is not None:
            for name, v in values:
                self.tracer.counter(name, v, ts=r.host_ns, unit=self.units[name])

    def on_tick(self, sampler: Sampler) -> None:
        now = time.monotonic()
        if not self.tty or now < self.next_print:
            return
        self.next_print = now + SUMMARY_EVERY_S
        st = sampler.stats
        elapsed = (sampler.clock.now_ns() - st.start_ns) / 1e9
        total = f"/{self.duration_s:g}" if self.duration_s else " (Ctrl-C ends)"
        vals = "  ".join(f"{n} {human(self.rates.latest[n], self.units[n])}"
                         for n in self.shown if n in self.rates.latest)
        cost = (st.cpu_ns + time.thread_time_ns() - self.cpu0) / max(1, sampler.clock.now_ns() - st.start_ns) * 100
        sys.stderr.write(f"\r{elapsed:6.1f}{total} s  {st.samples} samples  missed {st.missed_deadlines}  "
                         f"cost {cost:.1f}%  {vals}\x1b[K")
        sys.stderr.flush()


def collect_command(args, realtime_sim=None, pm_unit=None) -> int:
    try:
        source_class(args.source)  # refuse an unknown source name before the other checks
    except KeyError as e:
        return _err(e.args[0])
    if not args.list and args.out is None:
        return _err("--out FILE.actr is required (or --list to see the counters)")
    if getattr(args, "device_sampling", False):
        return device_sampling_command(args, realtime_sim, pm_unit)
    if not args.list and not (MIN_RATE_HZ <= args.rate <= MAX_RATE_HZ):
        return _err(f"--rate {args.rate:g} is outside {MIN_RATE_HZ:g}..{MAX_RATE_HZ:g} Hz")
    if args.duration is not None and args.duration < 0:
        return _err("--duration must be positive (0: until Ctrl-C)")
    until_stopped = args.duration == 0
    try:
        # --list only needs the model's registers, not a long run
        # --list only needs the model's registers, not a long run; "until Ctrl-C" simulates one minute
        src = open_source(args.source, 0.05 if args.list else (args.duration or 60.0), realtime_sim)
    except SourceUnavailable as e:
        return _err(str(e))
    except Exception as e:  # a source failing to start must say why, not print a traceback
        return _err(f"{args.source}: the source failed to start: {type(e).__name__}: {e}")
    if args.list:
        list_counters(src)
        src.close()
        return 0
    names = [n.strip() for n in args.counters.split(",") if n.strip()] if args.counters else None
    out = Path(args.out)
    if out.parent and not out.parent.exists():
        src.close()
        return _err(f"the directory of --out {out} does not exist")
    try:
        sampler = Sampler(src, out, rate_hz=args.rate, counters=names, clock=getattr(src, "clock", None) or WallClock())
    except SamplerError as e:
        src.close()
        return _err(str(e))
    except OSError as e:
        src.close()
        return _err(f"cannot write {out}: {e.strerror or e}")
    except Exception as e:  # a source whose readers cannot be set up: say which and why
        src.close()
        return _err(f"{args.source}: cannot set up sampling: {type(e).__name__}: {e}")

    if getattr(args, "realtime", False):
        print(f"acceltrace collect: scheduling: {use_realtime_priority()}", file=sys.stderr)
    for text in sampler.wrap_risks:
        print(f"acceltrace collect: warning: {text}", file=sys.stderr)
    tracer = None
    if getattr(args, "socket", None):
        try:
            from acceltrace.collect import client

            tracer = client.connect(str(args.socket), process_name=f"acceltrace collect ({args.source})")
        except Exception as e:  # no daemon there: say so, and still collect to the file
            print(f"acceltrace collect: not streaming to {args.socket}: {e}", file=sys.stderr)
    live = Live(sampler, args.duration, sys.stderr.isatty(), tracer)

    interrupted = False

    def on_signal(signum, frame):
        nonlocal interrupted
        interrupted = True
        sampler.stop()

    old = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    ended = "completed"
    try:
        sampler.run(None if until_stopped else args.duration, on_tick=live.on_tick)
        if interrupted:
            ended = "interrupted"
    except Exception as e:  # the file must still be closed validly
        ended = "error"
        print(f"\nacceltrace collect: sampling stopped: {type(e).__name__}: {e}", file=sys.stderr)
    finally:
        for sig, h in old.items():
            signal.signal(sig, h)
        sampler.close(ended)
        if tracer is not None:
            try:
                tracer.close()
            except Exception as e:
                print(f"acceltrace collect: closing the daemon stream failed: {e}", file=sys.stderr)
    st = sampler.stats
    span_s = max(1e-9, (st.end_ns - st.start_ns) / 1e9)
    if live.tty:
        sys.stderr.write("\n")
    print(f"wrote {out}: {st.samples} samples of {len(sampler.specs)} counters in {len(sampler.groups)} groups "
          f"at {args.rate:g} Hz over {span_s:.2f} s; missed deadlines {st.missed_deadlines}; "
          f"sampler cost {st.cpu_ns / 1e9 / span_s * 100:.2f}% of one core ({ended})")
    return {"completed": 0, "interrupted": 130}.get(ended, 1)


def device_sampling_command(args, realtime_sim, pm_unit) -> int:
    """`collect --source sim --device-sampling`: each device's PM unit samples its registers at
    --rate (1 Hz .. 200 kHz) into its own ring; this process drains the rings at --drain-hz
    into BUFS chunks (collect/counters/pm.py). pm_unit(bank, device, ring_samples=, model_offset_ns=)
    makes a unit (sim/pm.py's PMSampler; the command line passes it in)."""
    from acceltrace.collect.counters.pm import MAX_DRAIN_HZ, MIN_DRAIN_HZ, PMCollector, header_for
    from acceltrace.formats.actr.writer import ActrWriter

    if args.source != "sim" or pm_unit is None:
        return _err("--device-sampling needs a device with a PM sampler: only --source sim has one here")
    if not 1.0 <= args.rate <= 200_000.0:
        return _err(f"--rate {args.rate:g} is outside 1..200000 Hz for device sampling")
    if not MIN_DRAIN_HZ <= args.drain_hz <= MAX_DRAIN_HZ:
        return _err(f"--drain-hz {args.drain_hz:g} is outside {MIN_DRAIN_HZ:g}..{MAX_DRAIN_HZ:g} Hz")
    if not args.duration or args.duration < 0:
        return _err("--device-sampling needs a positive --duration")
    out = Path(args.out)
    if out.parent and not out.parent.exists():
        return _err(f"the directory of --out {out} does not exist")
    try:
        src = open_source("sim", args.duration, realtime_sim)
    except SourceUnavailable as e:
        return _err(str(e))
    bank = src.bank
    wanted = {n.strip() for n in args.counters.split(",") if n.strip()} if args.counters else None
    specs = {s.name: s for s in src.specs()}
    clock = WallClock()
    now = clock.now_ns()
    units = []
    for dev in dict.fromkeys(s.device for s in bank.specs):
        names = [s.name for s in bank.specs if s.device == dev and (wanted is None or s.name in wanted)]
        if not names:
            continue
        pm = pm_unit(bank, dev, ring_samples=args.pm_ring, model_offset_ns=int(bank.start_ns) - now)
        pm.program(names, args.rate, now)
        units.append((pm, [specs[n].header_entry(0) for n in names]))
    if wanted is not None and not units:
        return _err(f"none of --counters {args.counters} is a register of the model")
    try:
        w = ActrWriter(out, header_for(units, [d.header_entry() for d in src.devices()], source="sim-pm"))
    except OSError as e:
        return _err(f"cannot write {out}: {e.strerror or e}")
    col = PMCollector([pm for pm, _ in units], w, clock, drain_hz=args.drain_hz)
    old = {sig: signal.signal(sig, lambda *_: col.stop()) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        st = col.run(args.duration)
    finally:
        for sig, h in old.items():
            signal.signal(sig, h)
        w.close({**col.stats.as_dict(), "ended": "interrupted" if col._stop else "completed"})
    model_s = sum(pm.model_cpu_s for pm, _ in units)
    print(f"wrote {out}: {st.samples} device samples of {sum(len(pm.names) for pm, _ in units)} counters on "
          f"{len(units)} devices at {units[0][0].rate_hz:g} Hz, {st.drains} drains at {args.drain_hz:g} Hz; "
          f"dropped by the devices (ring full): {st.dropped}; drain cost "
          f"{(st.cpu_s - model_s) / max(st.wall_s, 1e-9) * 100:.2f}% of one core "
          f"(+ {model_s / max(st.wall_s, 1e-9) * 100:.2f}% evaluating the model's registers)")
    return 130 if col._stop else 0
