"""Counter sources, one module each; `source_class` maps `--source` names to their class.

Adding a source is one module with a CounterSource subclass (collect/counters/base.py)
and one branch here. Modules are imported only when their source is used (nvml needs
pynvml, sim needs the device model).
"""

from __future__ import annotations

SOURCES = ("sim", "nvml", "host")


def source_class(name: str):
    """The class of a registered source; KeyError naming the choices when unknown."""
    if name == "sim":
        from acceltrace.collect.counters.sim import SimSource

        return SimSource
    if name == "nvml":
        from acceltrace.collect.counters.nvml import NvmlSource

        return NvmlSource
    if name == "host":
        from acceltrace.collect.counters.host import HostSource

        return HostSource
    raise KeyError(f"unknown counter source {name!r}; expected one of: {', '.join(sorted(SOURCES))}")
