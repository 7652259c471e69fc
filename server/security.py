"""The server's browser-facing walls (docs/security.md): Host and Origin checks, security headers.

A server on localhost is reachable from every page the user visits: a cross-site form or
fetch can POST to it, and DNS rebinding lets a hostile name resolve to 127.0.0.1 and read
answers. So:
- every request's Host must be a name this server serves (loopback names, the bound address,
  and what `--allowed-host` / ACCELTRACE_ALLOWED_HOSTS add; "*" turns the check off);
- a state-changing request (POST, PUT, PATCH, DELETE) or a websocket that carries an Origin must
  come from this very origin or one of ACCELTRACE_ALLOWED_ORIGINS; no Origin (curl, scripts) is
  allowed, since no browser omits it cross-site;
- every response carries nosniff, a referrer policy that keeps trace URLs in the site, no
  framing, and pages a Content-Security-Policy that allows only this origin's own scripts.

Plain ASGI (not BaseHTTPMiddleware), so a tile pays one header lookup and one set membership.
"""

from __future__ import annotations

import json
import os
import socket
from urllib.parse import urlsplit

UNSAFE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1", "[::1]")
CSP = ("default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data: blob:; "
       "connect-src 'self'; worker-src 'self' blob:; object-src 'none'; base-uri 'none'; "
       "form-action 'self'; frame-ancestors 'none'")
_COMMON = [(b"x-content-type-options", b"nosniff"), (b"referrer-policy", b"same-origin"),
           (b"x-frame-options", b"DENY")]
_CSP = (b"content-security-policy", CSP.encode())


def _split_env(name: str) -> list[str]:
    return [x.strip() for x in os.environ.get(name, "").split(",") if x.strip()]


def allowed_hosts(bind_host: str | None, extra: list[str] | None = None) -> frozenset[str] | None:
    """The names Host may carry (without port), or None for any ("*")."""
    names = {n.lower() for n in LOOPBACK_NAMES}
    wanted = list(extra or []) + _split_env("ACCELTRACE_ALLOWED_HOSTS")
    if "*" in wanted:
        return None
    names.update(w.lower().strip("[]") for w in wanted)
    if bind_host:
        h = bind_host.lower().strip("[]")
        if h in ("0.0.0.0", "::", ""):
            # bound to every interface: the machine's own names and addresses are what teammates type
            for n in {socket.gethostname(), socket.getfqdn()}:
                names.add(n.lower())
                try:
                    names.update(a[4][0].lower() for a in socket.getaddrinfo(n, None))
                except OSError:
                    pass
        else:
            names.add(h)
    return frozenset(n.strip("[]") for n in names)


def _host_name(host: str) -> str:
    host = host.strip().lower()
    if host.startswith("["):  # [::1]:8000
        return host[1:host.find("]")] if "]" in host else host
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


class SecurityMiddleware:
    def __init__(self, app, hosts: frozenset[str] | None, origins: list[str] | None = None):
        self.app = app
        self.hosts = hosts
        self.origins = {o.rstrip("/").lower() for o in (origins or []) + _split_env("ACCELTRACE_ALLOWED_ORIGINS")}

    async def __call__(self, scope, receive, send):
        kind = scope["type"]
        if kind not in ("http", "websocket"):
            return await self.app(scope, receive, send)
        headers = {k: v for k, v in scope.get("headers", ())}
        host = headers.get(b"host", b"").decode("latin-1")
        if self.hosts is not None and _host_name(host) not in self.hosts:
            return await self._refuse(scope, send, f"Host {host!r} is not a name this server serves "
                                                   "(start it with --allowed-host NAME to add one)")
        origin = headers.get(b"origin")
        if origin is not None and (kind == "websocket" or scope["method"] in UNSAFE_METHODS):
            o = origin.decode("latin-1").rstrip("/").lower()
            if not (urlsplit(o).netloc == host.lower() or o in self.origins):
                return await self._refuse(scope, send, f"cross-origin request from {o!r} refused "
                                                       "(same origin only, or ACCELTRACE_ALLOWED_ORIGINS)")
        if kind == "websocket":
            return await self.app(scope, receive, send)

        async def send_with_headers(message):
            if message["type"] == "http.response.start":
                hs = list(message.get("headers", ()))
                names = {k.lower() for k, _ in hs}
                hs += [h for h in _COMMON if h[0] not in names]
                ctype = next((v for k, v in hs if k.lower() == b"content-type"), b"")
                if ctype.startswith(b"text/html") and b"content-security-policy" not in names:
                    hs.append(_CSP)
                message = {**message, "headers": hs}
            await send(message)

        return await self.app(scope, receive, send_with_headers)

    @staticmethod
    async def _refuse(scope, send, message: str):
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})
            return
        body = json.dumps({"error": {"code": "forbidden", "message": message}}).encode()
        await send({"type": "http.response.start", "status": 403,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                                *_COMMON]})
        await send({"type": "http.response.body", "body": body})
