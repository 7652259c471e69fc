"""Counter sources, one module each; SOURCES maps `--source` names to 'module:Class'.

Adding a source is one module with a CounterSource subclass (collect/counters/base.py)
and one line here. Modules are imported only when their source is used.
"""

from __future__ import annotations

import importlib

SOURCES = {
    "sim": "collect.counters.sim:SimSource",
    "nvml": "collect.counters.nvml:NvmlSource",
    "host": "collect.counters.host:HostSource",
}


def source_class(name: str):
    """The class of a registered source; KeyError naming the choices when unknown."""
    try:
        target = SOURCES[name]
    except KeyError:
        raise KeyError(f"unknown counter source {name!r}; expected one of: {', '.join(sorted(SOURCES))}") from None
    mod, cls = target.split(":")
    return getattr(importlib.import_module(mod), cls)
