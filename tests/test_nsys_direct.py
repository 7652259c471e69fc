"""The compiled Nsight reader's direct read of an export's table b-trees (ingest/nsys/_btree.c, direct.py)
against SQLite's own read of the same tables.

Every table the importer reads must come out the same, value for value and in the same order, from the
real export and from exports built to hold each record form SQLite writes (NULLs, INT64_MIN, times past
2^62, text past ASCII, text on overflow pages, rows older than a column added later, a rowid alias,
integers in a REAL column, pages of 512 and 65,536 bytes). A table the direct read cannot answer as
SQLite does is left to SQLite, before the read (direct.layout) or during it (Unsupported: its rows so far
are dropped and SQLite reads it again), and no file, however damaged, crashes the process: the walker in
tests/c/btree_walk.c runs _btree.c on mutated files under AddressSanitizer and UBSan.
"""

from __future__ import annotations

import random
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

from _helpers import ingest_ok, ingest_one, ingest_only
from acceltrace.ingest.nsys import direct
from acceltrace.ingest.nsys import read as nsys_read
from canonical import canonical_summary
import nsys_synth

ROOT = Path(__file__).resolve().parent.parent
REAL = ROOT / "sample_traces" / "nsys" / "nsys-2022.2" / "a100-saxpy-nsys2022.sqlite"
SPECS = {**nsys_read.EVENT_TABLES, **nsys_read.NAME_TABLES, **nsys_read.CPU_TABLES}

pytestmark = pytest.mark.skipif(nsys_read._sqlread is None, reason="ingest/nsys/_sqlread.c is not built")


@pytest.fixture(scope="module", autouse=True)
def _ingest_only():
    with ingest_only():
        yield


def _fetched(uri: str, sql: str, kinds: str, layout, rows: int) -> list:
    q = nsys_read._sqlread.Query(uri, sql, kinds, table=layout)
    try:
        return list(iter(lambda: q.fetch(rows), None))
    finally:
        q.close()


def _reads(path: Path, table: str, columns: list[str] | None = None, kinds: str | None = None, rows: int = 977):
    """(the direct read's batches or None where direct.layout leaves the table to SQLite, SQLite's batches)."""
    uri = f"file:{path}?mode=ro&immutable=1"
    with sqlite3.connect(uri, uri=True) as con:
        if columns is None:
            cols = {**SPECS[table][0], **SPECS[table][1]}
            have = {r[1] for r in con.execute(f'PRAGMA table_info("{table}")')}
            columns = [c for c in cols if c in have]
            kinds = nsys_read._kinds(cols, columns)
        layout = direct.layout(con, path, table, columns, kinds)
    sql = f'SELECT {", ".join(chr(34) + c + chr(34) for c in columns)} FROM "{table}"'
    return (None if layout is None else _fetched(uri, sql, kinds, layout, rows)), _fetched(uri, sql, kinds, None, rows)


def _tables(path: Path) -> list[str]:
    with sqlite3.connect(path) as con:
        have = {name for (name,) in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    return [t for t in SPECS if t in have]


def _quirky(path: Path, page_size: int | None = None) -> None:
    nsys_synth.write(path, iterations=3000, metric_samples=400, page_size=page_size)
    con = sqlite3.connect(path)
    con.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET correlationId = NULL WHERE rowid % 7 = 0")
    con.execute("UPDATE CUPTI_ACTIVITY_KIND_MEMCPY SET srcKind = -9223372036854775808 WHERE rowid % 5 = 0")
    con.execute('UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET "end" = 4611686018427387905 WHERE rowid = 3')
    con.execute('UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET "end" = -5, start = 2147483648 WHERE rowid = 4')
    con.execute("UPDATE StringIds SET value = value || ' µs ✓' WHERE id % 3 = 0")
    # names long enough for overflow pages at every page size, around the local-payload limits too
    for i, n in enumerate((400, 470, 480, 1000, 4000, 4061, 4062, 4100, 9000, 70_000, 300_000)):
        con.execute("INSERT INTO StringIds VALUES (?, ?)", (10_000 + i, ("k" * n)[:-1] + "é"))
    con.execute("UPDATE GPU_METRICS SET value = 7 WHERE rowid % 3 = 0")  # integers in the float column
    # a column added after the rows were written: their records end before it, it reads NULL
    con.execute("ALTER TABLE CUPTI_ACTIVITY_KIND_MEMSET ADD COLUMN memKind2 INTEGER")
    con.execute("UPDATE CUPTI_ACTIVITY_KIND_MEMSET SET memKind2 = 5 WHERE rowid % 2 = 0")
    con.commit()
    con.close()


@pytest.mark.parametrize("page_size", [None, 512, 65536])
def test_every_table_reads_the_same_direct_and_through_sqlite(tmp_path, page_size):
    path = tmp_path / "quirky.sqlite"
    _quirky(path, page_size)
    tables = _tables(path)
    assert len(tables) >= 10
    for table in tables:
        fast, slow = _reads(path, table)
        assert fast is not None and fast == slow, table
    fast, slow = _reads(path, "CUPTI_ACTIVITY_KIND_MEMSET", ["memKind2", "bytes"], "ii")  # short records
    assert fast == slow and any(b[1][0][1].count(0) for b in fast)
    fast, slow = _reads(path, "StringIds", ["value", "id"], "si", rows=5)
    assert fast == slow and any(len(b[1][0][1]) > 300_000 for b in fast)  # overflow pages, in order


def test_the_real_export_reads_the_same_direct_and_through_sqlite():
    tables = _tables(REAL)
    assert len(tables) >= 8
    for table in tables:
        fast, slow = _reads(REAL, table)
        assert fast is not None and fast == slow, table


@pytest.mark.parametrize("schema, columns, kinds, why", [
    ("CREATE TABLE t (a INTEGER, b INTEGER, PRIMARY KEY (a)) WITHOUT ROWID", ["a", "b"], "ii", "WITHOUT ROWID"),
    ("CREATE TABLE t (a INTEGER, b INTEGER DEFAULT 3)", ["a", "b"], "ii", "a DEFAULT"),
    ("CREATE TABLE t (a INTEGER, b REAL)", ["a", "b"], "ii", "REAL read as an integer"),
    ("CREATE TABLE t (a INTEGER, b INTEGER, c INTEGER AS (a + b))", ["a", "b"], "ii", "a generated column"),
    ("CREATE TABLE t (a INTEGER, b INTEGER, c TEXT); CREATE INDEX t_ab ON t (b, a)", ["a", "b"], "ii",
     "a covering index (its order)"),
])
def test_tables_the_direct_read_cannot_answer_are_left_to_sqlite(tmp_path, schema, columns, kinds, why):
    path = tmp_path / "t.sqlite"
    con = sqlite3.connect(path)
    con.executescript(schema)
    con.executemany("INSERT INTO t (a, b) VALUES (?, ?)", [(i, (i * 7919) % 1000) for i in range(5000)])
    con.commit()
    con.close()
    with sqlite3.connect(path) as con:
        assert direct.layout(con, path, "t", columns, kinds) is None, why


def test_an_integer_primary_key_reads_the_rowid_where_sqlite_takes_it_for_the_rowid(tmp_path):
    path = tmp_path / "keys.sqlite"
    con = sqlite3.connect(path)
    tables = {"alias": "id INTEGER PRIMARY KEY, v TEXT",
              "notalias": "id INTEGER PRIMARY KEY DESC, v TEXT",  # SQLite's quirk: a column of its own
              "int": "id INT PRIMARY KEY, v TEXT",  # INT, not INTEGER: a column of its own too
              "tablekey": "v TEXT, id integer, PRIMARY KEY (id DESC)"}  # ... but DESC here is the rowid's alias
    for t, cols in tables.items():
        con.execute(f"CREATE TABLE {t} ({cols})")
        con.executemany(f"INSERT INTO {t} (id, v) VALUES (?, ?)", [(i * 3, f"v{i}") for i in range(3000)])
    con.commit()
    with con:
        aliases = {t: direct.layout(con, path, t, ["v", "id"], "si")[3] for t in tables}
    con.close()
    assert aliases == {"alias": 0, "notalias": -1, "int": -1, "tablekey": 1}
    for t in tables:
        fast, slow = _reads(path, t, ["v", "id"], "si")
        assert fast is not None and fast == slow, t


def _copy(path: Path, monkeypatch, reader: str = "") -> tuple[int, dict]:
    monkeypatch.setenv(nsys_read.READER_ENV, reader)
    monkeypatch.setattr(nsys_read, "COMPILED_MIN_ROWS", 0)
    ex = nsys_read.open_export(path, path.name)
    stage = duckdb.connect()
    try:
        jobs = [(t, spec, None) for t, spec in SPECS.items() if t in ex.columns]
        n = nsys_read.copy_tables(ex, stage, jobs)
        return n, {t: stage.execute(f'SELECT * FROM "{t}"').fetchall() for t, _, _ in jobs}
    finally:
        ex.close()
        stage.close()


def test_a_file_in_wal_mode_is_read_by_sqlite(tmp_path, monkeypatch):
    path = tmp_path / "wal.sqlite"
    nsys_synth.write(path, iterations=500, metric_samples=20)
    con = sqlite3.connect(path)
    con.execute("PRAGMA journal_mode = WAL")  # newer pages may live in the -wal file: the b-tree alone is not the table
    con.close()
    ex = nsys_read.open_export(path, path.name)
    try:
        layout = direct.layout(ex.con, path, "StringIds", ["id", "value"], "is")
        with pytest.raises(nsys_read._sqlread.Unsupported):
            nsys_read._sqlread.Query(ex.uri, "SELECT id, value FROM StringIds", "is", table=layout)
    finally:
        ex.close()
    assert _copy(path, monkeypatch) == _copy(path, monkeypatch, "sqlite")


def _damage_a_leaf(path: Path, table: str, empty: bool = False) -> None:
    """Point a cell of a leaf in the middle of `table`'s b-tree past the page's end (its header and the interior
    pages intact, so the count of rows when the export is opened does not see it; reading the rows does); or,
    `empty`, set the leaf's cell count to 0."""
    con = sqlite3.connect(path)
    (root,) = con.execute("SELECT rootpage FROM sqlite_master WHERE name = ?", (table,)).fetchone()
    (page_size,) = con.execute("PRAGMA page_size").fetchone()
    con.close()
    data = bytearray(path.read_bytes())
    page = data[(root - 1) * page_size:root * page_size]
    assert page[0] == 5, "expected an interior root"
    n = int.from_bytes(page[3:5], "big")
    cell = int.from_bytes(page[12 + 2 * (n // 2):14 + 2 * (n // 2)], "big")
    leaf = int.from_bytes(page[cell:cell + 4], "big")
    at = (leaf - 1) * page_size
    assert data[at] == 13, "expected a table leaf"
    if empty:
        data[at + 3:at + 5] = b"\0\0"
    else:
        data[at + 8 + 6:at + 8 + 8] = (page_size + 40).to_bytes(2, "big")  # its fourth cell
    path.write_bytes(bytes(data))


def test_damage_met_midway_hands_the_table_to_sqlite_which_names_it(tmp_path, monkeypatch):
    path = tmp_path / "damaged.sqlite"
    nsys_synth.write(path, iterations=4000, metric_samples=20)
    _damage_a_leaf(path, "CUPTI_ACTIVITY_KIND_KERNEL")
    got = {}
    for reader in ("", "sqlite"):
        monkeypatch.setenv(nsys_read.READER_ENV, reader)
        _, res = ingest_one(tmp_path / f"s{reader}", path)
        got[reader] = res.error
    assert got[""] is not None and got[""] == got["sqlite"]
    assert "damaged.sqlite" in got[""] and "CUPTI_ACTIVITY_KIND_KERNEL" in got[""], got[""]


def test_a_child_page_without_cells_is_handed_back_as_sqlite_would_refuse_it(tmp_path):
    path = tmp_path / "empty-leaf.sqlite"
    nsys_synth.write(path, iterations=4000, metric_samples=20)
    _damage_a_leaf(path, "CUPTI_ACTIVITY_KIND_KERNEL", empty=True)
    uri = f"file:{path}?mode=ro&immutable=1"
    with sqlite3.connect(uri, uri=True) as con:
        layout = direct.layout(con, path, "CUPTI_ACTIVITY_KIND_KERNEL", ["start", "end"], "tt")
        with pytest.raises(sqlite3.DatabaseError):  # SQLite's own scan calls the file malformed
            con.execute('SELECT start, "end" FROM CUPTI_ACTIVITY_KIND_KERNEL').fetchall()
    with pytest.raises(nsys_read._sqlread.Unsupported):
        _fetched(uri, 'SELECT start, "end" FROM CUPTI_ACTIVITY_KIND_KERNEL', "tt", layout, 1000)


def test_unsupported_midway_drops_the_rows_read_and_sqlite_reads_the_table_again(tmp_path, monkeypatch):
    # graphNodeId NULL in the first 2,000 kernels, set after: taken for a rowid alias (whose stored value is
    # NULL), the direct read gives four batches of 500 rows, then meets a stored value and hands the table back
    path = tmp_path / "t.sqlite"
    nsys_synth.write(path, iterations=3000, metric_samples=20)
    with sqlite3.connect(path) as con:
        con.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET graphNodeId = CASE WHEN rowid <= 2000 THEN NULL ELSE 5 END")
    real_layout, real_read = direct.layout, nsys_read._read_compiled
    reads = []

    def fake_alias(con, p, table, columns, kinds):
        lay = real_layout(con, p, table, columns, kinds)
        if table != "CUPTI_ACTIVITY_KIND_KERNEL" or lay is None:
            return lay
        return lay[0], lay[1], lay[2], lay[2][columns.index("graphNodeId")]

    def counted(ex, stage, table, target, cols, batch_rows, layout):
        n = real_read(ex, stage, table, target, cols, batch_rows, layout)
        reads.append((table, layout is not None, n))
        return n

    monkeypatch.setattr(direct, "layout", fake_alias)
    monkeypatch.setattr(nsys_read, "_read_compiled", counted)
    monkeypatch.setattr(nsys_read, "COMPILED_BATCH_ROWS", 500)
    n1, rows1 = _copy(path, monkeypatch)
    # the direct read raised (no count recorded for it); SQLite read the table whole after the rows were dropped
    assert [r for r in reads if r[0] == "CUPTI_ACTIVITY_KIND_KERNEL"] == [("CUPTI_ACTIVITY_KIND_KERNEL", False, 6000)]
    monkeypatch.setattr(direct, "layout", real_layout)
    n2, rows2 = _copy(path, monkeypatch, "sqlite")
    assert n1 == n2 and rows1 == rows2


def test_an_ingest_reads_its_big_tables_direct_and_gives_the_same_trace(tmp_path, monkeypatch):
    path = tmp_path / "synth.sqlite"
    _quirky(path)
    taken = []
    real = direct.layout
    monkeypatch.setattr(direct, "layout", lambda *a: taken.append(a[2]) or real(*a))
    monkeypatch.delenv(nsys_read.READER_ENV, raising=False)
    store, res = ingest_ok(tmp_path / "direct", path)
    assert {"CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY"} <= set(taken)
    monkeypatch.setenv(nsys_read.READER_ENV, "sqlite")
    store2, res2 = ingest_ok(tmp_path / "sqlite", path)
    assert canonical_summary(store.connect(res.id)) == canonical_summary(store2.connect(res2.id))
    assert res.counts == res2.counts and res.warnings == res2.warnings


def _walker(tmp: Path) -> tuple[Path, dict] | None:
    """tests/c/btree_walk.c and _btree.c built with AddressSanitizer and UBSan (or None: no such gcc)."""
    exe = tmp / "btree_walk"
    cmd = ["gcc", "-std=c99", "-O1", "-g", "-fsanitize=address,undefined", "-fno-omit-frame-pointer",
           "-fno-sanitize-recover=undefined", str(ROOT / "tests" / "c" / "btree_walk.c"),
           str(ROOT / "ingest" / "nsys" / "_btree.c"), "-lm", "-o", str(exe)]
    try:
        subprocess.run(cmd, check=True, capture_output=True, timeout=180)
    except (OSError, subprocess.SubprocessError):
        return None
    return exe, {"ASAN_OPTIONS": "detect_leaks=1:abort_on_error=1", "UBSAN_OPTIONS": "halt_on_error=1"}


def test_the_btree_walk_under_address_sanitizer_on_damaged_files(tmp_path):
    built = _walker(tmp_path)
    if built is None:
        pytest.skip("no gcc with AddressSanitizer/UBSan here")
    exe, env = built
    src = tmp_path / "src.sqlite"
    _quirky(src, 512)
    con = sqlite3.connect(src)
    roots = dict(con.execute("SELECT name, rootpage FROM sqlite_master WHERE type = 'table'").fetchall())
    (kernels,) = con.execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()
    (ids,) = con.execute("SELECT sum(id) FROM StringIds").fetchone()
    con.close()
    # the walker reads what SQLite reads (rows; the rowid through its alias) ...
    out = subprocess.run([str(exe), str(src), str(roots["CUPTI_ACTIVITY_KIND_KERNEL"])], capture_output=True,
                         text=True, timeout=60, env=env).stdout
    assert out.startswith(f"rows {kernels} ")
    out = subprocess.run([str(exe), str(src), str(-roots["StringIds"])], capture_output=True, text=True,
                         timeout=60, env=env).stdout
    assert out.startswith(f"rows ") and f" sum {ids} " in out
    # ... and any damage ends a walk, never the process: bytes overwritten across the file, every page a root
    data = src.read_bytes()
    rng = random.Random(14)
    files = []
    for i in range(40):
        buf = bytearray(data)
        for _ in range(rng.choice([1, 8, 64, 400])):
            pos, k = rng.randrange(100, len(buf)), rng.choice([1, 2, 4, 64])
            buf[pos:pos + k] = bytes(rng.randrange(256) for _ in range(len(buf[pos:pos + k])))
        f = tmp_path / f"fuzz-{i}.sqlite"
        f.write_bytes(bytes(buf[:rng.choice([len(buf), len(buf) // 2, len(buf) - 300])]))
        files.append(str(f))
    p = subprocess.run([str(exe), "--all", *files], capture_output=True, text=True, timeout=600, env=env)
    assert p.returncode == 0 and p.stdout.strip() == "ok", (p.stdout + p.stderr)[-4000:]


def test_randomly_damaged_exports_read_direct_are_refused_or_read_as_sqlite_reads_them(tmp_path, monkeypatch):
    src = tmp_path / "src.sqlite"
    nsys_synth.write(src, iterations=600, metric_samples=20)
    data = src.read_bytes()
    rng = random.Random(27)
    for i in range(10):
        buf = bytearray(data)
        for _ in range(rng.choice([1, 8, 64])):
            pos = rng.randrange(100, len(buf))
            buf[pos] = rng.randrange(256)
        path = tmp_path / f"fuzz-{i}.sqlite"
        path.write_bytes(bytes(buf))
        got = {}
        for reader in ("", "sqlite"):
            monkeypatch.setenv(nsys_read.READER_ENV, reader)
            monkeypatch.setattr(nsys_read, "COMPILED_MIN_ROWS", 0)
            store, res = ingest_one(tmp_path / f"s{i}{reader}", path)
            got[reader] = res.error if res.error else canonical_summary(store.connect(res.id))
        assert got[""] == got["sqlite"], i
    shutil.rmtree(tmp_path / "s0", ignore_errors=True)
