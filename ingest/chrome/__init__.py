"""Chrome Trace Event JSON (PyTorch profiler / Kineto, Perfetto, Chrome): importer.py is the entry point."""
