"""Decompression limits count the bytes actually produced, whatever sizes a container declares."""

from __future__ import annotations

import gzip
import io
import tarfile
import zipfile

import pytest

from acceltrace.ingest import sources
from acceltrace.ingest.pipeline import ingest_paths
from acceltrace.store.catalog import Store

EVENT = b'{"ph":"X","ts":1,"dur":1,"pid":1,"tid":1,"name":"a"}'


def _trace(n: int) -> bytes:
    return b"[" + b",".join([EVENT] * n) + b"]"


@pytest.fixture(autouse=True)
def small_floor(monkeypatch):
    monkeypatch.setattr(sources, "BOMB_FLOOR_BYTES", 1 << 20)


def _ingest(tmp_path, name: str, blob: bytes):
    path = tmp_path / name
    path.write_bytes(blob)
    (res,) = ingest_paths(Store(tmp_path / "store"), [path])
    return res


def test_a_zip_member_is_limited_by_the_archive_on_disk_not_its_declared_size(tmp_path, monkeypatch):
    # the guard must not read the sizes a zip declares (a central directory can claim 4 GiB)
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("t.json", _trace(1_000))
    path = tmp_path / "a.zip"
    path.write_bytes(buf.getvalue())
    real_infolist = zipfile.ZipFile.infolist

    def lying_infolist(self):
        infos = real_infolist(self)
        for i in infos:
            i.file_size = 1 << 40  # what a hostile directory may say; compress_size is used to read
        return infos

    monkeypatch.setattr(zipfile.ZipFile, "infolist", lying_infolist)
    (src,) = sources.open_sources(path)
    with src.open() as f:
        guard = f.raw
        assert guard.limit == sources.bomb_limit(path.stat().st_size)
        assert len(f.read()) == len(_trace(1_000)) and guard.budget.total >= len(_trace(1_000))


def test_members_of_one_archive_share_one_budget(tmp_path):
    # each member alone is under the 1 MiB floor; together they are far over 200x the archive
    part = gzip.compress(_trace(17_000), 9)  # ~0.9 MB out of a few KB
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tf:
        for i in range(12):
            info = tarfile.TarInfo(f"rank{i}.json.gz")
            info.size = len(part)
            tf.addfile(info, io.BytesIO(part))
    blob = buf.getvalue()
    one = len(_trace(17_000))
    assert one < (1 << 20) and max(1 << 20, 200 * len(blob)) < 12 * one
    res = _ingest(tmp_path, "ranks.tar", blob)
    assert res.error and "decompression bomb" in res.error, res.error


def test_an_honest_archive_within_the_ratio_is_read(tmp_path):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("t.json", _trace(2_000))
    res = _ingest(tmp_path, "ok.zip", buf.getvalue())
    assert res.error is None and res.counts["slices"] == 2_000
