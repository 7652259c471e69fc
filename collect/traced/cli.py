"""`acceltrace traced --socket PATH --out FILE [--buffer-mb N] [--mode discard|ring]` and `... ctl CMD`."""

from __future__ import annotations

import json
import sys

from acceltrace.collect.traced.protocol import ctl


def traced_command(args) -> int:
    if args.ctl:
        return _ctl(args)
    if args.out is None:
        print("acceltrace traced: --out FILE.atrace is required to run the daemon", file=sys.stderr)
        return 2
    if args.buffer_mb < 1:
        print(f"acceltrace traced: --buffer-mb must be at least 1 (got {args.buffer_mb})", file=sys.stderr)
        return 2
    from acceltrace.collect.traced.daemon import Daemon

    return Daemon(args.socket, args.out, buffer_mb=args.buffer_mb, mode=args.mode).run()


def _ctl(args) -> int:
    words = list(args.ctl)
    if words and words[0] == "ctl":
        words = words[1:]
    if len(words) != 1 or words[0] not in ("start", "stop", "flush", "status"):
        print("usage: acceltrace traced --socket PATH ctl start|stop|flush|status", file=sys.stderr)
        return 2
    try:
        reply = ctl(args.socket, words[0])
    except OSError as e:
        print(f"acceltrace traced: no daemon at {args.socket} ({e.strerror or e})", file=sys.stderr)
        return 1
    print(json.dumps(reply, indent=1))
    return 0 if reply.get("ok") else 1
