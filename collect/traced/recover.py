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
import zlib
from pathlib import Path

from acceltrace.formats.atrace.layout import CHUNK_HEADER, EVENTS, TRAILER

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
    return d


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
