"""The input formats, in detection order: by file name first, then by content.

Adding a format is one subpackage of ingest/ whose importer module defines an `IMPORTER`
(ingest/importer.py) and one line in IMPORTERS below (docs/architecture.md).
"""

from __future__ import annotations

from pathlib import Path

from acceltrace.ingest.acceltrace_chrome.importer import IMPORTER as ACCELTRACE_CHROME
from acceltrace.ingest.chrome.importer import IMPORTER as CHROME
from acceltrace.ingest.importer import Importer
from acceltrace.ingest.native.actr import IMPORTER as ACTR
from acceltrace.ingest.native.atrace import IMPORTER as ATRACE
from acceltrace.ingest.nsys.importer import IMPORTER as NSYS
from acceltrace.ingest.sources import Source
from acceltrace.store.errors import IngestError

# Files users hand over that no importer reads, by name: what to make of them instead.
FOREIGN = (
    ((".nsys-rep", ".qdrep"), "an Nsight Systems report, which only nsys reads; export it to SQLite first"
                             " (nsys export --type sqlite FILE) and give acceltrace the .sqlite"),
    ((".pftrace", ".perfetto-trace"), "a Perfetto protobuf trace; acceltrace reads Chrome JSON: convert it with"
                                     " Perfetto's traceconv (traceconv json FILE OUT.json)"),
)

# Order matters only for content sniffing; names are checked for all importers first.
# acceltrace's own Chrome exports (strict sniff) go ahead of the generic Chrome importer.
IMPORTERS: tuple[Importer, ...] = (ACCELTRACE_CHROME, CHROME, NSYS, ACTR, ATRACE)


def detect(source: Source, importers: tuple[Importer, ...] = IMPORTERS) -> Importer:
    """The importer for a source: by name, then by content; a clear error otherwise."""
    if source.is_dir:
        for imp in importers:
            if imp.claims_dir(Path(source.path)):
                return imp
        raise IngestError(source.name, "is a directory that holds no recognised run (expected run.atrace/run.actr)")
    if not source.head:  # a compressed file or an archive's member with no bytes (an empty file is refused sooner)
        raise IngestError(source.name, "holds no bytes once decompressed; expected a trace", "byte 0")
    low = source.inner_name.lower()
    by_name = [imp for imp in importers if any(low.endswith(s) for s in imp.suffixes)]
    for imp in by_name:
        if imp.sniff(source.head):
            return imp
    for imp in importers:
        if imp.sniff(source.head):
            return imp
    found = []
    for imp in importers:
        if imp.probe is not None:
            claimed, what = imp.probe(source)
            if claimed:
                return imp
            if what:
                found.append(what)
    kinds = ", ".join(sorted({imp.name for imp in importers}))
    for suffixes, what in FOREIGN:
        if low.endswith(suffixes):
            raise IngestError(source.name, f"is {what}", "byte 0")
    utf16 = _utf16(source.head)
    if utf16:  # (what Windows PowerShell's `>` writes): JSON traces are UTF-8
        raise IngestError(source.name, f"is {utf16} text, not UTF-8; expected a UTF-8 trace (save it again as"
                          " UTF-8, e.g. PowerShell's Out-File -Encoding utf8)", "byte 0")
    what = f"unrecognised content ({'; '.join(found)})" if found else "unrecognised content"
    raise IngestError(source.name, f"{what}; expected one of: {kinds}", "byte 0")


def _utf16(head: bytes) -> str | None:
    """'UTF-16LE' or 'UTF-16BE' where `head` is JSON in UTF-16: by its byte-order mark, or a NUL beside each of
    its first characters."""
    if head.startswith(b"\xff\xfe") or (len(head) >= 4 and head[1] == 0 and head[3] == 0 and head[0] in b"{[ \r\n\t"):
        return "UTF-16LE"
    if head.startswith(b"\xfe\xff") or (len(head) >= 4 and head[0] == 0 and head[2] == 0 and head[1] in b"{[ \r\n\t"):
        return "UTF-16BE"
    return None


def claimed_dir(path: Path) -> bool:
    return any(imp.claims_dir(path) for imp in IMPORTERS)
