"""The daemon's side of the shared-memory rings: allocation (memfd, 0600 fallback) and draining."""

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


def pow2_records(n: int) -> int:
    n = max(MIN_RING_RECORDS, min(MAX_RING_RECORDS, int(n)))
    return 1 << (n - 1).bit_length()


class DaemonRing:
    """One producer thread's ring as the daemon sees it; `r` is the authoritative read index."""

    def __init__(self, capacity: int, mode: int, pid: int, tid: int):
        self.cap = capacity
        self.mask = capacity - 1
        self.mode = mode
        self.fd = alloc_fd(RG.ring_bytes(capacity))
        self.mem = mmap.mmap(self.fd, RG.ring_bytes(capacity), mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        RG.init_ring(self.mem, capacity, mode, pid, tid)
        self.idx = RG.index_view(self.mem)
        self.data = memoryview(self.mem)[RG.DATA_OFFSET:]
        self.r = 0
        self.overwritten = 0  # ring mode: records overwritten before we read them
        self.broken: str | None = None  # why we stopped trusting this ring
        self.drained = 0

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

    def close(self) -> None:
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
