"""The daemon's side of the shared-memory rings: allocation, re-attachment after a restart, draining.

A daemon with a ring directory (on tmpfs, /dev/shm) makes each ring a named 0600 file there, so
the ring outlives the daemon: the producer keeps writing into it, and a restarted daemon opens it
again by name (from its state file) and drains what was committed. Without one, a ring is an
anonymous memfd that dies with the daemon's and the producer's mappings.
"""

from __future__ import annotations

import mmap
import os
import tempfile

from acceltrace.formats import ring as RG
from acceltrace.formats.record import RECORD_SIZE

MIN_RING_RECORDS = 1024
MAX_RING_RECORDS = 1 << 22  # 256 MiB


def alloc_fd(nbytes: int) -> int:
    """An anonymous shared-memory file: memfd where the kernel has it, else an unlinked /dev/shm file (0600)."""
    if hasattr(os, "memfd_create"):
        fd = os.memfd_create("acceltrace-ring", os.MFD_CLOEXEC)
        os.fchmod(fd, 0o600)  # reachable only through /proc/<pid>/fd, and then only by the owner
    else:  # pragma: no cover - every Linux we target has memfd
        d = "/dev/shm" if os.path.isdir("/dev/shm") else None
        fd, path = tempfile.mkstemp(prefix="acceltrace-ring-", dir=d)
        os.fchmod(fd, 0o600)
        os.unlink(path)
    os.ftruncate(fd, nbytes)
    return fd


def create_named(path: str, nbytes: int) -> int:
    """A new 0600 ring file (O_EXCL: never an existing file or a planted link)."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
    try:
        os.ftruncate(fd, nbytes)
    except OSError:
        os.close(fd)
        os.unlink(path)
        raise
    return fd


def pow2_records(n: int) -> int:
    n = max(MIN_RING_RECORDS, min(MAX_RING_RECORDS, int(n)))
    return 1 << (n - 1).bit_length()


class DaemonRing:
    """One producer thread's ring as the daemon sees it; `r` is the authoritative read index."""

    def __init__(self, capacity: int, mode: int, pid: int, tid: int, path: str | None = None,
                 attach: dict | None = None):
        """A new ring (a named file at `path`, else a memfd), or with `attach` (a state-file entry:
        r, overwritten, drained) the existing ring file at `path`, left by a daemon that died."""
        self.cap = capacity
        self.mask = capacity - 1
        self.mode = mode
        self.path = path
        self.tid = tid
        nbytes = RG.ring_bytes(capacity)
        if attach is None:
            self.fd = create_named(path, nbytes) if path else alloc_fd(nbytes)
        else:
            self.fd = os.open(path, os.O_RDWR | os.O_CLOEXEC | os.O_NOFOLLOW)
            if os.fstat(self.fd).st_size != nbytes:
                os.close(self.fd)
                raise ValueError(f"ring file {path} is not a {capacity}-record ring")
        self.mem = mmap.mmap(self.fd, nbytes, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        if attach is None:
            RG.init_ring(self.mem, capacity, mode, pid, tid)
        else:
            info = RG.read_info(self.mem)
            if info["magic"] != RG.RING_MAGIC or info["capacity"] != capacity or info["mode"] != mode:
                self.mem.close()
                os.close(self.fd)
                raise ValueError(f"ring file {path} has a header that does not match the daemon's state")
        self.idx = RG.index_view(self.mem)
        self.data = memoryview(self.mem)[RG.DATA_OFFSET:]
        self.r = 0
        self.overwritten = 0  # ring mode: records overwritten before we read them
        self.broken: str | None = None  # why we stopped trusting this ring
        self.drained = 0
        if attach is not None:
            # everything before r is in the file (the state was saved after writing it); the ring's
            # read index may lag r by one tick (the daemon died between saving and publishing it)
            self.r, self.overwritten, self.drained = int(attach["r"]), int(attach["overwritten"]), int(attach["drained"])
            self.idx[RG.R] = self.r

    @property
    def position(self) -> int:
        """The read position once the records taken now are written: what the state file records."""
        w = getattr(self, "_pending_w", None)
        return self.r if w is None else w

    def state(self) -> dict:
        w = self.position
        return {"path": self.path, "cap": self.cap, "tid": self.tid, "r": w, "overwritten": self.overwritten,
                "drained": self.drained + (w - self.r)}

    @property
    def producer_lost(self) -> int:
        """Records the producer refused because the ring was full (discard mode), as it published."""
        return int(self.idx[RG.L])

    def take(self) -> tuple[list, int]:
        """Records published since the last take: (buffers, count). Discard mode: views into the ring
        (valid until `commit`); ring mode: copies, checked against overwriting during the copy."""
        if self.broken:
            return [], 0
        w = int(self.idx[RG.W])
        r = self.r
        if w < r or w - r > (1 << 48):
            self.broken = f"write index went from {r} to {w}: the producer corrupted its ring; ignored from now on"
            return [], 0
        if w - r > self.cap:
            # ring mode: the producer lapped us; in discard mode that is a misbehaving producer
            skipped = w - self.cap - r
            self.overwritten += skipped
            r += skipped
        n = w - r
        if n == 0:
            return [], 0
        start = r & self.mask
        first = min(n, self.cap - start)
        views = [self.data[start * RECORD_SIZE: (start + first) * RECORD_SIZE]]
        if n > first:
            views.append(self.data[: (n - first) * RECORD_SIZE])
        if self.mode == RG.MODE_RING:
            views = [bytes(v) for v in views]
            w2 = int(self.idx[RG.W])
            # slots reused while we copied, plus the one the producer may be writing right now
            # (index w2 reuses the slot of w2 - cap before w2 is published)
            torn = min(n, max(0, w2 + 1 - self.cap - r))
            if torn:
                self.overwritten += torn
                views = _drop_front(views, torn)
                n -= torn
        self._pending_w = w
        return views, n

    def commit(self) -> None:
        """Hand the slots taken back to the producer."""
        w = getattr(self, "_pending_w", None)
        if w is not None:
            self.drained += w - self.r if w >= self.r else 0
            self.r = w
            self.idx[RG.R] = w
            self._pending_w = None

    def closed_by_producer(self) -> bool:
        return bool(RG.read_info(self.mem)["flags"] & RG.FLAG_CLOSED)

    def close(self, unlink: bool = True) -> None:
        """Unmap; a named ring file is removed too (the daemon has drained it for the last time)."""
        if unlink and self.path:
            try:
                os.unlink(self.path)
            except OSError:
                pass
        self.data.release()
        self.idx = None
        try:
            self.mem.close()
        except BufferError:
            pass
        os.close(self.fd)


def _drop_front(views: list, n_records: int) -> list:
    out = []
    drop = n_records * RECORD_SIZE
    for v in views:
        if drop >= len(v):
            drop -= len(v)
            continue
        out.append(v[drop:])
        drop = 0
    return out
