"""`acceltrace record -- CMD`: the command runs with the counter sampler beside it (host source),
the PyTorch profiler through the environment where torch is installed (CPU build), clocks
aligned, into one run directory that ingests as one trace."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import duckdb
import pytest

from acceltrace.formats.atrace.reader import AtraceReader

TIMEOUT = 120


def _record(tmp_path, *cmd, out="run", extra=(), env=None):
    return subprocess.run([sys.executable, "-m", "acceltrace", "record", "--out", str(tmp_path / out),
                           *extra, "--", *cmd], capture_output=True, text=True, timeout=TIMEOUT,
                          env={**os.environ, **(env or {})})


def _ingest(tmp_path, run):
    store = tmp_path / "store"
    r = subprocess.run([sys.executable, "-m", "acceltrace", "--store", str(store), "ingest", str(run), "--json"],
                       capture_output=True, text=True, timeout=TIMEOUT)
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout.strip().splitlines()[-1])
    return duckdb.connect(str(store / "traces" / f"{info['id']}.duckdb"), read_only=True)


def test_a_plain_command_with_host_counters_ingests_as_one_trace(tmp_path):
    r = _record(tmp_path, sys.executable, "-c", "import time, sys; time.sleep(0.6); sys.exit(3)",
                extra=("--counters", "host", "--rate", "50"))
    assert r.returncode == 3, r.stderr  # the command's exit status
    run = tmp_path / "run"
    assert sorted(p.name for p in run.iterdir()) == ["run.actr", "run.atrace"]
    md = AtraceReader.open(run / "run.atrace").merged_metadata()["record"]
    assert md["exit_status"] == 3 and md["counters"] == "host" and md["clock"]["sync_markers"] == 0
    con = _ingest(tmp_path, run)
    (ts, dur), = con.execute("SELECT s.ts, s.dur FROM slices s JOIN tracks t USING (track_id) "
                             "WHERE t.name = 'recorded command'").fetchall()
    assert dur >= 0.6e9
    lo, hi, n = con.execute("SELECT min(c.ts), max(c.ts), count(*) FROM counters c JOIN tracks t USING (track_id) "
                            "WHERE t.name = 'cpu.busy'").fetchone()
    assert n >= 20 and ts - 50e6 <= lo and hi <= ts + dur + 100e6  # sampled while the command ran


def test_bad_use_is_a_clear_error(tmp_path):
    r = _record(tmp_path)
    assert r.returncode == 2 and "no command given" in r.stderr
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    r = _record(tmp_path, "true", out="full")
    assert r.returncode == 2 and "not an empty directory" in r.stderr
    r = _record(tmp_path, "true", out="b", extra=("--counters", "sim"))
    assert r.returncode == 2 and "host or nvml" in r.stderr
    r = _record(tmp_path, str(tmp_path / "no-such-program"), out="c", extra=("--counters", "none"))
    assert r.returncode == 2 and "cannot run" in r.stderr and "Traceback" not in r.stderr


def test_the_bootstrap_runs_a_sitecustomize_it_shadows(tmp_path):
    mine = tmp_path / "site"
    mine.mkdir()
    (mine / "sitecustomize.py").write_text(f"open({str(tmp_path / 'ran')!r}, 'w').write('yes')\n")
    r = _record(tmp_path, sys.executable, "-c", "print('hi')", extra=("--counters", "none"),
                env={"PYTHONPATH": str(mine)})
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "ran").read_text() == "yes"


def test_a_pytorch_program_is_profiled_with_counters_on_one_timeline(tmp_path):
    pytest.importorskip("torch")
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent("""
        import time, torch
        m = torch.nn.Linear(64, 64)
        x = torch.randn(32, 64)
        for _ in range(10):
            m(x).sum().backward()
            time.sleep(0.02)
    """))
    r = _record(tmp_path, sys.executable, str(script), extra=("--counters", "host", "--rate", "100"))
    assert r.returncode == 0, r.stderr
    run = tmp_path / "run"
    assert len(list(run.glob("torch.*.trace.json"))) == 1
    clock = AtraceReader.open(run / "run.atrace").merged_metadata()["record"]["clock"]
    # the residual is the scheduling delay between a marker's clock read and Kineto's record of it: a few
    # ms on a quiet machine, 6-7 ms at load 10; a wrong alignment is off by far more (the clocks' offset)
    assert clock["sync_markers"] == 6 and clock["residual_ns"] < 20e6
    con = _ingest(tmp_path, run)
    assert con.execute("SELECT value FROM trace_meta WHERE key = 'format'").fetchone()[0] == "atrace+actr+kineto"
    # the markers carry the monotonic time at which they were made: after alignment each sits there
    rows = con.execute("SELECT name, ts FROM slices WHERE name LIKE 'acceltrace.sync %'").fetchall()
    assert len(rows) == 6
    off = clock["monotonic_to_trace_ns"]
    assert max(abs(ts - (int(n.split()[-1]) + off)) for n, ts in rows) < 20e6
    ops = con.execute("SELECT min(ts), max(ts + dur), count(*) FROM slices WHERE name LIKE 'aten::%'").fetchone()
    cmd = con.execute("SELECT s.ts, s.ts + s.dur FROM slices s JOIN tracks t USING (track_id) "
                      "WHERE t.name = 'recorded command'").fetchone()
    assert ops[2] > 50 and cmd[0] <= ops[0] and ops[1] <= cmd[1]  # the ops inside the command's span
    lo, hi = con.execute("SELECT min(c.ts), max(c.ts) FROM counters c JOIN tracks t USING (track_id) "
                         "WHERE t.name = 'cpu.busy'").fetchone()
    assert lo <= ops[0] and hi >= ops[1]  # counters around the ops, on the same clock


def test_a_program_with_its_own_profiler_still_runs_and_exits_normally(tmp_path):
    pytest.importorskip("torch")
    script = tmp_path / "own.py"
    script.write_text("import torch\nwith torch.profiler.profile():\n    torch.randn(4, 4) @ torch.randn(4, 4)\n"
                      "print('done')\n")
    r = _record(tmp_path, sys.executable, str(script), extra=("--counters", "none"))
    assert r.returncode == 0 and "done" in r.stdout, r.stderr
    assert "own PyTorch profiler ended ours" in r.stderr
