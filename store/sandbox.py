"""Read-only SQL on one trace: no writes, no other files, no extensions, no network, bounded time and memory.

One fresh connection per query: the trace attached READ_ONLY, side files (findings)
visible as views, then external access disabled and the configuration locked, so a
query cannot ATTACH, COPY, read_csv, INSTALL, LOAD from disk or SET its way out. Only one
statement, and only SELECT or EXPLAIN, is accepted (so no CREATE TEMP, no in-memory ATTACH,
no PRAGMA). A watchdog interrupts a query that outruns its time limit.

run_limited runs that in a process of its own (a fresh interpreter: about 0.13 CPU-s of imports before
the query, 0.13-0.27 s of a trivial query's wall time on a quiet machine; the query at lower CPU
priority), whose address space is capped with
RLIMIT_AS: DuckDB's memory_limit covers only its buffer manager, not every allocation (a 3 GB `repeat()`
string went straight past it), so the kernel's limit is what holds. The process works inside the store's
folder and attaches the files by relative path, so `duckdb_databases()` and the settings never show where the
store is. A query that outlives its limit is interrupted, then the process is killed.

A server's queries (run_limited(ahead=True)) take a process started ahead, its imports done, waiting
on its stdin; each such query starts the next one's as it ends, and make_ahead starts one (a served
worker's start, the views page). One waits per store in each server process (63 MB
resident, most of it DuckDB's library); it has nothing of a query before its arguments arrive, so it
is the same as a fresh one.
"""

from __future__ import annotations

import atexit
import os
import re
import resource
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import duckdb

from acceltrace.store.catalog import Store

DEFAULT_TIMEOUT_S = 10.0
DEFAULT_MAX_ROWS = 10_000
DEFAULT_MEMORY_BYTES = 1 << 30  # what one query may allocate beyond the process it starts in
KILL_GRACE_S = 2.0  # after the time limit, the interrupt's grace before SIGKILL
ALLOWED_STATEMENTS = ("SELECT", "EXPLAIN")
# catalog functions that name files on disk (the store's absolute path), and the functions that
# run SQL built from a string (which would get round this check); refused by name
_PATH_FUNCTIONS = re.compile(
    r"\b(duckdb_databases|database_list|pragma_database_list|duckdb_temporary_files|duckdb_external_file_cache"
    r"|duckdb_extensions|duckdb_extension_repositories|duckdb_settings|current_setting|pg_settings)\b"
    r"|\b(query|query_table)\s*\(", re.IGNORECASE)


class QueryError(Exception):
    """The query was refused, failed or ran out of time; str() says which and why."""

    def __init__(self, message: str, code: str = "query_failed"):
        super().__init__(message)
        self.code = code


def check_statement(sql: str) -> None:
    """Exactly one SELECT (or EXPLAIN) statement, else QueryError('query_refused')."""
    if not sql or not sql.strip():
        raise QueryError("empty query; expected one SQL statement", "bad_request")
    try:
        stmts = duckdb.extract_statements(sql)
    except duckdb.Error as e:
        raise QueryError(f"{type(e).__name__}: {e}", "query_failed") from None
    if len(stmts) != 1:
        raise QueryError(f"expected one SQL statement, got {len(stmts)}", "query_refused")
    kind = stmts[0].type.name
    if kind not in ALLOWED_STATEMENTS:
        raise QueryError(f"only read-only SELECT queries are allowed here, not {kind}", "query_refused")
    m = _PATH_FUNCTIONS.search(sql)
    if m:
        raise QueryError(f"{(m.group(1) or m.group(2)).lower()}() is not available in trace queries (it names files "
                         "on the server or runs SQL from a string)", "query_refused")


def _lock_down(con: duckdb.DuckDBPyConnection, memory_limit: str) -> duckdb.DuckDBPyConnection:
    con.execute(f"SET memory_limit = '{memory_limit}'")
    con.execute("SET threads = 2")
    con.execute("SET enable_external_access = false")
    con.execute("SET lock_configuration = true")
    return con


def open_sandboxed(store: Store, trace_id: str, memory_limit: str = "1GB") -> duckdb.DuckDBPyConnection:
    return _lock_down(store.connect(trace_id), memory_limit)


def _open_relative(con: duckdb.DuckDBPyConnection, trace_id: str, memory_limit: str,
                   temp_max: str) -> duckdb.DuckDBPyConnection:
    """As Store.connect, from inside the store's folder (cwd), with relative paths only, in `con`: an
    in-memory instance made before the query's arguments came, nothing attached yet."""
    path = Path("traces") / f"{trace_id}.duckdb"
    if not path.exists():
        raise FileNotFoundError(f"trace {trace_id} not found")
    con.execute(f"SET memory_limit = '{memory_limit}'")
    con.execute(f"SET temp_directory = 'tmp/duck.{os.getpid()}.query'")
    con.execute(f"SET max_temp_directory_size = '{temp_max}'")
    con.execute(f"ATTACH '{path}' AS trace (READ_ONLY)")
    for kind in ("findings", "views"):  # the side files, as Store.connect attaches them
        side = Path("traces") / f"{trace_id}.{kind}.duckdb"
        if side.exists():
            con.execute(f"ATTACH '{side}' AS side_{kind} (READ_ONLY)")
            for (tname,) in con.execute("SELECT table_name FROM duckdb_tables() WHERE database_name = ?",
                                        [f"side_{kind}"]).fetchall():
                con.execute(f'CREATE TEMP VIEW "{tname}" AS SELECT * FROM side_{kind}."{tname}"')
    con.execute("USE trace")
    return con


def _execute(con: duckdb.DuckDBPyConnection, sql: str, max_rows: int | None, timeout_s: float | None,
             params: list | None, limit_s: float | None = None) -> tuple[list[str], list[tuple], bool]:
    """Run and fetch, interrupted after timeout_s (the limit the caller named is limit_s)."""
    limit_s = limit_s or timeout_s
    timed_out = threading.Event()

    def stop():
        timed_out.set()
        con.interrupt()

    timer = threading.Timer(timeout_s, stop) if timeout_s else None
    try:
        if timer:
            timer.start()
        cur = con.execute(sql, params or [])
        if cur.description is None:
            return [], [], False
        cols = [d[0] for d in cur.description]
        if max_rows is None:
            rows = cur.fetchall()
            truncated = False
        else:
            rows = cur.fetchmany(max_rows + 1)
            truncated = len(rows) > max_rows
            rows = rows[:max_rows]
        return cols, rows, truncated
    except duckdb.Error as e:
        if timed_out.is_set():
            raise QueryError(f"query stopped after the {limit_s:g} s time limit", "query_timeout") from None
        kind = type(e).__name__
        if kind == "OutOfMemoryException" or "out of memory" in str(e).lower():
            raise QueryError(f"query stopped: it needs more memory than its limit ({e})", "query_memory") from None
        code = "query_refused" if kind in ("PermissionException", "InvalidInputException") else "query_failed"
        raise QueryError(f"{kind}: {e}", code) from None
    except MemoryError:
        raise QueryError("query stopped: it needs more memory than its limit", "query_memory") from None
    finally:
        if timer:
            timer.cancel()


def run_readonly(
    store: Store,
    trace_id: str,
    sql: str,
    max_rows: int | None = DEFAULT_MAX_ROWS,
    timeout_s: float | None = DEFAULT_TIMEOUT_S,
    params: list | None = None,
) -> tuple[list[str], list[tuple], bool]:
    """(columns, rows, truncated), in this process (no memory cap; see run_limited). Raises QueryError."""
    check_statement(sql)
    con = open_sandboxed(store, trace_id)
    try:
        return _execute(con, sql, max_rows, timeout_s, params)
    finally:
        con.close()


# -- a process per query ----------------------------------------------------------------------
def _status_bytes(key: str) -> int:
    """A "kB" figure of /proc/self/status, in bytes (0 where there is none)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
    return 0


def _peak_bytes() -> int:
    """This process's own resident peak. Not getrusage: Linux carries a parent's resident size over
    a fork and an exec into the child's ru_maxrss (a query started from a 1.6 GB process "peaked" at
    1.6 GB), while VmHWM belongs to the memory map the exec made."""
    return _status_bytes("VmHWM")


def _child_main() -> None:
    """The query process (_BOOT; `python -m acceltrace.store.sandbox` too): one query, its arguments
    pickled on stdin, the answer pickled on stdout."""
    import pickle

    out = sys.stdout.buffer
    try:
        blank = duckdb.connect(":memory:")  # ~15-25 ms: made before the query's arguments come
        a = pickle.loads(sys.stdin.buffer.read())
        os.nice(a["nice"])  # after the imports, as a fresh process's: at the caller's priority, ready sooner
        os.chdir(a["root"])  # absolute: the store's folder, whatever the caller's working directory
        mem = a["memory_bytes"]
        limit = f"{max(64, (mem * 3 // 4) >> 20)}MB"
        con = _lock_down(_open_relative(blank, a["trace_id"], limit, f"{max(64, mem >> 20)}MB"), limit)
        # the cap counts from here: what the process already maps (Python, DuckDB) is not the query's
        cap = _status_bytes("VmSize") + mem
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
        # the time limit counts from the caller's start, so this process's own start-up is inside it
        left = None if a["deadline"] is None else max(0.05, a["deadline"] - time.time())
        answer = ("ok", _execute(con, a["sql"], a["max_rows"], left, None, a["timeout_s"]))
    except QueryError as e:
        answer = ("error", (str(e), e.code))
    except FileNotFoundError as e:
        answer = ("missing", str(e))
    except MemoryError:
        answer = ("error", ("query stopped: it needs more memory than its limit", "query_memory"))
    except BaseException as e:  # reported as a failed query, never a traceback
        answer = ("error", (f"{type(e).__name__}: {e}", "query_failed"))
    try:
        data = pickle.dumps(answer, protocol=pickle.HIGHEST_PROTOCOL)
    except MemoryError:
        data = pickle.dumps(("error", ("query stopped: its answer needs more memory than the limit",
                                       "query_memory")))
    except Exception as e:  # a value pickle cannot carry
        data = pickle.dumps(("error", (f"query answer cannot be returned: {e}", "query_failed")))
    try:
        peak = _peak_bytes()
    except (OSError, ValueError):
        peak = 0
    out.write(peak.to_bytes(8, "little") + data)  # the peak first: a cut-short answer never unpickles
    out.flush()
    sys.stderr.flush()
    os._exit(0)  # nothing to finalise (a read-only instance): the caller's wait ends ~10-20 ms sooner


def run_limited(
    store: Store,
    trace_id: str,
    sql: str,
    max_rows: int | None = DEFAULT_MAX_ROWS,
    timeout_s: float | None = DEFAULT_TIMEOUT_S,
    memory_bytes: int = DEFAULT_MEMORY_BYTES,
    nice: int = 10,
    ahead: bool = False,
) -> tuple[list[str], list[tuple], bool]:
    """As run_readonly, in a process of its own (_BOOT) capped at memory_bytes of address space beyond
    its start, at `nice` lower CPU priority, and killed KILL_GRACE_S after timeout_s. ahead: in the
    process started ahead for this store (make_ahead), where one waits, and start the next query's.
    Raises QueryError (codes: bad_request, query_refused, query_failed, query_timeout, query_memory)
    or FileNotFoundError."""
    import pickle

    check_statement(sql)
    if not store.trace_path(trace_id).exists():
        raise FileNotFoundError(f"trace {trace_id} not found in {store.root}")
    args = pickle.dumps({"root": os.path.abspath(store.root), "trace_id": trace_id, "sql": sql, "max_rows": max_rows,
                         "timeout_s": timeout_s, "deadline": time.time() + timeout_s if timeout_s else None,
                         "memory_bytes": int(memory_bytes), "nice": nice})
    key = os.path.abspath(store.root)
    proc = (_AHEAD.take(key) if ahead else None) or _launch(key)
    try:
        out, err = proc.communicate(args, timeout=(timeout_s + KILL_GRACE_S) if timeout_s else None)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise QueryError(f"query stopped after the {timeout_s:g} s time limit", "query_timeout") from None
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        _remove_spill(store, proc.pid)
        if ahead:
            _AHEAD.start(key)
    try:
        kind, value = pickle.loads(out[8:])
    except Exception:
        rc = proc.returncode
        why = f"signal {signal.Signals(-rc).name}" if rc is not None and rc < 0 else f"status {rc}"
        tail = err.decode("utf-8", "replace").strip().splitlines()[-1:] if err else []
        code = "query_memory" if rc in (-signal.SIGKILL, -signal.SIGSEGV, -signal.SIGABRT) else "query_failed"
        raise QueryError(f"query process ended with {why} before answering"
                         + (f" ({tail[0][:200]})" if tail else ""), code) from None
    if kind == "ok":
        return _redact_rows(value, _roots(store))
    if kind == "missing":
        raise FileNotFoundError(value)
    peak = int.from_bytes(out[:8], "little")
    message = _redact(value[0], _roots(store))
    if value[1] == "query_memory" and peak:
        message += f" (its process peaked at {peak >> 20} MiB; a query may use {memory_bytes >> 20} MiB beyond its start)"
    raise QueryError(message, value[1])


# the query process (-P: nothing imported from its working folder, the store's)
_BOOT = "from acceltrace.store import sandbox; sandbox._child_main()"


def _launch(root: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-P", "-c", _BOOT], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=root)


class _Ahead:
    """The query processes started ahead in this process, one per store folder."""

    def __init__(self):
        self._lock = threading.Lock()
        self._waiting: dict[str, tuple[int, subprocess.Popen]] = {}  # folder: (owner pid, process)
        self._exit_hook = False

    def start(self, key: str) -> None:
        """Best effort: a process that cannot start now (no such folder, no file descriptors) is left to
        the next query, which starts its own and answers that error."""
        with self._lock:
            held = self._waiting.get(key)
            if held is not None and held[0] == os.getpid() and held[1].poll() is None:
                return
            try:
                self._waiting[key] = (os.getpid(), _launch(key))
            except OSError:
                self._waiting.pop(key, None)
                return
            if not self._exit_hook:
                atexit.register(self.stop_all)
                self._exit_hook = True

    def take(self, key: str) -> subprocess.Popen | None:
        """The waiting process of key, or None (none, ended, or started by the process this one forked from)."""
        with self._lock:
            held = self._waiting.pop(key, None)
        if held is None or held[0] != os.getpid():
            return None
        if held[1].poll() is not None:
            _reap(held[1])
            return None
        return held[1]

    def waiting(self, key: str) -> int | None:
        with self._lock:
            held = self._waiting.get(key)
        return held[1].pid if held is not None and held[0] == os.getpid() and held[1].poll() is None else None

    def stop_all(self, root: str | None = None) -> None:
        with self._lock:
            keys = [k for k in self._waiting if root is None or k == root]
            held = [self._waiting.pop(k) for k in keys]
        for pid, proc in held:
            if pid == os.getpid():
                _reap(proc)


def _reap(proc: subprocess.Popen) -> None:
    """Ends a query process that was given no query (it holds nothing yet) and closes its pipes."""
    if proc.poll() is None:
        proc.kill()
    proc.communicate()


_AHEAD = _Ahead()


def make_ahead(store: Store) -> None:
    """Start the process of this store's next run_limited(ahead=True) query now, unless one waits."""
    _AHEAD.start(os.path.abspath(store.root))


def waiting(store: Store) -> int | None:
    """The pid of the process started ahead for this store's next query, or None."""
    return _AHEAD.waiting(os.path.abspath(store.root))


def stop_ahead(store: Store | None = None) -> None:
    """End the waiting query processes this process started (for one store, or all: done at exit)."""
    _AHEAD.stop_all(None if store is None else os.path.abspath(store.root))


def _roots(store: Store) -> list[str]:
    return sorted({str(store.root), os.path.realpath(store.root)}, key=len, reverse=True)


def _redact(text: str, roots: list[str]) -> str:
    for r in roots:
        text = text.replace(r, "<store>")
    return text


def _redact_rows(answer: tuple, roots: list[str]) -> tuple:
    """The store's own path never leaves in an answer (a value that names it says <store>)."""
    cols, rows, truncated = answer
    if any(isinstance(v, str) and any(r in v for r in roots) for row in rows for v in row):
        rows = [tuple(_redact(v, roots) if isinstance(v, str) else v for v in row) for row in rows]
    return cols, rows, truncated


def _remove_spill(store: Store, pid: int | None) -> None:
    import shutil

    if pid is not None:
        shutil.rmtree(store.tmp_dir / f"duck.{pid}.query", ignore_errors=True)


if __name__ == "__main__":
    _child_main()
