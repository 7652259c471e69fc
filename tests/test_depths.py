"""The builder's greedy depth pass: the compiled one (ingest/_depths.c) gives the Python loop's depths."""

from __future__ import annotations

import numpy as np
import pytest

from acceltrace.ingest import depths


@pytest.mark.skipif(depths._depths is None, reason="ingest/_depths.c is not built (no compiler)")
@pytest.mark.parametrize("seed", range(6))
def test_compiled_first_free_equals_python(seed):
    rng = np.random.default_rng(seed)
    n = [0, 1, 7, 300, 2000, 5000][seed]
    ts = rng.integers(-50, 10_000, n)
    dur = np.where(rng.random(n) < 0.2, 0, rng.integers(0, 400, n))  # instants among them
    order = np.lexsort((np.arange(n), -dur, ts))
    ts, dur = ts[order].astype(np.int64), dur[order].astype(np.int64)
    fast, slow = depths._first_free(ts, dur, compiled=True), depths._first_free(ts, dur, compiled=False)
    assert fast.dtype == slow.dtype == np.int32
    assert fast.tolist() == slow.tolist()
