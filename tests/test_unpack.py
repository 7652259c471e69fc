"""Traces compressed with xz, bzip2 or zstd (ingest/unpack.py): read as a gzip is, cut and damaged streams said as
a gzip's are, tar archives inside them, the decompression-bomb guard, and an upload through the server."""

from __future__ import annotations

import bz2
import gzip
import io
import json
import lzma
import tarfile
import time

import pyarrow as pa
import pytest
from fastapi.testclient import TestClient

from acceltrace.ingest import builder as builder_mod, pipeline, sources
from acceltrace.ingest.unpack import codec_of
from acceltrace.server.app import create_app
from acceltrace.store.catalog import Store
from _ui import A100, ROOT

COMPRESS = {
    "xz": (".xz", lambda data: lzma.compress(data, preset=1)),
    "bzip2": (".bz2", lambda data: bz2.compress(data, 1)),
    "zstd": (".zst", lambda data: pa.Codec("zstd").compress(data, asbytes=True)),
}
RANKS = [ROOT / "sample_traces" / "chrome" / "kineto" / f"sampled-rank{r}-small.json.gz" for r in (0, 1)]


@pytest.fixture(scope="module")
def a100_json() -> bytes:
    return gzip.decompress(A100.read_bytes())


@pytest.fixture
def quick(monkeypatch):
    monkeypatch.setattr(builder_mod, "build_lod", lambda con, **kw: None)


def _slices(store: Store, res) -> tuple:
    con = store.connect(res.id)
    try:
        return con.execute("SELECT count(*), sum(ts), sum(dur), sum(depth), count(DISTINCT track_id),"
                           " sum(hash(name)) FROM slices").fetchall()[0]
    finally:
        con.close()


@pytest.mark.parametrize("codec", sorted(COMPRESS))
def test_a_compressed_trace_stores_what_its_gzip_stores(tmp_path, quick, a100_json, codec):
    suffix, compress = COMPRESS[codec]
    path = tmp_path / f"a100-rank0-memcpy.json{suffix}"
    path.write_bytes(compress(a100_json))
    assert codec_of(path.read_bytes()[:16]) == codec
    store = Store(tmp_path / "store")
    got, want = pipeline.ingest_paths(store, [path, A100])
    assert got.error is None and want.error is None, (got.error, want.error)
    assert got.warnings == [] and got.counts == want.counts
    assert _slices(store, got) == _slices(store, want)


@pytest.mark.parametrize("codec", sorted(COMPRESS))
def test_a_stream_cut_short_loads_its_whole_events_and_says_so(tmp_path, quick, a100_json, codec):
    suffix, compress = COMPRESS[codec]
    data = compress(a100_json)
    path = tmp_path / f"cut.json{suffix}"
    path.write_bytes(data[:len(data) // 2])
    res = pipeline.ingest_paths(Store(tmp_path / "store"), [path])[0]
    assert res.error is None, res.error
    (warning,) = res.warnings
    assert "cut off" in warning and "the compressed data is cut short" in warning, warning
    assert 0 < res.counts["slices"] < 67_219 and res.counts["dropped_events"] == 1


@pytest.mark.parametrize("codec", ["xz", "zstd"])
def test_damaged_data_is_refused_with_where(tmp_path, quick, a100_json, codec):
    suffix, compress = COMPRESS[codec]
    data = bytearray(compress(a100_json))
    data[len(data) // 2:len(data) // 2 + 64] = b"x" * 64
    path = tmp_path / f"bad.json{suffix}"
    path.write_bytes(bytes(data))
    store = Store(tmp_path / "store")
    res = pipeline.ingest_paths(store, [path])[0]
    assert res.error is not None and res.error.startswith("bad.json" + suffix + ": decompressed byte ")
    assert "compressed data is damaged or cut short" in res.error
    assert store.list() == []


def test_a_tar_inside_xz_is_a_run_of_its_ranks(tmp_path, quick):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for p in RANKS:
            data = gzip.decompress(p.read_bytes())
            info = tarfile.TarInfo(p.name.removesuffix(".gz"))
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    path = tmp_path / "ranks.tar.xz"
    path.write_bytes(lzma.compress(buf.getvalue(), preset=1))
    store = Store(tmp_path / "store")
    got = pipeline.ingest_paths(store, [path])[0]
    ranks = [pipeline.ingest_paths(store, [p])[0] for p in RANKS]
    assert got.error is None, got.error
    assert got.counts["slices"] == sum(r.counts["slices"] for r in ranks) == 4_811 + 4_676


def test_the_bomb_guard_bounds_every_codec(tmp_path, quick, monkeypatch):
    monkeypatch.setattr(sources, "BOMB_FLOOR_BYTES", 1 << 20)
    body = b'{"traceEvents": [' + b" " * (8 << 20) + b"]}"
    for codec, (suffix, compress) in COMPRESS.items():
        path = tmp_path / f"bomb-{codec}.json{suffix}"
        path.write_bytes(compress(body))
        res = pipeline.ingest_paths(Store(tmp_path / f"store-{codec}"), [path])[0]
        assert res.error is not None and "decompression bomb" in res.error, (codec, res.error)


def test_an_upload_of_a_zstd_trace_is_ingested(tmp_path):
    events = [{"ph": "X", "name": f"k{i % 5}", "ts": i * 10, "dur": 5, "pid": 1, "tid": 1} for i in range(300)]
    body = pa.Codec("zstd").compress(json.dumps({"traceEvents": events}).encode(), asbytes=True)
    with TestClient(create_app(tmp_path / "store", max_upload_bytes=1 << 20), raise_server_exceptions=False) as c:
        r = c.post("/api/traces", files={"file": ("run.json.zst", body)})
        assert r.status_code in (201, 202), r.text
        deadline = time.monotonic() + 60
        while (row := c.get(f"/api/traces/{r.json()['id']}").json())["status"] == "ingesting":
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert row["status"] == "ready" and row["counts"]["slices"] == 300, row


def test_merged_compressed_files_are_named_by_their_stems(tmp_path, quick):
    events = {"traceEvents": [{"ph": "X", "ts": 1, "dur": 2, "pid": 1, "tid": 1, "name": "k"}]}
    paths = []
    for name, codec in (("alpha", "zstd"), ("beta", "xz")):
        suffix, compress = COMPRESS[codec]
        paths.append(tmp_path / f"{name}.pt.trace.json{suffix}")
        paths[-1].write_bytes(compress(json.dumps(events).encode()))
    store = Store(tmp_path / "store")
    (res,) = pipeline.ingest_paths(store, paths, merge=True)
    assert res.error is None, res.error
    con = store.connect(res.id)
    assert sorted(g for (g,) in con.execute("SELECT DISTINCT group_name FROM tracks").fetchall()) == ["alpha", "beta"]


def test_compressed_members_of_a_zip_are_read(tmp_path, quick):
    import zipfile

    path = tmp_path / "ranks.zip"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        for p, codec in zip(RANKS, ("zstd", "xz")):
            suffix, compress = COMPRESS[codec]
            z.writestr(p.name.removesuffix(".gz") + suffix, compress(gzip.decompress(p.read_bytes())))
    res = pipeline.ingest_paths(Store(tmp_path / "store"), [path])[0]
    assert res.error is None, res.error
    assert res.counts["slices"] == 4_811 + 4_676
