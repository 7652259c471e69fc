"""Nsight Systems SQLite exports: importer.py is the entry point."""
