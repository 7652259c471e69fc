"""PCIe physics: link rates by generation and width, TLP overhead, and a fluid model of DMA flows.

A transfer of S payload bytes costs a fixed latency L (descriptor fetch, first read round trip,
switch traversal) and then flows at whatever share of every link direction on its path it gets.
Shares are max-min fair over wire bytes: a posted write (D2H) or a read completion (H2D) costs
(MPS + TLP overhead) / MPS wire bytes per payload byte on the data direction, and an H2D read
also costs one header-only request per MRRS bytes on the opposite direction (full duplex, but
not free). Alone on an idle link a transfer therefore achieves S / (L + S / B) with B the
effective payload bandwidth, and concurrent DMA engines, devices or a shared switch uplink
slow each other exactly as much as the bottleneck direction demands.
"""

from __future__ import annotations

from dataclasses import dataclass

# Line rates, line codes and per-TLP overheads come from store.link, so the model's links and the
# utilisation "100 %" the viewer shows use the same numbers.
from acceltrace.store.link import GT_PER_LANE, LINE_CODE, tlp_overhead_bytes

READ_REQUEST_BYTES = 24  # a header-only memory read request TLP on the wire


@dataclass(frozen=True)
class LinkConfig:
    gen: int
    width: int
    mps: int = 256  # Max Payload Size, bytes
    mrrs: int = 512  # Max Read Request Size, bytes

    @property
    def encoding(self) -> float:
        """Fraction of raw bits that carry TLP bytes: 128b/130b for Gen3-5, 236/256-byte FLITs for Gen6."""
        return LINE_CODE[self.gen]

    @property
    def wire_bytes_per_ns(self) -> float:
        """TLP bytes per ns per direction after line encoding (Gen4 x16: 31.5)."""
        return GT_PER_LANE[self.gen] * self.width / 8.0 * self.encoding

    @property
    def tlp_overhead(self) -> int:
        return tlp_overhead_bytes(self.gen)

    @property
    def data_weight(self) -> float:
        """Wire bytes per payload byte on the direction that carries the data."""
        return (self.mps + self.tlp_overhead) / self.mps

    @property
    def request_weight(self) -> float:
        """Wire bytes per payload byte that an H2D read costs on the opposite direction."""
        return READ_REQUEST_BYTES / self.mrrs

    @property
    def payload_bytes_per_ns(self) -> float:
        """Effective payload bandwidth of one direction (the 100 % of utilisation counters)."""
        return self.wire_bytes_per_ns / self.data_weight


def achieved_bytes_per_ns(size_bytes: float, latency_ns: float, bandwidth_bytes_per_ns: float) -> float:
    """The model's achieved bandwidth for one transfer alone on its path: S / (L + S/B)."""
    return size_bytes / (latency_ns + size_bytes / bandwidth_bytes_per_ns)


class Resource:
    """One direction of one link (a device link or the switch uplink)."""

    __slots__ = ("name", "cap", "link", "bytes_counter", "tlp_counter", "rate", "tlp_rate", "since", "index")

    def __init__(self, name: str, link: LinkConfig, bytes_counter: str | None, tlp_counter: str | None):
        self.name = name
        self.link = link
        self.cap = link.wire_bytes_per_ns
        self.bytes_counter = bytes_counter
        self.tlp_counter = tlp_counter
        self.rate = 0.0  # payload bytes/ns now
        self.tlp_rate = 0.0
        self.since = 0.0
        self.index = -1


class Flow:
    __slots__ = ("remaining", "rate", "uses", "done", "rset", "limit", "meters")

    def __init__(self, size_bytes: float, uses, done, shape):
        self.remaining = float(size_bytes)
        self.rate = 0.0
        # (resource, wire weight per payload byte, TLPs per payload byte, carries payload)
        self.uses = uses
        self.rset, self.limit, self.meters = shape
        self.done = done


class Fabric:
    """All link directions of a topology and the flows crossing them, max-min fair."""

    def __init__(self, sim, bank=None):
        self.sim = sim
        self.bank = bank
        self.flows: list[Flow] = []
        self.resources: list[Resource] = []
        self._last = sim.now
        self._token = 0
        # meters: every counter a flow advances (link bytes and TLPs, HBM bytes), each with the
        # rate it grows at now and since when
        self._meter_ids: dict[str, int] = {}
        self._meter_names: list[str] = []
        self._meter_rate: list[float] = []
        self._meter_since: list[float] = []
        self._meter_segs: list[list | None] = []  # the bank's segment list of each meter (appended directly)
        self._shapes: dict[int, tuple] = {}

    def add_resource(self, res: Resource) -> Resource:
        res.since = self.sim.now
        res.index = len(self.resources)
        self.resources.append(res)
        return res

    def start(self, size_bytes: float, uses, extra=()):
        """Start a flow now; returns an Event fired when its last byte arrived.

        `uses` and `extra` ((counter, per payload byte) outside the fabric) should be the same
        objects for every flow of one path: what is derived from them is cached by identity.
        """
        self._advance()
        ev = self.sim.event()
        shape = self._shapes.get(id(uses))
        if shape is None:
            shape = self._shapes[id(uses)] = self._shape(uses, extra)
        self.flows.append(Flow(size_bytes, uses, ev, shape))
        self._reallocate()
        return ev

    def _meter(self, name: str) -> int:
        i = self._meter_ids.get(name)
        if i is None:
            i = self._meter_ids[name] = len(self._meter_names)
            self._meter_names.append(name)
            self._meter_rate.append(0.0)
            self._meter_since.append(self.sim.now)
            self._meter_segs.append(self.bank.segments(name) if self.bank is not None else None)
        return i

    def _shape(self, uses, extra) -> tuple:
        rset = {r.index for r, _w, _t, _p in uses}
        limit = min(r.cap / w for r, w, _t, _p in uses)  # alone, the narrowest direction sets the pace
        meters = []
        for r, _w, t, payload in uses:
            if payload and r.bytes_counter:
                meters.append((self._meter(r.bytes_counter), 1.0))
            if r.tlp_counter:
                meters.append((self._meter(r.tlp_counter), t))
        for name, per_byte in extra:
            meters.append((self._meter(name), per_byte))
        return rset, limit, tuple(meters)

    # -- internals -------------------------------------------------------------------------------
    def _advance(self) -> None:
        now = self.sim.now
        dt = now - self._last
        if dt > 0:
            for f in self.flows:
                f.remaining -= f.rate * dt
        self._last = now

    def _reallocate(self) -> None:
        flows = self.flows
        if len(flows) == 1:
            flows[0].rate = flows[0].limit
        elif flows:
            self._fill(flows)
        self._account()
        self._schedule()

    def _fill(self, flows: list[Flow]) -> None:
        """Progressive filling: raise every unfrozen flow's rate together until a direction fills."""
        n = len(self.resources)
        left = [r.cap for r in self.resources]
        unfrozen = flows
        while unfrozen:
            weight = [0.0] * n
            for f in unfrozen:
                for r, w, _t, _p in f.uses:
                    weight[r.index] += w
            best, best_i = float("inf"), -1
            for i in range(n):
                w = weight[i]
                if w > 0.0:
                    share = left[i] / w
                    if share < best:
                        best, best_i = share, i
            still = []
            for f in unfrozen:
                if best_i in f.rset:
                    f.rate = best
                    for r, w, _t, _p in f.uses:
                        left[r.index] -= best * w
                else:
                    still.append(f)
            unfrozen = still

    def _account(self) -> None:
        """Close the previous constant-rate segment of every counter whose rate changed."""
        now = self.sim.now
        new = [0.0] * len(self._meter_names)
        for f in self.flows:
            rate = f.rate
            for i, k in f.meters:
                new[i] += rate * k
        old, since, segs = self._meter_rate, self._meter_since, self._meter_segs
        for i, v in enumerate(new):
            if v != old[i]:
                if old[i] and now > since[i] and segs[i] is not None:
                    segs[i].append((since[i], now, old[i]))  # what RegisterBank.add_rate would store
                old[i] = v
                since[i] = now

    def _schedule(self) -> None:
        self._token += 1
        if not self.flows:
            return
        t_next = min(f.remaining / f.rate if f.rate > 0 else float("inf") for f in self.flows)
        # at least a picosecond ahead, so float rounding of `now` can never stall the agenda
        self.sim.at(self.sim.now + max(t_next, 1e-3), self._wake, self._token)

    def _wake(self, token) -> None:
        if token != self._token:
            return  # a later reallocation superseded this completion time
        self._advance()
        finished = [f for f in self.flows if f.remaining <= 1e-2 + 1e-3 * f.rate]
        if not finished:
            self._schedule()
            return
        self.flows = [f for f in self.flows if f not in finished]
        self._reallocate()
        for f in finished:
            f.done.succeed()

    def close(self) -> None:
        """Flush open counter segments at the end of the run."""
        self._advance()
        flows, self.flows = self.flows, []
        self._account()
        self.flows = flows
