"""bench/ingest.py says for each of issue 14's targets whether this run met it, against its own anchors."""

import sys

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


def test_the_floor_is_printed_beside_the_targets_it_bounds(capsys):
    floor = {"wall_s": 0.15, "cpu_s": 0.16, "scan_s": 0.04, "write_s": 0.11, "rss_mb": 0.0}
    print_targets([_row("a100.json", "orjson", 25.8, 0.30), _row("a100.json", "lod", 25.8, 0.28),
                   ("a100.json", "floor", 1000, int(25.8e6), floor)])
    line = next(line for line in capsys.readouterr().out.splitlines() if "a100" in line)
    assert "0.93x orjson <= 0.5: NOT met" in line
    assert "1.87x the floor (172 MB/s, 0.50x orjson)" in line  # the floor is judged by the same anchor


def test_the_floor_mode_measures_a_real_trace_in_its_own_process(tmp_path):
    from bench.ingest import A100, run_child

    r = run_child(sys.executable, "floor", A100, tmp_path / "store")
    assert isinstance(r, dict), r
    assert r["n"] > 50_000 and 0 < r["scan_s"] < r["wall_s"] and 0 < r["write_s"] < r["wall_s"]
    assert abs(r["scan_s"] + r["write_s"] - r["wall_s"]) < 1e-6


def test_the_nsight_readers_bench_runs_to_its_last_row():
    """bench/ingest_nsys.py --readers, on a small synthetic export: every row printed (it once stopped at the
    first end-to-end row, unpacking a return value that had gained a member)."""
    import subprocess
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    p = subprocess.run([sys.executable, str(root / "bench" / "ingest_nsys.py"), "--readers", "--iterations", "300",
                        "--repeat", "1"], capture_output=True, text=True, timeout=300, cwd=root)
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.count("acceltrace ingest, published") == 4  # two inputs, compiled and Python paths
    assert p.stdout.count("b-trees read directly") == 2 and p.stdout.count("through SQLite") == 2
