"""Fleet analysis on Dask: one task per trace (ingest, passes, a small result), DuckDB reduces."""
