"""A Chrome trace's flows get the same ids in every ingest: each way of linking (correlation ids, External ids, flow
events) hands its flows to the builder sorted, so their ids do not follow the order a DuckDB join's or window's
threads finished in (two ingests of the 830 MB generated trace gave 1.5 M of its 1.6 M flows other ids;
docs/performance.md, thirty-seventh stop). The Nsight importer's own flows: tests/test_nsys_ids.py."""

import importlib.util
from pathlib import Path

from _helpers import ingest_ok

ROOT = Path(__file__).resolve().parent.parent


def _gen_chrome():
    # loaded by path: putting bench/ on sys.path would let bench/ingest.py shadow the package
    spec = importlib.util.spec_from_file_location("gen_chrome", ROOT / "bench" / "gen_chrome.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_flows_are_numbered_in_one_order_in_every_ingest(tmp_path):
    path = tmp_path / "kineto.json"
    _gen_chrome().write(path, 200_000)
    runs = []
    for name in ("a", "b"):
        store, res = ingest_ok(tmp_path / name, path)
        runs.append(store.connect(res.id).execute(
            "SELECT flow_id, src_slice, dst_slice, kind, raw_kind FROM flows ORDER BY flow_id").fetchall())
    flows = runs[0]
    by_link = {}
    for _, src, dst, kind, raw in flows:
        by_link.setdefault(raw, []).append((src if src is not None else 1 << 62, dst, kind))
    assert {"correlation", "external_id"} <= set(by_link)
    for raw, rows in by_link.items():
        assert len(rows) > 10_000 and rows == sorted(rows), raw
    assert runs[1] == flows
