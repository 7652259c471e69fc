"""Committed .actr files (sample_traces/actr/) ingest to the snapshotted summary; damaged ones to their snapshotted messages.

Refresh snapshots after an intended change with ACCELTRACE_UPDATE_SNAPSHOTS=1.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from _helpers import check_snapshot

from acceltrace.ingest.pipeline import ingest_paths
from acceltrace.store.catalog import Store
from canonical import canonical_summary

ROOT = Path(__file__).resolve().parents[1] / "sample_traces" / "actr"
SNAP = Path(__file__).parent / "snapshots" / "actr"
VALID = sorted(p for p in ROOT.glob("*/*.actr") if p.parent.name != "invalid")
INVALID = sorted(p for p in ROOT.glob("invalid/*.actr"))


@pytest.mark.parametrize("sample", VALID, ids=lambda p: p.name)
def test_sample_ingests_to_its_snapshot(sample, tmp_path):
    store = Store(tmp_path / "store")
    (r,) = ingest_paths(store, [sample])
    assert r.error is None, r.error
    con = store.connect(r.id)
    text = canonical_summary(con) + "".join(f"warning: {w}\n" for w in r.warnings)
    check_snapshot(SNAP / sample.relative_to(ROOT).with_suffix(".summary.txt"), text)


@pytest.mark.parametrize("sample", INVALID, ids=lambda p: p.name)
def test_damaged_sample_gives_its_snapshotted_messages(sample, tmp_path):
    store = Store(tmp_path / "store")
    (r,) = ingest_paths(store, [sample])
    text = f"error: {r.error}\n" if r.error else "".join(f"warning: {w}\n" for w in r.warnings)
    assert text.strip(), "a damaged file must say what is wrong"
    check_snapshot(SNAP / sample.relative_to(ROOT).with_suffix(".messages.txt"), text)


def test_there_are_valid_and_damaged_samples():
    assert len(VALID) >= 2 and len(INVALID) >= 3
