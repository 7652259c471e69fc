"""Errors and warnings that name the file, the position and what was expected."""


class IngestError(Exception):
    """Input that cannot become a trace. str() is the message shown to the user."""

    def __init__(self, file: str, message: str, position: str | None = None):
        self.file = file
        self.position = position
        self.detail = message
        where = f"{file}: {position}" if position else file
        super().__init__(f"{where}: {message}")


def fmt_position(offset: int | None = None, event: int | None = None) -> str | None:
    """A position as users read it: byte offset and/or event index."""
    parts = []
    if offset is not None:
        parts.append(f"byte {offset}")
    if event is not None:
        parts.append(f"event {event}")
    return ", ".join(parts) or None
