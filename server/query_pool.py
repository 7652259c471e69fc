"""Who may run a SQL query now: slots shared by every worker, a per-client limit (docs/operations.md).

Queries run in processes of their own (store/sandbox.run_limited), never on the threads that
serve tiles: each request waits for its process on a small thread pool of its own. Limits are
advisory file locks in the store's locks/ folder, so they hold across all worker processes of
one server and are released by the kernel when a holder dies:
- ACCELTRACE_QUERY_SLOTS (default: the number of cores) queries run at once in the whole
  server; a query waits up to ACCELTRACE_QUERY_QUEUE_S (default 5 s) for one, then answers 503
  with Retry-After;
- ACCELTRACE_QUERY_PER_CLIENT (default 2) queries from one client address at once; one more
  answers 429 with Retry-After at once.
"""

from __future__ import annotations

import asyncio
import fcntl
import functools
import hashlib
import os
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from pathlib import Path

from acceltrace.server.limits import cores, env_int


class Overloaded(Exception):
    """No query can start now: status 429 (this client) or 503 (the server), with Retry-After."""

    def __init__(self, status: int, code: str, message: str, retry_after_s: int):
        super().__init__(message)
        self.status, self.code, self.message = status, code, message
        self.headers = {"Retry-After": str(retry_after_s)}


class QueryPool:
    def __init__(self, store_root: Path, slots: int | None = None, per_client: int | None = None,
                 queue_s: float | None = None):
        self.dir = Path(store_root) / "locks"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.slots = slots or env_int("ACCELTRACE_QUERY_SLOTS", cores())
        self.per_client = per_client or env_int("ACCELTRACE_QUERY_PER_CLIENT", 2)
        self.queue_s = queue_s if queue_s is not None else float(os.environ.get("ACCELTRACE_QUERY_QUEUE_S", 5.0))
        self.threads = ThreadPoolExecutor(max_workers=self.slots, thread_name_prefix="query")
        self._local: asyncio.Semaphore | None = None  # this worker's share of the waiting (event loop's)

    def _try(self, names: list[str]) -> int | None:
        """An fd holding an exclusive lock on the first free of these files, or None."""
        for name in names:
            fd = os.open(self.dir / name, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return fd
            except BlockingIOError:
                os.close(fd)
        return None

    @asynccontextmanager
    async def slot(self, client: str):
        who = hashlib.sha256(client.encode()).hexdigest()[:16]
        mine = self._try([f"client-{who}.{k}.lock" for k in range(self.per_client)])
        if mine is None:
            raise Overloaded(429, "too_many_queries",
                             f"{self.per_client} queries from your address are already running; wait for one "
                             "to finish", 2)
        slot = None
        local = False
        busy = Overloaded(503, "overloaded", f"all {self.slots} query slots of this server are busy "
                          f"(waited {self.queue_s:g} s); retry later", 5)
        try:
            loop = asyncio.get_running_loop()
            deadline = loop.time() + self.queue_s
            if self._local is None:
                self._local = asyncio.Semaphore(self.slots)
            try:  # never more pollers than slots in one worker: the other waiters sleep for free
                await asyncio.wait_for(self._local.acquire(), self.queue_s)
                local = True
            except asyncio.TimeoutError:
                raise busy from None
            while (slot := self._try([f"slot.{k}.lock" for k in range(self.slots)])) is None:
                if loop.time() >= deadline:
                    raise busy
                await asyncio.sleep(0.1)
            yield
        finally:
            if slot is not None:
                os.close(slot)
            if local:
                self._local.release()
            os.close(mine)

    async def run(self, fn, *args, **kwargs):
        return await asyncio.get_running_loop().run_in_executor(self.threads, functools.partial(fn, *args, **kwargs))

    def close(self) -> None:
        self.threads.shutdown(wait=False, cancel_futures=True)
