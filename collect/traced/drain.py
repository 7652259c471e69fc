"""The daemon's drain: what every ring published, written to the .atrace in one pass per tick.

A mixin of Daemon (daemon.py), kept apart so the socket loop and the drain read separately.
Order per tick: take what each ring published, then read pending socket messages (so a
string announced before a record was published is in the file before that record), then
write the records, the changed lost counts, and flush; then save the state file (what is in the
file, where each ring's unwritten records start) and only then hand the slots back to the
producers (ring.commit), so a daemon killed at any point leaves every record either in the file
or still in its ring, and a restarted daemon knows which (recover.py).
"""

from __future__ import annotations

from acceltrace.collect.traced import protocol as P

# what a hostile message can raise while being handled; RecursionError: writing a message nested
# almost to the parser's limit (json.dumps runs deeper in the stack than json.loads did)
REFUSED = (P.ProtocolError, ValueError, TypeError, KeyError, RecursionError)


class Draining:
    def drain_all(self, force: bool = False) -> None:
        if not (self.draining or force):
            return
        # take first, then read sockets, then write: strings announced before a record was
        # published are therefore in the file before that record
        taken = [(c, self._take(c)) for c in list(self.conns.values()) if c.stream is not None]
        self._deferred = []
        try:
            for c in list(self.conns.values()):
                if c.sock is not None and c.sock.fileno() >= 0:
                    self._readable(c)
        finally:
            deferred, self._deferred = self._deferred, None
        for c, parts in taken:
            self._write_taken(c, parts)
        self._write_losses()
        self.writer.flush()
        self._save_state()
        for c, parts in taken:
            self._commit(c, parts)
        for c, msg in deferred:
            if c.sock is None or c.sock.fileno() < 0:
                continue
            if msg is None:
                self._drop(c, c.drop_reason)
                continue
            try:
                self._handle(c, msg)
            except REFUSED as e:
                self._refuse(c, e)

    def _take(self, c) -> list:
        return [(r, *r.take()) for r in c.rings]

    def _write_taken(self, c, parts: list) -> None:
        for ring, views, n in parts:
            if n:
                self.writer.add_records_direct(views, c.stream)
                c.events += n

    def _commit(self, c, parts: list) -> None:
        for ring, views, n in parts:
            ring.commit()
            if ring.broken and not getattr(ring, "_reported", False):
                ring._reported = True
                self._print(f"acceltrace traced: pid {c.pid}: {ring.broken}")

    def _drain_conn(self, c, force: bool = False) -> None:
        parts = self._take(c)
        self._write_taken(c, parts)
        self._write_losses()
        self.writer.flush()
        self._save_state()
        self._commit(c, parts)

    def _write_losses(self) -> None:
        now = {}
        for c in self.conns.values():
            if c.stream is not None:
                lost = self._conn_lost(c)
                if lost != self._last_loss.get(c.stream, 0):
                    now[c.stream] = lost
        if now:
            self.writer.add_loss(now)
            self._last_loss.update(now)

    @staticmethod
    def _conn_lost(c) -> int:
        return sum(r.producer_lost + r.overwritten for r in c.rings) + getattr(c, "client_lost", 0)

    def _producer_info(self, c, lost: int) -> dict:
        return {"stream": c.stream, "pid": c.pid, "name": c.name, "events": c.events, "lost": lost,
                "rings": len(c.rings)}

    def totals(self) -> tuple[int, list[dict]]:
        live = [self._producer_info(c, self._conn_lost(c)) for c in self.conns.values() if c.stream is not None]
        producers = self.retired + live
        return sum(p["lost"] for p in producers), producers
