"""Trace comparison: two stored traces matched by normalised name within aligned steps (docs/diff.md)."""
