"""The Python tracing client: `from collect import client; t = client.connect()`.

    t = client.connect()                      # the daemon at $ACCELTRACE_SOCKET
    t = client.connect(file="run.atrace")     # no daemon: write the file directly
    with t.span("matmul", lane="cpu", corr=7):
        ...
    @t.span("step")                           # also a decorator
    def step(): ...
    t.complete("kernel", ts=dev_ticks, dur=ticks, lane="eu", clock=1, corr=7)  # explicit times
    t.close()

Every method writes fixed 64-byte records (formats/record.py) into a per-thread buffer:
a shared-memory ring handed out by the daemon, or a local buffer flushed into an
AtraceWriter. Names are interned once; no syscall per event.
"""

from __future__ import annotations

import os
from pathlib import Path

from acceltrace.collect.client.tracer import ClientError, Tracer

__all__ = ["connect", "Tracer", "ClientError"]


def connect(path: str | os.PathLike | None = None, *, file: str | os.PathLike | None = None,
            header: dict | None = None, process_name: str | None = None, pid: int | None = None,
            ring_records: int | None = None) -> Tracer:
    """A Tracer writing to the daemon at `path` (default $ACCELTRACE_SOCKET) or, with `file`, to an .atrace file.

    With neither a path, nor ACCELTRACE_SOCKET, nor file, this raises ClientError: events
    are never dropped silently because no daemon is running.
    """
    if file is not None:
        if path is not None:
            raise ClientError("give either path= (a daemon socket) or file= (write directly), not both")
        from acceltrace.collect.client.sinks import FileSink

        sink = FileSink(Path(file), header=header)
    else:
        sock = path if path is not None else os.environ.get("ACCELTRACE_SOCKET")
        if not sock:
            raise ClientError("no tracing daemon: pass connect(path=SOCKET), set ACCELTRACE_SOCKET, "
                              "or write a file directly with connect(file='run.atrace')")
        from acceltrace.collect.client.sinks import DaemonSink

        def open_sink():
            sink = DaemonSink(Path(sock), ring_records=ring_records, name=process_name)
            if header:
                sink.metadata({k: v for k, v in header.items() if k in ("devices", "clock_domains", "host_clock")})
            return sink

        sink = open_sink()
        t = Tracer(sink, pid=pid, reopen=open_sink)
        if process_name:
            t.name_process(process_name)
        return t
    t = Tracer(sink, pid=pid)
    if process_name:
        t.name_process(process_name)
    return t
