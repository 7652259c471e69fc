"""What the browser tests share: Chromium's path and flags, a trace served on loopback, SQL through
the server's query API, pages with their script errors collected, screenshots, waiting for idle.

The fixtures built on these (`browser`, `a100_server`) are in tests/conftest.py.
"""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import sys
import urllib.request
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
LAUNCH_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
               "--disable-sync", "--no-first-run"]
SHOTS = ROOT / "test-output" / "ui"
A100 = ROOT / "sample_traces" / "chrome" / "kineto" / "a100-rank0-memcpy.json.gz"


def get_json(url: str):
    with urllib.request.urlopen(url, timeout=20) as r:
        return json.loads(r.read())


def sql(server: str, trace_id: str, text: str, max_rows: int = 10_000) -> list:
    """Rows of one query through the server's sandboxed SQL endpoint (what a user can run)."""
    req = urllib.request.Request(f"{server}/api/traces/{trace_id}/query",
                                 data=json.dumps({"sql": text, "max_rows": max_rows}).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read())["rows"]


def first_ready(server: str) -> str:
    return next(t["id"] for t in get_json(f"{server}/api/traces")["traces"] if t["status"] == "ready")


def trace_info(server: str) -> dict:
    """The served trace's id, absolute start and duration (ns)."""
    tid = first_ready(server)
    meta = get_json(f"{server}/api/traces/{tid}")
    return {"id": tid, "start": int(meta["start_abs_ns"]), "duration": int(meta["duration_ns"])}


def ingest_cli(store: Path, path: Path, *flags: str) -> None:
    out = subprocess.run([sys.executable, "-m", "acceltrace", "--store", str(store), "ingest", *flags, "--json", str(path)],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]


@contextmanager
def new_page(browser, server: str, width: int = 1500, height: int = 900, timeout_ms: int | None = None):
    """A page in a context of its own on the server; `page.errors` collects its script errors."""
    ctx = browser.new_context(viewport={"width": width, "height": height}, base_url=server)
    pg = ctx.new_page()
    if timeout_ms:
        pg.set_default_timeout(timeout_ms)
    pg.errors = []
    pg.on("pageerror", lambda e: pg.errors.append(str(e)))
    try:
        yield pg
    finally:
        ctx.close()


def shot(page, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{name}.png"))


def wait_idle(page, timeout_ms: int = 15000) -> None:
    """The timeline has drawn everything it asked for (and stays so over two frames)."""
    js = "() => { const t = document.getElementById('timeline'); return t && t.dataset.state === 'idle'; }"
    page.wait_for_function(js, timeout=timeout_ms)
    page.evaluate("() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))")
    page.wait_for_function(js, timeout=timeout_ms)


def drop_file(page, name: str, data: bytes) -> None:
    """Drop a file onto the page the way a browser does (a DataTransfer holding a File, on drag events)."""
    page.evaluate("""([name, b64]) => {
        const bytes = Uint8Array.from(atob(b64), c => c.charCodeAt(0));
        const dt = new DataTransfer();
        dt.items.add(new File([bytes], name));
        for (const type of ['dragenter', 'dragover', 'drop'])
            document.body.dispatchEvent(new DragEvent(type, {dataTransfer: dt, bubbles: true, cancelable: true}));
    }""", [name, base64.b64encode(data).decode()])


def list_page_ready(page) -> None:
    """The trace list, idle: the trace page's modules loaded ahead, so a trace opens in place (pages/in_place.js).
    Marks the document (`window.__listDocument`): a navigation loses the mark."""
    page.goto("/")
    page.wait_for_function("() => performance.getEntriesByType('resource').some(e => e.name.endsWith('/pages/trace.js'))")
    page.wait_for_load_state("networkidle")
    page.evaluate("() => { window.__listDocument = true; }")
