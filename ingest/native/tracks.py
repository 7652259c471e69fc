"""Which track each .atrace record lands on, and the tracks' names (docs/formats.md, "Tracks")."""

from __future__ import annotations

import numpy as np

from acceltrace.formats import record as R


class Tracks:
    """Maps record key columns to builder track ids, vectorised over a batch (few tracks, many events)."""

    def __init__(self, builder, group: str | None, devices: list[dict], gstrings: list[str]):
        self.b, self.group, self.gstrings = builder, group, gstrings
        self.naming = R.TrackNaming(devices)  # names shared with the live view
        # equal strings from different streams name the same counter: one canonical id per text,
        # worked out only for the few strings that name counters (args JSON can be millions of strings)
        self._canon_by_text: dict[str, int] = {}
        self._canon: dict[int, int] = {}
        self.keys: dict[tuple, int] = {}
        self.units: dict[tuple, str] = {}

    def _key_cols(self, lane, device, pid, tid, name_gid):
        kp = np.where(lane <= 1, pid, 0).astype(np.uint64)  # cpu and driver tracks belong to a process
        kt = tid.astype(np.uint64)
        cnt = lane == 4
        if cnt.any():
            gids = name_gid[cnt]
            uniq = np.unique(gids)
            canon = np.array([self._canonical(int(g)) for g in uniq], dtype=np.uint64)
            kt[cnt] = canon[np.searchsorted(uniq, gids)]
        a = (lane.astype(np.uint64) << np.uint64(56)) | (device.astype(np.uint64) << np.uint64(48)) | kp
        return a, kt

    def _canonical(self, gid: int) -> int:
        c = self._canon.get(gid)
        if c is None:
            c = self._canon[gid] = self._canon_by_text.setdefault(self.gstrings[gid], gid)
        return c

    def ids(self, recs: np.ndarray, name_gid: np.ndarray, cat_gid: np.ndarray) -> np.ndarray:
        a, kt = self._key_cols(recs["lane"], recs["device"], recs["pid"], recs["tid"], name_gid)
        h = a ^ (kt * np.uint64(0x9E3779B97F4A7C15))
        # few tracks, many events: find the keys in a sample, then place every record by binary
        # search (no sort of the whole batch); the keys of records the sample missed (a track with few
        # records in the batch: every batch of the bench's file had some) are found among those alone
        step = max(1, len(h) // 4096) | 1  # odd: records that cycle through tracks in a power of two stay seen
        cand, cidx = np.unique(h[::step], return_index=True)
        first = cidx * step
        pos = np.minimum(np.searchsorted(cand, h), len(cand) - 1)
        missed = np.flatnonzero(cand[pos] != h)
        if len(missed):
            more, midx = np.unique(h[missed], return_index=True)
            cand = np.concatenate([cand, more])
            first = np.concatenate([first, missed[midx]])
            o = np.argsort(cand)
            cand, first = cand[o], first[o]
            pos = np.searchsorted(cand, h)
        inv = pos
        if not (np.array_equal(a, a[first][inv]) and np.array_equal(kt, kt[first][inv])):
            # a 64-bit hash collision: fall back to an exact unique over both columns
            pair = np.stack([a, kt], axis=1)
            _, first, inv = np.unique(pair, axis=0, return_index=True, return_inverse=True)
        out = np.empty(len(first), dtype=np.int32)
        for j, i in enumerate(first):
            out[j] = self._track(int(a[i]), int(kt[i]), int(cat_gid[i]))
        return out[inv.reshape(-1)]

    def _track(self, a: int, kt: int, cat_gid: int) -> int:
        key = (a, kt)
        tid = self.keys.get(key)
        if tid is None:
            if a >> 56 == 4 and self.gstrings[cat_gid]:
                self.units[key] = self.gstrings[cat_gid]  # a counter's unit travels in `cat`
            fields = self._fields(key)
            tid = self.b.track(**fields, key=("atrace", self.group, key))
            self.keys[key] = tid
        return tid

    def _fields(self, key: tuple) -> dict:
        a, kt = key
        lane, device, pid = a >> 56, (a >> 48) & 0xFF, a & 0xFFFFFFFF
        dev = self.naming.device(device)
        name, _ = self.naming.name(lane, device, pid, kt, self.gstrings[kt] if lane == 4 else "")
        group = self.naming.group(lane, device, pid)
        if self.group:
            group = f"{self.group} {group}"
        unit = self.units.get(key)
        return {
            "lane": R.LANES[lane], "name": name, "group_name": group, "device": dev,
            "process": str(pid) if lane <= 1 else None, "thread": str(kt) if lane == 0 else None,
            "unit": unit,
            "sort_key": (lane << 32) | (kt & 0xFFFFFFFF if lane != 4 else len(self.keys)),
        }

    def names(self, recs: np.ndarray, gid: np.ndarray) -> None:
        """Remember TRACK_NAME and PROCESS_NAME records (applied to tracks at the end)."""
        for rec, g in zip(recs, gid):
            self.naming.note(int(rec["kind"]), int(rec["lane"]), int(rec["device"]), int(rec["pid"]), int(rec["tid"]),
                             self.gstrings[int(g)])

    def apply_names(self) -> None:
        for key, tid in self.keys.items():
            f = self._fields(key)
            f.pop("sort_key")
            self.b.update_track(tid, **f)

    def device_names(self, device) -> list[str]:
        """Names a device goes by (its metadata name and its index as text)."""
        if not isinstance(device, int):
            return [str(device)]
        return sorted({self.naming.devices.get(device, f"dev{device}"), str(device)})
