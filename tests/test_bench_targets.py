"""bench/ingest.py says for each of issue 14's targets whether this run met it, against its own anchors."""

from bench.ingest import print_targets


def _row(label, mode, mb, wall_s, rss_mb=500.0):
    return (label, mode, 1000, int(mb * 1e6), {"wall_s": wall_s, "cpu_s": wall_s, "rss_mb": rss_mb})


def test_each_target_is_judged_against_the_same_runs_anchor(capsys):
    rows = [
        _row("generated 3600k events", "orjson", 827.4, 15.0),
        _row("generated 3600k events", "lod", 827.4, 4.4, rss_mb=1300),  # 188 MB/s, 0.29x
        _row("mtia.json.gz", "orjson", 86.9, 1.5),
        _row("mtia.json.gz", "lod", 86.9, 0.7),  # 124 MB/s, 0.47x
        _row("small.json.gz", "lod", 9.0, 0.1),
        ("broken.json", "lod", 1000, 30_000_000, "failed: bad bytes"),
    ]
    print_targets(rows)
    out = capsys.readouterr().out
    gen = next(line for line in out.splitlines() if line.strip().startswith("generated"))
    assert "188.0 MB/s >= 180: met" in gen and "0.29x orjson <= 0.5: met" in gen and "1,300 MB <= 1,500: met" in gen
    assert "set at 830 MB" not in gen
    mtia = next(line for line in out.splitlines() if "mtia" in line)
    assert "124.1 MB/s >= 150: NOT met" in mtia and "0.47x orjson <= 0.5: met" in mtia
    assert "peak 500 MB <= 1,500: met" in mtia  # memory is bounded on every input, not only at 830 MB
    assert "small.json.gz (9 MB): under 20 MB, no target" in out
    assert "broken" not in out


def test_a_generated_trace_of_another_size_says_where_its_targets_are_set(capsys):
    print_targets([_row("generated 200k events", "lod", 46.0, 0.5, rss_mb=1600)])
    out = capsys.readouterr().out
    assert "92.0 MB/s >= 180: NOT met" in out and "peak 1,600 MB <= 1,500: NOT met" in out
    assert "set at 830 MB" in out and "orjson" not in out
