"""Input formats -> the DuckDB trace store (one module per format, see registry.py)."""
