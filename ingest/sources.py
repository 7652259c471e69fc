"""What the user gave us, opened as a list of Sources: plain files, gzip, xz, bzip2, zstd, zip, tar (plain or in one of
those), directories.

Containers are streamed, never extracted to disk (a format that needs a real file, like
SQLite, asks for `materialize`, which writes into the ingest's own temp directory), and
every decompressing stream is guarded against decompression bombs.
"""

from __future__ import annotations

import gzip
import io
import shutil
import tarfile
import zipfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import BinaryIO, Callable

from acceltrace.ingest.arriving import Arriving, ArrivingReader
from acceltrace.ingest.gz import open_gzip
from acceltrace.ingest.unpack import CODEC_OF_SUFFIX, SUFFIXES as _UNPACK_SUFFIXES, codec_of, open_stream
from acceltrace.store.errors import IngestError

# Decompressed bytes allowed: at least this many, and beyond it at most RATIO x compressed.
BOMB_FLOOR_BYTES = 512 << 20
BOMB_RATIO = 200
BOMB_ABS_MAX = 64 << 30
HEAD_BYTES = 4096
GUARD_READ_BYTES = 64 << 10


class ProgressReader(io.RawIOBase):
    """Counts bytes read from the file on disk, for progress bars."""

    def __init__(self, raw: BinaryIO, on_read: Callable[[int], None] | None):
        self.raw = raw
        self.on_read = on_read

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        n = self.raw.readinto(b)
        if n and self.on_read:
            self.on_read(n)
        return n

    def close(self) -> None:
        self.raw.close()
        super().close()


class TruncatedStream(IngestError):
    """A compressed stream that ends before its end marker (e.g. a killed profiler's .gz).

    Formats that can use a prefix (Chrome JSON) catch it and keep what came before.
    """


class Budget:
    """Decompressed bytes one user-given file may produce, over all its members and every read.

    Counted as they are produced (never from sizes an archive declares), so a zip whose
    directory lies about its sizes, or a gzip inside a tar inside a gzip, gets no further.
    """

    def __init__(self, on_disk: int):
        self.limit = bomb_limit(on_disk)
        self.total = 0


class BombGuard(io.RawIOBase):
    """Refuses to yield more decompressed bytes than the budget allows."""

    def __init__(self, inner: BinaryIO, budget: Budget, label: str):
        self.inner = inner
        self.budget = budget
        self.limit = budget.limit
        self.label = label
        self.total = 0
        # a reader that can use a prefix sets lenient_eof: a cut-short stream then ends
        # quietly (its bytes so far intact) and `truncated` says why
        self.lenient_eof = False
        self.truncated: str | None = None

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        try:
            # bounded reads, so a damaged stream is reported near where it breaks
            data = self.inner.read(min(len(b), GUARD_READ_BYTES))
        except EOFError as e:
            if self.lenient_eof:
                self.truncated = f"the compressed data is cut short at decompressed byte {self.total} ({e})"
                return 0
            raise TruncatedStream(
                self.label, f"compressed data is cut short ({e}); expected a complete stream",
                f"decompressed byte {self.total}",
            ) from None
        except (gzip.BadGzipFile, zlib.error, OSError, zipfile.BadZipFile, tarfile.TarError) as e:
            raise IngestError(
                self.label, f"compressed data is damaged or cut short ({e}); expected a complete stream",
                f"decompressed byte {self.total}",
            ) from None
        n = len(data)
        self.total += n
        self.budget.total += n
        if self.budget.total > self.limit:
            raise IngestError(
                self.label,
                f"decompresses to more than {self.limit} bytes (limit: {BOMB_RATIO}x the compressed size,"
                f" at least {BOMB_FLOOR_BYTES >> 20} MiB); refused as a possible decompression bomb",
                f"decompressed byte {self.total}",
            )
        b[:n] = data
        return n

    def close(self) -> None:
        self.inner.close()
        super().close()


def bomb_limit(compressed: int) -> int:
    return min(BOMB_ABS_MAX, max(BOMB_FLOOR_BYTES, BOMB_RATIO * compressed))


@dataclass
class Source:
    """One input stream of one trace (a file, or a member of an archive)."""

    name: str  # what error messages call it: "file.json.gz" or "archive.tar.gz!rank3.json"
    opener: Callable[[], BinaryIO]  # -> decompressed bytes, buffered
    size: int | None = None  # bytes on disk as the user gave them (compressed)
    path: Path | None = None  # the real file, when it is a plain uncompressed file or a directory
    group: str | None = None  # set when several sources become one trace (rank name)
    head: bytes = b""
    inner_name: str = ""  # the name with container suffixes removed, for name-based detection
    is_dir: bool = False
    _tmp: list[Path] = field(default_factory=list)

    arriving: Arriving | None = None  # the upload it is read from is still arriving

    def open(self) -> BinaryIO:
        return self.opener()

    def materialize(self, tmp_dir: Path) -> Path:
        """A real file holding the decompressed bytes (for formats that need random access)."""
        if self.arriving is not None:  # a reader of random access waits for the whole upload
            self.arriving.wait()
        if self.path is not None and not self.is_dir:
            return self.path
        tmp_dir.mkdir(parents=True, exist_ok=True)
        out = tmp_dir / (PurePosixPath(self.inner_name).name or "input")
        with self.open() as src, open(out, "wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
        self._tmp.append(out)
        return out


def strip_container_suffix(name: str) -> str:
    low = name.lower()
    for suf in (".gz", ".gzip", *_UNPACK_SUFFIXES):
        if low.endswith(suf):
            return name[: -len(suf)]
    return name


def _read_head(opener: Callable[[], BinaryIO], label: str) -> bytes:
    with opener() as f:
        return f.read(HEAD_BYTES)


def _safe_member(archive: str, name: str) -> None:
    p = PurePosixPath(name.replace("\\", "/"))
    if p.is_absolute() or ".." in p.parts or (len(name) > 1 and name[1] == ":"):
        raise IngestError(
            archive, f"member path '{name}' climbs out of the archive; refused (expected relative member paths)"
        )


def open_sources(path: Path, on_read: Callable[[int], None] | None = None,
                 arriving: Arriving | None = None) -> list[Source]:
    """Expand one user-given path into its Sources (several for a multi-rank archive). `arriving`: the
    file is an upload still being written; a plain or gzip stream is read as it arrives, an archive once
    it is whole (zip's directory is at its end; a tar's members are found by a pass of their own)."""
    label = path.name
    if path.is_dir():
        return [Source(name=label, opener=lambda: open(path, "rb"), path=path, is_dir=True, inner_name=label)]
    if not path.exists():
        raise IngestError(str(path), "no such file")
    if arriving is not None:
        arriving.wait(262 + 8)
    if (arriving.size() if arriving is not None else path.stat().st_size) == 0:
        raise IngestError(label, "the file is empty; expected a trace", "byte 0")
    size = arriving.budget_size() if arriving is not None else path.stat().st_size
    with open(path, "rb") as f:
        magic = f.read(262 + 8)
    codec = "gzip" if magic[:2] == b"\x1f\x8b" else codec_of(magic)
    # archives wait for the whole file, and so does a gzip whose size was not declared (its decompression
    # budget goes by its size on disk: a chunked upload's first bytes would set it far too low), and any other
    # compressed stream (read as it arrives only for gzip, the common case)
    if arriving is not None and (magic[:4] == b"PK\x03\x04" or _is_tar(magic) or codec not in (None, "gzip")
                                 or (codec == "gzip" and not arriving.expected)):
        arriving.wait()
        arriving, size = None, path.stat().st_size

    def raw():
        f = ArrivingReader(arriving) if arriving is not None else open(path, "rb", buffering=0)
        return ProgressReader(f, on_read)

    if codec is not None:
        def unpacked():  # each open is one pass over the stream, bounded by itself
            inner = open_gzip(raw()) if codec == "gzip" else open_stream(codec, raw())
            return io.BufferedReader(BombGuard(inner, Budget(size), label), 1 << 20)

        head = _read_head(unpacked, label)
        if _is_tar(head):
            if arriving is not None:  # a tar.gz: its members are listed by a pass of their own
                arriving.wait()
                arriving, size = None, path.stat().st_size
            return _tar_sources(path, label, size, unpacked)
        return [Source(name=label, opener=unpacked, size=size, head=head, inner_name=strip_container_suffix(label),
                       arriving=arriving)]
    if magic[:4] == b"PK\x03\x04":
        return _zip_sources(path, label, size, on_read)
    if _is_tar(magic):
        return _tar_sources(path, label, size, lambda: io.BufferedReader(raw(), 1 << 20))

    def plain():
        return io.BufferedReader(raw(), 1 << 20)

    # an arriving file has no `path` to hand to a reader of random access: it materializes (waits) first
    return [Source(name=label, opener=plain, size=size, path=None if arriving is not None else path,
                   head=magic[:HEAD_BYTES], inner_name=label, arriving=arriving)]


def _is_tar(head: bytes) -> bool:
    return len(head) >= 262 and head[257:262] == b"ustar"


def _tar_sources(path: Path, label: str, size: int, opener: Callable[[], BinaryIO]) -> list[Source]:
    """Each regular member becomes a Source; members are streamed from a fresh pass each time."""
    names: list[str] = []
    try:
        with opener() as f, tarfile.open(fileobj=f, mode="r|") as tf:
            for m in tf:
                _safe_member(label, m.name)
                if m.issym() or m.islnk():
                    continue
                if m.isfile():
                    names.append(m.name)
    except tarfile.TarError as e:
        raise IngestError(label, f"not a readable tar archive ({e})") from None
    out = []
    budget = Budget(size)  # one for all members: what they produce together counts
    for member in names:
        def member_opener(member=member):
            f = opener()
            tf = tarfile.open(fileobj=f, mode="r|")
            for m in tf:
                if m.name == member:
                    ex = tf.extractfile(m)
                    inner = _unpacked_member(member, ex)
                    return io.BufferedReader(
                        BombGuard(inner, budget, f"{label}!{member}"), 1 << 20
                    )
            raise IngestError(label, f"member '{member}' vanished while reading")

        src = Source(
            name=f"{label}!{member}", opener=member_opener, size=None,
            inner_name=strip_container_suffix(PurePosixPath(member).name),
            group=stem(member),
        )
        src.head = _read_head(member_opener, src.name)
        out.append(src)
    return out


def _unpacked_member(name: str, raw: BinaryIO) -> BinaryIO:
    """An archive member's bytes, inflated where its name says they are compressed (a tar or zip of .json.gz,
    .json.zst, ... files)."""
    low = name.lower()
    if low.endswith((".gz", ".gzip")):
        return open_gzip(raw)
    codec = next((c for suf, c in CODEC_OF_SUFFIX.items() if low.endswith(suf)), None)
    return open_stream(codec, raw) if codec else raw


def _zip_sources(path: Path, label: str, size: int, on_read) -> list[Source]:
    try:
        zf = zipfile.ZipFile(path)
        infos = [i for i in zf.infolist() if not i.is_dir()]
    except zipfile.BadZipFile as e:
        raise IngestError(label, f"not a readable zip archive ({e})") from None
    for i in infos:
        _safe_member(label, i.filename)
    out = []
    budget = Budget(size)  # the archive's bytes on disk, not the sizes its directory claims
    for info in infos:
        def member_opener(info=info):
            try:  # the central directory can point at bytes that are not a member's header
                z = zipfile.ZipFile(path)
                inner = z.open(info)
            except (zipfile.BadZipFile, OSError, EOFError, NotImplementedError, RuntimeError) as e:
                raise IngestError(
                    label, f"member '{info.filename}' cannot be opened ({e}); expected a zip member's local header",
                    f"byte {info.header_offset}",
                ) from None
            return io.BufferedReader(
                BombGuard(_unpacked_member(info.filename, inner), budget, f"{label}!{info.filename}"), 1 << 20
            )

        src = Source(
            name=f"{label}!{info.filename}", opener=member_opener,
            inner_name=strip_container_suffix(PurePosixPath(info.filename).name),
            group=stem(info.filename),
        )
        src.head = _read_head(member_opener, src.name)
        out.append(src)
    return out


_STEM_SUFFIXES = (".gz", ".gzip", *_UNPACK_SUFFIXES, ".json", ".trace", ".pt", ".sqlite", ".tar", ".zip")


def stem(name: str) -> str:
    """A file's name without its directory and its container and trace suffixes (rank0.pt.trace.json.zst ->
    rank0): the group name of one member of a multi-rank archive, or of one file of a merged ingest."""
    base = PurePosixPath(name).name
    for suf in _STEM_SUFFIXES:
        if base.lower().endswith(suf):
            base = base[: -len(suf)]
    return base
