"""`acceltrace collect` as a user runs it: listing, clear refusals, Ctrl-C leaving a valid file."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import numpy as np
from pathlib import Path

from acceltrace.formats.actr.reader import read_actr_path

REPO = Path(__file__).resolve().parents[1]


def collect(*args, **kw):
    return subprocess.run([sys.executable, "-m", "acceltrace", "collect", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=60, **kw)


def test_list_shows_counters_units_and_notes():
    r = collect("--source", "host", "--list")
    assert r.returncode == 0, r.stderr
    assert "cpu.busy" in r.stdout and "memory.used" in r.stdout and "cumulative" in r.stdout
    assert "perf." in r.stdout or "note:" in r.stdout  # hardware counters, or why not


def test_nvml_without_a_driver_exits_nonzero_with_a_message(tmp_path):
    env = dict(os.environ)
    # whatever this machine has, a fake library path makes NVML unloadable for the child
    env["PYTHONPATH"] = str(tmp_path)
    (tmp_path / "pynvml.py").write_text(
        "class NVMLError(Exception):\n    pass\n"
        "def nvmlInit():\n    raise NVMLError('NVML Shared Library Not Found')\n")
    r = collect("--source", "nvml", "--out", str(tmp_path / "g.actr"), env=env)
    assert r.returncode == 2
    assert "no usable NVIDIA driver" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "g.actr").exists()


def test_unknown_source_counter_and_rate_are_refused(tmp_path, capsys):
    from acceltrace.cli import main

    out = str(tmp_path / "x.actr")
    cases = [
        (["--source", "nope", "--out", out], "expected one of: host, nvml, sim"),
        (["--source", "host", "--counters", "cpu.busy,bogus", "--out", out], "unknown counter(s) bogus"),
        (["--source", "host", "--rate", "50000", "--out", out], "outside 1..10000 Hz"),
        (["--source", "host"], "--out"),
    ]
    for argv, message in cases:
        assert main(["collect", *argv]) == 2, argv
        assert message in capsys.readouterr().err, argv


def test_a_short_run_writes_a_complete_file_and_a_summary(tmp_path):
    out = tmp_path / "h.actr"
    r = collect("--source", "host", "--rate", "50", "--duration", "0.4", "--out", str(out), "--realtime")
    assert r.returncode == 0, r.stderr
    assert "scheduling: SCHED_FIFO" in r.stderr or "SCHED_FIFO refused" in r.stderr
    assert "wrote" in r.stdout and "missed deadlines" in r.stdout and "% of one core" in r.stdout
    d = read_actr_path(out)
    assert d.tail["ended"] == "completed" and not d.truncated
    assert d.tail["ticks"] + d.tail["missed_deadlines"] == 21


def test_ctrl_c_ends_an_open_ended_run_cleanly_with_a_valid_file(tmp_path):
    out = tmp_path / "i.actr"
    p = subprocess.Popen([sys.executable, "-m", "acceltrace", "collect", "--source", "host", "--rate", "200",
                          "--duration", "0", "--out", str(out)], cwd=REPO,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 20
        # wait until sampling has started (the header is written, and a little time has passed)
        while time.monotonic() < deadline and (not out.exists() or out.stat().st_size < 100):
            time.sleep(0.05)
        time.sleep(0.5)
        p.send_signal(signal.SIGINT)
        stdout, stderr = p.communicate(timeout=20)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 130, stderr
    assert "Traceback" not in stderr and "(interrupted)" in stdout
    d = read_actr_path(out)
    assert not d.truncated and not d.warnings
    assert d.tail["ended"] == "interrupted" and d.tail["samples"] == len(d.samples[0]) > 10


def test_socket_streams_counter_values_to_a_running_daemon(tmp_path):
    from acceltrace.formats import record as R
    from acceltrace.formats.atrace.reader import AtraceReader

    sock, atrace = tmp_path / "d.sock", tmp_path / "live.atrace"
    daemon = subprocess.Popen([sys.executable, "-m", "acceltrace", "traced", "--socket", str(sock),
                               "--out", str(atrace)], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 20
        while not sock.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        r = collect("--source", "host", "--counters", "cpu.busy,memory.used", "--rate", "20",
                    "--duration", "0.5", "--out", str(tmp_path / "s.actr"), "--socket", str(sock))
        assert r.returncode == 0, r.stderr
        assert "not streaming" not in r.stderr
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.communicate(timeout=20)
    reader = AtraceReader.open(atrace)
    recs, streams = reader.read_all()
    is_counter = recs["kind"] == R.COUNTER
    counters, streams = recs[is_counter], np.asarray(streams)[is_counter]
    names = {reader.strings[int(s)][int(n)] for s, n in zip(streams, counters["name"])}
    # every sample the file holds is streamed: memory.used each time, cpu.busy (a rate) from the
    # second on. 11 ticks at 20 Hz over 0.5 s, less the deadlines a loaded machine missed (counted)
    d = read_actr_path(tmp_path / "s.actr")
    ticks = d.tail["ticks"]
    assert ticks + d.tail["missed_deadlines"] == 11 and ticks >= 2
    assert len(counters) == ticks + (ticks - 1)
    assert names == {"cpu.busy", "memory.used"}


def test_socket_without_a_daemon_still_writes_the_file(tmp_path):
    r = collect("--source", "host", "--rate", "20", "--duration", "0.2", "--out", str(tmp_path / "s.actr"),
                "--socket", str(tmp_path / "nobody.sock"))
    assert r.returncode == 0 and "not streaming" in r.stderr
    assert read_actr_path(tmp_path / "s.actr").tail["ended"] == "completed"


def test_sim_source_without_a_model_runs_llm_inference_in_real_time(tmp_path):
    out = tmp_path / "sim.actr"
    r = collect("--source", "sim", "--rate", "200", "--duration", "0.3", "--out", str(out))
    assert r.returncode == 0, r.stderr
    assert "simulating llm-inference" in r.stderr
    d = read_actr_path(out)
    assert d.header["source"] == "sim" and d.header["host_clock"] == "monotonic"
    assert any(g["multiplexed"] for g in d.header["groups"])
    assert d.tail["ended"] == "completed" and d.tail["samples"] > 60
    # registers were read as the model's time advanced: some PCIe byte counter moved
    pcie = [c["name"] for c in d.header["counters"] if c["name"].endswith("pcie.h2d_bytes")]
    moved = False
    for gid, smp in d.samples.items():
        names = d.group(gid)["counters"]
        for n in pcie:
            if n in names and len(smp) > 1:
                col = smp["raw"][:, names.index(n)]
                moved |= bool(col[-1] != col[0])
    assert moved


def test_a_killed_collector_leaves_a_readable_file_up_to_its_last_flush(tmp_path):
    out = tmp_path / "k.actr"
    p = subprocess.Popen([sys.executable, "-m", "acceltrace", "collect", "--source", "host", "--rate", "50",
                          "--duration", "0", "--out", str(out)], cwd=REPO,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and (not out.exists() or out.stat().st_size < 100):
            time.sleep(0.05)
        time.sleep(2.6)  # samples are handed to the OS at least once a second
    finally:
        p.kill()  # SIGKILL: no handler runs, no TAIL is written
        p.wait(timeout=20)
    d = read_actr_path(out)
    assert d.truncated and d.tail is None and any("no TAIL" in m for _, m, _ in d.warnings)
    assert len(d.samples[0]) >= 50  # at least the first second and more
