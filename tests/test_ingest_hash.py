"""The input's hash is computed beside the ingest, and set when the trace is published."""

import hashlib
import threading
from pathlib import Path

from acceltrace.ingest.pipeline import ingest_paths
from acceltrace.store.catalog import Store

SAMPLE = Path(__file__).resolve().parent.parent / "sample_traces" / "chrome" / "kineto" / "a100-rank0-memcpy.json.gz"


def test_hash_set_at_publish_and_used_to_skip(tmp_path):
    store = Store(tmp_path / "store")
    (first,) = ingest_paths(store, [SAMPLE], views=False)
    assert first.error is None and first.id
    row = store.get(first.id)
    assert row["status"] == "ready"
    assert row["content_hash"] == hashlib.sha256(SAMPLE.read_bytes()).hexdigest()
    (again,) = ingest_paths(store, [SAMPLE], skip_existing=True, views=False)
    assert again.skipped and again.id == first.id
    assert len(store.list()) == 1


def test_failed_ingest_leaves_no_row_and_no_hash_thread(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_bytes(b'{"traceEvents": [{"ph": "X", "ts": "x"}]}')
    store = Store(tmp_path / "store")
    (res,) = ingest_paths(store, [bad], views=False)
    assert res.error and "bad.json" in res.error
    assert store.list() == []
    assert not [t for t in threading.enumerate() if t.name.startswith("ingest-hash")]
