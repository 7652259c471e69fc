"""Shared by the Nsight and export tests: ingest into a temporary store without the derived steps."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import pytest

from acceltrace.ingest import builder as builder_mod
from acceltrace.ingest.pipeline import ingest_paths
from acceltrace.store.catalog import Store


@contextlib.contextmanager
def ingest_only():
    """No level-of-detail tables (they have their own tests; ingest_paths runs no analysis unless
    asked): these tests read only the store's own tables, and stay fast."""
    mp = pytest.MonkeyPatch()
    mp.setattr(builder_mod, "build_lod", lambda con, **kw: None)
    try:
        yield
    finally:
        mp.undo()


def ingest(tmp_dir: Path, *paths) -> tuple[Store, list]:
    """A fresh store in tmp_dir/store and the results of ingesting each path into it."""
    store = Store(Path(tmp_dir) / "store")
    return store, ingest_paths(store, list(paths))


def ingest_one(tmp_dir: Path, path) -> tuple[Store, object]:
    """ingest() of one path: (store, its result), which may carry an error."""
    store, (res,) = ingest(tmp_dir, path)
    return store, res


def ingest_ok(tmp_dir: Path, path) -> tuple[Store, object]:
    """ingest_one() that must succeed."""
    store, res = ingest_one(tmp_dir, path)
    assert res.error is None, res.error
    return store, res


UPDATE_SNAPSHOTS = os.environ.get("ACCELTRACE_UPDATE_SNAPSHOTS") == "1"


def check_snapshot(path: Path, text: str) -> None:
    """text equals the checked-in file at path.

    ACCELTRACE_UPDATE_SNAPSHOTS=1 (re)writes it. A missing snapshot is written and the test
    fails, so a snapshot that was never committed can never pass silently.
    """
    if UPDATE_SNAPSHOTS or not path.exists():
        missing = not path.exists()
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        if missing and not UPDATE_SNAPSHOTS:
            pytest.fail(f"wrote missing snapshot {path.name}; review and commit it")
    assert text == path.read_text(), f"{path.name} differs (ACCELTRACE_UPDATE_SNAPSHOTS=1 to accept)"


def numbered_slices(builder, n: int, dur: int = 5) -> None:
    """n slices on one thread track of `builder`, 10 ns apart (names s0..s6 in turn, args {"i": i}), and a
    dependency flow from each even slice to the next: a build's tables without an importer."""
    cpu = builder.track("cpu", "thread 1", group_name="proc")
    builder.add_slices({"track_id": [cpu] * n, "ts": list(range(0, 10 * n, 10)), "dur": [dur] * n,
                        "name": [f"s{i % 7}" for i in range(n)], "args": [f'{{"i": {i}}}' for i in range(n)]})
    builder.add_flows(list(range(0, n - 1, 2)), list(range(1, n, 2)), ["dependency"] * (n // 2))
