"""Format detection decides by structure: a Chrome trace is an object with traceEvents wherever
that key sits (past any window), gzip or not; a JSON file that is not one says which keys it has."""

from __future__ import annotations

import gzip
import io
import json

import pytest

from acceltrace.ingest.chrome import detect
from acceltrace.ingest.pipeline import ingest_paths
from acceltrace.store.catalog import Store


def _events(n: int) -> list[dict]:
    return [{"ph": "X", "cat": "cpu_op", "name": f"op{i % 7}", "pid": 1, "tid": 1, "ts": 10 * i, "dur": 5}
            for i in range(n)]


def _harness_trace(meta_bytes: int, n: int) -> bytes:
    # a harness object before traceEvents, with braces, brackets and escaped quotes in its strings
    meta = {"harness": {f"k{i}": 'v "q" {[' * 6 for i in range(meta_bytes // 60)}}
    return ('{"metadata": ' + json.dumps(meta) + ', "schemaVersion": 1, "traceEvents": '
            + json.dumps(_events(n)) + "}").encode()


@pytest.mark.parametrize("gz", [False, True])
def test_trace_events_after_a_large_metadata_object_is_a_chrome_trace(tmp_path, gz):
    data = _harness_trace(80_000, 300)
    assert data.index(b'"traceEvents"') > 64 * 1024
    path = tmp_path / ("t.json.gz" if gz else "t.json")
    path.write_bytes(gzip.compress(data) if gz else data)
    (res,) = ingest_paths(Store(tmp_path / "store"), [path])
    assert res.error is None, res.error
    assert res.format == "chrome" and res.counts["slices"] == 300


def test_a_json_object_without_trace_events_names_the_keys_it_found(tmp_path):
    body = {"config": {"x": "y" * 5000}, "results": [1, 2, 3], "notes": "a string with \"traceEvents\" in it"}
    path = tmp_path / "report.json"
    path.write_text(json.dumps(body))
    (res,) = ingest_paths(Store(tmp_path / "store"), [path])
    assert res.error and "report.json: byte 0" in res.error
    assert "top-level keys are config, results, notes, with no traceEvents" in res.error, res.error


@pytest.mark.parametrize("block", [3, 7, 64, 1 << 20])
def test_key_walk_is_the_same_for_every_block_size(monkeypatch, block):
    monkeypatch.setattr(detect, "BLOCK", block)
    text = ('\ufeff {"a": "x\\\\", "b": {"traceEvents": 1}, "c\\"d": [1, {"e": "}]"}], '
            '"f": "\\u0022", "traceEvents": [], "after": 1}')
    got = detect.top_level_keys(io.BytesIO(text.encode()))
    assert got == ("object", ["a", "b", 'c"d', "f", "traceEvents"], True)


@pytest.mark.parametrize("text, want", [
    ("[]", ("array", [], True)),
    ("  \n", ("empty", [], True)),
    ("<html>", ("other", [], True)),
    ('{"a": 1, "b": [2]}', ("object", ["a", "b"], True)),
    ('{"a": 1, "b": "cut', ("object", ["a", "b"], False)),
])
def test_key_walk_kinds(text, want):
    assert detect.top_level_keys(io.BytesIO(text.encode())) == want


def test_describe_says_what_was_found():
    assert detect.describe("object", ["a", "b"], True) == \
        "a JSON object whose top-level keys are a, b, with no traceEvents"
    many = [f"k{i}" for i in range(20)]
    assert "and 8 more" in detect.describe("object", many, True)
    assert detect.describe("object", ["a"], False).endswith("(the file ends inside the object)")


def test_a_report_or_trace_of_another_tool_says_how_to_make_it_readable(tmp_path):
    (tmp_path / "run.nsys-rep").write_bytes(bytes(range(256)) * 8)  # (nsys's own binary: not read here)
    (tmp_path / "run.pftrace").write_bytes(b"\x0a\x05hello")  # a protobuf TracePacket
    (tmp_path / "named.pftrace").write_text(json.dumps({"traceEvents": _events(3)}))  # content first: Chrome JSON
    store = Store(tmp_path / "store")
    rep, pf, named = ingest_paths(store, [tmp_path / "run.nsys-rep", tmp_path / "run.pftrace", tmp_path / "named.pftrace"])
    assert rep.error.startswith("run.nsys-rep: byte 0: is an Nsight Systems report") and "nsys export --type sqlite" in rep.error
    assert pf.error.startswith("run.pftrace: byte 0: is a Perfetto protobuf trace") and "traceconv json" in pf.error
    assert named.error is None and named.counts["slices"] == 3
