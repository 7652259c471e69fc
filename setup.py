"""Compiled parts, built by `pip install` (pyproject.toml holds everything else).

Each extension is optional: without a compiler the install still succeeds and the
Python paths run instead (slower, same results).
"""

from setuptools import Extension, setup

EXTENSIONS = [
    # the Chrome reader's scanner (ingest/chrome/_scan.c; docs/ingest.md "Speed"); -O3: 15-25 % faster
    # than -O2 on Kineto chunks (its per-field branches inlined into the event loop)
    Extension("acceltrace.ingest.chrome._scan", ["ingest/chrome/_scan.c"],
              extra_compile_args=["-O3", "-std=c99"], optional=True),
    # the builder's greedy depth pass for tracks with partial overlaps (ingest/depths.py)
    Extension("acceltrace.ingest._depths", ["ingest/_depths.c"], extra_compile_args=["-O2", "-std=c99"],
              optional=True),
    # the write's gather of a chunked string column into stored order (ingest/gather.py)
    Extension("acceltrace.ingest._gather", ["ingest/_gather.c"], extra_compile_args=["-O2", "-std=c99", "-Wall"],
              optional=True),
    # the Nsight SQLite reader's compiled path (ingest/nsys/read.py), on the system libsqlite3
    # (Debian: libsqlite3-dev); without it the Python sqlite3 path reads the same rows
    Extension("acceltrace.ingest.nsys._sqlread", ["ingest/nsys/_sqlread.c", "ingest/nsys/_btree.c"], libraries=["sqlite3"],
              extra_compile_args=["-O2", "-std=c99", "-Wall"], optional=True),
    # the what-if replay's list scheduling and critical-path walk (analysis/replay.py)
    Extension("acceltrace.analysis._replay", ["analysis/_replay.c"], extra_compile_args=["-O2", "-std=c99"],
              optional=True),
]

setup(ext_modules=EXTENSIONS)
