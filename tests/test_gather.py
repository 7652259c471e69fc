"""The write's gather into stored order (ingest/gather.py): each kind of column, the compiled string gather
(ingest/_gather.c) against the Python takes, and the C code's refusals, under AddressSanitizer too."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from acceltrace.ingest import gather

ROOT = Path(__file__).resolve().parent.parent
compiled = pytest.mark.skipif(gather._gather is None, reason="ingest/_gather.c is not built (no compiler)")


def _strings(rng: np.random.Generator, n: int, typ: pa.DataType) -> pa.Array:
    words = ["", "a", "é∂", "x" * 300, '{"External id": 7}', "\x00z"]
    return pa.array([None if rng.random() < 0.1 else words[int(rng.integers(len(words)))] + str(int(rng.integers(99)))
                     for _ in range(n)], typ)


def _chunked(rng: np.random.Generator, typ: pa.DataType) -> pa.ChunkedArray:
    """Chunks of every shape: sliced ones (a first offset past 0), empty ones, one of empty strings only (no
    data buffer), one of nulls only."""
    parts = []
    for n in (7, 0, 40, 1, 25):
        whole = _strings(rng, n + 5, typ)
        parts.append(whole.slice(3, n))
    parts.append(pa.array([""] * 4, typ))
    parts.append(pa.array([None] * 3, typ))
    return pa.chunked_array(parts, typ)


@compiled
@pytest.mark.parametrize("typ", [pa.string(), pa.large_string()])
def test_the_compiled_gather_takes_what_the_python_takes(monkeypatch, typ):
    rng = np.random.default_rng(3)
    for _ in range(20):
        col = _chunked(rng, typ)
        rows = rng.permutation(len(col))[: int(rng.integers(0, len(col) + 1))]
        fast = gather.Gather(col)
        assert fast.strings is not None
        got = fast.take(rows)
        monkeypatch.setattr(gather, "_gather", None)
        slow = gather.Gather(col)
        monkeypatch.undo()
        assert slow.strings is None
        want = slow.take(rows)
        assert got.type == want.type == typ
        assert got.to_pylist() == want.to_pylist() == [col[int(i)].as_py() for i in rows]
        got.validate(full=True)


def test_dictionary_columns_are_taken_through_one_dictionary():
    # each chunk has a dictionary of its own; one holds a null entry (Arrow cannot unify that one)
    a = pa.DictionaryArray.from_arrays(pa.array([0, 1, 2, 0, None], pa.int8()), pa.array(["x", None, "y"]))
    b = pa.DictionaryArray.from_arrays(pa.array([1, 0, 1], pa.int8()), pa.array(["y", "z"]))
    c = pa.DictionaryArray.from_arrays(pa.array([], pa.int8()), pa.array([], pa.string()))
    col = pa.chunked_array([a, c, b])
    flat = col.to_pylist()
    assert flat == ["x", None, "y", "x", None, "z", "y", "z"]
    g = gather.Gather(col)
    rows = np.array([7, 0, 1, 5, 4, 2, 6, 3])
    got = g.take(rows)
    assert got.type == pa.string() and got.to_pylist() == [flat[i] for i in rows]
    assert g.take(np.array([], np.int64)).to_pylist() == []
    empty = pa.chunked_array([], pa.dictionary(pa.int32(), pa.string()))
    assert gather.Gather(empty).take(np.array([], np.int64)).to_pylist() == []


def test_fixed_width_columns_take_across_chunks_with_their_nulls():
    col = pa.chunked_array([pa.array([1, None, 3]), pa.array([], pa.int64()), pa.array([4, 5, None, 7])])
    rows = np.array([6, 0, 5, 1, 3])
    assert gather.Gather(col).take(rows).to_pylist() == [7, 1, None, None, 4]


@compiled
def test_the_compiled_gather_refuses_what_is_out_of_place():
    s = pa.array(["ab", "cde", None, ""])
    _, off, data = s.buffers()
    ok = dict(offsets=(off,), firsts=np.array([0]), lengths=np.array([4]), data=(data,), wide=False,
              which=np.array([0, 0], np.int32), local=np.array([1, 0]), valid=np.array([1, 1], np.uint8), out_wide=False)

    def call(**change):
        a = {**ok, **change}
        return gather._gather.strings(a["offsets"], a["firsts"], a["lengths"], a["data"], a["wide"], a["which"],
                                      a["local"], a["valid"], a["out_wide"])

    offsets, got = call()
    assert got == b"cdeab" and np.frombuffer(offsets, np.int32).tolist() == [0, 3, 5]
    bad_offsets = pa.py_buffer(np.array([0, 2, 1, 5, 5], np.int32).tobytes())  # decreasing
    past_data = pa.py_buffer(np.array([0, 2, 5, 5, 99], np.int32).tobytes())  # past the data's end
    for change in (dict(which=np.array([1, 0], np.int32)), dict(which=np.array([-1, 0], np.int32)),
                   dict(local=np.array([4, 0])), dict(local=np.array([-1, 0])),
                   dict(firsts=np.array([1])), dict(lengths=np.array([9])), dict(firsts=np.array([-1])),
                   dict(offsets=(bad_offsets,), local=np.array([1, 0])), dict(offsets=(past_data,), local=np.array([3, 0])),
                   dict(valid=np.array([1], np.uint8)), dict(data=(data, data)), dict(wide=True)):
        with pytest.raises(ValueError):
            call(**change)
    # a null row is not read at all: its offsets may be anything
    assert call(offsets=(past_data,), local=np.array([3, 0]), valid=np.array([0, 1], np.uint8))[1] == b"ab"


_DRIVER = r"""
import sys
sys.path.insert(0, sys.argv[1])
import numpy as np, pyarrow as pa
import _gather
from acceltrace.ingest import gather
gather._gather = _gather
rng = np.random.default_rng(int(sys.argv[2]))
for k in range(int(sys.argv[3])):
    typ = pa.large_string() if k % 2 else pa.string()
    parts = [pa.array([None if rng.random() < 0.2 else "v" * int(rng.integers(0, 40)) for _ in range(n + 2)], typ).slice(1, n)
             for n in rng.integers(0, 30, int(rng.integers(2, 6)))]
    col = pa.chunked_array(parts, typ)
    rows = rng.permutation(len(col))
    assert gather.Gather(col).take(rows).to_pylist() == [col[int(i)].as_py() for i in rows]
    # garbage in every argument: refused, never read out of place
    n = int(rng.integers(0, 6))
    offs = tuple(pa.py_buffer(rng.integers(-5, 60, int(rng.integers(0, 8))).astype(np.int32).tobytes()) for _ in range(n))
    data = tuple(pa.py_buffer(bytes(int(rng.integers(0, 50)))) for _ in range(n))
    m = int(rng.integers(0, 8))
    try:
        _gather.strings(offs, rng.integers(-2, 4, n), rng.integers(-2, 8, n), data, False,
                        rng.integers(-1, n + 1, m).astype(np.int32), rng.integers(-2, 8, m),
                        rng.integers(0, 2, m).astype(np.uint8), bool(k % 3))
    except ValueError:
        pass
print("ok")
"""


@compiled
def test_the_compiled_gather_under_address_sanitizer(tmp_path):
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        import fuzz_scan
    finally:
        sys.path.remove(str(ROOT / "bench"))
    built = fuzz_scan.build(tmp_path, ROOT / "ingest" / "_gather.c")
    if built is None:
        pytest.skip("no gcc with AddressSanitizer/UBSan here")
    so, preload = built
    driver = tmp_path / "driver.py"
    driver.write_text(_DRIVER)
    env = dict(os.environ, LD_PRELOAD=preload, ASAN_OPTIONS="detect_leaks=0:abort_on_error=1",
               UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1")
    p = subprocess.run([sys.executable, str(driver), str(so.parent), "5", "3000"], capture_output=True, text=True,
                       timeout=240, env=env, cwd=ROOT)
    assert p.returncode == 0 and p.stdout.strip() == "ok", (p.stdout + p.stderr)[-4000:]
