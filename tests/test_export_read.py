"""Reading acceltrace's own Chrome exports back (ingest/acceltrace_chrome/importer.py): detection, streaming, damaged files."""

import gzip
import json

import pytest

from _helpers import ingest_ok, ingest_one, ingest_only

from acceltrace.ingest.acceltrace_chrome import importer as export_read
import nsys_synth
from acceltrace.export.command import export_trace
from canonical import canonical_summary


@pytest.fixture(scope="module", autouse=True)
def _ingest_only():
    with ingest_only():
        yield


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """A 3.x Nsight trace with counters and flows, ingested and exported to Chrome JSON."""
    tmp = tmp_path_factory.mktemp("export-read")
    src = tmp / "synth.sqlite"
    nsys_synth.write(src, iterations=6, metric_samples=4)
    store, res = ingest_ok(tmp, src)
    out = tmp / "synth.json"
    export_trace(store, res.id, "chrome", out)
    return store, res.id, out


def test_an_export_is_recognised_by_content_even_renamed_and_gzipped(exported, tmp_path):
    store0, tid, out = exported
    packed = tmp_path / "trace.bin.gz"
    packed.write_bytes(gzip.compress(out.read_bytes()))
    store, res = ingest_one(tmp_path, packed)
    assert res.error is None, res.error
    assert res.format == "acceltrace-chrome"
    assert canonical_summary(store.connect(res.id)) == canonical_summary(store0.connect(tid))


def test_other_chrome_files_are_left_to_the_chrome_ingester():
    kineto = b'{"schemaVersion": 1, "traceEvents": [\n{"ph": "X", "name": "a", "ts": 1, "dur": 2}]}'
    lookalike = b'{"displayTimeUnit": "ns", "otherData": {"tool": "other"}, "traceEvents": [\n]}'
    assert not export_read.sniff(kineto) and not export_read.sniff(lookalike)


def test_tiny_read_blocks_give_the_same_trace(exported, tmp_path, monkeypatch):
    store0, tid, out = exported
    monkeypatch.setattr(export_read, "BLOCK_BYTES", 97)
    store, res = ingest_one(tmp_path, out)
    assert res.error is None, res.error
    assert canonical_summary(store.connect(res.id)) == canonical_summary(store0.connect(tid))


def test_an_export_cut_short_loads_up_to_its_last_whole_event(exported, tmp_path):
    _, _, out = exported
    data = out.read_bytes()
    lines = data.split(b"\n")
    x_lines = [i for i, line in enumerate(lines) if line.startswith(b'{"ph":"X"')]
    cut_at = x_lines[len(x_lines) // 2]
    cut = tmp_path / "cut.json"
    cut.write_bytes(b"\n".join(lines[:cut_at]) + b"\n" + lines[cut_at][:25])
    store, res = ingest_one(tmp_path, cut)
    assert res.error is None, res.error
    assert res.counts["slices"] == len(x_lines) // 2
    assert any("cut short" in w for w in res.warnings)
    assert any("without closing its event array" in w for w in res.warnings)
    meta = dict(store.connect(res.id).execute("SELECT key, value FROM trace_meta").fetchall())
    assert meta["dropped_events"] == "1"


def test_a_damaged_line_in_the_middle_is_refused_naming_it(exported, tmp_path):
    _, _, out = exported
    lines = out.read_bytes().split(b"\n")
    lines[20] = b'{"ph":"X","name":'
    bad = tmp_path / "bad.json"
    bad.write_bytes(b"\n".join(lines))
    store, res = ingest_one(tmp_path, bad)
    assert res.error is not None and "line 21" in res.error and "not one JSON event per line" in res.error
    assert store.list() == []


def test_a_header_without_start_is_refused(exported, tmp_path):
    _, _, out = exported
    header, rest = out.read_bytes().split(b"\n", 1)
    doc = json.loads(header.decode().removesuffix('"traceEvents": [').rstrip().rstrip(",") + "}")
    del doc["otherData"]["start_ns"]
    new_header = json.dumps(doc)[:-1] + ', "traceEvents": ['
    bad = tmp_path / "nostart.json"
    bad.write_bytes(new_header.encode() + b"\n" + rest)
    store, res = ingest_one(tmp_path, bad)
    assert res.error is not None and "start_ns" in res.error and "line 1" in res.error


def test_the_export_header_keeps_the_sniffed_prefix(exported):
    _, _, out = exported
    head = out.read_bytes()[:4096]
    assert head.startswith(export_read.MAGIC) and export_read.sniff(head)
