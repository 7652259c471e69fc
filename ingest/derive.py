"""Derived tables built into a trace file at the end of ingest, before it is published.

Each step is "module:function" taking the builder's DuckDB connection, run in order
after slices are sorted and trace_meta is filled. The tile server's level-of-detail
summaries register here, so every published trace carries them.
"""

from __future__ import annotations

import importlib

import duckdb

STEPS: list[str] = ["ingest.lod:build"]


def run_all(con: duckdb.DuckDBPyConnection) -> None:
    for step in STEPS:
        mod_name, fn_name = step.split(":")
        getattr(importlib.import_module(mod_name), fn_name)(con)
