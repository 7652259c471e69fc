"""The Nsight importer's correlation links (ingest/nsys/links.py): held in memory, or past the spill threshold
in an Arrow file of the work directory, the flows query reads the same `_links`; the file goes afterwards."""

from __future__ import annotations

import duckdb
import pyarrow as pa
import pytest

from acceltrace.ingest.nsys.links import Links


def _batch(roles, corrs, gpid=7):
    return pa.table({"role": pa.array(roles, pa.string()), "corr_id": pa.array(corrs, pa.int64()),
                     "gpid": pa.array([gpid] * len(roles), pa.int64())})


def _read(links: Links) -> list[tuple]:
    stage = duckdb.connect()
    with links.viewed(stage):
        rows = stage.execute("SELECT slice_id, corr, gpid, role FROM _links ORDER BY slice_id").fetchall()
        ((ops,),) = stage.execute("SELECT count(*) FROM _links WHERE role IN ('exec', 'dma')").fetchall()
    with pytest.raises(duckdb.Error):  # let go with the body
        stage.execute("SELECT * FROM _links")
    return rows + [("ops", ops)]


@pytest.mark.parametrize("on_file", [False, True])
def test_the_links_read_back_as_they_were_given(tmp_path, on_file):
    path = tmp_path / "links.arrows"
    links = Links(path if on_file else None)
    links.add(0, _batch(["api", None, "drv", "api"], [11, 12, 11, 0]))  # no role, or corr 0: no link
    links.add(4, _batch([None, None], [1, 2]))  # a batch without links (NVTX ranges)
    links.add(6, _batch(["exec", "dma", "exec"], [11, None, 13], gpid=9))  # a null corr: none
    assert path.exists() == on_file
    assert _read(links) == [(0, 11, 7, "api"), (2, 11, 7, "drv"), (6, 11, 9, "exec"), (8, 13, 9, "exec"), ("ops", 2)]
    assert not path.exists()


def test_no_links_read_as_an_empty_table(tmp_path):
    assert _read(Links(tmp_path / "links.arrows")) == [("ops", 0)]


def test_a_role_the_flows_query_does_not_know_is_refused(tmp_path):
    with pytest.raises(ValueError, match="a correlation role outside"):
        Links(tmp_path / "links.arrows").add(0, _batch(["api", "launch"], [1, 2]))
