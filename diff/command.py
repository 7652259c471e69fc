"""`acceltrace diff A B [--steps ...] [--json]`: the comparison printed as text or one JSON object."""

from __future__ import annotations

import json
import sys

from acceltrace.diff.compare import Noise, compare
from acceltrace.diff.report import render
from acceltrace.diff.steps import StepsError


def diff_command(args, store, id_a: str, id_b: str) -> int:
    """Compare two ready traces of `store` (the CLI resolved ids and ingested files)."""
    if args.noise_pct < 0 or args.noise_ns < 0:
        print("acceltrace diff: --noise-pct and --noise-ns must be >= 0", file=sys.stderr)
        return 2
    try:
        doc = compare(store, id_a, id_b, steps=args.steps, noise=Noise(args.noise_pct, args.noise_ns),
                      strip_templates=args.strip_templates)
    except StepsError as e:
        print(f"acceltrace diff: {e}", file=sys.stderr)
        return 2
    except FileNotFoundError as e:
        print(f"acceltrace diff: {e}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(doc))
    else:
        print(render(doc, top=args.top))
    return 0
