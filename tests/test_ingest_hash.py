"""The input's hash is computed beside the ingest, and set when the trace is published; it is the same
whichever way the bytes came (an ingest of a file, an upload received in pieces), and without the blake3
package it falls back to SHA-256 as earlier stores hold it (store/content.py)."""

import hashlib
import threading
from pathlib import Path

from acceltrace.ingest.pipeline import ingest_paths
from acceltrace.store import content
from acceltrace.store.catalog import Store

SAMPLE = Path(__file__).resolve().parent.parent / "sample_traces" / "chrome" / "kineto" / "a100-rank0-memcpy.json.gz"


def expected(data: bytes) -> str:
    """The hash of `data` as store/content.py writes it (BLAKE3 where installed, the fallback elsewhere)."""
    if content._blake3 is not None:
        return "blake3:" + content._blake3.blake3(data).hexdigest()
    return hashlib.sha256(data).hexdigest()


def test_blake3_is_what_an_install_hashes_with():
    """pyproject.toml requires it; the fallback is for a platform pip could not install it on."""
    assert content._blake3 is not None
    assert content.of_paths([SAMPLE]).startswith("blake3:")


def test_hash_set_at_publish_and_used_to_skip(tmp_path):
    store = Store(tmp_path / "store")
    (first,) = ingest_paths(store, [SAMPLE], views=False)
    assert first.error is None and first.id
    row = store.get(first.id)
    assert row["status"] == "ready"
    assert row["content_hash"] == expected(SAMPLE.read_bytes())
    (again,) = ingest_paths(store, [SAMPLE], skip_existing=True, views=False)
    assert again.skipped and again.id == first.id
    assert len(store.list()) == 1


def test_a_file_and_its_bytes_in_pieces_hash_alike(tmp_path):
    data = SAMPLE.read_bytes()
    pieces = content.Hasher()
    for i in range(0, len(data), 65_537):  # as an upload arrives
        pieces.update(data[i:i + 65_537])
    assert content.of_paths([SAMPLE]) == pieces.hexdigest()
    empty = tmp_path / "empty"
    empty.write_bytes(b"")
    assert content.of_paths([empty]) == expected(b"")
    folder = tmp_path / "ranks"  # a folder: its files in name order
    folder.mkdir()
    (folder / "b").write_bytes(b"second")
    (folder / "a").write_bytes(b"first")
    assert content.of_paths([folder]) == expected(b"firstsecond")


def test_without_blake3_sha256_as_earlier_stores_hold_it(tmp_path, monkeypatch):
    monkeypatch.setattr(content, "_blake3", None)
    assert content.of_paths([SAMPLE]) == hashlib.sha256(SAMPLE.read_bytes()).hexdigest()
    store = Store(tmp_path / "store")
    (first,) = ingest_paths(store, [SAMPLE], views=False)
    assert store.get(first.id)["content_hash"] == hashlib.sha256(SAMPLE.read_bytes()).hexdigest()
    (again,) = ingest_paths(store, [SAMPLE], skip_existing=True, views=False)
    assert again.skipped and again.id == first.id


def test_failed_ingest_leaves_no_row_and_no_hash_thread(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_bytes(b'{"traceEvents": [{"ph": "X", "ts": "x"}]}')
    store = Store(tmp_path / "store")
    (res,) = ingest_paths(store, [bad], views=False)
    assert res.error and "bad.json" in res.error
    assert store.list() == []
    assert not [t for t in threading.enumerate() if t.name.startswith("ingest-hash")]
