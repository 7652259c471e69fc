"""uvicorn's HTTP protocol with a deadline on request headers (docs/operations.md).

uvicorn arms its keep-alive timeout only between requests and cancels it on the first byte
of the next one, so a client that sends a request line and then one header byte every few
seconds (slowloris) holds its connection for ever. Here every request's headers must be
complete within ACCELTRACE_HEADER_TIMEOUT_S (default 10 s) of the connection opening or of
the request's first byte; otherwise the server answers 408 and closes the connection.
Bodies are bounded by server/limits.py.
"""

from __future__ import annotations

import os

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

DEFAULT_HEADER_TIMEOUT_S = 10.0
_408 = (b"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\nconnection: close\r\n"
        b"content-length: 92\r\n\r\n"
        b'{"error": {"code": "request_timeout", "message": "request headers did not arrive in time"}}\n')
assert len(_408.split(b"\r\n\r\n", 1)[1]) == 92


def header_timeout_s() -> float:
    try:
        return float(os.environ.get("ACCELTRACE_HEADER_TIMEOUT_S", DEFAULT_HEADER_TIMEOUT_S))
    except ValueError:
        return DEFAULT_HEADER_TIMEOUT_S


class GuardedHttpToolsProtocol(HttpToolsProtocol):
    _header_timer = None
    _timeout_s: float | None = None  # read from the environment once per process

    def connection_made(self, transport) -> None:
        super().connection_made(transport)
        self._arm()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._arm()

    def on_headers_complete(self) -> None:
        self._disarm()
        super().on_headers_complete()

    def connection_lost(self, exc) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _arm(self) -> None:
        if self._header_timer is None:
            cls = type(self)
            if cls._timeout_s is None:
                cls._timeout_s = header_timeout_s()
            self._header_timer = self.loop.call_later(cls._timeout_s, self._headers_late)

    def _disarm(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _headers_late(self) -> None:
        self._header_timer = None
        if self.transport.is_closing():
            return
        if self.cycle is not None and not self.cycle.response_complete:
            return  # a request is being answered (pipelining): its own limits apply
        self.transport.write(_408)
        self.transport.close()
