"""Device ticks -> host ns, piecewise-linearly between (host ns, device ticks) clock-sync pairs."""

from __future__ import annotations

import numpy as np


class DomainMap:
    """One device clock domain's mapping; extrapolates along the end segments."""

    def __init__(self, ticks: np.ndarray, host_ns: np.ndarray, hz: float | None = None):
        order = np.argsort(ticks, kind="stable")
        ticks, host_ns = ticks[order], host_ns[order]
        keep = np.concatenate([[True], np.diff(ticks) > 0])  # repeated tick values cannot define a slope
        self.ticks = ticks[keep].astype(np.int64)
        self.host = host_ns[keep].astype(np.int64)
        self.hz = hz
        if len(self.ticks) == 1 and not hz:
            raise ValueError("one clock-sync pair and no nominal frequency (hz): cannot map ticks to ns")
        self._slope = np.diff(self.host) / np.diff(self.ticks)  # ns per tick of each segment, float64

    def __call__(self, dev_ticks: np.ndarray) -> np.ndarray:
        t = np.asarray(dev_ticks, dtype=np.int64)
        if len(self.ticks) == 1:
            return self.host[0] + np.rint((t - self.ticks[0]) * (1e9 / self.hz)).astype(np.int64)
        seg = np.clip(np.searchsorted(self.ticks, t, side="right") - 1, 0, len(self.ticks) - 2)
        # integer base + float offset: precise even for epoch-sized host times
        return self.host[seg] + np.rint((t - self.ticks[seg]) * self._slope[seg]).astype(np.int64)

    def residual_ns(self) -> int | None:
        """Largest leave-one-out error: each interior pair predicted from its two neighbours."""
        if len(self.ticks) < 3:
            return None
        k, h = self.ticks, self.host
        frac = (k[1:-1] - k[:-2]) / (k[2:] - k[:-2])
        pred = h[:-2] + np.rint(frac * (h[2:] - h[:-2])).astype(np.int64)
        return int(np.max(np.abs(pred - h[1:-1])))


def domain_maps(sync: np.ndarray, domains: list[dict]) -> tuple[dict[int, DomainMap], list[str]]:
    """A map per device domain that has sync pairs (or one pair and an hz); problems as text."""
    hz = {int(d["id"]): d.get("hz") for d in domains if isinstance(d, dict) and "id" in d}
    maps, problems = {}, []
    for dom in np.unique(sync["domain"]) if len(sync) else []:
        dom = int(dom)
        if dom == 0:
            continue
        rows = sync[sync["domain"] == dom]
        try:
            maps[dom] = DomainMap(rows["dev_ticks"].astype(np.int64), rows["host_ns"].astype(np.int64), hz.get(dom))
        except ValueError as e:
            problems.append(f"clock domain {dom}: {e}")
    return maps, problems
