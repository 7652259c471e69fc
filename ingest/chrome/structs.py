"""The event as msgspec decodes it: the fields the Chrome importer reads, nothing else."""

from __future__ import annotations

import msgspec
from msgspec import Raw, Struct

_NO_ARGS = Raw(b"{}")
_NO_RAW = Raw(b"")


class Ev(Struct, gc=False):
    ph: str | None = None
    name: str | None = None
    cat: str | None = None
    pid: int | float | str | None = None
    tid: int | float | str | None = None
    ts: int | float | None = None
    dur: int | float | None = None
    id: int | float | str | None = None
    bp: str | None = None
    s: str | None = None
    args: Raw = _NO_ARGS
    bind_id: int | float | str | None = None
    flow_in: bool | None = None
    flow_out: bool | None = None


class RawEv(Ev, gc=False):
    """The same event with times kept as their JSON text (strings, exotic numbers)."""

    ts: Raw = _NO_RAW
    dur: Raw = _NO_RAW


_FAST = msgspec.json.Decoder(list[Ev])
_RAW = msgspec.json.Decoder(list[RawEv])
