"""The what-if graph's build holds little beyond the graph it returns: each query result's columns go once
copied, and DuckDB's tables go to its spill files once its queries are done (docs/analysis.md "What if")."""

from __future__ import annotations

import sys
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

from acceltrace.analysis import graph as G
from acceltrace.analysis import params as P
from acceltrace.analysis import replay as R
from acceltrace.analysis import runner
from acceltrace.ingest.pipeline import ingest_paths
from acceltrace.store.catalog import Store

sys.path.insert(0, str(Path(__file__).resolve().parent))
import nsys_synth  # noqa: E402


def _graph_bytes(g: R.Graph) -> int:
    arrays = [v for v in vars(g).values() if isinstance(v, np.ndarray)]
    return sum(a.nbytes for a in arrays) + (g.index.lut.nbytes if g.index.lut is not None else 0)


@pytest.fixture(scope="module")
def analysed(tmp_path_factory):
    d = tmp_path_factory.mktemp("graph")
    path = d / "synth.sqlite"
    nsys_synth.write(path, iterations=5000)
    store = Store(d / "s")
    (res,) = ingest_paths(store, [path], views=False)
    assert res.error is None, res.error
    return store, res.id


def test_the_build_holds_at_most_three_quarters_of_the_graph_beside_it(analysed, monkeypatch):
    store, trace_id = analysed
    monkeypatch.delenv("ACCELTRACE_DUCKDB_MEMORY", raising=False)
    con = store.connect(trace_id, sides=())
    runner._exec_file(con, runner.SQL_DIR / "_common.sql", P.resolve(None))
    tracemalloc.start()
    try:
        g = R.build(con)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    size = _graph_bytes(g)
    assert len(g.ts) > 40_000
    # the query results held to the build's end and copied beside their columns made it 2.07x at 45 k
    # nodes (2.2 GB at 3.6 M nodes, 1.6 GB of the process); each taken out where it is used, 1.68x
    assert peak <= 1.8 * size, f"peak {peak >> 20} MB traced beside a graph of {size >> 20} MB"
    ((limit,),) = con.execute("SELECT current_setting('memory_limit')").fetchall()
    assert limit == "61.0 MiB", limit  # G.ARRAYS_DUCKDB_MEMORY: 64 MB
    con.close()


def test_the_operators_duckdb_memory_is_kept(analysed, monkeypatch):
    store, trace_id = analysed
    monkeypatch.setenv("ACCELTRACE_DUCKDB_MEMORY", "700MB")
    con = store.connect(trace_id, sides=())
    runner._exec_file(con, runner.SQL_DIR / "_common.sql", P.resolve(None))
    R.build(con)
    ((limit,),) = con.execute("SELECT current_setting('memory_limit')").fetchall()
    assert limit == "667.5 MiB", limit
    con.close()
