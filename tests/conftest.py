"""Shared fixtures: a store with small traces built in-process, an in-process API client, a live server.

- `trace_store` (session): a Store in a temp dir holding
    * "synthetic": ~40k slices over 24 tracks, nested to depth 8+, counters, built with a small
      RAW_WINDOW_ROWS (and no RAW_TRACE_ROWS) so tiles at low levels come from raw windows and at
      high levels from the LOD pyramid (both paths are tested);
    * "chain": a handmade trace with one API call -> submission -> DMA + kernel correlation chain
      (plus a dependency flow that must not join it), instants, a long slice and counters.
  `trace_store.ids` maps those names to trace ids; `trace_store.root` is the directory.
- `api` (session): a fastapi TestClient on that store (no sockets).
- `live_server_factory` (session): `start(store_dir, paths=(), extra_args=())` runs the real
  `acceltrace serve` in a subprocess on a free loopback port and returns a LiveServer with
  `.url` (e.g. "http://127.0.0.1:40123"), `.store`, `.proc`, `.log_path`; every server started
  is stopped at the end of the session (or call `.stop()`).
- `live_server` (session): one such server on `trace_store`.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# fastapi's TestClient sends Host: testserver; the Host check (server/security.py) must let it in
os.environ.setdefault("ACCELTRACE_ALLOWED_HOSTS", "testserver")
START_ABS_NS = 1_700_000_000_000_000_000


@dataclass
class TraceStore:
    root: Path
    ids: dict[str, str] = field(default_factory=dict)
    # slice ids of the chain trace, by role
    chain: dict[str, int] = field(default_factory=dict)


def _build_chain_trace(store) -> tuple[str, dict[str, int]]:
    from acceltrace.ingest.builder import TraceBuilder

    trace_id, tmp = store.begin("chain", None, None)
    b = TraceBuilder(tmp)
    cpu = b.track("cpu", "thread 11", group_name="python (11)", process="11", thread="11")
    drv = b.track("driver", "queue 0", group_name="device 0", device="0")
    pcie = b.track("pcie", "H2D", group_name="device 0", device="0")
    eu = b.track("eu", "stream 7", group_name="device 0", device="0")
    util = b.track("counter", "PCIe H2D", group_name="device 0", device="0", unit="GB/s")
    t = START_ABS_NS
    names = ["cudaMemcpyAsync", "cudaLaunchKernel", "submit copy", "submit kernel", "Memcpy HtoD", "gemm_kernel",
             "long_kernel", "other_api", "tiny"]
    rows = {
        "track_id": [cpu, cpu, drv, drv, pcie, eu, eu, cpu] + [eu] * 50,
        "ts": [t + 1000, t + 5000, t + 2000, t + 6000, t + 3000, t + 8000, t + 20_000, t + 40_000]
              + [t + 20_100 + 37 * i for i in range(50)],
        "dur": [3000, 2000, 500, 500, 4000, 6000, 10_000_000, 1000] + [20] * 50,
        "name": names[:8] + ["tiny"] * 50,
        "bytes": [None, None, None, None, 1 << 20, None, None, None] + [None] * 50,
        "direction": [None, None, None, None, "h2d", None, None, None] + [None] * 50,
        "host_mem": [None, None, None, None, "pinned", None, None, None] + [None] * 50,
        "args": ['{"stream": 7}'] + [None] * 57,
    }
    first = b.add_slices(rows)
    ids = {"memcpy_api": first, "launch_api": first + 1, "submit_copy": first + 2, "submit_kernel": first + 3,
           "dma": first + 4, "kernel": first + 5, "long": first + 6, "other_api": first + 7}
    inst = b.add_slices({"track_id": [cpu] * 3, "ts": [t + 1500, t + 1600, t + 9000], "dur": [0, 0, 0],
                         "name": ["mark", "mark", "sync"]})
    ids["instant"] = inst
    b.add_flows([ids["memcpy_api"], ids["submit_copy"], ids["launch_api"], ids["submit_kernel"], ids["kernel"]],
                [ids["submit_copy"], ids["dma"], ids["submit_kernel"], ids["kernel"], ids["other_api"]],
                ["submit", "dma", "submit", "exec", "dependency"], ["ac2g"] * 4 + ["fwdbwd"])
    # the kernel launch and the copy share nothing but the stream: link them only through their calls
    b.add_counters([util] * 5, [t, t + 2500, t + 3000, t + 5000, t + 30_000], [0.0, 5.0, 12.5, 3.0, 0.0])
    counts = b.finish("test", "chain")
    store.publish(trace_id, tmp, "test", counts)
    return trace_id, ids


@pytest.fixture(scope="session")
def trace_store(tmp_path_factory) -> TraceStore:
    from acceltrace.tiles import build as lod
    from bench.gen_synthetic import build_trace
    from acceltrace.store.catalog import Store

    root = tmp_path_factory.mktemp("store")
    store = Store(root)
    ts = TraceStore(root=root)
    saved = lod.RAW_WINDOW_ROWS, lod.RAW_TRACE_ROWS
    # small, so the pyramid starts at a low level in a small trace (which would otherwise have none)
    lod.RAW_WINDOW_ROWS, lod.RAW_TRACE_ROWS = 2_000, 0
    try:
        ts.ids["synthetic"], _ = build_trace(store, 40_000, name="synthetic", n_tracks=72, seed=7,
                                             n_counter_tracks=2, counter_period_ns=3_000, batch_rows=20_000)
    finally:
        lod.RAW_WINDOW_ROWS, lod.RAW_TRACE_ROWS = saved
    ts.ids["chain"], ts.chain = _build_chain_trace(store)
    return ts


@pytest.fixture(scope="session")
def api(trace_store):
    from fastapi.testclient import TestClient

    from acceltrace.server.app import create_app

    app = create_app(trace_store.root, max_upload_bytes=8 << 20, query_timeout_s=2.0)
    with TestClient(app, raise_server_exceptions=False) as c:
        yield c


@pytest.fixture
def synced(monkeypatch) -> list[str]:
    """The paths store/duck.py syncs to the disk (os.fsync on a descriptor), in order, as they happen."""
    import acceltrace.store.duck as duck

    paths: list[str] = []
    real_fsync = duck.os.fsync

    def fsync(fd):
        paths.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    monkeypatch.setattr(duck.os, "fsync", fsync)
    return paths


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class LiveServer:
    url: str
    store: Path
    proc: subprocess.Popen
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


def start_live_server(store: Path, paths=(), extra_args=(), timeout_s: float = 60.0,
                      env: dict | None = None) -> LiveServer:
    """`python -m acceltrace --store STORE serve PATHS --port P` on loopback (`env`: variables added to
    its environment); waits until it answers."""
    port = free_port()
    Path(store).mkdir(parents=True, exist_ok=True)
    log_path = Path(store) / f"server-{port}.log"
    log = open(log_path, "wb")
    env = dict(os.environ, **(env or {}), PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.Popen(
        [sys.executable, "-m", "acceltrace", "--store", str(store), "serve", *map(str, paths),
         "--host", "127.0.0.1", "--port", str(port), *extra_args],
        cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env=env)
    server = LiveServer(f"http://127.0.0.1:{port}", Path(store), proc, log_path)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}:\n{server.log()}")
        try:
            with urllib.request.urlopen(server.url + "/api/traces", timeout=2) as r:
                if r.status == 200:
                    return server
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            time.sleep(0.1)
    server.stop()
    raise RuntimeError(f"server did not answer within {timeout_s} s:\n{server.log()}")


@pytest.fixture(scope="session")
def live_server_factory():
    started: list[LiveServer] = []

    def start(store: Path, paths=(), extra_args=()) -> LiveServer:
        s = start_live_server(store, paths, extra_args)
        started.append(s)
        return s

    yield start
    for s in started:
        s.stop()


@pytest.fixture(scope="session")
def live_server(trace_store, live_server_factory) -> LiveServer:
    return live_server_factory(trace_store.root)


@pytest.fixture(scope="module")
def browser():
    """A headless Chromium (Debian's) for a module's browser tests (tests/_ui.py). Per module, not per
    session: Playwright's sync API refuses a second instance while one is running, and some modules
    drive their own (test_live_ui, test_fleet)."""
    from _ui import CHROMIUM, LAUNCH_ARGS

    if not Path(CHROMIUM).exists():
        pytest.skip(f"chromium not found at {CHROMIUM}")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=LAUNCH_ARGS)
        yield b
        b.close()


@pytest.fixture(scope="session")
def a100_server(tmp_path_factory, live_server_factory) -> str:
    """The A100 Kineto sample ingested (and analysed) by the CLI and served on loopback: the trace
    the views, track and navigation browser tests read (none of them changes it)."""
    from _ui import A100, ingest_cli

    store = tmp_path_factory.mktemp("a100-ui-store")
    ingest_cli(store, A100)
    return live_server_factory(store).url
