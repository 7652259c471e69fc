"""`acceltrace sim SCENARIO --out DIR [--seed N] [--events N] [--live]`."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path


def sim_command(args) -> int:
    from acceltrace.sim import scenarios
    from acceltrace.sim.session import run_scenario

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
