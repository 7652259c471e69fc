"""Small hand-made traces for the analysis pass tests, written through the real TraceBuilder.

A trace is described with times in microseconds (readable) and stored in ns. Device work
is submitted the way the native runtime does it: a CPU call, a driver doorbell with a
dma/exec flow to the device slice, and one correlation id shared by all three.
"""

from __future__ import annotations

import json

from acceltrace.ingest.builder import TraceBuilder
from acceltrace.store.catalog import Store

US = 1000
T0 = 1_000_000_000  # absolute start (ns); arbitrary, nonzero to catch relative/absolute mixups


class TraceSpec:
    def __init__(self, link: tuple[int, int, int] | None = (4, 16, 256)):
        self.link = link
        self.slices: list[dict] = []
        self.flows: list[tuple[int, int, str]] = []
        self.counters: list[tuple[str, str, str, float, float]] = []
        self._corr = 0

    def _add(self, lane: str, track: str, ts_us: float, dur_us: float, name: str, dev: str | None = None,
             **cols) -> int:
        self.slices.append(dict(lane=lane, track=track, ts=T0 + round(ts_us * US), dur=round(dur_us * US),
                                name=name, dev=dev, **cols))
        return len(self.slices) - 1

    def cpu(self, ts_us: float, dur_us: float, name: str, thread: str = "main", corr: int | None = None,
            args: dict | None = None, **cols) -> int:
        return self._add("cpu", thread, ts_us, dur_us, name, corr_id=corr,
                         args=json.dumps(args) if args else None, **cols)

    def _submit(self, call_ts_us: float, ready_us: float, kind: str, work: int, queue: str, dev: str,
                thread: str, call_name: str, call_args: dict | None, call_cols: dict) -> int:
        corr = self.slices[work]["corr_id"]
        call = self.cpu(call_ts_us, max(ready_us - call_ts_us + 1, 1), call_name, thread, corr, call_args,
                        **call_cols)
        bell = self._add("driver", f"{dev} {queue}", ready_us, 0, "doorbell", dev, corr_id=corr)
        self.flows.append((bell, work, kind))
        return call

    def copy(self, ts_us: float, dur_us: float, nbytes: int, direction: str = "h2d", host_mem: str = "pinned",
             dev: str = "dev0", engine: int = 0, ready_us: float | None = None, call_ts_us: float | None = None,
             queue: str = "queue 0", thread: str = "main", corr: int | None = None,
             call_args: dict | None = None) -> int:
        """A DMA transfer submitted at ready_us (default: 2 us before it starts)."""
        if corr is None:
            self._corr += 1
            corr = self._corr
        ready = ts_us - 2 if ready_us is None else ready_us
        x = self._add("pcie", f"{dev} {direction} engine {engine}", ts_us, dur_us,
                      "DMA HtoD" if direction == "h2d" else "DMA DtoH", dev, corr_id=corr, bytes=nbytes,
                      direction=direction, host_mem=host_mem)
        self._submit(ready - 3 if call_ts_us is None else call_ts_us, ready, "dma", x, queue, dev, thread,
                     "acMemcpyAsync", call_args, dict(bytes=nbytes, direction=direction, host_mem=host_mem))
        return x

    def kernel(self, ts_us: float, dur_us: float, name: str = "k", dev: str = "dev0", unit: str = "matrix 0",
               ready_us: float | None = None, queue: str = "queue 0", thread: str = "main",
               args: dict | None = None) -> int:
        self._corr += 1
        ready = ts_us - 2 if ready_us is None else ready_us
        k = self._add("eu", f"{dev} {unit}", ts_us, dur_us, name, dev, corr_id=self._corr,
                      args=json.dumps(args) if args else None)
        self._submit(ready - 3, ready, "exec", k, queue, dev, thread, "acLaunchKernel", None, {})
        return k

    def counter(self, track: str, dev: str, unit: str, ts_us: float, value: float) -> None:
        self.counters.append((track, dev, unit, T0 + round(ts_us * US), value))

    def build(self, store: Store, name: str = "t") -> str:
        """Write the trace into the store and publish it; returns its id."""
        tid, tmp = store.begin(name, 0, None)
        b = TraceBuilder(tmp)
        cols = {k: [] for k in ("track_id", "ts", "dur", "name", "corr_id", "bytes", "direction", "host_mem",
                                "args")}
        for s in self.slices:
            lane = s["lane"]
            group = s["dev"] if s["dev"] else "host"
            cols["track_id"].append(b.track(lane, s["track"], group_name=group, device=s["dev"]))
            for k in ("ts", "dur", "name"):
                cols[k].append(s[k])
            for k in ("corr_id", "bytes", "direction", "host_mem", "args"):
                cols[k].append(s.get(k))
        first = b.add_slices(cols)
        if self.flows:
            b.add_flows([first + s for s, _, _ in self.flows], [first + d for _, d, _ in self.flows],
                        [k for _, _, k in self.flows])
        for track, dev, unit, ts, value in self.counters:
            t = b.track("counter", track, group_name=dev, device=dev, unit=unit)
            b.add_counters([t], [ts], [value])
        if self.link:
            gen, width, mps = self.link
            b.set_meta("link_gen", str(gen))
            b.set_meta("link_width", str(width))
            b.set_meta("max_payload_bytes", str(mps))
        counts = b.finish("test", name)
        store.publish(tid, tmp, "test", counts)
        return tid


def gen4_x16_Bps(mps: int = 256) -> float:
    """The effective peak the passes should derive for a Gen4 x16 link (bytes/s)."""
    return 16e9 / 8 * 16 * 128 / 130 * mps / (mps + 24)
