"""Ingest of .actr raw counter dumps (docs/counters.md): raw registers -> rates and levels on counter tracks.

Format-module interface (ingest/registry.py) plus `ingest_actr`, which the run-directory
ingester (ingest/native/atrace.py) calls for run.actr so events and counters make one trace.
Everything per counter is numpy over whole columns; no per-sample Python.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import numpy as np

from acceltrace.formats.actr.layout import MAGIC, NO_DEV_TICKS, ActrFormatError, record_dtype
from acceltrace.formats.actr.reader import ActrData, read_actr
from acceltrace.store.errors import IngestError
from acceltrace.store.link import GT_PER_LANE, link_peak_bytes_per_s, link_raw_bytes_per_s
from acceltrace.ingest.sources import Source
from acceltrace.ingest.importer import Importer, per_source

NAME = "actr"
SUFFIXES = (".actr",)

FIT_WINDOW = 1024  # samples per least-squares window when device ticks are mapped from the sample pairs

ClockMap = Callable[[np.ndarray], np.ndarray]


def sniff(head: bytes) -> bool:
    return head[:8] == MAGIC


def ingest(source: Source, builder) -> None:
    ingest_actr(source, builder)


def ingest_actr(source_or_path, builder, clock_map=None, group: str | None = None) -> dict:
    """Write one .actr file's counters into the builder as counter tracks; returns a small summary.

    source_or_path: an ingest.sources.Source or a filesystem path.
    clock_map: how a device's dev_ticks become host ns. None: from the file's own
      (host_ns, dev_ticks) sample pairs (least-squares lines over windows of samples,
      joined piecewise-linearly, which removes host read jitter). Or a dict
      {device name: map} with map either a callable(ndarray int64 ticks) -> ndarray int64
      host ns, or a pair (ticks array, host_ns array) of sync points interpolated
      piecewise-linearly (extrapolated along the end segments); devices not in the dict,
      and devices without a clock, fall back as for None. A single callable or pair
      applies to every device.
    Samples of devices without a clock (dev_ticks = -1) use host_ns as recorded.
    group: prefix for the tracks' group_name (a rank name when several runs form one
      trace); default: the Source's group, if any.
    Raises IngestError for a file that cannot be read at all; damage after the header
    becomes warnings (with dropped-sample counts) and the rest is ingested.
    Returns {"devices": [...], "tracks": n, "samples": n, "truncated": bool}.
    """
    if isinstance(source_or_path, Source):
        label, opener = source_or_path.name, source_or_path.open
        group = group if group is not None else source_or_path.group
    else:
        p = Path(source_or_path)
        label = p.name

        def opener():
            return open(p, "rb")
    try:
        with opener() as f:
            data = read_actr(f)
    except ActrFormatError as e:
        raise IngestError(label, e.detail, f"byte {e.offset}" if e.offset is not None else None) from None
    except OSError as e:
        raise IngestError(label, f"cannot read ({e.strerror or e})") from None
    for offset, message, dropped in data.warnings:
        builder.warn(label, message, f"byte {offset}", dropped=dropped)
    for note in data.notes:  # what the collector said about its run (unavailable counters, wrap risks)
        builder.warn(label, f"collector note: {note.get('message', note)}")
    return _write(data, builder, label, group, clock_map)


# -- time -----------------------------------------------------------------------------------------
def _as_map(m) -> ClockMap | None:
    if m is None:
        return None
    if callable(m):
        return lambda t: np.asarray(m(t), dtype=np.int64)
    ticks, host = (np.asarray(a, dtype=np.int64) for a in m)
    return lambda t: _interp_extrap(t, ticks, host)


def _interp_extrap(t: np.ndarray, xs: np.ndarray, ys: np.ndarray) -> np.ndarray:
    """Piecewise-linear through (xs, ys), extended along the first and last segments; int64 in and out."""
    if len(xs) == 0:
        raise ValueError("empty clock map")
    order = np.argsort(xs, kind="stable")
    xs, ys = xs[order], ys[order]
    x0, y0 = xs[0], ys[0]
    xr, yr = (xs - x0).astype(np.float64), (ys - y0).astype(np.float64)
    tr = (np.asarray(t, dtype=np.int64) - x0).astype(np.float64)
    if len(xs) == 1:
        return y0 + tr.astype(np.int64)
    out = np.interp(tr, xr, yr)
    lo, hi = tr < xr[0], tr > xr[-1]
    out[lo] = yr[0] + (tr[lo] - xr[0]) * (yr[1] - yr[0]) / max(xr[1] - xr[0], 1.0)
    out[hi] = yr[-1] + (tr[hi] - xr[-1]) * (yr[-1] - yr[-2]) / max(xr[-1] - xr[-2], 1.0)
    # a wild extrapolation saturates instead of wrapping; the builder drops times out of range
    return y0 + np.round(np.clip(out, -TIME_LIMIT, TIME_LIMIT)).astype(np.int64)


TIME_LIMIT = float(1 << 62)  # host ns and device ticks beyond this are corrupt (146 years of ns)


def _drop_bad_times(data: ActrData, builder, label: str) -> None:
    """Samples whose host time is out of range or goes backwards (a wrapped or corrupt clock
    read), or whose device ticks are out of range, are dropped and counted, never mapped."""
    for gid, smp in list(data.samples.items()):
        if len(smp) == 0:
            continue
        host, ticks = smp["host_ns"].astype(np.int64), smp["dev_ticks"].astype(np.int64)
        ok = (host >= 0) & (host < TIME_LIMIT) & (ticks < TIME_LIMIT) & (ticks >= NO_DEV_TICKS)
        back = np.zeros(len(smp), dtype=bool)
        back[1:] = host[1:] < host[:-1]
        ok &= ~back
        n_bad = int(len(smp) - np.count_nonzero(ok))
        if n_bad:
            builder.warn(label, f"group {gid}: {n_bad} samples with a host time out of range or going backwards"
                         f" (a wrapped or corrupt clock read; {int(np.count_nonzero(back))} went backwards);"
                         " dropped", dropped=n_bad)
            data.samples[gid] = smp[ok]


def fit_from_pairs(ticks: np.ndarray, host_ns: np.ndarray, window: int = FIT_WINDOW) -> tuple[ClockMap, int]:
    """A ticks -> host ns map from the samples' own pairs, and its largest residual in ns."""
    order = np.argsort(ticks, kind="stable")
    t, h = ticks[order].astype(np.int64), host_ns[order].astype(np.int64)
    t0, h0 = t[0], h[0]
    x, y = (t - t0).astype(np.float64), (h - h0).astype(np.float64)
    knots_x, knots_y = [], []
    for s in range(0, len(x), window):
        xs, ys = x[s : s + window], y[s : s + window]
        if len(xs) < 2 or xs[-1] == xs[0]:
            knots_x.append(xs.mean())
            knots_y.append(ys.mean())
            continue
        xm, ym = xs.mean(), ys.mean()
        slope = np.dot(xs - xm, ys - ym) / np.dot(xs - xm, xs - xm)
        # each window contributes its fitted line at its two ends; overlapping ends average
        for xe in (xs[0], xs[-1]):
            knots_x.append(xe)
            knots_y.append(ym + slope * (xe - xm))
    kx, ky = np.asarray(knots_x), np.asarray(knots_y)
    kx, idx = np.unique(kx, return_inverse=True)
    ky = np.bincount(idx, weights=ky) / np.bincount(idx)
    kxi = np.round(kx).astype(np.int64) + t0
    kyi = np.round(ky).astype(np.int64) + h0
    fitted = _interp_extrap(t, kxi, kyi)
    return (lambda q: _interp_extrap(q, kxi, kyi)), int(np.abs(fitted - h).max()) if len(h) else 0


# -- values ----------------------------------------------------------------------------------------
def _write(data: ActrData, builder, label: str, group: str | None, clock_map) -> dict:
    hdr = data.header
    devices = {d["name"]: d for d in hdr.get("devices", [])}
    specs = {c["name"]: c for c in hdr["counters"]}
    gdev = {g["id"]: g.get("device") or specs[g["counters"][0]].get("device", "host") for g in hdr["groups"]}

    _buffered_to_samples(data, builder, label, gdev, clock_map)
    _drop_bad_times(data, builder, label)

    # sample times per group: device ticks mapped to host ns where the device has a clock
    maps: dict[str, ClockMap | None] = {}
    residual = 0
    for dev in dict.fromkeys(gdev.values()):
        given = clock_map.get(dev) if isinstance(clock_map, dict) else clock_map
        has_clock = bool((devices.get(dev) or {}).get("clock_hz"))
        if given is not None and has_clock:
            maps[dev] = _as_map(given)
            continue
        if not has_clock:
            maps[dev] = None
            continue
        ticks = [data.samples[g]["dev_ticks"] for g, d in gdev.items() if d == dev and len(data.samples[g])]
        hosts = [data.samples[g]["host_ns"] for g, d in gdev.items() if d == dev and len(data.samples[g])]
        if not ticks:
            maps[dev] = None
            continue
        t, h = np.concatenate(ticks), np.concatenate(hosts)
        ok = t >= 0
        if ok.sum() < 2:
            maps[dev] = None
            continue
        maps[dev], r = fit_from_pairs(t[ok], h[ok])
        residual = max(residual, r)

    series: dict[str, tuple[np.ndarray, np.ndarray]] = {}  # counter name -> (ts, value in its unit)
    bad_intervals = 0
    for gid, smp in data.samples.items():
        if len(smp) == 0:
            continue
        order = np.argsort(smp["host_ns"], kind="stable")
        smp = smp[order]
        dev = gdev[gid]
        m = maps.get(dev)
        ts = m(smp["dev_ticks"]) if m is not None else smp["host_ns"].astype(np.int64)
        if m is not None:  # a sample without ticks keeps its host time
            no_ticks = smp["dev_ticks"] < 0
            ts[no_ticks] = smp["host_ns"][no_ticks]
        running = smp["running_ns"].astype(np.int64)
        d_run = np.diff(running)
        names = data.group(gid)["counters"]
        for j, name in enumerate(names):
            spec = specs[name]
            raw = smp["raw"][:, j]
            scale = float(spec.get("scale", 1.0))
            if spec["kind"] == "gauge":
                series[name] = (ts, raw.astype(np.float64) * scale)
                continue
            bits = int(spec["bits"])
            mask = np.uint64((1 << bits) - 1) if bits < 64 else np.uint64(0xFFFFFFFFFFFFFFFF)
            delta = (raw[1:] - raw[:-1]) & mask  # uint64 arithmetic wraps; the mask makes it mod 2**bits
            valid = d_run > 0
            bad_intervals += int(np.count_nonzero(d_run < 0))
            rate = delta[valid].astype(np.float64) / d_run[valid] * 1e9 * scale
            # stamped at the interval's end, as perf stat -I and NVML report: the value covers (previous, ts]
            series[name] = (ts[1:][valid], rate)
    if bad_intervals:
        builder.warn(label, f"{bad_intervals} sample intervals with running time going backwards; skipped",
                     dropped=bad_intervals)

    n_tracks = 0
    batch: list[tuple[int, np.ndarray, np.ndarray]] = []  # one insert for all tracks: far cheaper than one each

    def emit(dev: str, name: str, unit: str, ts: np.ndarray, values: np.ndarray, sort_key: int) -> None:
        nonlocal n_tracks
        group_name = f"{group} {dev}" if group else dev
        tid = builder.track("counter", name, group_name=group_name, device=dev, unit=unit, sort_key=sort_key)
        if len(ts):
            batch.append((tid, ts, values))
        n_tracks += 1

    for dev, derived in _derived(specs, devices, series).items():
        for k, (name, unit, ts, values) in enumerate(derived):
            emit(dev, name, unit, ts, values, k)
    for k, (name, (ts, values)) in enumerate(series.items()):
        spec = specs[name]
        emit(spec.get("device", "host"), name, spec["unit"], ts, values, 100 + k)

    n_values = sum(len(ts) for _, ts, _ in batch)
    if batch:
        builder.add_counters(
            np.concatenate([np.full(len(ts), tid, dtype=np.int32) for tid, ts, _ in batch]),
            np.concatenate([ts for _, ts, _ in batch]),
            np.concatenate([v for _, _, v in batch]).astype(np.float64),
        )
    _meta(builder, data, devices, residual)
    return {"devices": list(devices), "tracks": n_tracks, "samples": int(sum(len(s) for s in data.samples.values())),
            "values": n_values, "truncated": data.truncated}


def _buffered_to_samples(data: ActrData, builder, label: str, gdev: dict, clock_map) -> None:
    """Buffered (device-sampled, BUFS) groups become ordinary sample arrays: device ticks mapped to
    host ns with the drains' clock pairs (or the caller's clock map), and running time that does
    not advance across a gap of dropped samples, so no rate is claimed for a span the device lost."""
    for gid, drains in data.buffered.items():
        g = data.group(gid)
        hz = float(g["buffered"]["clock_hz"])
        k = len(g["counters"])
        recs = np.concatenate([d["records"] for d in drains])
        seq = np.concatenate([d["seq0"] + np.arange(len(d["records"]), dtype=np.int64) for d in drains])
        dropped = sum(d["dropped"] for d in drains)
        expected_gaps, prev_end = 0, None
        for d in drains:
            if prev_end is not None:
                expected_gaps += max(0, d["seq0"] - prev_end)
            prev_end = d["seq0"] + len(d["records"])
        if dropped:
            builder.warn(label, f"the device's PM ring overflowed: {dropped} samples of group {gid} were dropped "
                                "by the device (counted exactly); no rate is drawn across those gaps",
                         dropped=dropped)
        if expected_gaps != dropped:
            builder.warn(label, f"group {gid}: the sample sequence skips {expected_gaps} samples but the "
                                f"device reported {dropped} dropped")
        dev = gdev[gid]
        given = clock_map.get(dev) if isinstance(clock_map, dict) else clock_map
        ticks = recs["dev_ticks"].astype(np.int64)
        if given is not None:
            host = _as_map(given)(ticks)
        else:
            st = np.asarray([d["sync_dev_ticks"] for d in drains], dtype=np.int64)
            sh = np.asarray([d["sync_host_ns"] for d in drains], dtype=np.int64)
            st, first = np.unique(st, return_index=True)
            sh = sh[first]
            if len(st) >= 2:
                host = _interp_extrap(ticks, st, sh)
            else:  # one pair: the nominal clock rate through it
                host = sh[0] + np.round((ticks - st[0]) * (1e9 / hz)).astype(np.int64)
        step = np.diff(ticks).astype(np.float64) * (1e9 / hz)
        step[np.diff(seq) != 1] = 0.0  # an interval spanning dropped samples did not count
        running = np.concatenate([[0], np.cumsum(step)]).astype(np.uint64) if len(ticks) else np.zeros(0, np.uint64)
        out = np.zeros(len(recs), dtype=record_dtype(k))
        out["host_ns"], out["dev_ticks"] = host, NO_DEV_TICKS
        out["enabled_ns"], out["running_ns"] = running, running
        out["raw"] = recs["raw"]
        data.samples[gid] = np.concatenate([data.samples[gid], out]) if len(data.samples.get(gid, ())) else out


def _meta(builder, data: ActrData, devices: dict, residual: int) -> None:
    tail = data.tail or {}
    builder.set_meta("counters_rate_hz", str(data.header.get("rate_hz", "")))
    builder.set_meta("counters_source", str(data.header.get("source", "")))
    builder.set_meta("counters_missed_deadlines", str(tail.get("missed_deadlines", "unknown")))
    if data.buffered:
        builder.set_meta("counters_buffered_dropped", str(sum(d["dropped"] for ds in data.buffered.values()
                                                              for d in ds)))
    if any((d.get("clock_hz") for d in devices.values())):
        builder.set_meta("counters_clock_residual_ns", str(residual))
    if any(k == "link_gen" or k.startswith("link_gen:") for k in builder.meta):
        return  # the events' own header (a run directory) already described the links
    with_links = [(n, d) for n, d in devices.items() if (d.get("links") or {}).get("link")]
    for name, d in with_links:
        link = d["links"]["link"]
        suffix = "" if len(with_links) == 1 else f":{name}"
        for key, src in (("link_gen", "gen"), ("link_width", "width"), ("max_payload_bytes", "max_payload_bytes")):
            if src in link:
                builder.set_meta(key + suffix, str(link[src]))


def _hold(ts: np.ndarray, series: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    """Another counter's value for the interval ending at each of ts: its first sample at or after
    ts (values cover the interval before their time); NaN after its last value."""
    sts, sv = series
    k = np.searchsorted(sts, ts, side="left")
    ok = k < len(sts)
    out = np.full(len(ts), np.nan)
    out[ok] = sv[k[ok]]
    return out


def _derived(specs: dict, devices: dict, series: dict) -> dict[str, list]:
    """Derived tracks per device (docs/counters.md, "Derived metrics")."""
    out: dict[str, list] = {}
    by_role: dict[tuple[str, str], list[str]] = {}
    for name, spec in specs.items():
        if name in series and spec.get("role"):
            by_role.setdefault((spec.get("device", "host"), spec["role"]), []).append(name)

    for name, spec in specs.items():
        if name not in series:
            continue
        dev, role = spec.get("device", "host"), spec.get("role", "")
        ts, v = series[name]
        if role in ("pcie_h2d_bytes", "pcie_d2h_bytes", "pcie_h2d_rate", "pcie_d2h_rate"):
            link_name = spec.get("link") or "link"
            link = ((devices.get(dev) or {}).get("links") or {}).get(link_name) or {}
            if link.get("gen") in GT_PER_LANE and link.get("width"):  # a counter of link bytes (NVML's): headers too
                peak = (link_raw_bytes_per_s(link["gen"], link["width"]) if spec.get("pcie_bytes") == "link" else
                        link_peak_bytes_per_s(link["gen"], link["width"], link.get("max_payload_bytes", 256)))
            elif spec.get("full_scale"):
                peak = float(spec["full_scale"])
            else:
                continue
            direction = "H2D" if "h2d" in role else "D2H"
            out.setdefault(dev, []).append(
                (f"PCIe {direction} utilisation ({link_name})", "%", ts, v / peak * 100.0))
        elif role in ("eu_busy_cycles", "dma_busy_ns") and spec.get("full_scale"):
            what = name[len(dev) + 1:] if name.startswith(dev + ".") else name
            # "eu.matrix0.busy_cycles" -> "eu.matrix0 utilisation"; "dma.h2d_busy_ns" -> "dma.h2d utilisation"
            stem = what.rsplit(".", 1)[0] if role == "eu_busy_cycles" else what.removesuffix("_busy_ns")
            out.setdefault(dev, []).append((f"{stem} utilisation", "%", ts, v / float(spec["full_scale"]) * 100.0))

    for (dev, role), names in by_role.items():
        if role == "cpu_busy_jiffies":
            for name in names:
                prefix = name.rsplit(".", 1)[0]
                total = series.get(prefix + ".jiffies")
                ts, busy = series[name]
                if total is None or not np.array_equal(total[0], ts):
                    continue
                ok = total[1] > 0  # both are rates over the same intervals: their ratio is busy / all
                out.setdefault(dev, []).append((f"{prefix} utilisation", "%", ts[ok], busy[ok] / total[1][ok] * 100))
        if role != "hbm_read_bytes":
            continue
        ts, rd = series[names[0]]
        writes = by_role.get((dev, "hbm_write_bytes"), [])
        fetched = rd + (np.nan_to_num(_hold(ts, series[writes[0]])) if writes else 0.0)
        out.setdefault(dev, []).append(("HBM bandwidth", "GB/s", ts, fetched / 1e9))
        req = by_role.get((dev, "hbm_requested_bytes"), [])
        if req:
            # on the requested counter's own intervals (it may be multiplexed: fewer, counted intervals),
            # with the fetched rate of the interval ending at the same time
            rts, used = series[req[0]]
            fetched_at = _hold(rts, (ts, fetched))
            ok = (fetched_at > 0) & ~np.isnan(fetched_at)
            out[dev].append(("HBM bytes used per byte fetched", "ratio", rts[ok], used[ok] / fetched_at[ok]))
    return out


IMPORTER = Importer(name=NAME, suffixes=SUFFIXES, sniff=sniff, session=per_source(ingest))
