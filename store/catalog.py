"""The trace store: a catalog plus one immutable DuckDB file per trace.

Layout of a store directory:
  catalog.sqlite            SQLite in WAL mode, one row per trace (safe for many processes)
  traces/<id>.duckdb        the published trace, written once, then only opened read-only
  traces/<id>.<side>.duckdb side files derived later (findings, ...), replaced atomically
  tmp/<id>.<pid>.duckdb     an ingest in progress; swept when its process is gone

A trace becomes visible (status 'ready') only after its file has been renamed into
traces/. Rows of ingests whose process died are removed with their temp files the
next time the store is opened, so a SIGKILLed ingest leaves nothing half-visible.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import shutil
import sqlite3
import time
from contextlib import contextmanager
from pathlib import Path

import duckdb

from acceltrace.store.duck import close_synced, memory_connection, settings as duck_settings, unsynced

DEFAULT_STORE = ".acceltrace"

_CATALOG_SQL = """
CREATE TABLE IF NOT EXISTS traces (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    format TEXT,
    status TEXT NOT NULL,          -- live | ingesting | ready | failed
    created TEXT NOT NULL,         -- ISO 8601 UTC
    source_bytes INTEGER,          -- size of what the user gave us (compressed, as given)
    db_bytes INTEGER,              -- size of the published DuckDB file
    content_hash TEXT,             -- of the input bytes, dedup of identical inputs (store/content.py)
    counts TEXT,                   -- JSON: tracks, slices, flows, counters, warnings
    error TEXT,                    -- message of a failed ingest
    progress REAL,                 -- 0..1 while ingesting
    pid INTEGER,                   -- process that is ingesting
    host TEXT
)
"""


ORPHAN_AGE_S = 60


def store_dir(explicit: str | os.PathLike | None = None) -> Path:
    """--store beats ACCELTRACE_STORE beats ./.acceltrace."""
    return Path(explicit or os.environ.get("ACCELTRACE_STORE") or DEFAULT_STORE)


def new_trace_id() -> str:
    """At least 128 random bits (136 drawn), URL-safe, 23 characters, never starting with "-"."""
    while True:
        tid = secrets.token_urlsafe(17)
        if tid[0].isalnum():
            return tid


_ID_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")


def is_trace_id(text: str) -> bool:
    """Only the id alphabet (URL-safe base64), 1-64 characters: safe in a file name and a glob."""
    return isinstance(text, str) and 0 < len(text) <= 64 and not (set(text) - _ID_CHARS)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class Store:
    """The catalog and the files of one store directory."""

    def __init__(self, root: str | os.PathLike | None = None, sweep: bool = True):
        self.root = store_dir(root)
        self.traces_dir = self.root / "traces"
        self.tmp_dir = self.root / "tmp"
        self.traces_dir.mkdir(parents=True, exist_ok=True)
        self.tmp_dir.mkdir(parents=True, exist_ok=True)
        self.catalog_path = self.root / "catalog.sqlite"
        with self._db() as db:
            db.execute(_CATALOG_SQL)
        if sweep:
            self.sweep()

    # -- catalog -------------------------------------------------------------------------
    @contextmanager
    def _db(self):
        db = sqlite3.connect(self.catalog_path, timeout=30, isolation_level=None)
        try:
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA busy_timeout=30000")
            db.row_factory = sqlite3.Row
            yield db
        finally:
            db.close()

    def _row(self, row: sqlite3.Row | None) -> dict | None:
        if row is None:
            return None
        d = dict(row)
        d["counts"] = json.loads(d["counts"]) if d.get("counts") else {}
        if d["status"] == "ready" and not self.trace_path(d["id"]).exists():
            # a file removed behind the store's back: say so instead of failing on open
            d["status"] = "damaged"
            d["error"] = f"the trace file {d['id']}.duckdb is missing from {self.traces_dir}"
        return d

    def list(self, status: str | None = None) -> list[dict]:
        """The catalog; ingests whose process died since the store was opened are dropped first."""
        q = "SELECT * FROM traces"
        args: tuple = ()
        if status:
            q += " WHERE status = ?"
            args = (status,)
        q += " ORDER BY created DESC, id"
        with self._db() as db:
            if db.execute("SELECT 1 FROM traces WHERE status IN ('ingesting', 'live') LIMIT 1").fetchone():
                self._sweep_dead_ingests(db)
            return [self._row(r) for r in db.execute(q, args).fetchall()]

    def get(self, trace_id: str) -> dict | None:
        with self._db() as db:
            return self._row(db.execute("SELECT * FROM traces WHERE id = ?", (trace_id,)).fetchone())

    def begin(self, name: str, source_bytes: int | None, content_hash: str | None) -> tuple[str, Path]:
        """Register an ingest in progress; returns its id and the temp path to build into."""
        with self._db() as db:
            return self._insert_ingesting(db, name, source_bytes, content_hash)

    def begin_unique(self, name: str, source_bytes: int | None,
                     content_hash: str) -> tuple[dict | None, str | None, Path | None]:
        """begin(), unless a trace of the same content is ready or being ingested: then that row.

        One write transaction holds the check and the insert, so concurrent uploads of one file
        (threads or processes) make one trace: (existing row, None, None) or (None, id, temp path).
        """
        with self._db() as db:
            db.execute("BEGIN IMMEDIATE")
            try:
                row = self._same_content(db, content_hash)
                if row is not None:
                    db.execute("COMMIT")
                    return row, None, None
                trace_id, tmp = self._insert_ingesting(db, name, source_bytes, content_hash)
                db.execute("COMMIT")
                return None, trace_id, tmp
            except BaseException:
                db.execute("ROLLBACK")
                raise

    def claim_content(self, trace_id: str, source_bytes: int, content_hash: str) -> dict | None:
        """An upload ingested as it arrived (begun before its hash was known) now has all its bytes: the
        ready or ingesting row of the same content, if there is one (this row, the duplicate, is then
        deleted: nobody sees it again, and its ingest, which cannot publish before its upload is marked
        complete, is told to stop), else None once this row holds the hash and size. The check and the
        change are one write transaction, as begin_unique's are: of two uploads of one file, the later
        claim finds the earlier."""
        with self._db() as db:
            db.execute("BEGIN IMMEDIATE")
            try:
                row = self._same_content(db, content_hash, other_than=trace_id)
                if row is None:
                    db.execute("UPDATE traces SET content_hash = ?, source_bytes = ? WHERE id = ?",
                               (content_hash, source_bytes, trace_id))
                else:
                    db.execute("DELETE FROM traces WHERE id = ?", (trace_id,))
                db.execute("COMMIT")
                return row
            except BaseException:
                db.execute("ROLLBACK")
                raise

    def _same_content(self, db, content_hash: str, other_than: str | None = None) -> dict | None:
        """The ready row of this content, else one being ingested by a live process, else None."""
        for r in db.execute("SELECT * FROM traces WHERE content_hash = ? AND status IN ('ready', 'ingesting')"
                            " AND id IS NOT ? ORDER BY status = 'ready' DESC, created",
                            (content_hash, other_than)).fetchall():
            row = self._row(r)
            alive = row["host"] != os.uname().nodename or _pid_alive(row["pid"] or -1)
            if row["status"] == "ready" or (row["status"] == "ingesting" and alive):
                return row
        return None

    def _insert_ingesting(self, db, name: str, source_bytes: int | None, content_hash: str | None) -> tuple[str, Path]:
        trace_id = new_trace_id()
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        db.execute(
            "INSERT INTO traces (id, name, status, created, source_bytes, content_hash, progress, pid, host)"
            " VALUES (?, ?, 'ingesting', ?, ?, ?, 0, ?, ?)",
            (trace_id, name, now, source_bytes, content_hash, os.getpid(), os.uname().nodename),
        )
        return trace_id, self.tmp_dir / f"{trace_id}.{os.getpid()}.duckdb"

    def begin_live(self, name: str) -> str:
        """Register a live capture (status 'live', owned by this process); returns its id. It becomes
        an ingest of the same id when the capture stops (`live_to_ingesting`)."""
        trace_id = new_trace_id()
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        with self._db() as db:
            db.execute(
                "INSERT INTO traces (id, name, status, created, counts, progress, pid, host)"
                " VALUES (?, ?, 'live', ?, '{}', 0, ?, ?)",
                (trace_id, name, now, os.getpid(), os.uname().nodename),
            )
        return trace_id

    def set_live_counts(self, trace_id: str, counts: dict, source_bytes: int) -> None:
        with self._db() as db:
            db.execute("UPDATE traces SET counts = ?, source_bytes = ? WHERE id = ? AND status = 'live'",
                       (json.dumps(counts), int(source_bytes), trace_id))

    def live_to_ingesting(self, trace_id: str) -> Path:
        """The capture stopped: the row becomes an ingest in progress; returns its temp path."""
        with self._db() as db:
            db.execute("UPDATE traces SET status = 'ingesting', progress = 0, pid = ? WHERE id = ?",
                       (os.getpid(), trace_id))
        return self.tmp_dir / f"{trace_id}.{os.getpid()}.duckdb"

    def live_dir(self, trace_id: str) -> Path:
        """Where a live capture keeps its segments (removed once it is published): in memory-backed
        /dev/shm where there is one (segments are rebuilt many times a second and never outlive the
        capture), else beside the catalog."""
        if not is_trace_id(trace_id):
            raise ValueError(f"{trace_id!r} is not a trace id")
        shm = Path("/dev/shm")
        if shm.is_dir() and os.access(shm, os.W_OK):
            tag = hashlib.sha256(str(self.root.resolve()).encode()).hexdigest()[:16]
            return shm / f"acceltrace-{os.getuid()}" / tag / trace_id
        return self.root / "live" / trace_id

    def set_progress(self, trace_id: str, fraction: float) -> None:
        with self._db() as db:
            db.execute("UPDATE traces SET progress = ? WHERE id = ?", (float(fraction), trace_id))

    def publish(self, trace_id: str, tmp_path: Path, fmt: str, counts: dict, content_hash: str | None = None) -> None:
        """Rename the finished file into place, then mark it ready (in that order).

        content_hash: the input's hash when it was computed during the ingest (else the row's own)."""
        final = self.trace_path(trace_id)
        os.replace(tmp_path, final)
        with self._db() as db:
            db.execute(
                "UPDATE traces SET status = 'ready', format = ?, counts = ?, db_bytes = ?, progress = 1,"
                " pid = NULL, error = NULL, content_hash = coalesce(?, content_hash) WHERE id = ?",
                (fmt, json.dumps(counts), final.stat().st_size, content_hash, trace_id),
            )

    def fail(self, trace_id: str, tmp_path: Path | None, error: str, keep_row: bool = True) -> None:
        """An ingest failed: its temp files go; the row stays as 'failed' (for uploads) or goes."""
        if tmp_path is not None:
            _unlink_duckdb(tmp_path)
        with self._db() as db:
            if keep_row:
                db.execute(
                    "UPDATE traces SET status = 'failed', error = ?, pid = NULL WHERE id = ?", (error, trace_id)
                )
            else:
                db.execute("DELETE FROM traces WHERE id = ?", (trace_id,))

    def rename(self, trace_id: str, name: str) -> None:
        with self._db() as db:
            db.execute("UPDATE traces SET name = ? WHERE id = ?", (name, trace_id))

    def remove(self, trace_id: str) -> bool:
        """Drop the catalog row (readers stop seeing it), then the trace's files; False if no such row.

        The id is checked against the id alphabet before any file is touched. A kill after the
        row is gone leaves files without a row, which sweep() removes; a kill can never leave a
        row whose files are half deleted.
        """
        if not is_trace_id(trace_id):
            raise ValueError(f"{trace_id!r} is not a trace id (expected up to 64 characters of A-Z a-z 0-9 - _)")
        with self._db() as db:
            n = db.execute("DELETE FROM traces WHERE id = ?", (trace_id,)).rowcount
        if n:
            self._remove_files(trace_id)
        return n > 0

    def _remove_files(self, trace_id: str) -> None:
        # the trace's own file first: a tile or side file renamed into place after it is gone sees
        # that and removes itself (tiles/disk.py), and one renamed before is in the listing below
        self.trace_path(trace_id).unlink(missing_ok=True)
        for p in list(self.traces_dir.iterdir()):
            if p.name.split(".", 1)[0] == trace_id:
                p.unlink(missing_ok=True)

    def sweep(self) -> None:
        """Remove what dead ingests left behind: their catalog rows and their temp files."""
        with self._db() as db:
            self._sweep_dead_ingests(db)
            known = {r[0] for r in db.execute("SELECT id FROM traces").fetchall()}
        # files whose row is gone (a removal killed half way); a file younger than a minute may be
        # a publish racing this sweep, and each candidate is checked against the catalog again
        old = time.time() - ORPHAN_AGE_S
        for p in self.traces_dir.iterdir():
            tid = p.name.split(".", 1)[0]
            if tid in known or p.suffix != ".duckdb":
                continue
            try:
                if p.stat().st_mtime < old and self.get(tid) is None:
                    p.unlink(missing_ok=True)
            except OSError:
                pass
        for p in self.tmp_dir.iterdir():
            parts = p.name.split(".")
            pid = int(parts[1]) if len(parts) > 2 and parts[1].isdigit() else None
            if pid is None or not _pid_alive(pid):
                try:
                    if p.is_dir():
                        shutil.rmtree(p, ignore_errors=True)
                    else:
                        p.unlink(missing_ok=True)
                except OSError:
                    pass

    def _sweep_dead_ingests(self, db) -> int:
        """Rows of ingests (and live captures) on this host whose process is gone (killed): they will
        never finish. A dead capture's segments go with its row."""
        host = os.uname().nodename
        n = 0
        for r in db.execute("SELECT id, pid, host, status FROM traces WHERE status IN ('ingesting', 'live')").fetchall():
            if r["host"] == host and (r["pid"] is None or not _pid_alive(r["pid"])):
                n += db.execute("DELETE FROM traces WHERE id = ? AND status = ?", (r["id"], r["status"])).rowcount
                if r["status"] == "live" and is_trace_id(r["id"]):
                    shutil.rmtree(self.live_dir(r["id"]), ignore_errors=True)
        return n

    # -- files ---------------------------------------------------------------------------
    def trace_path(self, trace_id: str) -> Path:
        return self.traces_dir / f"{trace_id}.duckdb"

    def side_path(self, trace_id: str, side: str) -> Path:
        """A derived side file next to the trace (e.g. side='findings')."""
        return self.traces_dir / f"{trace_id}.{side}.duckdb"

    def write_side(self, trace_id: str, side: str, build) -> Path:
        """Build a side file in a temp path with build(con), then atomically replace the old one."""
        tmp = self.tmp_dir / f"{trace_id}-{side}.{os.getpid()}.duckdb"
        _unlink_duckdb(tmp)
        con = duckdb.connect(str(tmp), config=duck_settings(self.tmp_dir))  # bounded as every connection
        built = False
        try:
            unsynced(con)
            build(con)
            close_synced(con, tmp)
            built = True
        finally:
            con.close()
            if not built:  # failed or interrupted: no half-built file left in tmp
                _unlink_duckdb(tmp)
        final = self.side_path(trace_id, side)
        os.replace(tmp, final)
        if not self.trace_path(trace_id).exists():  # the trace was removed meanwhile: leave no orphan
            _unlink_duckdb(final)
        return final

    def connect(self, trace_id: str, sides: tuple[str, ...] = ("findings", "views")) -> duckdb.DuckDBPyConnection:
        """A read-only connection to a published trace, with side files attached.

        Unqualified table names resolve to the trace; each present side file is
        attached read-only under its own name and its tables are visible as temp
        views (e.g. `findings`).
        """
        path = self.trace_path(trace_id)
        if not path.exists():
            raise FileNotFoundError(f"trace {trace_id} not found in {self.root}")
        con = memory_connection(self.tmp_dir)
        con.execute(f"ATTACH '{_sql_str(path)}' AS trace (READ_ONLY)")
        for side in sides:
            sp = self.side_path(trace_id, side)
            if sp.exists():
                con.execute(f"ATTACH '{_sql_str(sp)}' AS side_{side} (READ_ONLY)")
                for (tname,) in con.execute(
                    "SELECT table_name FROM duckdb_tables() WHERE database_name = ?", [f"side_{side}"]
                ).fetchall():
                    con.execute(f'CREATE TEMP VIEW "{tname}" AS SELECT * FROM side_{side}."{tname}"')
        con.execute("USE trace")
        return con


def _sql_str(p: os.PathLike | str) -> str:
    return str(p).replace("'", "''")


def _unlink_duckdb(path: Path) -> None:
    for p in (path, Path(str(path) + ".wal"), Path(str(path) + ".tmp")):
        try:
            p.unlink(missing_ok=True)
        except OSError:
            pass
