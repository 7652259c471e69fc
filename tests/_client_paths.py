"""Runs a client test module on both of the Python client's paths: compiled and pure Python.

    from _client_paths import client_path  # noqa: F401  (an autouse fixture)

The pure-Python path is chosen with ACCELTRACE_PURE_PYTHON=1 (read per Tracer, and inherited by
producer subprocesses). The compiled case is skipped, with the reason, only where the extension
was not built (no C compiler when the project was installed).
"""

import pytest

from acceltrace.collect.client import tracer


@pytest.fixture(autouse=True, params=["compiled", "python"])
def client_path(request, monkeypatch):
    if request.param == "compiled":
        monkeypatch.delenv(tracer.PURE_PYTHON_ENV, raising=False)
        if tracer.compiled() is None:
            pytest.skip("the client extension is not built here (pip install -e . with a C compiler)")
    else:
        monkeypatch.setenv(tracer.PURE_PYTHON_ENV, "1")
        assert tracer.compiled() is None
    return request.param
