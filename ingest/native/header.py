"""An .atrace header's metadata as ingest relies on it (ingest/native/atrace.py): its devices and clock
domains checked for shape, and a launcher's facts about the process for trace_meta."""

from __future__ import annotations


def sane_meta(meta: dict, builder, label: str) -> dict:
    """The header's devices and clock domains in the shape ingest relies on; entries of another
    shape (a damaged or crafted file) are left out with a warning instead of failing deep inside."""
    for key in ("devices", "clock_domains"):
        entries = meta.get(key, [])
        if not isinstance(entries, list):
            builder.warn(label, f"header/metadata '{key}' is not a list; ignored")
            entries = []
        good = [e for e in entries if isinstance(e, dict) and _sane_entry(key, e)]
        if len(good) != len(entries):
            builder.warn(label, f"{len(entries) - len(good)} '{key}' entries of the wrong shape ignored")
        meta[key] = good
    return meta


def _sane_entry(key: str, e: dict) -> bool:
    def small_int(v, hi):
        return isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= hi

    if key == "clock_domains":
        hz = e.get("hz")
        return (small_int(e.get("id"), 255) and (e.get("device") is None or small_int(e["device"], 255))
                and (hz is None or (isinstance(hz, (int, float)) and not isinstance(hz, bool) and hz > 0)))
    dev = e.get("id", e.get("index"))
    return dev is None or small_int(dev, 255)


def distributed_meta(meta: dict, b, label: str) -> None:
    """A launcher's facts about the process: its rank, world size and job (header `distributed`),
    and the host name, as trace_meta rank / world_size / job / hostname (fleets tag traces by them)."""
    dist = meta.get("distributed")
    if isinstance(dist, dict):
        for key in ("rank", "world_size"):
            v = dist.get(key)
            if isinstance(v, int) and not isinstance(v, bool) and v >= 0:
                b.set_meta(key, str(v))
            elif v is not None:
                b.warn(label, f"header/distributed.{key} is {v!r}, expected a non-negative integer; ignored")
        if isinstance(dist.get("job"), str) and dist["job"]:
            b.set_meta("job", dist["job"][:200])
    host = meta.get("host")
    if isinstance(host, dict) and isinstance(host.get("hostname"), str) and host["hostname"]:
        b.set_meta("hostname", host["hostname"][:200])
