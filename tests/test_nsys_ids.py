"""An Nsight export's slices and flows get the same ids in every ingest: the slices of each table numbered in
the export's own row order, the flows in (src, dst, kind) order. Before, a DuckDB join handed the mapping
queries' rows on in whatever order its threads finished them, so a re-ingest renumbered the slices, and a
shared URL or a finding that named one named another (docs/performance.md, thirty-seventh stop)."""

import sqlite3

import nsys_synth
from _helpers import ingest_ok

OFF = nsys_synth.SESSION_START_UTC_NS
# a few hundred thousand rows: enough row groups that DuckDB's two threads each take some
ITERATIONS = 20_000


def _export_order(path, sql):
    db = sqlite3.connect(path)
    try:
        return [r[0] for r in db.execute(sql)]
    finally:
        db.close()


def _by_id(con, categories):
    marks = ", ".join("?" * len(categories))
    return [r[0] for r in con.execute(f"SELECT ts - ? FROM slices WHERE category IN ({marks}) ORDER BY slice_id",
                                      [OFF, *categories]).fetchall()]


def test_slices_are_numbered_in_the_exports_row_order_and_alike_in_every_ingest(tmp_path):
    path = tmp_path / "ids.sqlite"
    nsys_synth.write(path, iterations=ITERATIONS, metric_samples=0)
    store, res = ingest_ok(tmp_path / "a", path)
    con = store.connect(res.id)
    for categories, sql in [
        (("cuda_runtime", "cuda_driver"), "SELECT start FROM CUPTI_ACTIVITY_KIND_RUNTIME WHERE eventClass <> 67"
                                          " ORDER BY rowid"),
        (("kernel",), "SELECT start FROM CUPTI_ACTIVITY_KIND_KERNEL ORDER BY rowid"),
        (("gpu_memcpy",), "SELECT start FROM CUPTI_ACTIVITY_KIND_MEMCPY ORDER BY rowid"),
        (("gpu_memset",), "SELECT start FROM CUPTI_ACTIVITY_KIND_MEMSET ORDER BY rowid"),
        (("user_annotation",), "SELECT start FROM NVTX_EVENTS ORDER BY rowid"),
    ]:
        want = _export_order(path, sql)
        assert len(want) >= ITERATIONS
        assert _by_id(con, categories) == want, categories
    flows = con.execute("SELECT src_slice, dst_slice, kind FROM flows ORDER BY flow_id").fetchall()
    assert len(flows) >= 4 * ITERATIONS and flows == sorted(flows)

    def everything(c):
        return (c.execute("SELECT slice_id, track_id, ts, dur, depth, name, category, args FROM slices"
                          " ORDER BY slice_id").fetchall(),
                c.execute("SELECT flow_id, src_slice, dst_slice, kind FROM flows ORDER BY flow_id").fetchall())

    first = everything(con)
    store2, res2 = ingest_ok(tmp_path / "b", path)
    assert everything(store2.connect(res2.id)) == first
