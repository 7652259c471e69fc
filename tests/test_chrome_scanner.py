"""The compiled Chrome scanner (ingest/chrome/_scan.c) against the msgspec path it speeds up.

Every sample must match its checked-in snapshot through both paths (test_chrome_samples.py
checks the default, compiled one; this file the msgspec one), every bad input must give
the same outcome through both, and column by column the scanner must
give what msgspec's structs give, on hand-written quirks and on random mutations. A
chunk the scanner is unsure of comes back None (msgspec then decides): never a crash,
never a different value.
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import msgspec
import numpy as np
import pytest
from _helpers import check_snapshot

from acceltrace.ingest import builder as builder_mod, pipeline, sources
from acceltrace.ingest.chrome import columns
from acceltrace.store.catalog import Store
from canonical import canonical_summary

ROOT = Path(__file__).resolve().parent.parent
KINETO = sorted((ROOT / "sample_traces" / "chrome" / "kineto").glob("*.json*")) + sorted(
    (ROOT / "sample_traces" / "chrome" / "kineto").glob("*.tar.gz"))  # the list test_chrome_samples.py checks
INVALID = sorted((ROOT / "sample_traces" / "chrome" / "invalid").iterdir())
SNAPSHOTS = ROOT / "tests" / "snapshots" / "chrome" / "kineto"
FIELDS = columns._FIELDS

needs_scanner = pytest.mark.skipif(columns._scan is None, reason="the compiled scanner is not built (no compiler)")


@pytest.fixture
def quick(monkeypatch):
    monkeypatch.setattr(builder_mod, "build_lod", lambda con, **kw: None)
    monkeypatch.setattr(sources, "BOMB_FLOOR_BYTES", 1 << 20)


def _summary(tmp_path, path, compiled: bool, block: int | None = None) -> str:
    old = columns.USE_COMPILED
    columns.USE_COMPILED = compiled
    try:
        store = Store(tmp_path / f"store-{compiled}")
        res = pipeline.ingest_paths(store, [path])[0]
        if res.error:
            return f"refused: {res.error}"
        return canonical_summary(store.connect(res.id)) + "\n".join(res.warnings)
    finally:
        columns.USE_COMPILED = old


def test_the_scanner_is_built_by_the_install():
    # `pip install -e .` builds it (setup.py); the fallback exists for machines without a compiler
    if shutil.which("cc") is None and shutil.which("gcc") is None:
        pytest.skip("no C compiler on this machine: the msgspec path runs (the tests below cover it)")
    assert columns._scan is not None and columns.compiled()
    os.environ["ACCELTRACE_CHROME_SCANNER"] = "python"
    try:
        assert not columns.compiled()  # the switch a user has to force the fallback
    finally:
        del os.environ["ACCELTRACE_CHROME_SCANNER"]


@pytest.mark.parametrize("path", KINETO, ids=lambda p: p.name)
def test_msgspec_path_matches_the_snapshots(tmp_path, quick, path):
    # test_chrome_samples.py checks the default (compiled) path against the same files
    check_snapshot(SNAPSHOTS / f"{path.name}.summary.txt", _plain_summary(tmp_path, path))


def _plain_summary(tmp_path, path) -> str:
    old = columns.USE_COMPILED
    columns.USE_COMPILED = False
    try:
        store = Store(tmp_path / "store-plain")
        res = pipeline.ingest_paths(store, [path])[0]
        assert res.error is None, res.error
        return canonical_summary(store.connect(res.id))
    finally:
        columns.USE_COMPILED = old


@needs_scanner
@pytest.mark.parametrize("path", INVALID, ids=lambda p: p.name)
def test_both_paths_give_the_same_outcome_on_bad_input(tmp_path, quick, path):
    assert _summary(tmp_path, path, True) == _summary(tmp_path, path, False)


@needs_scanner
def test_small_blocks_give_the_same_trace(tmp_path, quick, monkeypatch):
    # many chunk cuts (and re-tries of the cut) through one real file
    from acceltrace.ingest.chrome import reader

    monkeypatch.setattr(reader, "BLOCK_BYTES", 64 << 10)
    path = ROOT / "sample_traces" / "chrome" / "kineto" / "mi250-rocm-minitoy.json.gz"
    assert _summary(tmp_path, path, True) == _summary(tmp_path, path, False)


# -- column by column ----------------------------------------------------------------
QUIRKS = [
    # plain Kineto shapes
    '{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1365627000007.663, "dur": 69.873,'
    ' "args": {"correlation": 1, "External id": 2, "bytes": 4096}}',
    '{"ph": "X", "name": "n", "pid": 1, "tid": 2, "ts": 17, "dur": 0}',
    '{"ph":"i","s":"g","name":"mark","pid":"","tid":"","ts":-5.5}',
    # pid / tid mixing ints and strings; ids as strings
    '{"ph": "s", "id": "0x1a", "pid": "25738", "tid": 25738, "ts": 1.5, "cat": "ac2g", "name": "ac2g", "bp": "e"}',
    '{"ph": "f", "id": 7, "pid": -3, "tid": "stream 7", "ts": 0.001}',
    # escapes and non-ASCII in names; escaped quotes inside args
    r'{"ph": "X", "name": "tab\there \"q\" \\ \/ \u00e9 \ud83d\ude00 \u0000", "cat": "c\u0061t", "ts": 1, "dur": 2,'
    r' "args": {"s": "a\"b", "n": [1, 2.5e3, {"x": null}]}}',
    '{"ph": "X", "name": "caf\u00e9 \u6f22\u5b57", "ts": 2, "dur": 1}',
    # missing, null and odd fields; unknown keys with every kind of value
    '{"ph": "X", "ts": null, "dur": null}',
    '{"name": "no phase", "ts": 3}',
    '{}',
    '{"ph": "C", "name": "mem", "pid": 1, "ts": 4, "args": {"bytes": 1e3, "big": 123456789012345678901234567890}}',
    '{"ph": "X", "ts": 5, "dur": 1, "extra": [true, false, null, -0, 0.5, "s", {"a": {}}], "zz": -1.25E-3}',
    '{"ph": "X", "ts": 6, "dur": 1, "args": "not an object"}',
    '{"ph": "X", "ts": 6, "dur": 1, "args": {"correlation": 99999999999999999999, "size": 2.5, "External id": "7",'
    ' "external id": -3, "direction": "h2d", "bytes": null, "nested": {"correlation": 5}}}',
    '{"ph": "X", "ts": 6, "dur": 1, "args": {"size": [1], "direction": {"x": 1}, "bytes": true, "correlation": -0}}',
    '{"ph": "X", "ts": 6, "dur": 1, "args": {  }}',
    '{"ph": "b", "cat": "async", "id": 9, "name": "a", "pid": 1, "ts": 7, "args": null}',
    '{"ph": "X", "ts": 8, "dur": 1, "bind_id": 12, "flow_in": true, "flow_out": false}',
    '{"ph": "X", "ts": 8, "dur": 1, "bind_id": "x", "flow_in": null}',
    # times the scanner leaves to msgspec (more than three decimals, exponents, strings, huge)
    '{"ph": "X", "ts": 1683564901548726, "dur": 209748}',  # 16-digit integer microseconds (A100 Kineto)
    '{"ph": "X", "ts": 9223372036854774.999, "dur": 1}',
    '{"ph": "X", "ts": -9223372036854774, "dur": 1}',
    '{"ph": "X", "ts": 9223372036854775, "dur": 1}',
    '{"ph": "X", "ts": 1.23456, "dur": 1}',
    '{"ph": "X", "ts": 1e3, "dur": 1}',
    '{"ph": "X", "ts": "12.5", "dur": 1}',
    '{"ph": "X", "ts": 99999999999999999999, "dur": 1}',
    '{"ph": "X", "ts": 1, "dur": 1, "pid": 1.5}',
    '{"ph": "X", "ts": 1, "dur": 1, "pid": 18446744073709551615}',
    # keys the scanner cannot match without unescaping, repeated keys
    r'{"ph": "X", "t\u0073": 1, "dur": 1}',
    '{"ph": "X", "ts": 1, "ts": 2, "dur": 1}',
]


def _struct_values(evs: list, name: str) -> list:
    return [getattr(e, name) for e in evs]


def _outcome(fn, arg):
    """fn(arg), or the type and text of what it raised (both paths must raise alike)."""
    try:
        return fn(arg)
    except Exception as e:  # noqa: BLE001 - compared, not hidden
        return (type(e).__name__, str(e))


def _compare(raw: bytes) -> bool:
    """Columns from the scanner == msgspec's structs; False when the scanner declined."""
    cols = columns.scan_columns(raw)
    if cols is None:
        return False
    try:
        evs = columns._FAST.decode(raw)
    except msgspec.ValidationError:
        evs = columns._RAW.decode(raw)
    assert len(cols) == len(evs)
    for name in FIELDS:
        mine = columns.values(cols, name)
        if name in ("ts", "dur"):
            p, q = columns.to_ns(mine, lambda: None), columns.to_ns(_struct_values(evs, name),
                                                                  lambda n=name: _struct_values(columns._RAW.decode(raw), n))
            assert p.ok.tolist() == q.ok.tolist() and p.missing.tolist() == q.missing.tolist(), name
            assert p.values[p.ok].tolist() == q.values[q.ok].tolist(), name
            assert list(mine) == _struct_values(evs, name), name
        elif name == "args":
            assert [bytes(r) for r in mine] == [bytes(e.args) for e in evs]
            assert columns.raw_text(mine).equals(columns.raw_text(_struct_values(evs, name)))
            af_mine, af_ref = _outcome(columns.arg_fields, mine), _outcome(columns.arg_fields,
                                                                          _struct_values(evs, name))
            if isinstance(af_mine, columns.ArgFieldColumns) and isinstance(af_ref, list):
                for attr in ("correlation", "ext", "ext_lower", "nbytes", "size", "direction"):
                    got, want = columns.values(af_mine, attr), [getattr(f, attr) for f in af_ref]
                    assert got == want and [type(v) for v in got] == [type(v) for v in want], attr
                    assert columns.ints(got).equals(columns.ints(want)), attr
                assert list(af_mine) == af_ref
            else:
                assert af_mine == af_ref
        else:
            ref = _struct_values(evs, name)
            assert mine == ref, name
            assert [type(v) for v in mine] == [type(v) for v in ref], name
            if name in columns._STR_FIELDS:
                assert columns.strings(cols, name).to_pylist() == ref
    # the sequence view: structs decoded from each event's own bytes
    assert list(cols) == evs
    if len(evs):
        assert cols[len(evs) - 1] == evs[-1]
        k = np.array([len(evs) - 1, 0])
        sub = columns.take(cols, k)
        assert list(sub) == [evs[-1], evs[0]] and columns.values(sub, "name") == [evs[-1].name, evs[0].name]
    return True


@needs_scanner
@pytest.mark.parametrize("event", QUIRKS)
def test_scanner_columns_equal_msgspec(event):
    raw = ("[" + event + "]").encode()
    try:
        msgspec.json.decode(raw)
    except msgspec.DecodeError:
        pytest.fail("a quirk must be valid JSON")
    accepted = _compare(raw)
    declines = ('"ts": 1.23456', '"ts": 1e3', '"ts": "12.5"', '"ts": 99999999999999999999', '"pid": 1.5',
                '"pid": 18446744073709551615', r"t\u0073", '"ts": 1, "ts": 2', '"ts": 9223372036854775,')
    assert accepted == (not any(d in event for d in declines)), "declined what it should read, or the reverse"


@needs_scanner
def test_all_quirks_in_one_chunk():
    readable = [q for q in QUIRKS if _compare(f"[{q}]".encode())]
    assert _compare(("[" + ",\n ".join(readable) + "]").encode())
    assert _compare(b"[]") and _compare(b" [ \n ] ")


def _mutations(seed: int, count: int):
    rng = random.Random(seed)
    readable = [q for q in QUIRKS if columns.scan_columns(f"[{q}]".encode()) is not None]
    base = ("[" + ",".join(readable) + "]").encode()
    alphabet = b'{}[]",:\\ \t\n0123456789.-eEtruefalsn\x00\x1f\x7f\x80\xc3\xa9\xed\xa0\x80\xf0\x9f\x98'
    for _ in range(count):
        b = bytearray(base)
        for _ in range(rng.randint(1, 6)):
            op = rng.random()
            i = rng.randrange(len(b) + 1)
            if op < 0.4 and len(b) > 1:
                del b[min(i, len(b) - 1)]
            elif op < 0.8:
                b.insert(i, rng.choice(alphabet))
            else:
                b = b[:i]  # cut off anywhere
        yield bytes(b)


@needs_scanner
@pytest.mark.parametrize("n", [1, 3000, 4095, 4096, 4097, 9000, 20000])
def test_chunks_of_more_events_than_the_scanners_guess_agree(n):
    # The scanner writes its columns into its outputs, sized by a guess from the chunk's bytes (one row per
    # 160 bytes, at least 4096): tiny events outnumber it and grow the columns into arrays of their own
    # (copied out at the end); fewer are moved down within the outputs. Both must give msgspec's columns.
    kinds = ['{"ph":"i","ts":%d,"pid":1,"tid":%d,"name":"m%d","s":"t"}',
             '{"ph":"X","ts":%d,"dur":5,"pid":2,"tid":%d,"name":"k%d","cat":"kernel","args":{"correlation":7}}',
             '{"ph":"C","ts":%d,"pid":3,"tid":%d,"name":"c%d","args":{"v":1.5}}']
    raw = ("[" + ",".join(kinds[i % 3] % (i, i % 7, i % 11) for i in range(n)) + "]").encode()
    assert _compare(raw)
    assert len(columns.scan_columns(raw)) == n
    # the rows hint (from the chunks before) only sizes the buffers: any hint, the same outputs
    from acceltrace.ingest.chrome import _scan
    want = _scan.scan(raw)
    for hint in (1, n // 2 + 1, n, 4 * n, len(raw), 1 << 62):
        assert _scan.scan(raw, hint) == want, hint


def test_mutated_chunks_never_disagree():
    # bounded here (2000 inputs, ~2 s); bench/fuzz_scan.py fuzzes the C code alone under ASan
    accepted = 0
    for raw in _mutations(14, 2000):
        try:
            ok = _compare(raw)
        except (msgspec.DecodeError, msgspec.ValidationError):
            pytest.fail(f"the scanner accepted what msgspec refuses: {raw[:200]!r}")
        accepted += ok
    assert 50 < accepted < 2000  # some mutations stay valid, most do not


def test_the_readers_join_is_bytes_join_compiled_or_not(monkeypatch):
    # blocks.joined: the compiled join copies without the GIL; without the extension, b"".join; the same bytes
    from acceltrace.ingest.chrome import blocks

    data = bytes(range(256)) * 40
    cases = [[], [b""], [data], [b"[", memoryview(data)[7:900], b"]"], [data[:5], bytearray(b"xyz"), data]]
    for compiled in ([True, False] if blocks._join is not None else [False]):
        if not compiled:
            monkeypatch.setattr(blocks, "_join", None)
        for parts in cases:
            got = blocks.joined(parts)
            assert type(got) is bytes and got == b"".join(parts)
        assert blocks.bracketed(b"  {1},{2}, ", 2, 9) == b"[{1},{2}]"
        with pytest.raises(TypeError):
            blocks.joined([b"a", 3])


# -- the C code under AddressSanitizer -------------------------------------------------
def test_scanner_under_address_sanitizer():
    # bench/fuzz_scan.py builds _scan.c with ASan + UBSan and feeds it mutations of the bad-input
    # corpus, the quirks above and a generated trace; here a short run, the bench runs 200k inputs
    p = subprocess.run([sys.executable, str(ROOT / "bench" / "fuzz_scan.py"), "--count", "3000", "--seed", "14",
                        "--timeout", "150"], capture_output=True, text=True, timeout=240, cwd=ROOT)
    if p.returncode == 2:
        pytest.skip(p.stdout.strip())
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-2000:]
    assert p.stdout.startswith("ok 3000 inputs")


@pytest.mark.parametrize("compiled", [True, False])
def test_args_that_are_not_objects_do_not_break_linking(tmp_path, quick, compiled):
    # one event's args is a string, another's carries a correlation id: both load, the link stays
    trace = tmp_path / "t.json"
    trace.write_text('{"traceEvents": ['
                     '{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 1,'
                     ' "dur": 2, "args": {"correlation": 7}},'
                     '{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 3, "dur": 4,'
                     ' "args": {"correlation": 7}},'
                     '{"ph": "X", "cat": "cpu_op", "name": "odd", "pid": 1, "tid": 1, "ts": 5, "dur": 1, "args": "text"}]}')
    text = _summary(tmp_path, trace, compiled)
    assert not text.startswith("refused"), text
    old = columns.USE_COMPILED
    columns.USE_COMPILED = compiled
    try:
        store = Store(tmp_path / "s")
        res = pipeline.ingest_paths(store, [trace])[0]
    finally:
        columns.USE_COMPILED = old
    assert res.error is None and res.counts["slices"] == 3 and res.counts["flows"] == 1, (res.error, res.counts)


def test_events_of_a_selection_read_one_by_one_are_the_selected_ones():
    # EventColumns.take + indexing (the rare per-event paths: metadata, problem reports, DMA args):
    # each index reads its own row of the chunk, negative ones too, and past the end raises
    import json as _json

    evs = [{"ph": "X", "name": f"k{i}", "pid": 1, "tid": 1, "ts": 1000 + i, "dur": 5,
            "args": {"External id": i, "direction": "HOST_TO_DEVICE" if i % 2 else "DEVICE_TO_HOST"}}
           for i in range(40)]
    raw = _json.dumps(evs).encode()
    cols = columns.scan_columns(raw)
    if cols is None:
        pytest.skip("the compiled scanner is not built")
    pick = np.array([3, 17, 39, 0])
    sub = cols.take(pick)
    assert [sub[i].name for i in range(len(pick))] == [f"k{j}" for j in pick]
    assert sub[-1].name == "k0"
    with pytest.raises(IndexError):
        sub[len(pick)]
    args = columns.values(sub, "args")
    assert [_json.loads(bytes(args[i]))["External id"] for i in range(len(pick))] == pick.tolist()
    ts = columns.values(sub, "ts")
    assert [ts[i] for i in range(len(pick))] == [1000 + j for j in pick]
    af = columns.arg_fields(args)
    assert [af[i].direction for i in range(len(pick))] == [evs[j]["args"]["direction"] for j in pick]


def test_codes_of_a_selection_are_what_dictionary_encode_of_its_values_gives():
    """The rows of each phase take their pid/tid/cat/name codes from the chunk's (worked out once, on
    the scan thread) made dense again in order of first appearance: they must be exactly what hashing
    the selection's own values gives (pyarrow's dictionary_encode), for any selection."""
    import pyarrow as pa
    from acceltrace.ingest.chrome.scanned import dense_codes

    rng = np.random.default_rng(7)
    for _ in range(200):
        n = int(rng.integers(0, 400))
        vals = rng.choice(["", "ac2g", "kernel", "cpu_op", "gpu_memcpy", "x\u00e9"], n)
        enc = pa.array(vals).dictionary_encode()
        codes, dic = enc.indices.to_numpy().astype(np.int64), enc.dictionary.to_pylist()
        idx = np.sort(rng.choice(n, int(rng.integers(0, n + 1)), replace=False)) if n else np.zeros(0, np.int64)
        got_codes, got_vals = dense_codes(codes[idx], dic)
        want = pa.array(vals[idx], pa.string()).dictionary_encode()
        assert got_vals == want.dictionary.to_pylist()
        assert got_codes.tolist() == want.indices.to_numpy().tolist()


@pytest.mark.parametrize("dtype", [np.int8, np.int16, np.int32, np.int64, np.uint8])
def test_unique_inverse_counts_small_ranges_and_hashes_wide_ones_with_np_uniques_answer(dtype):
    rng = np.random.default_rng(3)
    info = np.iinfo(dtype)
    for lo, hi in ((0, 3), (-120, 120), (0, 1 << 18), (-(1 << 50), 1 << 50)):
        lo, hi = max(lo, int(info.min)), min(hi, int(info.max))
        for n in (1, 300, 5000):
            a = rng.integers(lo, hi, n, endpoint=True).astype(dtype)
            u, inv = columns.unique_inverse(a)
            u2, inv2 = np.unique(a, return_inverse=True)
            assert u.dtype == a.dtype and u.tolist() == u2.tolist() and inv.tolist() == inv2.tolist()


@needs_scanner
def test_a_chunks_codes_match_its_columns_hashed_directly():
    """_Scanned.codes: pid/tid over the events where they are integers (-1 elsewhere), strings with a
    missing value as "", each in order of first appearance."""
    import pyarrow as pa
    from acceltrace.ingest.chrome.scanned import scan_columns

    raw = (b'[{"ph":"X","pid":7,"tid":"main","name":"a","ts":1,"dur":2},{"ph":"s","pid":3,"tid":9,"cat":"ac2g",'
           b'"name":"ac2g","id":1,"ts":1},{"ph":"X","pid":7,"tid":9,"cat":"kernel","name":"b","ts":2,"dur":1},'
           b'{"ph":"f","bp":"e","pid":3,"tid":9,"cat":"ac2g","name":"ac2g","id":1,"ts":3}]')
    cols = scan_columns(raw)
    assert cols is not None
    pid_codes, pid_vals = cols._s.codes("pid")
    assert pid_codes.tolist() == [0, 1, 0, 1] and pid_vals == [7, 3]
    tid_codes, tid_vals = cols._s.codes("tid")
    assert tid_codes.tolist() == [-1, 0, 0, 0] and tid_vals == [9]
    for name in ("cat", "name", "bp"):
        codes, vals = cols._s.codes(name)
        want = cols.strings(name).fill_null("").dictionary_encode()
        assert vals == want.dictionary.to_pylist() and codes.tolist() == want.indices.to_numpy().tolist()
    sel = cols.take(np.array([1, 3]))
    assert [v for v in sel.string_codes("bp")[1]] == ["", "e"] and sel.string_codes("bp")[0].tolist() == [0, 1]
    assert sel.int_codes("tid")[0].tolist() == [0, 0] and sel.int_codes("tid")[1] == [9]
    assert cols.int_codes("tid") is None  # not an integer in every event: the caller reads the values
