"""From paths the user gave to published traces: expand, detect, build, publish, then post-steps."""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import duckdb

from acceltrace.ingest import memory, registry, spill
from acceltrace.ingest.builder import TraceBuilder
from acceltrace.ingest.importer import Importer, ImportSession
from acceltrace.ingest.made_ahead import to_its_end
from acceltrace.store.errors import IngestError
from acceltrace.ingest.arriving import Arriving
from acceltrace.ingest.sources import Source, open_sources, stem
from acceltrace.store import aggregates, content, duck
from acceltrace.store.catalog import Store

# What runs after a trace is published (the analysis passes): the caller passes it in, so
# ingest knows nothing of analysis. Its failures become warnings of the result.
AfterPublish = Callable[[Store, str], None]

_SKIP_NAMES = {"readme", "readme.md", "attribution.md", "license", "licence", "notice"}


@dataclass
class Result:
    name: str
    id: str | None = None
    format: str | None = None
    counts: dict = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    error: str | None = None
    skipped: bool = False  # already in the store (same content)

    def as_json(self) -> dict:
        d = {"id": self.id, "name": self.name, "format": self.format}
        for k in ("tracks", "slices", "flows", "counters", "warnings"):
            d[k] = self.counts.get(k, 0)
        if self.error:
            d["error"] = self.error
        if self.skipped:
            d["skipped"] = True
        return d


def expand_inputs(paths: list[Path]) -> list[Path]:
    """Directories that are not run directories stand for the trace files inside them.

    Inside a directory, subfolders named `invalid` (the bad-input fixtures next to the
    sample traces) are left out; name such a folder or file directly to ingest it.
    """
    out: list[Path] = []
    for p in paths:
        p = Path(p)
        if p.is_dir() and not registry.claimed_dir(p):
            for child in sorted(p.iterdir()):
                if child.name.startswith(".") or child.name.lower() in _SKIP_NAMES or child.suffix in (".md", ".txt"):
                    continue
                if child.is_dir() and child.name == "invalid":
                    continue
                out.extend(expand_inputs([child]))
        else:
            out.append(p)
    return out


def _size(paths: list[Path]) -> int:
    total = 0
    for p in paths:
        if p.is_dir():
            total += sum(f.stat().st_size for f in p.rglob("*") if f.is_file())
        elif p.exists():
            total += p.stat().st_size
    return total


SMALL_BUILD_BYTES = 256 << 20  # Chrome JSON up to this size builds with DuckDB at one thread (ingest/opening.py)


def _small_build(detected: list, paths: list[Path], arriving: Arriving | None) -> bool:
    """Chrome JSON alone, of at most SMALL_BUILD_BYTES (a gzip file's own count of its bytes; an upload
    still arriving, its announced size, unless gzipped): the build keeps DuckDB at one thread from its
    start (200 MB of JSON 6 % sooner; 830 MB 6 % later, so not past this size)."""
    if not detected or any(isinstance(imp, IngestError) or imp.name != "chrome" for _, imp in detected):
        return False
    if arriving is not None:
        gz = any(p.name.lower().endswith(".gz") for p in paths)
        return not gz and 0 < (arriving.expected or 0) <= SMALL_BUILD_BYTES
    return sum(_json_bytes(p) for p in paths) <= SMALL_BUILD_BYTES


def _json_bytes(p: Path) -> int:
    """The bytes of the input once inflated: a gzip file's last four bytes say (modulo 4 GB), else its size."""
    if p.is_dir():
        return _size([p])
    size = p.stat().st_size if p.exists() else 0
    if p.suffix.lower() == ".gz" and size >= 18:
        with open(p, "rb") as f:
            f.seek(-4, os.SEEK_END)
            return max(size, int.from_bytes(f.read(4), "little"))
    return size


def ingest_paths(
    store: Store,
    paths: list[Path],
    name: str | None = None,
    merge: bool = False,
    skip_existing: bool = False,
    keep_failed: bool = False,
    progress: Callable[[str, float], None] | None = None,
    after_publish: AfterPublish | None = None,
    views: bool = True,
) -> list[Result]:
    """Ingest each path as a trace (or all of them as one with merge); never raises IngestError."""
    paths = [Path(p) for p in paths]
    groups = [paths] if merge else [[p] for p in expand_inputs(paths)]
    results = []
    for group in groups:
        label = name or (group[0].name if len(group) == 1 else f"{group[0].name} (+{len(group) - 1})")
        results.append(
            ingest_one(store, group, label, merge=merge, skip_existing=skip_existing,
                       keep_failed=keep_failed, progress=progress, after_publish=after_publish, views=views)
        )
    return results


def ingest_one(
    store: Store,
    paths: list[Path],
    label: str,
    merge: bool = False,
    skip_existing: bool = False,
    keep_failed: bool = False,
    progress: Callable[[str, float], None] | None = None,
    trace_id: str | None = None,
    tmp_path: Path | None = None,
    after_publish: AfterPublish | None = None,
    threads: int | None = None,
    views: bool = True,
    arriving: Arriving | None = None,
) -> Result:
    """Build one trace from paths; with trace_id/tmp_path given, fill a catalog row begun earlier.
    threads: DuckDB threads of the build (a fleet's map runs one per worker process: 1).
    views: build the views' whole-trace aggregates (store/aggregates.py build_side) once published.
    arriving: paths is one upload still being written (ingest/arriving.py): read as it arrives."""
    with ExitStack() as heap:  # a small build's freed blocks reused, to the end (ingest/memory.py)
        return _ingest_one(heap, store=store, paths=paths, label=label, merge=merge, skip_existing=skip_existing,
                           keep_failed=keep_failed, progress=progress, trace_id=trace_id, tmp_path=tmp_path,
                           after_publish=after_publish, threads=threads, views=views, arriving=arriving)


def _ingest_one(heap: ExitStack, *, store, paths, label, merge, skip_existing, keep_failed, progress, trace_id,
                tmp_path, after_publish, threads, views, arriving) -> Result:
    res = Result(name=label)
    digest = None
    hashing = None  # the hash of a new row, computed beside the ingest (store/content.py: without the GIL)
    try:
        if trace_id is None and skip_existing:  # needed first: an input already in the store is skipped
            digest = content.of_paths(paths)
        else:  # a row begun earlier has its hash already (an upload hashes as it arrives)
            for p in paths:
                if not p.is_dir():
                    open(p, "rb").close()
            if trace_id is None:
                hashing = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ingest-hash")
                digest = hashing.submit(content.of_paths, paths)
    except OSError as e:
        res.error = f"{paths[0]}: cannot read ({e.strerror or e})"
        return res
    total = max(1, _size(paths)) if arriving is None else max(1, arriving.expected or 0)
    done = 0

    def on_read(n: int) -> None:
        nonlocal done
        done += n
        # an upload still arriving goes by its declared size; one of undeclared length (chunked) claims no
        # share until it is whole
        of = total if arriving is None else arriving.known_size()
        if progress and of:
            progress(label, min(1.0, done / of))

    if trace_id is None and skip_existing:  # the check and the insert in one transaction: no twin
        have, trace_id, tmp_path = store.begin_unique(label, total, digest)
        if have is not None:
            res.id, res.format, res.counts, res.skipped = have["id"], have["format"], have["counts"], True
            return res
    elif trace_id is None:
        trace_id, tmp_path = store.begin(label, total, None)  # its hash is set when it is published
    res.id = trace_id
    builder = None
    stopped: BaseException | None = None  # Ctrl-C mid-build: raised again once the build and its row are gone
    try:
        sources: list[Source] = []
        for p in paths:
            srcs = open_sources(p, on_read, arriving=arriving)
            if merge or len(paths) > 1:
                for s in srcs:
                    s.group = s.group if len(srcs) > 1 else stem(p.name)
            elif len(srcs) == 1:
                srcs[0].group = None
            sources.extend(srcs)
        detected: list[tuple[Source, Importer | IngestError]] = []
        for src in sources:
            try:
                detected.append((src, registry.detect(src)))
            except IngestError as e:
                if len(sources) == 1:
                    raise
                detected.append((src, e))  # one unreadable member of an archive: said below, the rest kept
        small = _small_build(detected, paths, arriving)
        if small:  # (a bigger build keeps glibc's own rule: its peak is what its memory bound is about)
            heap.enter_context(memory.kept_heap())
        builder = TraceBuilder(tmp_path, threads=threads, small=small)
        builder.sole_source = sum(not isinstance(imp, IngestError) for _, imp in detected) == 1
        sessions: dict[str, tuple[Importer, ImportSession]] = {}
        for src, imp in detected:
            if isinstance(imp, IngestError):
                builder.warn(src.name, f"skipped: {imp.detail}")
                continue
            if imp.name not in sessions:
                sessions[imp.name] = (imp, imp.session(builder))
            sessions[imp.name][1].add(src)
        if not sessions:
            raise IngestError(label, "no member of the archive is a recognised trace")
        for _, session in sessions.values():
            session.finish()
        fmts = sorted(sessions)
        fmt = fmts[0] if len(fmts) == 1 else "+".join(fmts)
        res.counts = builder.finish(fmt, label)
        res.format = fmt
        res.warnings = list(builder.warnings.kept)
        try:
            hashed = digest.result() if hashing is not None else None
        except OSError as e:  # the file changed under us while it was read twice
            raise IngestError(label, f"cannot read the input again to hash it ({e.strerror or e})")
        store.publish(trace_id, tmp_path, fmt, res.counts, content_hash=hashed)
    except IngestError as e:
        res.error = str(e)
    except MemoryError:
        res.error = f"{label}: ran out of memory while ingesting"
    except Exception as e:  # an ingester bug must not take the process down or leave a half trace
        if interrupted(e):
            res.error, stopped = f"{label}: interrupted", KeyboardInterrupt()
        else:
            res.error = f"{label}: internal error while ingesting: {type(e).__name__}: {e}"
    except BaseException as e:  # Ctrl-C between queries (or an exit): the build's threads are stopped first, else
        res.error, stopped = f"{label}: interrupted", e  # they run on into the interpreter's exit, which aborts
    finally:
        if res.error and builder is not None:
            builder.abort()
        if hashing is not None:
            hashing.shutdown(wait=True, cancel_futures=True)
    if res.error:
        store.fail(trace_id, tmp_path, res.error, keep_row=keep_failed)
        if stopped is not None:
            raise stopped
        if not keep_failed:
            res.id = None
        return res
    # a trace the builder built in its bounded regime (past the spill threshold): each post-publish step keeps both
    # cores busy on its own and their DuckDB memory adds up: at 6 M slices 2.28 GB at once, 1.57-1.64 GB one after
    # the other in the same time, 1.24-1.27 GB (the ingest's own peak) with DuckDB at AFTER_MEMORY, the command's
    # time level (docs/performance.md)
    big = builder.spilling
    with duck.memory_limit_here(spill.AFTER_MEMORY) if big else nullcontext():
        _after_publish(store, trace_id, res, label, views, after_publish, together=threads != 1 and not big)
    return res


def _after_publish(store: Store, trace_id: str, res: Result, label: str, views: bool,
                   after_publish: AfterPublish | None, together: bool) -> None:
    """The views' whole-trace aggregates (a side file) and the caller's post-step (the analysis) on a published
    trace; each failure a warning of `res`, a Ctrl-C in either raised once both are done. The views run on a thread
    of their own; `together`: the post-step beside them, on this one. Each
    reads the trace on a connection of its own and writes a side file of its own, and each keeps about one
    core busy (A100: 0.21 s and 0.42 s; diffusion: 1.2 s and 0.6 s), so the findings come that much sooner.
    In turn (views first, the shorter) for a one-thread build and past the spill threshold."""

    stop: list[BaseException] = []  # Ctrl-C in a step: the trace stays published, without that step's results,
    # and the command stops once the steps under way have (a step's failure is a warning)

    def build_views() -> None:  # (on its thread: DuckDB interrupts only the main thread's queries at Ctrl-C)
        try:
            aggregates.build_side(store, trace_id)
        except Exception as e:  # the views then compute from the slices
            res.warnings.append(f"{label}: the views' precompute failed: {type(e).__name__}: {e}")

    def post() -> None:
        try:
            after_publish(store, trace_id)
        except Exception as e:
            if interrupted(e):
                stop.append(KeyboardInterrupt())
            else:
                res.warnings.append(f"{label}: post-ingest step failed: {type(e).__name__}: {e}")

    # The views' precompute runs on a thread of its own either way: off the main thread DuckDB does not stop its
    # queries at Ctrl-C, and stopping its frames' recursive query can hang DuckDB 2.0.1 (in its cancel of the
    # query's tasks; 8 of 12 tries on a standalone recursive query): it runs to its end, the command stops after.
    beside = threading.Thread(target=build_views, name="views-precompute") if views else None
    try:
        if beside is not None:
            beside.start()
            if not together:
                _views_done(beside, stop)
        if after_publish is not None and not stop:
            post()
    except KeyboardInterrupt as e:  # (one met in start() too: the thread may be running by then)
        stop.append(e)
    finally:
        if beside is not None and beside.ident is not None:
            _views_done(beside, stop)
    if stop:
        raise stop[0]


def _views_done(thread: threading.Thread, stop: list[BaseException]) -> None:
    """Waits for the views' thread to end, through a Ctrl-C, which is kept in `stop`."""
    stopped = to_its_end(lambda _: thread.join())
    if stopped is not None:
        stop.append(stopped)


def interrupted(e: BaseException | None) -> bool:
    """Whether `e` comes of a Ctrl-C: DuckDB's answer to it (while a query runs on the main thread DuckDB takes
    SIGINT itself and raises "Query interrupted", a RuntimeError in 2.0.1, in place of KeyboardInterrupt; one met
    in Python code it called, reading a registered Arrow object, comes back inside its own error's text), or an
    error met while a KeyboardInterrupt was on its way (closing a connection that a thread still uses, say)."""
    seen = set()  # a chain set by hand may loop
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        text = str(e)
        if (isinstance(e, (KeyboardInterrupt, duckdb.InterruptException)) or text.startswith("Query interrupted")
                or (isinstance(e, duckdb.Error) and "KeyboardInterrupt" in text)):
            return True
        e = e.__cause__ or e.__context__
    return False

