"""Times out of range are dropped and counted by the builder, whatever the format; never an
internal error (issue 22 item 6)."""

from __future__ import annotations

import json

from acceltrace.ingest.pipeline import ingest_paths
from acceltrace.store.catalog import Store


def _ingest(tmp_path, events, name="t.json"):
    path = tmp_path / name
    path.write_text(json.dumps(events))
    (res,) = ingest_paths(Store(tmp_path / "store"), [path])
    return res


def _x(ts, dur=1, name="a"):
    return {"ph": "X", "ts": ts, "dur": dur, "name": name, "pid": 1, "tid": 1}


def test_a_timestamp_near_int64_max_is_dropped_and_counted_not_an_internal_error(tmp_path):
    res = _ingest(tmp_path, [_x(9223372036854775), _x(5, name="b")])
    assert res.error is None, res.error
    assert res.counts["slices"] == 1 and res.counts["dropped_events"] == 1
    assert any("2^62 ns" in w for w in res.warnings), res.warnings


def test_only_out_of_range_times_is_a_clear_error(tmp_path):
    res = _ingest(tmp_path, [_x(9223372036854775), _x(-9223372036854775)])
    assert res.error and "internal error" not in res.error, res.error
    assert "t.json" in res.error


def test_a_decades_long_slice_is_kept_with_a_warning(tmp_path):
    # -1e18 ns start, a 31-year duration: representable, but nearly certainly corrupt
    res = _ingest(tmp_path, [_x(-1e12, 31 * 365 * 86400e6), _x(5, name="b")])
    assert res.error is None, res.error
    assert any("days" in w and "corrupt" in w for w in res.warnings), res.warnings


def test_args_that_are_not_an_object_are_not_an_internal_error(tmp_path):
    for i, args in enumerate((1, "s", 1.5, True, None, [1, 2])):
        (tmp_path / str(i)).mkdir()
        res = _ingest(tmp_path / str(i), [dict(_x(1), args=args), _x(2, name="b")])
        assert res.error is None, (args, res.error)
        assert res.counts["slices"] == 2, (args, res.counts)
