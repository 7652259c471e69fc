"""`acceltrace ingest / ls / rm / query` as a user runs them: a subprocess on a fresh store."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SMALL = ROOT / "sample_traces" / "chrome" / "kineto" / "v100-with-gpu-metrics-counters.json"
MI250 = ROOT / "sample_traces" / "chrome" / "kineto" / "mi250-rocm-minitoy.json.gz"


def cli(tmp_path, *args, check=True):
    env = dict(os.environ, ACCELTRACE_STORE=str(tmp_path / "store"))
    p = subprocess.run([sys.executable, "-m", "acceltrace", *map(str, args)], capture_output=True, text=True,
                       env=env, cwd=tmp_path, timeout=300)
    assert "Traceback" not in p.stderr, p.stderr
    if check:
        assert p.returncode == 0, p.stderr
    return p


def test_ingest_ls_query_rm_round_trip(tmp_path):
    p = cli(tmp_path, "ingest", SMALL, "--name", "gpu metrics", "--json")
    (line,) = p.stdout.splitlines()
    info = json.loads(line)
    assert info["name"] == "gpu metrics" and info["format"] == "chrome"
    assert {k: info[k] for k in ("tracks", "slices", "flows", "counters")} == {
        "tracks": 8, "slices": 256, "flows": 73, "counters": 78}
    assert p.stderr == ""  # no progress bar when not on a terminal

    listed = [json.loads(x) for x in cli(tmp_path, "ls", "--json").stdout.splitlines()]
    assert [(r["id"], r["status"]) for r in listed] == [(info["id"], "ready")]

    q = cli(tmp_path, "query", info["id"], "SELECT lane, count(*) AS n FROM tracks GROUP BY lane ORDER BY lane",
            "--format", "json")
    # the profiler's own span ("PyTorch Profiler (0)") is an annotation, not a CPU thread's work
    assert json.loads(q.stdout) == [{"lane": "annotation", "n": 1}, {"lane": "counter", "n": 2}, {"lane": "cpu", "n": 3},
                                    {"lane": "eu", "n": 1}, {"lane": "pcie", "n": 1}]
    csv = cli(tmp_path, "query", info["id"], "SELECT count(*) AS n FROM counters").stdout
    assert csv == "n\n78\n"

    refused = cli(tmp_path, "query", info["id"], "DELETE FROM slices", check=False)
    assert refused.returncode != 0 and "Traceback" not in refused.stderr

    cli(tmp_path, "rm", info["id"])
    assert cli(tmp_path, "ls", "--json").stdout == ""


def test_merge_makes_one_trace_grouped_per_input(tmp_path):
    p = cli(tmp_path, "ingest", "--merge", "--json", SMALL, MI250)
    (line,) = p.stdout.splitlines()
    info = json.loads(line)
    groups = cli(tmp_path, "query", info["id"], "SELECT DISTINCT group_name FROM tracks ORDER BY 1",
                 "--format", "json").stdout
    assert [g["group_name"] for g in json.loads(groups)] == ["mi250-rocm-minitoy", "v100-with-gpu-metrics-counters"]


def test_bad_input_exits_non_zero_with_the_reason(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"traceEvents": [{"ph": "X", "ts": NaN}]}')
    p = cli(tmp_path, "ingest", bad, check=False)
    assert p.returncode == 1
    assert "bad.json: byte" in p.stderr and "NaN or Infinity" in p.stderr
    assert cli(tmp_path, "ls").stdout == ""
