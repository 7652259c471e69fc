"""Fast reads of many registers of a frozen sim.registers.RegisterBank (the sim source's hot path)."""

from __future__ import annotations

import numpy as np


class CursorReader:
    """Reads many registers of a frozen RegisterBank at non-decreasing times in one numpy pass.

    The bank's own reader evaluates one register at a time (a numpy call each, ~20 us);
    at 64 registers and 1 kHz that alone would exceed the sampler's budget. This keeps a
    breakpoint cursor per register over the bank's frozen breakpoint arrays and evaluates
    every register with one expression, with the bank's arithmetic exactly (a test checks
    equality with read_raw). It relies on the arrays RegisterBank.freeze() builds
    (times/totals/slopes, times/values); `available()` says whether they are there.
    """

    _MAX_STEPS = 2  # cursor advances per read before falling back to the vectorised seek

    @staticmethod
    def available(bank, names) -> bool:
        data = getattr(bank, "_data", None)
        if not getattr(bank, "frozen", False) or not isinstance(data, dict):
            return False
        for n in names:
            d = data.get(n)
            if d is None or getattr(d, "times", None) is None:
                return False
            if not (hasattr(d, "totals") and hasattr(d, "slopes")) and not hasattr(d, "values"):
                return False
        return True

    def __init__(self, bank, names):
        times, base, slope, starts, lens = [], [], [], [], []
        masks, gauge = [], []
        pos = 0
        for n in names:
            spec, d = bank.spec(n), bank._data[n]
            is_gauge = spec.kind == "gauge"
            t = np.asarray(d.times, dtype=np.float64)
            b = np.asarray(d.values if is_gauge else d.totals, dtype=np.float64)
            s = np.zeros(len(t)) if is_gauge else np.asarray(d.slopes, dtype=np.float64)
            # a leading sentinel holds 0 before the first breakpoint; a trailing one is never passed
            times += [np.array([-1e300]), t, np.array([np.inf])]
            base += [np.array([0.0]), b, np.array([b[-1] if len(b) else 0.0])]
            slope += [np.array([0.0]), s, np.array([0.0])]
            starts.append(pos)
            lens.append(len(t))
            pos += len(t) + 2
            masks.append((1 << spec.bits) - 1 if spec.bits < 64 else (1 << 64) - 1)
            gauge.append(is_gauge)
        self.times, self.base, self.slope = np.concatenate(times), np.concatenate(base), np.concatenate(slope)
        self.starts, self.lens = np.array(starts), np.array(lens)
        # One globally sorted key array for a vectorised seek: register i's times shifted into its own
        # band [i * span, (i + 1) * span). Float rounding may misplace a query that falls within an ulp
        # of a breakpoint; _seek checks every result exactly and redoes those registers alone.
        finite = self.times[np.isfinite(self.times) & (self.times > -1e299)]
        self.tmin = float(finite.min()) if len(finite) else 0.0
        rng = float(finite.max()) - self.tmin if len(finite) else 0.0
        self.span = 4.0 * max(rng, 1e9)
        band = np.repeat(np.arange(len(names), dtype=np.float64) * self.span, self.lens + 2)
        rel = np.clip(self.times - self.tmin, -self.span / 4, self.span * 3 / 4)
        self.keys = band + rel
        self.bands = np.arange(len(names), dtype=np.float64) * self.span
        self.ends = self.starts + self.lens
        self.mask = np.array(masks, dtype=np.uint64)
        # floor(total + 1e-6) for counters as the bank does; levels round to nearest (a level exactly
        # halfway between integers rounds up here, to even in the bank: levels are whole entries)
        self.offset = np.where(np.array(gauge), 0.5, 1e-6)
        self.k = self.starts.copy()
        self._load()
        self.last_t = -np.inf
        # the bank keeps model-relative float ns and reads absolute int host ns (RegisterBank.reader)
        self.origin_ns = int(getattr(bank, "origin_ns", 0))

    def _load(self) -> None:
        """Cache the current segment of every register (start time, value there, slope, next breakpoint)."""
        k = self.k
        self.seg_t, self.seg_v, self.seg_s = self.times[k], self.base[k], self.slope[k]
        self.next_t = self.times[k + 1]

    def _seek(self, t: float) -> None:
        """Place every cursor at the segment holding t: one searchsorted over all bands, then an exact check."""
        q = self.bands + min(max(t - self.tmin, -self.span / 4 + 1.0), self.span * 3 / 4 - 1.0)
        k = np.searchsorted(self.keys, q, side="right") - 1
        np.maximum(k, self.starts, out=k)  # np.clip with array bounds is several times slower
        np.minimum(k, self.ends, out=k)
        bad = ~((self.times[k] <= t) & (self.times[k + 1] > t))
        for i in (np.flatnonzero(bad) if bad.any() else ()):
            s, n = self.starts[i], self.lens[i]
            k[i] = s + np.searchsorted(self.times[s + 1 : s + 1 + n], t, side="right")
        self.k = k
        self._load()

    def __call__(self, t_ns) -> list[int]:
        t = float(int(t_ns) - self.origin_ns)
        if t < self.last_t or self.last_t == -np.inf:
            self._seek(t)
        elif (self.next_t <= t).any():
            for _ in range(self._MAX_STEPS):
                adv = self.next_t <= t
                if not adv.any():
                    self._load()
                    break
                self.k += adv
                self.next_t = self.times[self.k + 1]
            else:
                self._seek(t)
        self.last_t = t
        # the bank's own arithmetic, operation for operation, so the values are bit-identical
        v = self.seg_s * (t - self.seg_t)
        v += self.seg_v
        v += self.offset
        return (np.floor(v).astype(np.uint64) & self.mask).tolist()
