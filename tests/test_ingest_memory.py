"""The ingest's allocators (ingest/memory.py): set by the first TraceBuilder of a process, a user's own
environment left alone. Each case runs in a fresh interpreter: the settings are process-wide."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

_PROBE = """
import sys, tempfile, pathlib
import numpy as np, pyarrow as pa
from acceltrace.ingest.builder import TraceBuilder
core = getattr(np, "_core", None) or np.core
before = pa.default_memory_pool().backend_name
b = TraceBuilder(pathlib.Path(tempfile.mkdtemp()) / "t.duckdb")
b.abort()
hint = core.multiarray._set_madvise_hugepage(True)  # returns the setting it replaces
print(before, pa.default_memory_pool().backend_name, hint)
"""


def _probe(**env) -> list[str]:
    full = {k: v for k, v in os.environ.items() if k not in ("ARROW_DEFAULT_MEMORY_POOL", "NUMPY_MADVISE_HUGEPAGE")}
    full.update(env)
    out = subprocess.run([sys.executable, "-c", _PROBE], env=full, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout.split()


def test_a_builder_moves_the_process_to_small_pages():
    _, after, hint = _probe()
    assert after == "system"
    assert hint == "False"


@pytest.mark.parametrize("pool", ["mimalloc", "jemalloc"])
def test_a_users_choice_is_kept(pool):
    import pyarrow as pa

    try:
        getattr(pa, f"{pool}_memory_pool")()
    except NotImplementedError:
        pytest.skip(f"this pyarrow has no {pool}")
    before, after, hint = _probe(ARROW_DEFAULT_MEMORY_POOL=pool, NUMPY_MADVISE_HUGEPAGE="1")
    assert before == after == pool
    assert hint == "True"
