"""Input formats -> the trace store: one subpackage per format behind one Importer (importer.py),
registered in registry.py; the pipeline, the sources (archives, containers) and the builder."""
