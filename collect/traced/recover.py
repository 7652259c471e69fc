"""What lets a restarted daemon continue a trace after the previous one was killed (docs/tracing.md).

The daemon keeps every ring as a named file in a tmpfs directory of its own (rings outlive it) and,
after each drain tick has written its records and before it hands the slots back to the producers,
saves a state file beside the trace (FILE.state, replaced atomically): the file's size, and per
ring its file name and the read position up to which its records are in the trace. A restarted
daemon on the same --out finds the state file, cuts the trace back to that size (keeping the whole
strings, metadata, clock-sync and loss chunks written after it, dropping event chunks: their records
are still in the rings, since their slots were never handed back), reopens the rings and drains
them from those positions. Producers that are still alive reconnect with their stream number.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import time
import zlib
from pathlib import Path

from acceltrace.collect.traced import protocol as P
from acceltrace.collect.traced.rings import DaemonRing
from acceltrace.formats import ring as RG
from acceltrace.formats.atrace.layout import CHUNK_HEADER, EVENTS, TRAILER
from acceltrace.formats.atrace.writer import AtraceWriter

STATE_VERSION = 1
SHM_ROOT = "/dev/shm"


def state_path(out: Path) -> Path:
    return out.with_name(out.name + ".state")


def ring_dir_path(out: Path) -> str:
    """Where the rings of trace `out` live: /dev/shm/acceltrace-traced-UID/<hash of the trace's path>."""
    key = hashlib.sha256(os.fsencode(str(Path(out).resolve()))).hexdigest()[:16]
    return os.path.join(SHM_ROOT, f"acceltrace-traced-{os.getuid()}", key)


def ring_dir(out: Path) -> str | None:
    """This trace's private directory of ring files on tmpfs, made 0700; None where there is no /dev/shm."""
    if not os.path.isdir(SHM_ROOT):
        return None
    d = ring_dir_path(out)
    for p in (os.path.dirname(d), d):
        try:
            os.mkdir(p, 0o700)
        except FileExistsError:
            pass
        st = os.lstat(p)
        # never a directory someone else made (or a link to one): rings would be theirs to read
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or stat.S_IMODE(st.st_mode) & 0o077:
            raise OSError(f"{p} is not a private directory of this user")
    with open(os.path.join(d, "trace"), "w") as f:  # whose rings these are: lets other daemons sweep them
        f.write(str(Path(out).resolve()))
    _sweep_abandoned(os.path.dirname(d), d)
    return d


def _sweep_abandoned(top: str, mine: str) -> None:
    """Remove the ring directories of traces with no state file any more (the trace was deleted, or
    finished): nothing can resume them. A running daemon always has its state file."""
    for name in os.listdir(top):
        d = os.path.join(top, name)
        if d == mine:
            continue
        try:
            owner = os.path.join(d, "trace")
            if time.time() - os.stat(owner).st_mtime < 60:  # a daemon starting now may not have saved a state yet
                continue
            with open(owner) as f:
                trace = f.read()
            if not os.path.exists(trace + ".state"):
                for f in os.listdir(d):
                    os.unlink(os.path.join(d, f))
                os.rmdir(d)
        except OSError:  # no owner file, or another daemon sweeping too
            continue


def load(path: Path) -> dict | None:
    """The state a killed daemon left, or None (none, or not one this version wrote: then it says why)."""
    try:
        with open(path) as f:
            st = json.load(f)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        raise ValueError(f"cannot read {path} ({e})") from None
    if not isinstance(st, dict) or st.get("version") != STATE_VERSION:
        raise ValueError(f"{path} is not a state file of this daemon version")
    return st


def cut_back(out: Path, size: int) -> int:
    """Cut `out` back to `size` bytes, keeping the whole non-event chunks written after it (and not a
    trailer); returns the new size. A torn last chunk is dropped."""
    with open(out, "r+b") as f:
        f.seek(0, os.SEEK_END)
        end = f.tell()
        if end < size:
            raise ValueError(f"{out} is shorter ({end} bytes) than the {size} bytes its state file recorded")
        f.seek(size)
        tail = f.read()
        keep, pos = [], 0
        while pos + CHUNK_HEADER.size <= len(tail):
            ctype, _stream, n, crc = CHUNK_HEADER.unpack_from(tail, pos)
            stop = pos + CHUNK_HEADER.size + n
            if n % 8 or stop > len(tail) or zlib.crc32(tail[pos + CHUNK_HEADER.size: stop]) != crc:
                break
            if ctype not in (EVENTS, TRAILER):
                keep.append(tail[pos:stop])
            pos = stop
        f.truncate(size)
        f.seek(size)
        data = b"".join(keep)
        f.write(data)
        return size + len(data)


def sweep(directory: str | None, keep: set[str]) -> None:
    """Remove ring files of this trace that no state names (a daemon died between two saves)."""
    if not directory:
        return
    for name in os.listdir(directory):
        p = os.path.join(directory, name)
        if p not in keep and name.startswith("acceltrace-ring-"):
            try:
                os.unlink(p)
            except OSError:
                pass


def pid_alive(pid: int) -> bool:
    """Whether process `pid` still runs (a zombie does not: it can write nothing more)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def _check_int(v, lo: int, hi: int, what: str) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
        raise P.ProtocolError(f"{what} must be an integer in [{lo}, {hi}], got {json.dumps(v)[:40]}")
    return v


class Recovering:
    """A mixin of Daemon (daemon.py): the state file, resuming after a crash, reconnecting producers."""

    conn_class = None  # the daemon's Conn (set by Daemon: a recovered producer is one without a socket)

    def _resume(self, hdr: dict) -> bool:
        """Continue the trace a killed daemon left (its state file names the file's size and the rings);
        False when there is nothing to resume (then a new trace starts)."""
        try:
            st = load(self.state_file)
        except ValueError as e:
            self._print(f"acceltrace traced: {e}; starting a new trace")
            st = None
        if st is None or st.get("out") != str(self.out_path) or not self.out_path.is_file():
            sweep(self.ring_dir, set())
            return False
        if st.get("mode") != self.mode:
            self._print(f"acceltrace traced: resuming {self.out_path} in {st.get('mode')} mode, as it was started "
                        f"(not {self.mode})")
            self.mode = st["mode"]
        try:
            size = cut_back(self.out_path, int(st["file_size"]))
        except ValueError as e:
            self._print(f"acceltrace traced: cannot resume: {e}; starting a new trace")
            sweep(self.ring_dir, set())
            return False
        self.writer = AtraceWriter(self.out_path, hdr, resume_events=int(st["events_written"]))
        self.next_stream = int(st["next_stream"])
        self.retired = list(st.get("retired", []))
        keep, missing = set(), 0
        for ps in st.get("streams", []):
            c = self.conn_class(None, stream=int(ps["stream"]), pid=int(ps["pid"]), name=str(ps.get("name", "")),
                     events=int(ps.get("events", 0)))
            c.client_lost = int(ps.get("client_lost", 0))
            for rs in ps.get("rings", []):
                try:
                    if not rs.get("path"):
                        raise ValueError("it was an anonymous ring (no ring directory), gone with the daemon")
                    ring = DaemonRing(int(rs["cap"]), RG.MODES[self.mode], c.pid, int(rs["tid"]), path=rs["path"],
                                      attach=rs)
                except (OSError, ValueError) as e:
                    # a ring file someone removed: what it held after its saved position is unknown
                    self._print(f"acceltrace traced: pid {c.pid}: cannot reopen ring {rs.get('path')} ({e}); "
                                "its unwritten events are lost and cannot be counted")
                    missing += 1
                    continue
                keep.add(ring.path)
                c.rings.append(ring)
                self.allocated_bytes += RG.ring_bytes(ring.cap)
            self.conns[id(c)] = c
        sweep(self.ring_dir, keep)
        self._print(f"acceltrace traced: resuming {self.out_path} after a daemon crash: {len(keep)} rings of "
                    f"{len(st.get('streams', []))} producers reopened, file cut back to {size} bytes"
                    + (f", {missing} rings missing" if missing else ""))
        self._save_state()
        return True

    def _state(self) -> dict:
        streams = [{"stream": c.stream, "pid": c.pid, "name": c.name, "events": c.events,
                    "client_lost": getattr(c, "client_lost", 0), "rings": [r.state() for r in c.rings]}
                   for c in self.conns.values() if c.stream is not None]
        return {"version": STATE_VERSION, "out": str(self.out_path), "socket": str(self.socket_path),
                "mode": self.mode, "ring_dir": self.ring_dir, "file_size": self.writer.bytes_written,
                "events_written": self.writer.events_written, "next_stream": self.next_stream,
                "retired": self.retired, "streams": streams}

    def _save_state(self) -> None:
        """Record what is in the file and where each ring's unwritten records start; called after the
        records taken are written and before their slots are handed back (ring.commit)."""
        text = json.dumps(self._state(), separators=(",", ":"))
        if text != self._saved_state:
            tmp = self.state_file.with_name(self.state_file.name + ".tmp")
            with open(tmp, "w") as f:
                f.write(text)
            os.replace(tmp, self.state_file)
            self._saved_state = text

    def _reap_orphans(self) -> None:
        """Recovered producers that died while no daemon ran: drained one last time, then retired."""
        for c in list(self.conns.values()):
            if c.sock is None and not pid_alive(c.pid):
                self._drop(c, None)

    def _resume_producer(self, c, msg: dict) -> None:
        """A producer whose daemon was killed reconnects: it takes back its stream and its rings."""
        stream = _check_int(msg["resume"], 1, 2**31, "resume")
        pid = _check_int(msg.get("pid", 0), 0, 2**32 - 1, "pid")
        orphan = next((o for o in self.conns.values() if o.sock is None and o.stream == stream and o.pid == pid), None)
        if orphan is None:
            self._reply(c, {"ok": False, "error": f"no stream {stream} of pid {pid} to resume"})
            return
        self.conns.pop(id(orphan), None)
        c.stream, c.pid, c.name, c.rings, c.events = orphan.stream, orphan.pid, orphan.name, orphan.rings, orphan.events
        c.client_lost = getattr(orphan, "client_lost", 0)
        self._reply(c, {"ok": True, "stream": c.stream, "mode": self.mode, "version": P.PROTOCOL_VERSION})

