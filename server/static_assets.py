"""The web UI's files under a versioned path the browser keeps for good, and the trace page's module graph.

/static/v/<version>/... serves web/static with `Cache-Control: public, max-age=31536000, immutable`.
<version> is a hash of every file's path and bytes, worked out when the app is created: a changed file is
a new URL, so a browser never asks again for a file it holds. The pages name their scripts and styles
under it (the templates' `static`). A trace page opened before, or prefetched by the list page while an
upload is ingested, then loads its ~45 modules with no request at all (docs/ui.md, "Page assets").
/static/... serves the same files as before, without the long cache (links from elsewhere, scripts that
import a module by its plain path).
"""

from __future__ import annotations

import hashlib
import re
import time
from pathlib import Path

from starlette.staticfiles import StaticFiles

IMMUTABLE = "public, max-age=31536000, immutable"
PREFIX = "/static/v"
# the trace page's stylesheets, in the order it links them
TRACE_STYLES = ("app.css", "tracks.css", "nav.css")
TRACE_ENTRY = "pages/trace_page.js"  # its main(): pages/trace.js
# a module's relative references to others: static imports, `import("./x.js")`, `new URL("./worker.js", ...)`
_RELATIVE_JS = re.compile(r"""["'](\.{1,2}/[\w./-]+\.js)["']""")


def version(static_dir: Path) -> str:
    """A hash of the folder's files, names and bytes (16 hex digits); that of nothing without the folder."""
    h = hashlib.sha256()
    if static_dir.is_dir():
        for f in sorted(p for p in static_dir.rglob("*") if p.is_file()):
            h.update(f.relative_to(static_dir).as_posix().encode() + b"\0")
            h.update(f.read_bytes())
            h.update(b"\0")
    return h.hexdigest()[:16]


def module_graph(static_dir: Path, entry: str = TRACE_ENTRY) -> list[str]:
    """Every module `entry` loads (its tile worker's included), as paths under static_dir, entry first, then in
    the order they are first referenced. A reference to a file that is not there is left out."""
    root = static_dir.resolve()
    seen, order, todo = {entry}, [], [entry]
    while todo:
        rel = todo.pop(0)
        path = root / rel
        if not path.is_file():
            continue
        order.append(rel)
        for ref in _RELATIVE_JS.findall(path.read_text(encoding="utf-8", errors="replace")):
            target = (path.parent / ref).resolve()
            if not target.is_relative_to(root):
                continue
            name = target.relative_to(root).as_posix()
            if name not in seen:
                seen.add(name)
                todo.append(name)
    return order


class ImmutableStatic(StaticFiles):
    """StaticFiles whose answers the browser may keep for a year without asking again; a file changed since
    the version was worked out (someone editing web/static under a running server) is answered `no-cache`
    instead, so no browser keeps it under a version that names other bytes (restart to get a new version)."""

    def __init__(self, *args, since: float, **kwargs):
        super().__init__(*args, **kwargs)
        self.since = since

    def file_response(self, full_path, stat_result, scope, status_code: int = 200):
        response = super().file_response(full_path, stat_result, scope, status_code)
        response.headers["Cache-Control"] = IMMUTABLE if stat_result.st_mtime <= self.since else "no-cache"
        return response


class Assets:
    """What the templates name: the versioned prefix, the trace page's modules and styles."""

    def __init__(self, static_dir: Path):
        self.since = time.time()  # before the files are read: one written during the hash counts as changed
        self.version = version(static_dir)
        self.prefix = f"{PREFIX}/{self.version}"
        self.trace_modules = module_graph(static_dir)
        self.trace_styles = [s for s in TRACE_STYLES if (static_dir / s).is_file()]

    def template_globals(self) -> dict:
        return {"static": self.prefix, "trace_modules": self.trace_modules, "trace_styles": self.trace_styles}
