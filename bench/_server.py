"""A real `acceltrace serve` in a subprocess on loopback, for the benchmarks (tiles, load)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class BenchServer:
    def __init__(self, store: Path):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = Path(store) / f"bench-server-{self.port}.log"
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "acceltrace", "--store", str(store), "serve", "--port", str(self.port)],
            cwd=ROOT, stdout=open(self.log_path, "wb"), stderr=subprocess.STDOUT, env=env)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(self.url + "/api/traces", timeout=2):
                    return
            except OSError:
                if self.proc.poll() is not None:
                    raise RuntimeError(self.log_path.read_text())
                time.sleep(0.1)
        raise RuntimeError("server did not start")

    def rss_bytes(self) -> int:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):  # peak resident set
                return int(line.split()[1]) * 1024
        return 0

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
