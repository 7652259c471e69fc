"""Where a fleet lives in the store: <store>/fleets/<id>/ with fleet.json, results/, fleet.duckdb.

fleet.json (name, inputs, tag pattern, builds) is replaced atomically; results/ holds one
Parquet file per build, one row group per trace, written as results arrive; fleet.duckdb is
the reduce's output (the fleet tables), rebuilt in a temp file and renamed into place.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from acceltrace.store.catalog import is_trace_id, new_trace_id

FLEETS = "fleets"


class FleetNotFound(LookupError):
    pass


def is_fleet_id(text: str) -> bool:
    return is_trace_id(text)


def fleets_dir(store) -> Path:
    return Path(store.root) / FLEETS


def fleet_dir(store, fleet_id: str) -> Path:
    if not is_trace_id(fleet_id):
        raise FleetNotFound(f"{fleet_id!r} is not a fleet id")
    return fleets_dir(store) / fleet_id


def list_fleets(store) -> list[dict]:
    out = []
    root = fleets_dir(store)
    if root.is_dir():
        for d in sorted(root.iterdir()):
            f = d / "fleet.json"
            if is_trace_id(d.name) and f.is_file():
                try:
                    out.append(json.loads(f.read_text()))
                except ValueError:
                    continue
    return sorted(out, key=lambda f: (f.get("updated", ""), f["id"]), reverse=True)


def resolve(store, given: str) -> dict:
    """A fleet by id, unique id prefix or name; FleetNotFound saying what exists otherwise."""
    fleets = list_fleets(store)
    exact = [f for f in fleets if f["id"] == given] or [f for f in fleets if f.get("name") == given]
    if not exact and len(given) >= 4:
        exact = [f for f in fleets if f["id"].startswith(given)]
    if len(exact) == 1 or (exact and all(f.get("name") == given for f in exact)):
        return exact[0]
    names = ", ".join(f"{f['id']} ({f.get('name')})" for f in fleets[:10]) or "none"
    if exact:
        raise FleetNotFound(f"{given!r} matches {len(exact)} fleets; give the id")
    raise FleetNotFound(f"no fleet {given!r} in {fleets_dir(store)}; fleets: {names}")


def open_or_create(store, name: str | None, inputs: list[str], tag_pattern: str | None) -> dict:
    """The fleet of that name (updated by this build), or a new one."""
    if name:
        for f in list_fleets(store):
            if f.get("name") == name:
                f["inputs"] = sorted(set(f.get("inputs", [])) | set(inputs))
                if tag_pattern:
                    f["tag_pattern"] = tag_pattern
                return f
    fid = new_trace_id()
    now = _now()
    return {"id": fid, "name": name or f"fleet {now}", "created": now, "updated": now, "inputs": sorted(set(inputs)),
            "tag_pattern": tag_pattern, "builds": 0}


def save(store, fleet: dict) -> None:
    d = fleet_dir(store, fleet["id"])
    (d / "results").mkdir(parents=True, exist_ok=True)
    fleet["updated"] = _now()
    tmp = d / f".fleet.json.{os.getpid()}.tmp"
    tmp.write_text(json.dumps(fleet, indent=1, sort_keys=True) + "\n")
    os.replace(tmp, d / "fleet.json")


def db_path(store, fleet_id: str) -> Path:
    return fleet_dir(store, fleet_id) / "fleet.duckdb"


def results_dir(store, fleet_id: str) -> Path:
    return fleet_dir(store, fleet_id) / "results"


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
