"""Processes as /proc lists them (Linux): a process's descendants, whether one still runs."""

from __future__ import annotations

from pathlib import Path


def _table() -> dict[int, tuple[int, bytes]]:
    """pid -> (parent pid, command line) of every process readable now."""
    out = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                stat = (d / "stat").read_text()
                cmd = (d / "cmdline").read_bytes()
            except OSError:
                continue
            out[int(d.name)] = (int(stat.rsplit(")", 1)[1].split()[1]), cmd)
    return out


def descendants(pid: int, cmd_has: bytes = b"", depth: int | None = None) -> set[int]:
    """Every process under pid (down to `depth` generations: 1 = its children) whose command line holds
    cmd_has."""
    table = _table()
    out, level, gen = set(), {pid}, 0
    while level and (depth is None or gen < depth):
        level = {c for c, (pp, _) in table.items() if pp in level} - out
        out |= level
        gen += 1
    return {p for p in out if cmd_has in table[p][1]}


def alive(pid: int) -> bool:
    """Running (a zombie not yet reaped by its parent is not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False
