"""A trace whose every group holds at most RAW_TRACE_ROWS short slices gets no pyramid (tiles/build.py): its tiles
aggregate their window's raw rows at every level, and are the tiles its pyramid gives, byte for byte."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

from acceltrace.ingest.pipeline import ingest_one
from acceltrace.store.catalog import Store
from acceltrace.tiles import build as lod
from acceltrace.tiles.query import DEPTH_PAGE, LodInfo, build_page

SAMPLES = Path(__file__).resolve().parent.parent / "sample_traces" / "chrome" / "kineto"


def _built(tmp_path: Path, sample: str, raw_trace_rows: int, monkeypatch) -> duckdb.DuckDBPyConnection:
    monkeypatch.setattr(lod, "RAW_TRACE_ROWS", raw_trace_rows)
    store = Store(tmp_path / f"store{raw_trace_rows}")
    res = ingest_one(store, [SAMPLES / sample], sample, views=False)
    assert res.error is None, res.error
    return duckdb.connect(str(store.trace_path(res.id)), read_only=True)


@pytest.mark.parametrize("sample", ["mtia-rank0-dma.json.gz", "xdit-sd35-diffusion.json.gz"])
def test_a_small_trace_has_no_pyramid_and_the_same_tiles(tmp_path, monkeypatch, sample):
    # MTIA: DMA bytes, a group of 109 k slices; diffusion: 54 depths (pages and their folds), 192 k in one group
    limit = lod.RAW_TRACE_ROWS
    plain = _built(tmp_path, sample, limit, monkeypatch)
    pyr = _built(tmp_path, sample, 0, monkeypatch)
    try:
        info, pinfo = LodInfo.load(plain), LodInfo.load(pyr)
        (densest,) = plain.execute("SELECT max(n) FROM (SELECT count(*) AS n FROM lod_slices GROUP BY grp)").fetchone()
        assert lod.RAW_WINDOW_ROWS < densest <= limit  # past RAW_WINDOW_ROWS: the other build has a pyramid
        assert info.base_level == info.max_level + 1 and pinfo.base_level <= info.max_level
        assert plain.execute("SELECT count(*) FROM lod_merged").fetchone() == (0,)
        assert pyr.execute("SELECT count(*) FROM lod_merged").fetchone()[0] > 0
        names = [r[0] for r in plain.execute("SELECT name FROM lod_names ORDER BY name_id").fetchall()]
        groups = plain.execute("SELECT grp FROM lod_group_counts WHERE slices > 0 ORDER BY slices DESC").fetchall()
        compared = 0
        for (grp,) in groups[:3]:
            (deepest, busiest) = plain.execute(
                f"SELECT max(depth), mode(ts >> {info.max_level}) FROM lod_slices WHERE grp = {grp}").fetchone()
            for level in range(info.max_level, pinfo.base_level - 2, -1):
                # the first tile, the middle one and the one over the busiest stretch of the trace
                n_tiles = max(1, -(-info.duration_ns // (1024 << level)))
                for index in sorted({0, n_tiles // 2, (busiest << info.max_level) >> (level + 10)}):
                    for page in range(deepest // DEPTH_PAGE + 1):
                        a = build_page(plain.cursor(), info, level, index, grp, page, names=names, max_depth=deepest)
                        b = build_page(pyr.cursor(), pinfo, level, index, grp, page, names=names, max_depth=deepest)
                        assert a == b, f"group {grp} level {level} tile {index} page {page}"
                        compared += 1
        assert compared > 30
    finally:
        plain.close()
        pyr.close()
