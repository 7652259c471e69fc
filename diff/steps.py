"""Aligned steps: ProfilerStep#N, else a repeated top-level user annotation, else the whole trace.

Steps are aligned by position (the i-th step of A with the i-th of B: two runs rarely number
their steps alike) and only as many as both sides have. Every slice in scope belongs to one step:
host slices by their start, device work by the step of the host call that launched it (so a
kernel that runs after its step ended still counts for it), unlaunched device work by its start.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import duckdb

from acceltrace.diff.pair import Side, letter

STEP_NAME = "ProfilerStep#N"  # ProfilerStep#<n> after name normalisation


class StepsError(ValueError):
    """A --steps selection that does not parse or names steps the traces do not have."""


@dataclass
class Steps:
    basis: str            # "ProfilerStep", "annotation" or "trace"
    name: str | None      # the normalised step name (None for the whole trace)
    aligned: int          # steps both sides have
    selected: list[int]   # positions compared
    notes: list[str]


def parse_spec(spec: str | None, aligned: int) -> list[int]:
    """'all' / None, or comma-separated positions and ranges ('0,2-4'), counted from 0."""
    if spec is None or spec.strip().lower() in ("", "all"):
        return list(range(aligned))
    out: set[int] = set()
    for pos, item in enumerate(spec.split(",")):
        item = item.strip()
        m = re.fullmatch(r"(\d+)(?:-(\d+))?", item)
        if not m:
            raise StepsError(f"--steps {spec!r}: item {pos + 1} ({item!r}) is not a step position or a range"
                             " like 2-4 (positions count from 0)")
        lo = int(m.group(1))
        hi = int(m.group(2)) if m.group(2) is not None else lo
        if hi < lo:
            raise StepsError(f"--steps {spec!r}: range {item!r} runs backwards")
        if hi >= aligned:
            raise StepsError(f"--steps {spec!r}: step {hi} is out of range: the traces have {aligned} aligned"
                             f" step{'s' if aligned != 1 else ''}" + (f" (0-{aligned - 1})" if aligned else ""))
        out.update(range(lo, hi + 1))
    return sorted(out)


def _candidates(con: duckdb.DuckDBPyConnection) -> list[tuple]:
    """(side, name, track_id, n, total_ns) of ProfilerSteps and top-level annotations, most frequent first."""
    rows = con.execute(f"""
        WITH c AS (
            SELECT side, name_id, track_id, count(*) AS n, sum(dur) AS total FROM _base
            WHERE store_lane IN ('cpu', 'annotation') AND dur > 0
              AND (name_id IN (SELECT name_id FROM _name_list WHERE name = '{STEP_NAME}') OR (is_annotation AND depth = 0))
            GROUP BY ALL)
        SELECT c.side, l.name, c.track_id, c.n, c.total FROM c JOIN _name_list l USING (name_id)
        ORDER BY c.n DESC, c.total DESC, c.track_id""").fetchall()
    return [(letter(r[0]),) + tuple(r[1:]) for r in rows]


def _choose(cands: list[tuple]) -> tuple[str, dict[str, int]] | None:
    """The step name both sides have (ProfilerStep first), and per side the track holding most of them."""
    best: dict[tuple[str, str], tuple[int, int, int]] = {}
    for side, name, track, n, total in cands:
        key = (side, name)
        if key not in best or (n, total) > best[key][1:]:
            best[key] = (track, n, total)
    common = {name for (side, name) in best if side == "a"} & {name for (side, name) in best if side == "b"}
    if STEP_NAME in common:
        pick = STEP_NAME
    else:
        repeated = [nm for nm in common if min(best[("a", nm)][1], best[("b", nm)][1]) >= 2]
        if not repeated:
            return None
        pick = max(repeated, key=lambda nm: (min(best[("a", nm)][1], best[("b", nm)][1]),
                                             best[("a", nm)][2] + best[("b", nm)][2], nm))
    return pick, {"a": best[("a", pick)][0], "b": best[("b", pick)][0]}


def build_steps(con: duckdb.DuckDBPyConnection, sides: dict[str, Side], spec: str | None) -> Steps:
    """_steps (every step per side), _sel (the selected windows) and _step_of (slice -> step)."""
    notes: list[str] = []
    cands = _candidates(con)
    chosen = _choose(cands)
    if chosen is not None:
        name, track = chosen
        con.execute(f"""CREATE TEMP TABLE _steps AS
            SELECT side, row_number() OVER (PARTITION BY side ORDER BY ts, slice_id) - 1 AS step,
                   slice_id, track_id, ts, ts + dur AS te FROM _base
            WHERE name_id = (SELECT name_id FROM _name_list WHERE name = ?) AND store_lane IN ('cpu', 'annotation') AND dur > 0
              AND ((side = 0 AND track_id = {int(track['a'])}) OR (side = 1 AND track_id = {int(track['b'])}))""",
                    [name])
        counts = {letter(k): v for k, v in con.execute("SELECT side, count(*) FROM _steps GROUP BY side").fetchall()}
        aligned = min(counts.get("a", 0), counts.get("b", 0))
        if counts.get("a", 0) != counts.get("b", 0):
            notes.append(f"A has {counts.get('a', 0)} steps, B {counts.get('b', 0)}: the first {aligned} of each"
                         " are compared")
        basis = "ProfilerStep" if name == STEP_NAME else "annotation"
    else:
        name, basis, aligned = None, "trace", 1
        has = {r[0] for r in cands if r[1] == STEP_NAME}
        if len(has) == 1:
            notes.append(f"only {'A' if 'a' in has else 'B'} has ProfilerStep steps: the whole traces are compared")
        # the whole trace as one step, on the host thread that is busiest at the top level
        con.execute("""CREATE TEMP TABLE _steps AS
            WITH busy AS (
                SELECT side, track_id, sum(dur) AS busy FROM _base WHERE store_lane = 'cpu' AND depth = 0
                GROUP BY ALL),
            thread AS (SELECT side, arg_max(track_id, busy * 1e6 - track_id) AS track_id FROM busy GROUP BY side),
            span AS (SELECT side, min(ts) AS ts, max(ts + dur) AS te FROM _base GROUP BY side)
            SELECT s.side, 0 AS step, NULL::BIGINT AS slice_id, t.track_id, s.ts, s.te
            FROM span s LEFT JOIN thread t USING (side)""")
    selected = parse_spec(spec, aligned)
    if aligned == 0:
        notes.append("the traces have no step in common")
    sel_list = ", ".join(str(int(i)) for i in selected) or "NULL"
    con.execute(f"CREATE TEMP TABLE _sel AS SELECT * FROM _steps WHERE step IN ({sel_list})")
    if basis == "trace":  # every slice is in the one step: no table to build
        con.execute("CREATE TEMP VIEW _scope AS SELECT *, 0 AS step FROM _base")
    else:
        con.execute("""CREATE TEMP TABLE _step_of AS
            WITH host AS (
                SELECT b.side, b.slice_id, st.step FROM _base b
                ASOF JOIN _sel st ON st.side = b.side AND b.ts >= st.ts
                WHERE b.store_lane IN ('cpu', 'driver', 'annotation') AND b.ts < st.te),
            dev AS (SELECT side, slice_id, ts FROM _base WHERE lane IN ('kernel', 'copy')),
            via AS (
                SELECT d.side, d.slice_id, h.step FROM dev d
                JOIN _launch l ON l.side = d.side AND l.dev_id = d.slice_id
                JOIN host h ON h.side = d.side AND h.slice_id = l.host_id),
            own AS (
                SELECT d.side, d.slice_id, st.step FROM dev d
                ASOF JOIN _sel st ON st.side = d.side AND d.ts >= st.ts
                WHERE d.ts < st.te
                  AND NOT EXISTS (SELECT 1 FROM _launch l WHERE l.side = d.side AND l.dev_id = d.slice_id))
            SELECT * FROM host UNION ALL SELECT * FROM via UNION ALL SELECT * FROM own""")
        con.execute("""CREATE TEMP TABLE _scope AS
            SELECT b.*, so.step FROM _base b JOIN _step_of so USING (side, slice_id)""")
    return Steps(basis, name, aligned, selected, notes)


def step_pairs(con: duckdb.DuckDBPyConnection, sides: dict[str, Side], steps: Steps) -> list[dict]:
    """Per aligned position: each side's step (its name as recorded, start and duration, rel ns)."""
    rows = [(letter(r[0]),) + tuple(r[1:]) for r in
            con.execute("SELECT side, step, slice_id, track_id, ts, te FROM _steps ORDER BY step, side").fetchall()]
    labels: dict[tuple[str, int], str] = {}
    for x in sides.values():
        ids = [r[2] for r in rows if r[0] == x.side and r[2] is not None]
        if ids:
            for sid, nm in con.execute(f"SELECT slice_id, name FROM {x.db}.slices WHERE slice_id IN "
                                       f"({', '.join(str(int(i)) for i in ids)})").fetchall():
                labels[(x.side, sid)] = nm
    out: dict[int, dict] = {}
    for side, step, sid, track, ts, te in rows:
        if step >= steps.aligned:
            continue
        start = int(sides[side].meta.get("start_ns", 0))
        p = out.setdefault(step, {"index": step, "selected": step in steps.selected})
        p[side] = {"name": labels.get((side, sid), "whole trace"), "slice_id": sid, "track_id": track,
                   "start_ns": int(ts) - start, "dur_ns": int(te - ts)}
    return [out[k] for k in sorted(out)]
