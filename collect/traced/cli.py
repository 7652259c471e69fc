"""`acceltrace traced --socket PATH --out FILE [--buffer-mb N] [--mode discard|ring]` and `... ctl CMD`."""

from __future__ import annotations

import json
import socket
import sys

from acceltrace.collect.traced import protocol as P


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


def ctl(socket_path, cmd: str, timeout_s: float = 5.0) -> dict:
    """Send one control command to a running daemon and return its reply."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout_s)
    try:
        s.connect(str(socket_path))
        P.send_msg(s, {"op": "ctl", "cmd": cmd})
        reply, _ = P.recv_msg(s)
    finally:
        s.close()
    if reply is None:
        raise ConnectionError("the daemon closed the connection without a reply")
    return reply


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
