"""The trace store: catalog (one DuckDB file per trace), schema, sandboxed SQL, link physics, named queries."""
