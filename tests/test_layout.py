"""The layout of docs/architecture.md, held against the code's own imports.

Every import of the project's code goes through the one `acceltrace.` namespace; packages
depend only downward (the rule below is the one docs/architecture.md states); no two
modules import each other, directly or around a circle, lazily or not; pyproject.toml
installs every package folder; and a built wheel holds no top-level package but ours.
"""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PARTS = ("acceltrace", "ingest", "server", "collect", "analysis", "sim", "store", "formats", "tiles", "export", "diff",
         "fleet")

# package -> the packages it may import (docs/architecture.md, "The dependency rule").
# "cli" is acceltrace/ itself: the command line, which may call into every part.
ALLOWED = {
    "cli": set(PARTS[1:]),
    "server": {"analysis", "tiles", "export", "ingest", "diff", "store", "formats", "collect", "fleet"},
    "fleet": {"ingest", "analysis", "store", "formats"},
    "diff": {"store"},
    "analysis": {"store"},
    "tiles": {"store"},
    "export": {"store", "formats"},
    "ingest": {"tiles", "store", "formats"},
    "collect": {"formats", "store"},
    "sim": {"collect", "formats", "store"},
    "store": set(),
    "formats": set(),
}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[0] != "acceltrace":
        parts.insert(0, "acceltrace")
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(f): f for part in PARTS for f in (ROOT / part).rglob("*.py")}


def _part(module: str) -> str:
    bits = module.split(".")
    return bits[1] if len(bits) > 1 and bits[1] in PARTS else "cli"


def _imports(path: Path, modules: dict[str, Path]) -> tuple[set[str], list[str]]:
    """(the project modules a file imports, the bare top-level imports of our folders it makes)."""
    out, bare = set(), []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        for name in names:
            top = name.split(".")[0]
            if top in PARTS[1:]:
                bare.append(f"{path.relative_to(ROOT)}:{node.lineno}: {name}")
            if top != "acceltrace":
                continue
            if isinstance(node, ast.ImportFrom):
                for a in node.names:
                    sub = f"{name}.{a.name}"
                    out.add(sub if sub in modules else name)
            else:
                out.add(name)
    return {m for m in out if m in modules}, bare


@pytest.fixture(scope="module")
def graph():
    mods = _modules()
    edges, bare = {}, []
    for name, path in mods.items():
        edges[name], b = _imports(path, mods)
        bare += b
    return mods, edges, bare


def test_every_import_of_our_code_goes_through_the_acceltrace_namespace(graph):
    _, _, bare = graph
    assert bare == []
    for f in list((ROOT / "tests").glob("*.py")) + list((ROOT / "bench").glob("*.py")):
        _, b = _imports(f, {})
        assert b == [], b


def test_packages_depend_only_downward(graph):
    _, edges, _ = graph
    wrong = sorted(f"{m} -> {t}" for m, ts in edges.items() for t in ts
                   if _part(m) != _part(t) and _part(t) not in ALLOWED[_part(m)])
    assert wrong == []


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one node (Tarjan, iterative)."""
    index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]
    for start in edges:
        if start in index:
            continue
        work = [(start, iter(sorted(edges.get(start, ()))))]
        index[start] = low[start] = counter[0]
        counter[0] += 1
        stack.append(start)
        on.add(start)
        while work:
            node, it = work[-1]
            for nxt in it:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter[0]
                    counter[0] += 1
                    stack.append(nxt)
                    on.add(nxt)
                    work.append((nxt, iter(sorted(edges.get(nxt, ())))))
                    break
                if nxt in on:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on.discard(w)
                        comp.append(w)
                        if w == node:
                            break
                    if len(comp) > 1:
                        out.append(sorted(comp))
    return out


def test_no_import_cycles_between_files_or_packages(graph):
    _, edges, _ = graph
    # a package's __init__ importing its own modules is not a cycle of meaning: leave it out
    file_edges = {m: {t for t in ts if not (m + ".").startswith(t + ".")} for m, ts in edges.items()}
    assert _cycles(file_edges) == []
    pkg_edges = defaultdict(set)
    for m, ts in edges.items():
        for t in ts:
            if _part(m) != _part(t):
                pkg_edges[_part(m)].add(_part(t))
    assert _cycles(dict(pkg_edges)) == []


def test_the_cycle_finder_finds_cycles():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_pyproject_installs_every_package_folder():
    conf = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(conf["packages"])
    folders = {_module_name(f) for part in PARTS for f in (ROOT / part).rglob("__init__.py")}
    assert folders <= listed, sorted(folders - listed)
    for pkg, folder in conf["package-dir"].items():
        assert (ROOT / folder).is_dir(), (pkg, folder)


def test_no_product_file_is_over_420_lines():
    long = []
    for part in PARTS + ("web",):
        for f in (ROOT / part).rglob("*"):
            if f.suffix in (".py", ".js") and len(f.read_text().splitlines()) > 420:
                long.append(str(f.relative_to(ROOT)))
    assert long == []


def test_the_wheel_installs_only_the_acceltrace_package(tmp_path):
    pytest.importorskip("setuptools")
    # build from a copy of what the wheel is made of, so no build/ folder lands in the checkout
    src = tmp_path / "src"
    skip = shutil.ignore_patterns("__pycache__", "*.so", "*.egg-info")
    src.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE", "setup.py", "MANIFEST.in"):
        if (ROOT / name).exists():
            shutil.copy2(ROOT / name, src / name)
    for part in PARTS + ("web",):
        shutil.copytree(ROOT / part, src / part, ignore=skip)
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q",
                        "-w", str(tmp_path), str(src)], capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, r.stderr[-2000:]
    (wheel,) = tmp_path.glob("acceltrace-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names}
    assert {t for t in tops if not t.endswith(".dist-info")} == {"acceltrace"}
    # what the server reads at run time travels with it
    for need in ("acceltrace/web/templates/trace.html", "acceltrace/analysis/_common.sql",
                 "acceltrace/collect/client/acceltrace.h", "acceltrace/ingest/chrome/importer.py"):
        assert need in names, need
    assert any(re.match(r"acceltrace/web/static/.+\.js$", n) for n in names)
