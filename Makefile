# Two entry points (see README): `make run` and `make test`. Everything they
# need is installed here, into a project-local virtual environment.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STORE ?= .acceltrace
HOST ?= 127.0.0.1
PORT ?= 8000

.PHONY: setup test-setup run test clean

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

setup: $(BIN)/python
	@# the compiled parts (setup.py: the Chrome scanner) need a C compiler; without one they
	@# are skipped and the Python paths run instead (same results, slower)
	@command -v cc >/dev/null 2>&1 || { \
	  echo "installing gcc for the compiled ingest scanner (optional)"; \
	  (apt-get update -qq && apt-get install -y -qq gcc python3-dev) >/dev/null 2>&1 || \
	  (sudo -n apt-get update -qq && sudo -n apt-get install -y -qq gcc python3-dev) >/dev/null 2>&1 || \
	  echo "no C compiler: the ingest scanner is not built; Chrome traces load on the slower Python path"; }
	@# the Nsight SQLite reader (ingest/nsys/_sqlread.c) links the system libsqlite3: Debian's libsqlite3-dev
	@test -f /usr/include/sqlite3.h || { \
	  echo "installing libsqlite3-dev for the compiled Nsight reader (optional)"; \
	  (apt-get update -qq && apt-get install -y -qq libsqlite3-dev) >/dev/null 2>&1 || \
	  (sudo -n apt-get update -qq && sudo -n apt-get install -y -qq libsqlite3-dev) >/dev/null 2>&1 || \
	  echo "no libsqlite3-dev: Nsight exports are read on the slower Python sqlite3 path"; }
	$(BIN)/python -m pip install -q -e .
	@# the bytecode of the project's own modules, once: where PYTHONDONTWRITEBYTECODE is set, every command
	@# would otherwise compile them again at its start (0.13 s of each `acceltrace ingest`); the folders are
	@# pyproject.toml's package-dir, so a new part is compiled too
	$(BIN)/python -m compileall -q -j 0 $$($(BIN)/python -c "import tomllib; print(*sorted(set(tomllib.load(open('pyproject.toml', 'rb'))['tool']['setuptools']['package-dir'].values())))")

test-setup: setup
	$(BIN)/python -m pip install -q -e '.[test]'
	@command -v chromium >/dev/null 2>&1 || { \
	  echo "installing Debian's chromium for the browser tests"; \
	  (apt-get update -qq && apt-get install -y -qq chromium) || \
	  (sudo apt-get update -qq && sudo apt-get install -y -qq chromium); }
	@command -v wrk >/dev/null 2>&1 || { \
	  echo "installing Debian's wrk for bench/load.py (optional)"; \
	  (apt-get install -y -qq wrk || sudo -n apt-get install -y -qq wrk) >/dev/null 2>&1 || \
	  echo "no wrk: bench/load.py runs its Python client only"; }

run: setup
	$(BIN)/acceltrace --store $(STORE) serve --host $(HOST) --port $(PORT) sample_traces

# The suite on every core, up to four (pytest-xdist): a test file's tests stay on one worker, since they share
# its module fixtures (a browser, a live server). On the 2-core build machine 900 s -> 631 s. TEST_WORKERS=0
# runs it in one process.
TEST_WORKERS ?= auto
test: test-setup
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --maxprocesses 4 --dist loadfile $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) $(STORE) build *.egg-info
