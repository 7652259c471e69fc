"""Bounded work per server process (docs/operations.md): what one worker accepts, and for how long.

- At most `max_inflight` HTTP requests are in progress in one worker; one more is answered at
  once with 503 and Retry-After instead of queueing without limit (long-lived event streams and
  websockets are not counted: they wait, they do not work).
- A request body must keep arriving: no byte for `body_idle_s`, or an average below
  `min_body_rate` bytes/s once `body_grace_s` have passed, answers 408 and closes the
  connection, so a client sending a byte every few seconds cannot hold a worker's upload slot.
  (Slow *headers* are cut by server/protocol.py, before a request reaches the app.)
- A client that goes away mid-request is not an error: the request stops and nothing is
  logged as a 500.

Plain ASGI (like server/security.py): a tile pays one counter increment.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from dataclasses import dataclass

log = logging.getLogger("acceltrace.server")

UNCOUNTED_SUFFIXES = ("/progress", "/analysis/events")  # server-sent event streams: they sleep, they do not work


def cores() -> int:
    """The cores this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def env_int(name: str, default: int) -> int:
    """A positive whole number from the environment (at least 1), else `default`."""
    try:
        return max(1, int(os.environ[name]))
    except (KeyError, ValueError):
        return default


def _env_num(name: str, default: float) -> float:
    try:
        return float(os.environ[name])
    except (KeyError, ValueError):
        return default


@dataclass(frozen=True)
class Limits:
    """One worker's limits; each has an environment variable (docs/operations.md)."""

    max_inflight: int = 256
    retry_after_s: int = 1
    body_idle_s: float = 30.0
    body_grace_s: float = 10.0
    min_body_rate: float = 1024.0  # bytes/s averaged over the whole body so far

    @classmethod
    def from_env(cls, **override) -> "Limits":
        d = cls()
        vals = {
            "max_inflight": int(_env_num("ACCELTRACE_MAX_INFLIGHT", d.max_inflight)),
            "retry_after_s": int(_env_num("ACCELTRACE_RETRY_AFTER_S", d.retry_after_s)),
            "body_idle_s": _env_num("ACCELTRACE_BODY_IDLE_S", d.body_idle_s),
            "body_grace_s": _env_num("ACCELTRACE_BODY_GRACE_S", d.body_grace_s),
            "min_body_rate": _env_num("ACCELTRACE_MIN_BODY_RATE", d.min_body_rate),
        }
        vals.update({k: v for k, v in override.items() if v is not None})
        return cls(**vals)


class SlowBody(Exception):
    """The client's body stopped arriving or arrives too slowly (answered 408)."""


class LimitsMiddleware:
    def __init__(self, app, limits: Limits | None = None):
        self.app = app
        self.limits = limits or Limits.from_env()
        self.inflight = 0

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        counted = not scope["path"].endswith(UNCOUNTED_SUFFIXES)
        if counted and self.inflight >= self.limits.max_inflight:
            return await _answer(send, 503, "overloaded",
                                 f"this server worker has {self.inflight} requests in progress (limit "
                                 f"{self.limits.max_inflight}); retry in {self.limits.retry_after_s} s",
                                 [(b"retry-after", str(self.limits.retry_after_s).encode())])
        if scope["method"] in ("GET", "HEAD"):  # no body to guard: the cheap path (tiles)
            if counted:
                self.inflight += 1
            try:
                await self.app(scope, receive, send)
            except OSError as e:
                log.info("client went away during %s %s: %s", scope.get("method"), scope["path"], e)
            finally:
                if counted:
                    self.inflight -= 1
            return
        started = [False]

        async def tracked_send(message):
            if message["type"] == "http.response.start":
                started[0] = True
            await send(message)

        if counted:
            self.inflight += 1
        try:
            await self.app(scope, self._guarded_receive(receive), tracked_send)
        except SlowBody as e:
            if not started[0]:
                await _answer(send, 408, "request_timeout", str(e), [(b"connection", b"close")])
        except OSError as e:  # the socket went away under a response being written
            log.info("client went away during %s %s: %s", scope.get("method"), scope["path"], e)
        finally:
            if counted:
                self.inflight -= 1

    def _guarded_receive(self, receive):
        lim = self.limits
        t0 = time.monotonic()
        got = [0]

        async def guarded():
            try:
                message = await asyncio.wait_for(receive(), lim.body_idle_s)
            except asyncio.TimeoutError:
                raise SlowBody(f"no request body byte for {lim.body_idle_s:g} s; the upload was stopped") from None
            if message["type"] == "http.request":
                got[0] += len(message.get("body", b""))
                elapsed = time.monotonic() - t0
                if message.get("more_body") and elapsed > lim.body_grace_s and got[0] < lim.min_body_rate * elapsed:
                    raise SlowBody(f"request body arrives at {got[0] / elapsed:.0f} bytes/s, below the server's "
                                   f"minimum of {lim.min_body_rate:g} bytes/s; the upload was stopped")
            return message

        return guarded


async def _answer(send, status: int, code: str, message: str, extra: list[tuple[bytes, bytes]]) -> None:
    body = json.dumps({"error": {"code": code, "message": message}}).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                            *extra]})
    await send({"type": "http.response.body", "body": body})
