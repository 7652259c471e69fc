"""`acceltrace sim --live`: the run goes through a real tracing daemon, paced in real time."""

from __future__ import annotations

import json
import subprocess
import sys
import time

from acceltrace.formats.atrace.reader import AtraceReader


def test_live_run_reaches_the_daemon_in_real_time(tmp_path, monkeypatch):
    sock = tmp_path / "traced.sock"
    daemon_out = tmp_path / "daemon.atrace"
    daemon = subprocess.Popen([sys.executable, "-m", "acceltrace", "traced", "--socket", str(sock),
                               "--out", str(daemon_out)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        for _ in range(100):
            if sock.exists():
                break
            time.sleep(0.05)
        assert sock.exists(), "the tracing daemon did not start"
        monkeypatch.setenv("ACCELTRACE_SOCKET", str(sock))
        from acceltrace.sim.live import run_live

        t0 = time.monotonic()
        assert run_live("launch-gaps", 5, 600, tmp_path / "run") == 0
        elapsed = time.monotonic() - t0
        truth = json.loads((tmp_path / "run" / "ground_truth.json").read_text())
        assert elapsed >= truth["run_ns"] / 1e9  # paced: not faster than the simulated run
        assert (tmp_path / "run" / "run.actr").stat().st_size > 0
    finally:
        from acceltrace.collect.traced.protocol import ctl

        ctl(sock, "stop")  # stops recording and closes the file; the service itself keeps running
        daemon.terminate()
        daemon.wait(timeout=20)
    reader = AtraceReader.open(daemon_out)
    recs, _streams = reader.read_all()
    assert len(recs) >= 600
    # the replay stamped host records on the live monotonic clock, the same one ground truth uses
    host = recs[(recs["clock"] == 0) & (recs["ts"] > 0)]
    assert host["ts"].min() >= truth["run_start_ns"] - 1
    assert reader.sync is not None and len(reader.sync) > 0


def test_a_daemon_that_goes_away_mid_run_is_reported_and_the_sampler_still_stops(tmp_path, monkeypatch, capsys):
    from acceltrace.collect import client
    from acceltrace.collect.client import ClientError
    from acceltrace.sim.live import run_live

    class DyingTracer:
        """Takes a few events, then behaves as a client whose daemon has died."""

        def __init__(self):
            self.n = 0

        def name_track(self, *a, **k):
            pass

        def _event(self, *a, **k):
            self.n += 1
            if self.n > 20:
                raise ClientError("the tracing daemon closed the connection")

        complete = instant = clock_sync = _event

        def close(self):
            raise ClientError("events were lost: the daemon is gone")

    monkeypatch.setenv("ACCELTRACE_SOCKET", str(tmp_path / "nowhere.sock"))
    monkeypatch.setattr(client, "connect", lambda *a, **k: DyingTracer())
    assert run_live("launch-gaps", 5, 600, tmp_path / "run") == 1
    err = capsys.readouterr().err
    assert "the tracing daemon stopped taking events" in err and "Traceback" not in err
    assert (tmp_path / "run" / "run.actr").stat().st_size > 0  # the sampler was stopped and closed its file
