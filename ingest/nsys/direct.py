"""Where the compiled reader may read a table straight from the file's b-tree (ingest/nsys/_btree.c) rather
than through SQLite, and how: the table's root page and, for each column read, its position in a record.

The direct read gives what SQLite's `SELECT <columns> FROM <table>` gives, in the same order, only where
that follows from the file format alone, so every table that could read otherwise goes to SQLite:
- a table WITHOUT ROWID or with generated columns (its records are laid out otherwise);
- a column read with a DEFAULT (a record written before the column was added reads the default, which
  the b-tree does not hold);
- a column of REAL affinity read as an integer or text (SQLite turns an integer it stored there back
  into a float);
- a query SQLite would answer from an index (its rows come in the index's order).
A column SQLite reads as the rowid (an INTEGER PRIMARY KEY, its quirks included: SQLite's own EXPLAIN says
which) reads the rowid; the reader checks that its stored value is NULL, as an alias's is, and hands the table
back to SQLite where it is not. The reader hands
back any file it does not take the same way (docs/nsys.md "Reading speed").
"""

from __future__ import annotations

import re
import sqlite3

from acceltrace.store.duck import quote_ident

_WITHOUT_ROWID = re.compile(r"\bWITHOUT\s+ROWID\b", re.IGNORECASE)  # (in a comment too: left to SQLite)


def affinity(declared: str) -> str:
    """A declared column type's affinity, by SQLite's rules in their order (datatype3.html, 3.1)."""
    t = (declared or "").upper()
    if "INT" in t:
        return "INTEGER"
    if any(k in t for k in ("CHAR", "CLOB", "TEXT")):
        return "TEXT"
    if not t or "BLOB" in t:
        return "BLOB"
    if any(k in t for k in ("REAL", "FLOA", "DOUB")):
        return "REAL"
    return "NUMERIC"


def layout(con: sqlite3.Connection, path, table: str, columns: list[str], kinds: str) -> tuple | None:
    """(path, root page, record positions, alias position or -1) for `_sqlread.Query(table=...)` reading
    `columns` (one kind letter each) of `table`, or None where SQLite must read it."""
    try:
        found = con.execute("SELECT rootpage, sql FROM sqlite_master WHERE type = 'table' AND name = ?",
                            (table,)).fetchall()
        if len(found) != 1 or not isinstance(found[0][0], int) or found[0][0] < 1:
            return None
        root, sql = found[0]
        if _WITHOUT_ROWID.search(sql or ""):
            return None
        info = con.execute(f"PRAGMA table_xinfo({quote_ident(table)})").fetchall()
        plan = con.execute(f"EXPLAIN QUERY PLAN SELECT {', '.join(map(quote_ident, columns))}"
                           f" FROM {quote_ident(table)}").fetchall()
        keys = [row[1] for row in info if row[5]]
        # the rowid's alias: the one key column SQLite's program reads with Rowid, not Column
        alias = keys[0] if len(keys) == 1 and any(op[1] == "Rowid" for op in con.execute(
            f"EXPLAIN SELECT {quote_ident(keys[0])} FROM {quote_ident(table)}")) else None
    except sqlite3.DatabaseError:
        return None  # SQLite reads it, and names what is wrong
    if any(hidden for *_, hidden in info) or any("INDEX" in str(row[-1]).upper() for row in plan):
        return None
    position = {name: k for k, (_, name, *_rest) in enumerate(info)}
    declared = {row[1]: row for row in info}
    for c, kind in zip(columns, kinds):
        row = declared.get(c)
        if row is None or row[4] is not None or (affinity(row[2]) == "REAL" and kind != "f"):
            return None
    positions = tuple(position[c] for c in columns)
    return str(path), root, positions, position[alias] if alias in columns else -1
