"""acceltrace's own Chrome JSON exports, read back without loss (ahead of the generic Chrome importer)."""
