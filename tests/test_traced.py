"""The tracing daemon with real producer processes: counts, modes, crashes, hostile input, permissions."""

import os
import signal
import socket
import stat
import struct
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from _client_paths import client_path  # noqa: F401  (both client paths)

from acceltrace.collect import client
from acceltrace.formats.atrace.reader import AtraceReader
from acceltrace.collect.traced.protocol import ctl

PY = sys.executable


def _start(tmp_path, mode="discard", buffer_mb=8):
    sock, out = tmp_path / "d.sock", tmp_path / "out.atrace"
    proc = subprocess.Popen([PY, "-m", "acceltrace", "traced", "--socket", str(sock), "--out", str(out),
                             "--buffer-mb", str(buffer_mb), "--mode", mode],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    for _ in range(200):
        if sock.exists():
            return proc, sock, out
        if proc.poll() is not None:
            raise AssertionError(proc.stdout.read())
        time.sleep(0.02)
    proc.kill()
    raise AssertionError("daemon did not start")


def _stop(proc):
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=20)
    assert proc.returncode == 0, out
    return out


def _producer(sock, body, *args):
    """A separate Python process running `body` with `t` connected to the daemon."""
    code = "import sys, threading, os\nfrom acceltrace.collect import client\nt = client.connect(sys.argv[1])\n" \
           + textwrap.dedent(body)
    return subprocess.Popen([PY, "-c", code, str(sock), *map(str, args)])


@pytest.fixture
def forget_rings():
    """A killed daemon's rings stay in /dev/shm for a restarted one (test_traced_kill.py); tests that
    never restart it remove them at teardown."""
    import shutil

    from acceltrace.collect.traced import recover

    outs = []
    yield outs.append
    for out in outs:
        shutil.rmtree(recover.ring_dir_path(out), ignore_errors=True)


def _records(out):
    r = AtraceReader.open(out)
    recs, streams = r.read_all()
    return r, recs, streams


def test_several_processes_and_threads_arrive_complete_and_exact(tmp_path):
    proc, sock, out = _start(tmp_path)
    body = """
        def work(k):
            for j in range(3000):
                with t.span("w", corr=(k << 20) | j, cat=str(k)):
                    pass
        ths = [threading.Thread(target=work, args=(k,)) for k in range(3)]
        [x.start() for x in ths]; [x.join() for x in ths]
        t.close()
    """
    ps = [_producer(sock, body) for _ in range(3)]
    assert all(p.wait(60) == 0 for p in ps)
    _stop(proc)
    r, recs, streams = _records(out)
    assert len(recs) == 27000 and r.trailer["lost_events"] == 0
    assert r.trailer["events"] == 27000 and len(r.trailer["producers"]) == 3
    for s in np.unique(streams):
        mine = recs[streams == s]
        assert len(mine) == 9000 and len(np.unique(mine["corr"])) == 9000
        assert len(np.unique(mine["tid"])) == 3


def _overrun(tmp_path, mode):
    proc, sock, out = _start(tmp_path, mode=mode)
    assert ctl(sock, "stop")["draining"] is False
    body = """
        for j in range(10000):
            t.complete("e", j, 1, corr=j + 1)
        t._sink.publish_all()
        print("ok", flush=True)
        sys.stdin.readline()
        t.close()
    """
    code = "import sys\nfrom acceltrace.collect import client\nt = client.connect(sys.argv[1], ring_records=1024)\n" \
           + textwrap.dedent(body)
    p = subprocess.Popen([PY, "-c", code, str(sock)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "ok"
    assert ctl(sock, "start")["draining"] is True
    p.communicate("\n", timeout=30)
    _stop(proc)
    return _records(out)


def test_discard_mode_keeps_the_oldest_and_counts_every_dropped_event(tmp_path):
    r, recs, _ = _overrun(tmp_path, "discard")
    assert recs["corr"].tolist() == list(range(1, 1025))
    assert r.trailer["lost_events"] == 10000 - 1024
    assert r.trailer["producers"][0]["lost"] == 10000 - 1024


def test_ring_mode_keeps_the_newest_and_counts_what_was_overwritten(tmp_path):
    r, recs, _ = _overrun(tmp_path, "ring")
    # the newest records survive; the oldest slot of the lapped ring is the one a producer would be
    # overwriting next, so the daemon cannot trust it and counts it as overwritten too
    assert recs["corr"].tolist() == list(range(10000 - 1023 + 1, 10001))
    assert r.trailer["lost_events"] == 10000 - 1023


def test_events_reach_the_file_while_the_producer_runs(tmp_path):
    proc, sock, out = _start(tmp_path)
    t = client.connect(sock)
    try:
        sent = time.monotonic()
        t.instant("hello", corr=42)  # no flush: the client's 20 ms publisher and the daemon's 20 ms drain
        seen = None
        while time.monotonic() - sent < 2.0:
            r, recs, _ = _records(out)
            if 42 in recs["corr"].tolist():
                seen = time.monotonic() - sent
                break
            time.sleep(0.01)
        # ~40 ms on an idle machine; the bound leaves room for this shared, oversubscribed one
        assert seen is not None and seen < 0.5, seen
        assert r.trailer is None  # the daemon is still writing
    finally:
        t.close()
        _stop(proc)


def test_sigkilled_producer_loses_nothing_it_wrote_and_harms_no_one(tmp_path):
    proc, sock, out = _start(tmp_path)
    victim = _producer(sock, """
        for j in range(500):
            t.complete("v", j, 1, corr=j + 1)
        t.complete("last", 0, 1, corr=501)  # published as it is written: no batch waits for a flush
        os.kill(os.getpid(), 9)
    """)
    assert victim.wait(30) == -9
    survivor = _producer(sock, """
        for j in range(100):
            t.complete("s", j, 1, corr=j + 1)
        t.close()
    """)
    assert survivor.wait(30) == 0
    assert ctl(sock, "status")["ok"]
    _stop(proc)
    r, recs, streams = _records(out)
    assert len(recs) == 601 and r.trailer["lost_events"] == 0  # all 501 of the victim + 100 from the survivor
    assert sorted(recs[streams == streams[0]]["corr"].tolist()) == list(range(1, 502))


def test_sigkilled_daemon_leaves_a_file_that_reads_to_its_last_whole_chunk(tmp_path, forget_rings):
    proc, sock, out = _start(tmp_path)
    forget_rings(out)
    t = client.connect(sock)
    for j in range(2000):
        t.complete("e", j, 1, corr=j + 1)
    t.flush()
    proc.kill()
    proc.wait(10)
    r, recs, _ = _records(out)
    assert len(recs) == 2000 and r.trailer is None
    with pytest.raises(client.ClientError):
        for _ in range(10):
            t.flush()


def test_close_after_the_daemon_died_says_events_were_lost(tmp_path, forget_rings):
    proc, sock, out = _start(tmp_path)
    forget_rings(out)
    t = client.connect(sock)
    t.complete("before", 1, 1)
    t.flush()
    proc.kill()
    proc.wait(10)
    t.complete("after", 2, 1)  # spans keep working; this record goes nowhere
    with pytest.raises(client.ClientError, match="lost"):
        t.close()
    t.close()  # reported once


def test_a_daemon_that_never_answers_does_not_hang_the_traced_program(tmp_path, monkeypatch):
    # e.g. a daemon stopped with Ctrl-Z: the kernel still accepts connections, nobody replies
    from acceltrace.collect.client.sinks import DaemonSink

    monkeypatch.setattr(DaemonSink, "REPLY_TIMEOUT_S", 0.5)
    path = tmp_path / "silent.sock"
    silent = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    silent.bind(str(path))
    silent.listen(4)
    try:
        t0 = time.monotonic()
        with pytest.raises(client.ClientError, match="timed out"):
            client.connect(path)
        assert time.monotonic() - t0 < 5
    finally:
        silent.close()


def _raw(sock_path, payload: bytes) -> bytes:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(2)
    s.connect(str(sock_path))
    try:
        s.sendall(payload)
        try:
            return s.recv(4096)
        except socket.timeout:
            return b""
    finally:
        s.close()


def test_hostile_socket_input_is_refused_and_the_daemon_keeps_serving(tmp_path):
    proc, sock, out = _start(tmp_path)

    def frame(body: bytes) -> bytes:
        return struct.pack("<I", len(body)) + body

    attacks = [
        struct.pack("<I", 0xFFFFFFFF) + b"x" * 100,  # absurd length
        frame(b"\xff\xfe not json"),
        frame(b"[1, 2, 3]"),
        frame(b'{"op": "ring", "tid": 1}'),  # before hello
        frame(b'{"op": "hello", "pid": -5}'),
        frame(b'{"op": "hello", "pid": 1}') + frame(b'{"op": "strings", "entries": [[0, 5]]}'),
        frame(b'{"op": "hello", "pid": 1}') + frame(b'{"op": "sync", "domain": 999, "pairs": [[1, 2]]}'),
        frame(b'{"op": "hello", "pid": 1}') + frame(b'{"op": "metadata", "data": "nope"}'),
        frame(b'{"op": "launch_missiles"}'),
        os.urandom(3000),
    ]
    for a in attacks:
        _raw(sock, a)
    assert proc.poll() is None
    t = client.connect(sock)
    t.instant("still fine")
    t.close()
    log = _stop(proc)
    assert "protocol error" in log
    r, recs, _ = _records(out)
    assert len(recs) == 1


def _fds(pid: int) -> list[str]:
    """What a process's descriptors point at now; one it closes while they are read (the daemon
    closing the connection just ended) is not held, so it is skipped rather than failing the read."""
    out = []
    for n in os.listdir(f"/proc/{pid}/fd"):
        try:
            out.append(os.readlink(f"/proc/{pid}/fd/{n}"))
        except FileNotFoundError:
            pass
    return out


def test_deeply_nested_json_and_passed_fds_are_refused_without_crashing_the_daemon(tmp_path):
    proc, sock, out = _start(tmp_path)
    deep = b"[" * 100_000 + b"]" * 100_000  # json.loads recurses: RecursionError, not ValueError
    deep_meta = b'{"op": "metadata", "data": ' + b'{"a": ' * 900 + b"1" + b"}" * 900 + b"}"
    hello = b'{"op": "hello", "pid": 1}'
    replies = []
    for body in ([deep], [hello, deep_meta]):
        replies.append(_raw(sock, b"".join(struct.pack("<I", len(b)) + b for b in body)))
        assert proc.poll() is None, proc.stdout.read()
    assert b"nested too deeply" in replies[0]
    # a hostile client passing its own descriptors: the daemon never takes them
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(str(sock))
    r_fd, w_fd = os.pipe()
    body = b'{"op": "ctl", "cmd": "status"}'
    s.sendmsg([struct.pack("<I", len(body)) + body], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, struct.pack("i", r_fd))])
    s.settimeout(5)
    assert b'"ok":true' in s.recv(65536)
    s.close()
    passed = f"pipe:[{os.fstat(r_fd).st_ino}]"
    os.close(r_fd), os.close(w_fd)
    held = _fds(proc.pid)
    assert passed not in held, held
    t = client.connect(sock)
    t.instant("still fine")
    t.close()
    _stop(proc)
    assert len(_records(out)[1]) == 1


def test_a_client_that_never_reads_its_replies_cannot_stall_the_daemon(tmp_path):
    proc, sock, out = _start(tmp_path)
    body = b'{"op": "ctl", "cmd": "status"}'
    flood = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    flood.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    flood.connect(str(sock))
    flood.setblocking(False)
    try:
        flood.send((struct.pack("<I", len(body)) + body) * 3000)  # ~1 MB of replies it will never read
    except BlockingIOError:
        pass
    time.sleep(0.2)
    t0 = time.monotonic()
    assert ctl(sock, "status", timeout_s=30)["ok"]
    # before: one second per unread reply once the socket buffer filled, no ring drained meanwhile
    assert time.monotonic() - t0 < 5
    flood.close()
    log = _stop(proc)
    assert "does not read its replies" in log


def test_socket_and_rings_are_owner_only(tmp_path):
    proc, sock, out = _start(tmp_path)
    try:
        assert stat.S_IMODE(os.stat(sock).st_mode) == 0o600
        from acceltrace.collect.traced.rings import DaemonRing

        ring = DaemonRing(1024, 0, 1, 1)
        assert stat.S_IMODE(os.fstat(ring.fd).st_mode) == 0o600
        ring.close()
        t = client.connect(sock)
        t.instant("x")
        # the rings the daemon handed out, seen through its own fd table
        fds = [f"/proc/{proc.pid}/fd/{n}" for n in os.listdir(f"/proc/{proc.pid}/fd")]
        rings = [f for f in fds if "acceltrace-ring" in os.readlink(f)]
        assert rings and all(stat.S_IMODE(os.stat(f).st_mode) == 0o600 for f in rings)
        t.close()
    finally:
        _stop(proc)


def test_ctl_commands_report_status_and_refuse_unknown_ones(tmp_path):
    proc, sock, out = _start(tmp_path)
    try:
        st = ctl(sock, "status")
        assert st["ok"] and st["mode"] == "discard" and st["draining"]
        assert ctl(sock, "flush")["ok"]
        bad = ctl(sock, "explode")
        assert not bad["ok"] and "expected start, stop, flush or status" in bad["error"]
        r = subprocess.run([PY, "-m", "acceltrace", "traced", "--socket", str(sock), "ctl", "status"],
                           capture_output=True, text=True, timeout=30)
        assert r.returncode == 0 and '"draining": true' in r.stdout
    finally:
        _stop(proc)


def test_threads_refused_a_ring_count_their_events_as_lost(tmp_path):
    proc, sock, out = _start(tmp_path, buffer_mb=1)
    try:
        # 1 MiB budget: rings past twice the budget are refused; each refused thread's events are counted
        t = client.connect(sock, ring_records=8192)

        def work():
            for j in range(100):
                t.complete("e", j, 1)

        import threading

        for _ in range(30):
            th = threading.Thread(target=work)
            th.start()
            th.join()
        refused = sum(1 for w in t._sink.lost_writers)
        t.close()
    finally:
        _stop(proc)
    r, recs, _ = _records(out)
    assert refused >= 1
    assert len(recs) + r.trailer["lost_events"] == 3000 and r.trailer["lost_events"] == 100 * refused


def test_forked_child_gets_its_own_stream_and_never_writes_into_the_parents_ring(tmp_path):
    proc, sock, out = _start(tmp_path)
    try:
        t = client.connect(sock)
        with t.span("parent before fork"):
            pass
        pid = os.fork()
        if pid == 0:  # child: same tracer object, new connection on first use
            try:
                for _ in range(50):
                    with t.span("child"):
                        pass
                t.close()
            finally:
                os._exit(0)
        os.waitpid(pid, 0)
        with t.span("parent after fork"):
            pass
        t.close()
    finally:
        _stop(proc)
    r, recs, streams = _records(out)
    by_stream = {}
    for s in np.unique(streams):
        names = r.strings[int(s)]
        by_stream[int(s)] = sorted({names[n] for n in recs[streams == s]["name"]})
    assert sorted(by_stream.values()) == [["child"], ["parent after fork", "parent before fork"]]
    child_stream = [s for s, v in by_stream.items() if v == ["child"]][0]
    assert (recs[streams == child_stream]["pid"] == pid).all() and (streams == child_stream).sum() == 50


def test_second_daemon_on_a_live_socket_is_refused_and_touches_no_file(tmp_path):
    proc, sock, out = _start(tmp_path)
    try:
        r = subprocess.run([PY, "-m", "acceltrace", "traced", "--socket", str(sock), "--out", str(out)],
                           capture_output=True, text=True, timeout=30)
        assert r.returncode != 0 and "another daemon is listening" in r.stderr
        assert not out.with_name(out.name + ".old").exists()
        assert ctl(sock, "status")["ok"]
    finally:
        _stop(proc)


def test_unwritable_output_is_a_clear_error_without_a_leftover_socket(tmp_path):
    sock = tmp_path / "x.sock"
    r = subprocess.run([PY, "-m", "acceltrace", "traced", "--socket", str(sock), "--out",
                        str(tmp_path / "no" / "such" / "dir.atrace")], capture_output=True, text=True, timeout=30)
    assert r.returncode == 1 and "cannot write" in r.stderr and "Traceback" not in r.stderr
    assert not sock.exists()


def test_out_naming_a_directory_is_refused_and_the_directory_left_where_it_is(tmp_path):
    # an existing output is kept as FILE.old; a directory must never be moved aside that way
    work = tmp_path / "work"
    work.mkdir()
    (work / "precious.txt").write_text("keep me")
    sock = tmp_path / "x.sock"
    r = subprocess.run([PY, "-m", "acceltrace", "traced", "--socket", str(sock), "--out", str(work)],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and "not a regular file" in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert (work / "precious.txt").read_text() == "keep me"
    assert not (tmp_path / "work.old").exists() and not sock.exists()
    r = subprocess.run([PY, "-m", "acceltrace", "traced", "--socket", str(sock), "--out", str(tmp_path / "t.atrace"),
                        "--buffer-mb", "0"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and "--buffer-mb must be at least 1" in r.stderr


def test_bulk_record_arrays_go_through_the_ring_with_exact_counts(tmp_path):
    from acceltrace.formats import record as R

    proc, sock, out = _start(tmp_path)
    try:
        t = client.connect(sock, ring_records=4096)
        name = t.intern("dev record")
        recs = np.zeros(3000, R.RECORD_DTYPE)
        recs["kind"], recs["name"], recs["lane"], recs["ts"] = R.COMPLETE, name, R.LANE_CODES["eu"], np.arange(3000)
        recs["corr"], recs["flags"] = np.arange(1, 3001), R.FLAG_HAS_CORR
        t.write_records(recs)  # wraps nothing yet
        t.flush()
        t.write_records(recs)  # wraps around the end of the ring
        t.flush()
        ctl(sock, "stop")
        t.write_records(np.concatenate([recs, recs]))  # 6000 into a 4096 ring nobody drains: 1904 refused
        ctl(sock, "start")
        t.close()
    finally:
        _stop(proc)
    r, got, _ = _records(out)
    assert len(got) + r.trailer["lost_events"] == 12000 and r.trailer["lost_events"] == 6000 - 4096
    assert got["corr"][:6000].tolist() == list(range(1, 3001)) * 2
    assert (got["pid"] == os.getpid()).all()
