"""`acceltrace sim SCENARIO --out DIR [--seed N] [--events N] [--live]` and
`acceltrace sim fleet --ranks N --out DIR [--seed S] [--events N]`."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path


def sim_command(args) -> int:
    from acceltrace.sim import scenarios
    from acceltrace.sim.session import run_scenario

    if args.scenario == "fleet":
        return _fleet(args)
    if getattr(args, "ranks", None) is not None:
        print("acceltrace sim: --ranks is for `acceltrace sim fleet`", file=sys.stderr)
        return 2
    if args.scenario not in scenarios.SCENARIOS:
        print(f"acceltrace sim: unknown scenario {args.scenario!r}; expected one of: "
              f"{', '.join(scenarios.SCENARIOS)}", file=sys.stderr)
        return 2
    if args.events is not None and args.events < 1:
        print("acceltrace sim: --events must be a positive number of events", file=sys.stderr)
        return 2
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        print(f"acceltrace sim: --out {out} exists and is not a directory", file=sys.stderr)
        return 2
    if args.live:
        from acceltrace.sim.live import run_live

        return run_live(args.scenario, args.seed, args.events, out)
    t0 = time.perf_counter()
    summary = run_scenario(args.scenario, out, seed=args.seed, events=args.events)
    summary["wall_s"] = round(time.perf_counter() - t0, 3)
    print(json.dumps(summary))
    return 0


def _fleet(args) -> int:
    """N run directories of one multi-rank job and fleet_truth.json (sim/fleet.py)."""
    from acceltrace.sim.fleet import DEFAULT_EVENTS, MAX_RANKS, write_fleet

    if args.ranks is None or not 1 <= args.ranks <= MAX_RANKS:
        print(f"acceltrace sim fleet: --ranks N is required, 1 to {MAX_RANKS}", file=sys.stderr)
        return 2
    if args.live:
        print("acceltrace sim fleet: --live is not supported for fleets", file=sys.stderr)
        return 2
    if args.events is not None and args.events < 1000:
        print("acceltrace sim fleet: --events must be at least 1000 per rank", file=sys.stderr)
        return 2
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        print(f"acceltrace sim fleet: --out {out} exists and is not a directory", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    summary = write_fleet(out, args.ranks, seed=args.seed, events=args.events or DEFAULT_EVENTS)
    summary["wall_s"] = round(time.perf_counter() - t0, 3)
    print(json.dumps(summary))
    return 0
