"""Uploads: stream the request body to a file in the store's tmp dir, then ingest it in a process of its own.

The body is never held in memory: the event loop only gathers what the socket gave into blocks of
BLOCK_BYTES and hands each to a thread of the upload's own (at most two blocks in flight), which
parses multipart bodies (python-multipart's streaming parser, whose file-data callback writes to
disk), hashes and writes; that thread runs at a lower priority (nice +UPLOAD_NICE), so hashing and
writing never hold the loop that serves the same worker's viewers. The size limit is checked
against Content-Length first and against the bytes actually received always (in the loop: an
oversized body is refused as soon as it crosses the limit).

A JSON trace (streamable()) is ingested while it arrives: its ingest starts as its first bytes do and
reads the file as it grows (ingest/arriving.py). A body that does not arrive well (too large, malformed,
cut off) marks the file failed, which stops that ingest and removes its row. A body that does: its hash
is known only now, so the route checks for a duplicate and sets the hash in one transaction
(store/catalog.py claim_content) and only then marks the file complete (an ingest cannot end before
that mark, so a duplicate never publishes); a duplicate is marked failed and answered with the stored
trace, as before.
"""

from __future__ import annotations

import asyncio
import collections
import os
import re
import secrets
import shutil
import threading
import time
from dataclasses import dataclass, field
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

from python_multipart.multipart import MultipartParser, parse_options_header

from acceltrace.ingest.arriving import Arriving
from acceltrace.server import ingest_child
from acceltrace.server.deps import ApiError, AppState
from acceltrace.store import content

_SAFE = re.compile(r"[^A-Za-z0-9._+-]")
BLOCK_BYTES = 1 << 20   # what the loop hands the upload's thread at a time
BLOCKS_IN_FLIGHT = 2    # the loop waits (without blocking) beyond this: memory stays bounded
UPLOAD_NICE = 5         # the receiving thread's priority below the worker's (Linux: per thread)


@dataclass
class Received:
    path: Path
    name: str
    size: int
    digest: str  # its content hash (store/content.py)
    work_dir: Path
    arriving: bool = False  # an ingest reads it as it arrives: the caller marks it complete or failed


def safe_name(name: str | None) -> str:
    """A file name we can put on disk that keeps the suffixes format detection uses."""
    base = os.path.basename((name or "").replace("\\", "/")).strip() or "upload"
    base = _SAFE.sub("_", base)[-120:].lstrip(".") or "upload"
    return base


class _Sink:
    """Writes received bytes to one file, counting and hashing them, enforcing the limit. `arriving`: an
    ingest reads the file as it grows, so each write reaches the file at once (no bytes held back in
    a buffer)."""

    def __init__(self, path: Path, limit: int):
        self.path = path
        self.limit = limit
        self.fh = open(path, "wb")
        self.size = 0
        self.hash = content.Hasher()
        self.arriving = False

    def write(self, data: bytes) -> None:
        self.size += len(data)
        if self.size > self.limit:
            raise ApiError(413, "too_large", f"upload exceeds the limit of {self.limit} bytes")
        self.hash.update(data)
        self.fh.write(data)
        if self.arriving:
            self.fh.flush()

    def close(self) -> None:
        self.fh.close()


class _Receiver:
    """The body's blocks processed in order on a thread of this upload's own: `consume(block)`
    (parsing, hashing, writing) runs there, never in the event loop; an error it raises comes back
    at the next `feed` or at `finish`."""

    def __init__(self, consume, limit: int):
        self._consume = consume
        self.limit = limit
        self.size = 0
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="upload", initializer=_lower_priority)
        self._pending: list[bytes] = []
        self._pending_bytes = 0
        self._inflight: collections.deque[Future] = collections.deque()

    async def feed(self, chunk: bytes) -> None:
        self.size += len(chunk)
        if self.size > self.limit:
            raise ApiError(413, "too_large", f"upload exceeds the limit of {self.limit} bytes")
        if chunk:
            self._pending.append(chunk)
            self._pending_bytes += len(chunk)
        if self._pending_bytes >= BLOCK_BYTES:
            await self._hand_over()

    async def _hand_over(self) -> None:
        if not self._pending:
            return
        chunks, self._pending, self._pending_bytes = self._pending, [], 0
        while len(self._inflight) >= BLOCKS_IN_FLIGHT:
            await asyncio.wrap_future(self._inflight.popleft())
        self._inflight.append(self._pool.submit(self._run, chunks))

    def _run(self, chunks: list[bytes]) -> None:  # on the upload's thread: the join's copy too
        self._consume(chunks[0] if len(chunks) == 1 else b"".join(chunks))

    async def finish(self, then=None) -> None:
        """Every block consumed, then `then()` on the same thread (after the last block)."""
        await self._hand_over()
        while self._inflight:
            await asyncio.wrap_future(self._inflight.popleft())
        if then is not None:
            await asyncio.wrap_future(self._pool.submit(then))

    async def close(self) -> None:
        """Wait for what is in flight (errors ignored: the caller is already failing or done), then
        let the thread go."""
        while self._inflight:
            try:
                await asyncio.wrap_future(self._inflight.popleft())
            except BaseException:
                pass
        self._pool.shutdown(wait=False)


def _lower_priority() -> None:
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), min(19, os.getpriority(os.PRIO_PROCESS, 0)
                                                                      + UPLOAD_NICE))
    except (AttributeError, OSError):  # not Linux, or not allowed: the thread keeps the worker's priority
        pass


def streamable(filename: str) -> bool:
    """An upload that can be ingested as it arrives: a JSON trace, plain or gzip (not an archive: a zip's
    directory is at its end, a tar's members are listed by a pass of their own). Off with
    ACCELTRACE_INGEST_WHILE_UPLOADING=0 (docs/operations.md): every upload is then ingested once whole."""
    if os.environ.get("ACCELTRACE_INGEST_WHILE_UPLOADING", "1") == "0":
        return False
    low = filename.lower()
    return low.endswith((".json", ".json.gz"))


async def receive(request, state: AppState, raw_name: str | None, on_file=None) -> Received:
    """Stream the body (multipart field `file`, or raw with ?name=) into the store's tmp dir.

    on_file(path, filename, declared): called (on the upload's thread) as the file is about to be
    written; True when it started an ingest that reads the file as it arrives. The file is then marked
    failed if the body is not received well (and left for that ingest's job to remove); received well,
    the caller marks it (`Received.arriving`): complete, or failed when it is a duplicate, so that its
    ingest cannot publish before the duplicate check."""
    limit = state.max_upload_bytes
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit + 64 * 1024:
        raise ApiError(413, "too_large", f"upload of {declared} bytes exceeds the limit of {limit} bytes")
    expected = int(declared) if declared and declared.isdigit() else None
    # <token>.<pid>.upload: Store.sweep removes it if this process dies mid-upload
    work_dir = state.store.tmp_dir / f"up-{secrets.token_hex(8)}.{os.getpid()}.upload"
    work_dir.mkdir(parents=True)
    sinks: list[_Sink] = []

    def opened(sink: _Sink, filename: str) -> None:
        sinks.append(sink)
        if on_file is not None and on_file(sink.path, filename, expected):
            sink.arriving = True

    try:
        ctype, params = parse_options_header(request.headers.get("content-type", ""))
        if ctype == b"multipart/form-data":
            rec = await _receive_multipart(request, work_dir, limit, params, opened)
        else:
            name = safe_name(raw_name)
            sink = _Sink(work_dir / name, limit)
            opened(sink, raw_name or name)
            rx = _Receiver(sink.write, limit)
            try:
                async for chunk in request.stream():
                    await rx.feed(chunk)
                await rx.finish()
            finally:
                await rx.close()
                sink.close()
            if sink.size == 0:
                raise ApiError(400, "bad_request",
                               "empty upload; expected a trace file in the body or multipart field 'file'")
            rec = Received(sink.path, raw_name or name, sink.size, sink.hash.hexdigest(), work_dir)
        rec.arriving = any(k.arriving for k in sinks)  # the caller marks it complete (or a duplicate)
        return rec
    except BaseException as e:
        arriving = [k for k in sinks if k.arriving]
        for sink in arriving:  # its ingest fails, and its job removes the directory once that has ended
            sink.close()
            Arriving.failed(sink.path, e.message if isinstance(e, ApiError) else "the upload was cut off")
        if not arriving:
            shutil.rmtree(work_dir, ignore_errors=True)
        raise


async def _receive_multipart(request, work_dir: Path, limit: int, params: dict, opened) -> Received:
    boundary = params.get(b"boundary")
    if not boundary:
        raise ApiError(400, "bad_request", "multipart body without a boundary")
    state = {"headers": {}, "field": None, "sink": None, "filename": None, "header_name": b"", "header_value": b""}
    found: list[tuple[str, _Sink]] = []

    def on_header_field(data, start, end):
        state["header_name"] += data[start:end]

    def on_header_value(data, start, end):
        state["header_value"] += data[start:end]

    def on_header_end():
        state["headers"][state["header_name"].lower()] = state["header_value"]
        state["header_name"], state["header_value"] = b"", b""

    def on_headers_finished():
        disp, opts = parse_options_header(state["headers"].get(b"content-disposition", b""))
        field_name = opts.get(b"name", b"").decode("utf-8", "replace")
        if field_name == "file" and state["sink"] is None and not found:
            filename = opts.get(b"filename", b"upload").decode("utf-8", "replace")
            state["filename"] = filename
            state["sink"] = _Sink(work_dir / safe_name(filename), limit)
            state["field"] = "file"
            opened(state["sink"], filename)
        else:
            state["field"] = None

    def on_part_data(data, start, end):
        if state["field"] == "file":
            state["sink"].write(data[start:end])

    def on_part_end():
        if state["field"] == "file":
            state["sink"].close()
            found.append((state["filename"], state["sink"]))
        state["headers"], state["field"] = {}, None

    parser = MultipartParser(boundary, {
        "on_header_field": on_header_field, "on_header_value": on_header_value, "on_header_end": on_header_end,
        "on_headers_finished": on_headers_finished, "on_part_data": on_part_data, "on_part_end": on_part_end,
    })

    def parsed(step):  # on the upload's thread: a malformed body is a 400, the sink's 413 stays
        def run(*args) -> None:
            try:
                step(*args)
            except ApiError:
                raise
            except Exception as e:
                raise ApiError(400, "bad_request", f"malformed multipart body: {e}") from None
        return run

    rx = _Receiver(parsed(parser.write), limit + 64 * 1024)  # the file part's own size: its sink's limit
    try:
        async for chunk in request.stream():
            await rx.feed(chunk)
        await rx.finish(then=parsed(parser.finalize))
    finally:
        await rx.close()
        if state["sink"] is not None:
            state["sink"].close()
    if not found:
        raise ApiError(400, "bad_request", "multipart body has no field 'file'; expected the trace in field 'file'")
    filename, sink = found[0]
    if sink.size == 0:
        raise ApiError(400, "bad_request", f"uploaded file {filename!r} is empty")
    return Received(sink.path, filename, sink.size, sink.hash.hexdigest(), work_dir)


@dataclass
class IngestJob:
    trace_id: str
    done: threading.Event = field(default_factory=threading.Event)
    error: str | None = None
    tmp_path: Path | None = None
    # the upload it reads as it arrives failed, or was a duplicate: once the ingest ends its row and files go
    discard: bool = False


def start_ingest(state: AppState, rec: Received, display_name: str) -> IngestJob | dict:
    """Register the trace (so its id exists and shows 'ingesting'), then ingest it in a process of
    its own (server/ingest_child.py: lower priority, never in the server's event loop or thread
    pool). A thread here waits for it; the progress travels through the catalog.

    When the same content is already ready or being ingested (a concurrent upload of the same
    file), nothing starts: the catalog row of that trace is returned instead."""
    existing, trace_id, tmp_path = state.store.begin_unique(display_name, rec.size, rec.digest)
    if existing is not None:
        shutil.rmtree(rec.work_dir, ignore_errors=True)
        return existing
    return _launch(state, trace_id, tmp_path, rec.path, display_name, rec.work_dir)


def start_arriving_ingest(state: AppState, path: Path, display_name: str, expected: int | None) -> IngestJob:
    """start_ingest() for an upload still arriving at `path` (receive()'s on_file): the row is begun
    without a hash (claim_content() sets it, or finds the duplicate, once every byte is in), and the
    ingest reads the file as it grows."""
    trace_id, tmp_path = state.store.begin(display_name, expected, None)
    return _launch(state, trace_id, tmp_path, path, display_name, path.parent, expected=expected, arriving=True)


def _launch(state: AppState, trace_id: str, tmp_path: Path, path: Path, display_name: str, work_dir: Path,
            expected: int | None = None, arriving: bool = False) -> IngestJob:
    job = IngestJob(trace_id, tmp_path=tmp_path)
    root = str(state.store.root)

    def run() -> None:
        try:
            with state.ingest_slots:
                try:
                    job.error = state.ingests.run(ingest_child.ingest, root, str(path), display_name, trace_id,
                                                  str(tmp_path), expected, arriving)
                except BrokenProcessPool:
                    job.error = (f"{display_name}: the server stopped before its ingest ended; upload it again"
                                 if state.ingests.closed else
                                 f"{display_name}: the ingest process died (out of memory or killed)")
                except BaseException as e:  # never let a thread die silently with the row 'ingesting'
                    job.error = f"{display_name}: internal error while ingesting: {type(e).__name__}: {e}"
                if job.error is not None:
                    row = state.store.get(trace_id)
                    if row is not None and row["status"] == "ingesting":  # the process could not say so
                        state.store.fail(trace_id, tmp_path, job.error, keep_row=True)
                if job.discard:  # nobody is shown this trace: the upload's own answer says why
                    _discard(state, trace_id, tmp_path)
                published = job.error is None and not job.discard
                if published:  # (its upload was marked complete before its ingest could end)
                    _cleared(job, work_dir)
                    try:  # the coarse tiles every first viewer asks for (a cache: failures are harmless)
                        state.ingests.run(ingest_child.prebuild, root, trace_id)
                    except BaseException:
                        pass
            if not published and arriving:  # an ingest that ended early: its upload may still be writing
                Arriving(path).until_marked()  # there (waited for outside the ingest slots: they are for ingests)
            if published:
                try:  # a trace too big to replay at analysis: its what-if step, at idle priority, after the
                    # upload is answered and outside the ingest slots (its findings keep impact_ns NULL, saying
                    # why, if it fails)
                    state.ingests.run(ingest_child.whatif, root, trace_id)
                except BaseException:
                    pass
        finally:
            _cleared(job, work_dir)

    threading.Thread(target=run, name=f"ingest-{trace_id}", daemon=True).start()
    return job


def _cleared(job: IngestJob, work_dir: Path) -> None:
    """The upload's files removed, then the job said done (its ingest has ended, nothing of it is left
    in the upload's directory)."""
    shutil.rmtree(work_dir, ignore_errors=True)
    job.done.set()


def _discard(state: AppState, trace_id: str, tmp_path: Path) -> None:
    """The row and files of an ingest whose upload failed or was a duplicate, whatever it came to."""
    row = state.store.get(trace_id)
    if row is None:
        return
    if row["status"] == "ready":
        state.store.remove(trace_id)
    else:
        state.store.fail(trace_id, tmp_path, "discarded", keep_row=False)


def discard_when_ended(state: AppState, job: IngestJob, timeout_s: float = 600.0) -> None:
    """Mark the job's trace for removal, wait (in a thread of the caller's) until its ingest has ended and
    remove what it left, so that the answer that says the upload failed (or was a duplicate) is not
    followed by a row of it. Its ingest stops at its next read once the upload is marked failed."""
    job.discard = True
    job.done.wait(timeout_s)
    _discard(state, job.trace_id, job.tmp_path)


def wait_published(state: AppState, job: IngestJob, timeout_s: float) -> dict | None:
    """The trace's catalog row once it is published (its job may still be building the views' precompute
    and running the analysis: the page shows "analysing" and the findings arrive by push), or once its
    job ended (a failure: its files are gone by then), or after timeout_s: so the upload is answered as
    soon as the trace can be viewed."""
    deadline = time.monotonic() + timeout_s
    while True:
        ended = job.done.is_set()  # read before the row: the row is then at least as new as the job's end
        row = state.store.get(job.trace_id)
        if ended or (row is not None and row["status"] == "ready") or time.monotonic() >= deadline:
            return row
        job.done.wait(0.02)


def wait_for_row(state: AppState, trace_id: str, timeout_s: float) -> dict | None:
    """The catalog row of a trace another request is ingesting, once it is no longer 'ingesting'
    or timeout_s has passed (an upload deduplicated onto an ingest in progress waits as its own would)."""
    deadline = time.monotonic() + timeout_s
    row = state.store.get(trace_id)
    while row is not None and row["status"] == "ingesting" and time.monotonic() < deadline:
        time.sleep(0.1)
        row = state.store.get(trace_id)
    return row
