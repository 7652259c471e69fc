"""Every real Kineto / Chrome trace in sample_traces/chrome/kineto ingests to its checked-in summary.

Regenerate the snapshots after an intended change with
    ACCELTRACE_UPDATE_SNAPSHOTS=1 .venv/bin/python -m pytest -q tests/test_chrome_samples.py
and review the diff.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from _helpers import check_snapshot

from acceltrace.ingest import builder as builder_mod, pipeline
from acceltrace.store.catalog import Store
from canonical import canonical_summary

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = sorted((ROOT / "sample_traces" / "chrome" / "kineto").glob("*.json*")) + sorted(
    (ROOT / "sample_traces" / "chrome" / "kineto").glob("*.tar.gz"))
SNAPSHOTS = ROOT / "tests" / "snapshots" / "chrome" / "kineto"


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    # ingest only: the analysis passes and level-of-detail tables have their own tests
    mp = pytest.MonkeyPatch()
    mp.setattr(builder_mod, "build_lod", lambda con, **kw: None)
    yield Store(tmp_path_factory.mktemp("chrome-samples"))
    mp.undo()


@pytest.fixture(scope="module")
def ingested(store):
    out = {}
    for path in SAMPLES:
        res = pipeline.ingest_paths(store, [path])[0]
        out[path.name] = res
    return out


@pytest.mark.parametrize("name", [p.name for p in SAMPLES])
def test_sample_matches_its_snapshot(store, ingested, name):
    res = ingested[name]
    assert res.error is None, res.error
    text = canonical_summary(store.connect(res.id))
    check_snapshot(SNAPSHOTS / f"{name}.summary.txt", text)


@pytest.mark.parametrize("name", ["sampled-rank0-small.json.gz", "v100-with-gpu-metrics-counters.json",
                                  "mi250-rocm-minitoy.json.gz"])
def test_unknown_file_name_gives_the_same_summary(store, ingested, tmp_path, name):
    src = next(p for p in SAMPLES if p.name == name)
    renamed = tmp_path / ("capture.gz" if name.endswith(".gz") else "capture")
    shutil.copy(src, renamed)
    res = pipeline.ingest_paths(store, [renamed])[0]
    assert res.error is None, res.error
    assert canonical_summary(store.connect(res.id)) == canonical_summary(store.connect(ingested[name].id))


@pytest.mark.parametrize("name,arrow_bytes", [("a100-rank0-memcpy.json.gz", 1 << 20),
                                              ("nccl-collectives.json.gz", 240 << 10)])
def test_link_rows_moved_into_duckdb_part_way_give_the_same_trace(store, ingested, monkeypatch, name, arrow_bytes):
    """Past STAGE_ARROW_BYTES the staged link rows move from Arrow into DuckDB tables (memory stays
    bounded): at a fifth to a third of what these traces stage, they move a few times and the rows staged after
    the last move join them at the end."""
    from acceltrace.ingest.chrome import state as chrome_state

    moved, left = [], {}
    to_duck, register = chrome_state.ChromeState._to_duck, chrome_state.ChromeState.register_staged

    def registering(self):
        left.update({t: len(b) for t, b in self._staged_rows.items() if t in self._in_duck})
        register(self)

    monkeypatch.setattr(chrome_state.ChromeState, "_to_duck", lambda self, t: moved.append(t) or to_duck(self, t))
    monkeypatch.setattr(chrome_state.ChromeState, "register_staged", registering)
    monkeypatch.setattr(chrome_state, "STAGE_ARROW_BYTES", arrow_bytes)
    res = pipeline.ingest_paths(store, [next(p for p in SAMPLES if p.name == name)], name=f"moved {name}")[0]
    assert res.error is None, res.error
    assert moved.count("flow_raw") >= 3 and "ext" in moved and left.get("flow_raw", 0) > 0
    assert canonical_summary(store.connect(res.id)) == canonical_summary(store.connect(ingested[name].id))


def _con(store, ingested, name):
    return store.connect(ingested[name].id)


def test_a100_pageable_host_to_device_copies_are_typed(store, ingested):
    con = _con(store, ingested, "a100-rank0-memcpy.json.gz")
    n, lanes, no_bytes = con.execute(
        "SELECT count(*), list(DISTINCT t.lane), count(*) FILTER (WHERE s.bytes IS NULL) FROM slices s"
        " JOIN tracks t USING (track_id) WHERE s.direction = 'h2d' AND s.host_mem = 'pageable'").fetchone()
    assert (n, lanes, no_bytes) == (45, ["pcie"], 0)
    assert con.execute("SELECT count(*) FROM slices WHERE name LIKE 'Memcpy HtoD (Pageable%'").fetchone()[0] == 45


def test_every_device_op_with_a_matching_runtime_call_is_linked(store, ingested):
    con = _con(store, ingested, "a100-rank0-memcpy.json.gz")
    unlinked = con.execute("""
        SELECT count(*) FROM slices d JOIN tracks td USING (track_id)
        WHERE td.lane IN ('eu', 'pcie') AND d.corr_id IN (
            SELECT s.corr_id FROM slices s JOIN tracks t USING (track_id) WHERE t.lane = 'cpu' AND s.corr_id IS NOT NULL)
          AND NOT EXISTS (SELECT 1 FROM flows f WHERE f.dst_slice = d.slice_id AND f.src_slice IS NOT NULL
                          AND f.kind = 'launch')""").fetchone()[0]
    assert unlinked == 0
    (linked,) = con.execute("SELECT count(*) FROM flows WHERE kind = 'launch' AND src_slice IS NOT NULL").fetchone()
    assert linked > 6800


def test_multi_rank_archive_groups_tracks_by_rank_on_one_clock(store, ingested):
    con = _con(store, ingested, "v100-dlrm-8ranks.tar.gz")
    groups = [r[0] for r in con.execute("SELECT DISTINCT group_name FROM tracks ORDER BY 1").fetchall()]
    assert groups == [f"rank {i}" for i in range(8)]
    # stacked rank 0 first (the sort keys the page orders groups by), not in the archive's order (2, 4, 7, 0, ...)
    by_key = con.execute("SELECT group_name FROM tracks GROUP BY 1 ORDER BY min(sort_key)").fetchall()
    assert [r[0] for r in by_key] == groups
    spans = con.execute("SELECT t.group_name, min(s.ts), max(s.ts + s.dur) FROM slices s JOIN tracks t"
                        " USING (track_id) GROUP BY 1").fetchall()
    latest_start = max(s for _, s, _ in spans)
    earliest_end = min(e for _, _, e in spans)
    assert latest_start < earliest_end  # the ranks' windows overlap: one clock, not eight
    # correlation ids repeat across ranks; links never cross ranks
    (crossing,) = con.execute("""
        SELECT count(*) FROM flows f JOIN slices a ON a.slice_id = f.src_slice JOIN tracks ta ON ta.track_id = a.track_id
        JOIN slices b ON b.slice_id = f.dst_slice JOIN tracks tb ON tb.track_id = b.track_id
        WHERE ta.group_name <> tb.group_name""").fetchone()
    assert crossing == 0


def test_old_schema_stream_threads_are_execution_units(store, ingested):
    con = _con(store, ingested, "v100-resnet50-2021-old-schema.json.gz")
    got = con.execute("SELECT DISTINCT t.lane, t.name FROM slices s JOIN tracks t USING (track_id)"
                      " WHERE s.category = 'Kernel'").fetchall()
    assert got == [("eu", "stream 7")]
    (ext,) = con.execute("SELECT count(*) FROM flows WHERE raw_kind = 'external_id'").fetchone()
    assert ext > 10000  # Runtime rows say "external id", Operator rows "External id"


def test_mtia_dma_requests_are_pcie_transfers_with_bytes(store, ingested):
    con = _con(store, ingested, "mtia-rank0-dma.json.gz")
    got = con.execute("SELECT t.name, s.direction, count(*), min(s.bytes) > 0 FROM slices s JOIN tracks t"
                      " USING (track_id) WHERE s.name = 'dma_request' GROUP BY ALL ORDER BY 1").fetchall()
    assert got == [("PCIe DtoH", "d2h", 7360, True), ("PCIe HtoD", "h2d", 15001, True)]
    (execs,) = con.execute("SELECT count(*) FROM flows WHERE kind = 'exec'").fetchone()
    assert execs == 3453


def test_kineto_relative_times_are_put_back_on_the_epoch(store, ingested):
    con = _con(store, ingested, "b200-eager-rank0.json.gz")
    (start,) = con.execute("SELECT value FROM trace_meta WHERE key = 'start_ns'").fetchone()
    # baseTimeNanoseconds (2025-12-31) + 1365627949 us of relative time
    assert 1_767_189_312_000_000_000 < int(start) < 1_767_189_312_000_000_000 + 20 * 86400 * 10**9
