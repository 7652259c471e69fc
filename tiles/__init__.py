"""Level-of-detail tiles: the tables built at ingest (build.py), queried and encoded at serve time (query.py)."""
