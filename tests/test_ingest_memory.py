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


@pytest.mark.parametrize("trim_from, trims", [(10**9, 0), (1, 2)])
def test_the_pool_is_trimmed_only_for_a_large_build(tmp_path, monkeypatch, trim_from, trims):
    """An ingest trims Arrow's pool twice before its peak (the parse's pages once the links are done, the
    write's own once `slices` is written), from TRIM_FROM_SLICES slices; a smaller build keeps its pages."""
    import pyarrow as pa
    from pathlib import Path

    from acceltrace.ingest import memory, pipeline
    from acceltrace.store.catalog import Store

    calls = []
    pool = pa.default_memory_pool()

    class Counting:  # the pool, its trims counted
        def release_unused(self):
            calls.append(1)
            pool.release_unused()

        def __getattr__(self, name):
            return getattr(pool, name)

    monkeypatch.setattr(memory, "TRIM_FROM_SLICES", trim_from)
    monkeypatch.setattr(memory.pa, "default_memory_pool", lambda: Counting())
    sample = Path(__file__).resolve().parent.parent / "sample_traces" / "chrome" / "kineto" / "mi250-rocm-minitoy.json.gz"
    (r,) = pipeline.ingest_paths(Store(tmp_path / "store"), [sample], views=False)
    assert r.error is None and r.counts["slices"] > 0
    assert len(calls) == trims
