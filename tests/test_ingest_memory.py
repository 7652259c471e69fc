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


# A block above glibc's mmap threshold, freed and taken again: outside a build each take is new memory
# (faulted in page by page); within one it is the same heap, already faulted in.
_HEAP_PROBE = """
import resource, sys
import numpy as np
from acceltrace.ingest import memory
N = 48 << 20  # above the 32 MB that glibc's own threshold rises to
memory.use_small_pages()  # (numpy's huge-page hint off: one fault a 2 MB page would hide the count)
def faults_to_take_again():
    a = np.ones(N // 8); del a
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    a = np.ones(N // 8); del a
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
out = [faults_to_take_again()]
with memory.kept_heap():
    with memory.kept_heap():  # a second build of the same process
        out.append(faults_to_take_again())
    out.append(faults_to_take_again())
out.append(faults_to_take_again())
print(*out)
"""


def _heap_probe(**env) -> list[int]:
    full = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_") and k != "GLIBC_TUNABLES"}
    full.update(env)
    out = subprocess.run([sys.executable, "-c", _HEAP_PROBE], env=full, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return [int(v) for v in out.stdout.split()]


def _glibc() -> bool:
    """glibc, on a kernel that does not back the heap with huge pages unasked (THP "always" would fault a
    48 MB block in 2 MB at a time, and the counts below would not tell reuse from new memory)."""
    import platform

    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    try:
        with open("/sys/kernel/mm/transparent_hugepage/enabled") as f:
            return "[always]" not in f.read()
    except OSError:
        return True


@pytest.mark.skipif(not _glibc(), reason="glibc's mallopt, and page faults that count 4 kB pages")
def test_a_build_reuses_freed_blocks_and_hands_them_back_after():
    pages = (48 << 20) // 4096
    before, nested, inner_ended, after = _heap_probe()
    assert before > pages // 2, f"outside a build a freed 48 MB block is new memory again: {before} faults"
    assert nested < pages // 20, f"within a build it is reused: {nested} faults, expected few of {pages}"
    assert inner_ended < pages // 20, f"the outer build still runs: {inner_ended} faults"
    assert after > pages // 2, f"after the last build, glibc's thresholds again: {after} faults"


@pytest.mark.skipif(not _glibc(), reason="glibc's mallopt, and page faults that count 4 kB pages")
def test_a_users_malloc_tuning_is_kept():
    pages = (48 << 20) // 4096
    # the user's own threshold (128 kB, fixed): every 48 MB block is mapped anew, even within a build
    _, nested, _, _ = _heap_probe(MALLOC_MMAP_THRESHOLD_="131072")
    assert nested > pages // 2, nested


@pytest.mark.parametrize("sample, kept", [("chrome/kineto/a100-rank0-memcpy.json.gz", True),
                                           ("atrace/acceltrace-0.1/daemon-python-c.atrace", False),
                                           ("nsys/nsys-2022.2/a100-saxpy-nsys2022.sqlite", False)])
def test_a_small_build_runs_within_the_kept_heap(tmp_path, monkeypatch, sample, kept):
    # Chrome JSON of a small build keeps the freed heap from the builder's start to the end of ingest_one;
    # a native or Nsight file (and Chrome JSON past 256 MB) keeps glibc's own rule: a held heap raised the
    # Nsight bench's peak by 280-300 MB (1.36 -> 1.64 GB at 2.5 M slices)
    from pathlib import Path

    from acceltrace.ingest import memory, pipeline
    from acceltrace.ingest.builder import TraceBuilder
    from acceltrace.store.catalog import Store

    seen = []
    finish = TraceBuilder.finish

    def watched(self, *a, **k):
        seen.append(memory._builds)
        return finish(self, *a, **k)

    monkeypatch.setattr(TraceBuilder, "finish", watched)
    libc = _Recorder()
    monkeypatch.setattr(memory, "_libc", lambda: libc)
    path = Path(__file__).resolve().parent.parent / "sample_traces" / sample
    (r,) = pipeline.ingest_paths(Store(tmp_path / "store"), [path], views=False)
    assert r.error is None, r.error
    assert seen == [1 if kept else 0], seen
    assert memory._builds == 0
    if not kept:
        assert libc.calls == []
        return
    assert libc.calls == [("mallopt", memory.M_MMAP_THRESHOLD, memory.KEPT_MMAP_THRESHOLD),
                         ("mallopt", memory.M_TRIM_THRESHOLD, memory.KEPT_TRIM_THRESHOLD),
                         ("mallopt", memory.M_MMAP_THRESHOLD, memory.AFTER_MMAP_THRESHOLD),
                         ("mallopt", memory.M_TRIM_THRESHOLD, memory.AFTER_TRIM_THRESHOLD),
                         ("malloc_trim", 0)]


class _Recorder:
    """glibc's malloc tuning, as calls made."""

    def __init__(self):
        self.calls = []

    def mallopt(self, param, value):
        self.calls.append(("mallopt", param, value))
        return 1

    def malloc_trim(self, pad):
        self.calls.append(("malloc_trim", pad))
        return 1


def test_hand_back_trims_even_where_the_user_tunes_malloc(monkeypatch):
    # the upload process's hand-back after each ingest (server/ingest_child.py) trims whatever the tuning:
    # only the kept heap's thresholds are the user's to set
    from acceltrace.ingest import memory
    from acceltrace.store import heap

    libc = _Recorder()
    monkeypatch.setattr(heap, "glibc", lambda: libc)
    monkeypatch.setenv("MALLOC_ARENA_MAX", "2")
    heap.hand_back()
    assert libc.calls == [("malloc_trim", 0)]
    assert memory._libc() is None  # ... and the kept heap leaves that process's malloc alone
