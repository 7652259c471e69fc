"""Native .atrace files from the real tools (daemon, Python and C clients) and damaged ones, snapshotted.

Refresh snapshots after an intended change with ACCELTRACE_UPDATE_SNAPSHOTS=1.
"""

import re
from pathlib import Path

import pytest
from _helpers import check_snapshot

from acceltrace.ingest.pipeline import ingest_paths
from acceltrace.store.catalog import Store
from canonical import canonical_summary

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "sample_traces" / "atrace"
SNAP = Path(__file__).parent / "snapshots" / "atrace"


def _check(name: str, text: str) -> None:
    check_snapshot(SNAP / name, text)


def test_daemon_capture_summary_matches_snapshot(tmp_path):
    f = SAMPLES / "acceltrace-0.1" / "daemon-python-c.atrace"
    store = Store(tmp_path / "s")
    (res,) = ingest_paths(store, [f])
    assert res.error is None, res.error
    con = store.connect(res.id)
    _check("acceltrace-0.1/daemon-python-c.summary.txt", canonical_summary(con))
    # the Python producer's correlation chain: cpu -> driver (submit) -> pcie (dma) / eu (exec)
    kinds = dict(con.execute("SELECT kind, count(*) FROM flows GROUP BY kind").fetchall())
    assert kinds == {"submit": 20, "dma": 10, "exec": 10}


@pytest.mark.parametrize("name", sorted(p.name for p in (SAMPLES / "invalid").iterdir()))
def test_damaged_files_give_their_snapshotted_error_or_warnings(tmp_path, name):
    store = Store(tmp_path / "s")
    (res,) = ingest_paths(store, [SAMPLES / "invalid" / name])
    if res.error:
        # the list of known formats grows as format modules are added; it is not this file's business
        text = "error: " + re.sub(r"expected one of: .*", "expected one of: <registered formats>", res.error) + "\n"
    else:
        text = "warnings:\n" + "".join(f"  {w}\n" for w in res.warnings)
    _check(f"invalid/{name}.txt", text)
