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


@pytest.mark.parametrize("release_from, released", [(10**9, 0), (1, 1)])
def test_the_parse_memory_goes_back_only_for_a_large_trace(tmp_path, monkeypatch, release_from, released):
    """drop_staging trims Arrow's pool before the write (the peak of a large ingest); a trace of fewer than
    RELEASE_FROM_SLICES slices keeps its pages (the trim costs more than it saves there)."""
    import pyarrow as pa
    from pathlib import Path

    from acceltrace.ingest import pipeline
    from acceltrace.ingest.chrome import state
    from acceltrace.store.catalog import Store

    calls = []
    pool = pa.default_memory_pool()

    class Counting:
        def release_unused(self):
            calls.append(1)
            pool.release_unused()

    class Arrow:  # pyarrow as state.py sees it, its pool counted (the write's own trim is not counted)
        def __getattr__(self, name):
            return (lambda: Counting()) if name == "default_memory_pool" else getattr(pa, name)

    monkeypatch.setattr(state, "RELEASE_FROM_SLICES", release_from)
    monkeypatch.setattr(state, "pa", Arrow())
    sample = Path(__file__).resolve().parent.parent / "sample_traces" / "chrome" / "kineto" / "mi250-rocm-minitoy.json.gz"
    (r,) = pipeline.ingest_paths(Store(tmp_path / "store"), [sample], views=False)
    assert r.error is None and r.counts["slices"] > 0
    assert len(calls) == released
