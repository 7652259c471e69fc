"""Socket messages between clients and the daemon: a u32 length, then a UTF-8 JSON object.

Ring file descriptors travel with a reply as SCM_RIGHTS ancillary data. Anything longer
than MAX_MSG_BYTES, not JSON, or not an object is a protocol error (the daemon refuses
the message and drops that connection; it never crashes).
"""

from __future__ import annotations

import array
import json
import socket
import struct

PROTOCOL_VERSION = 1
MAX_MSG_BYTES = 1 << 20
LEN = struct.Struct("<I")


class ProtocolError(ValueError):
    pass


def encode_msg(msg: dict) -> bytes:
    body = json.dumps(msg, separators=(",", ":")).encode()
    return LEN.pack(len(body)) + body


def send_msg(sock: socket.socket, msg: dict, fds: list[int] | None = None) -> None:
    data = encode_msg(msg)
    if fds:
        sock.sendmsg([data], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))])
    else:
        sock.sendall(data)


def _recv_exact(sock: socket.socket, n: int, fds: list[int], want_fds: bool) -> bytes | None:
    buf = bytearray()
    while len(buf) < n:
        if want_fds:
            data, anc, _, _ = sock.recvmsg(n - len(buf), socket.CMSG_SPACE(4 * 4))
            for level, ctype, cdata in anc:
                if level == socket.SOL_SOCKET and ctype == socket.SCM_RIGHTS:
                    a = array.array("i")
                    a.frombytes(cdata[: len(cdata) - len(cdata) % 4])
                    fds.extend(a)
        else:
            data = sock.recv(n - len(buf))
        if not data:
            return None
        buf += data
    return bytes(buf)


def recv_msg(sock: socket.socket, want_fds: bool = False) -> tuple[dict | None, list[int]]:
    """One message (blocking); (None, []) when the peer closed."""
    fds: list[int] = []
    head = _recv_exact(sock, LEN.size, fds, want_fds)
    if head is None:
        return None, fds
    (n,) = LEN.unpack(head)
    if n > MAX_MSG_BYTES:
        raise ProtocolError(f"message of {n} bytes exceeds the {MAX_MSG_BYTES}-byte limit")
    body = _recv_exact(sock, n, fds, want_fds)
    if body is None:
        return None, fds
    return decode_body(body, require_op=False), fds


def decode_body(body: bytes, require_op: bool = True) -> dict:
    try:
        msg = json.loads(body)
    except (ValueError, UnicodeDecodeError) as e:
        raise ProtocolError(f"message is not JSON ({e})") from None
    except RecursionError:  # json recurses per nesting level: a hostile "[[[[..." must not kill the daemon
        raise ProtocolError("message is nested too deeply") from None
    if not isinstance(msg, dict):
        raise ProtocolError("message is not a JSON object")
    if require_op and not isinstance(msg.get("op"), str):
        raise ProtocolError("message is not a JSON object with an 'op'")
    return msg


class FrameBuffer:
    """Splits a non-blocking byte stream into messages (the daemon side)."""

    def __init__(self) -> None:
        self.buf = bytearray()

    def feed(self, data: bytes) -> list[dict]:
        self.buf += data
        out = []
        while len(self.buf) >= LEN.size:
            (n,) = LEN.unpack_from(self.buf, 0)
            if n > MAX_MSG_BYTES:
                raise ProtocolError(f"message of {n} bytes exceeds the {MAX_MSG_BYTES}-byte limit")
            if len(self.buf) < LEN.size + n:
                break
            body = bytes(self.buf[LEN.size: LEN.size + n])
            del self.buf[: LEN.size + n]
            out.append(decode_body(body))
        return out


def ctl(socket_path, cmd: str, timeout_s: float = 5.0) -> dict:
    """Send one control command to a running daemon and return its reply."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout_s)
    try:
        s.connect(str(socket_path))
        send_msg(s, {"op": "ctl", "cmd": cmd})
        reply, _ = recv_msg(s)
    finally:
        s.close()
    if reply is None:
        raise ConnectionError("the daemon closed the connection without a reply")
    return reply
