"""A small WebSocket client (RFC 6455, standard library only) and the PTY
session that runs over it."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import socket
import struct
import threading
from typing import TYPE_CHECKING, Any, Dict, Mapping, Optional, Tuple

from . import errors, models
from ._http import Transport, error_from

if TYPE_CHECKING:
    import http.client

_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
#: The largest frame accepted from the server.
MAX_FRAME = 16 << 20

OP_CONT, OP_TEXT, OP_BIN, OP_CLOSE, OP_PING, OP_PONG = 0x0, 0x1, 0x2, 0x8, 0x9, 0xA


class WebSocket:
    """A client WebSocket on a connected socket (the handshake done)."""

    def __init__(self, sock: socket.socket, buffered: bytes = b"") -> None:
        self.sock = sock
        self._buf = bytearray(buffered)
        self._wlock = threading.Lock()
        self.closed = False

    def _recv_exact(self, n: int) -> bytes:
        while len(self._buf) < n:
            try:
                b = self.sock.recv(max(n - len(self._buf), 65536))
            except socket.timeout:
                raise errors.Timeout("airlock: pty: nothing from the daemon within the timeout") from None
            except OSError as e:
                raise errors.ConnectionFailed(f"airlock: pty: {e}") from None
            if not b:
                raise errors.ConnectionFailed("airlock: pty: the connection closed")
            self._buf += b
        out = bytes(self._buf[:n])
        del self._buf[:n]
        return out

    def send(self, opcode: int, payload: bytes) -> None:
        head = bytearray([0x80 | opcode])
        n = len(payload)
        if n < 126:
            head.append(0x80 | n)
        elif n < 1 << 16:
            head.append(0x80 | 126)
            head += struct.pack("!H", n)
        else:
            head.append(0x80 | 127)
            head += struct.pack("!Q", n)
        mask = os.urandom(4)
        head += mask
        body = bytes(b ^ mask[i % 4] for i, b in enumerate(payload)) if n < 256 else _mask(payload, mask)
        with self._wlock:
            try:
                self.sock.sendall(bytes(head) + body)
            except OSError as e:
                raise errors.ConnectionFailed(f"airlock: pty: {e}") from None

    def recv(self) -> Tuple[int, bytes]:
        """The next message (opcode, payload); pings are answered."""
        msg_op, parts = None, []
        while True:
            b0, b1 = self._recv_exact(2)
            fin, op = b0 & 0x80, b0 & 0x0F
            n = b1 & 0x7F
            if n == 126:
                n = struct.unpack("!H", self._recv_exact(2))[0]
            elif n == 127:
                n = struct.unpack("!Q", self._recv_exact(8))[0]
            if n > MAX_FRAME:
                raise errors.StreamError(f"airlock: pty: a frame of {n} bytes")
            key = self._recv_exact(4) if b1 & 0x80 else None
            data = self._recv_exact(n)
            if key:
                data = _mask(data, key)
            if op == OP_PING:
                self.send(OP_PONG, data)
                continue
            if op == OP_PONG:
                continue
            if op == OP_CLOSE:
                if not self.closed:
                    try:
                        self.send(OP_CLOSE, data[:2])
                    except errors.AirlockError:
                        pass
                self.closed = True
                return OP_CLOSE, data
            if op != OP_CONT:
                msg_op = op
            parts.append(data)
            if fin:
                return (msg_op or OP_BIN), b"".join(parts)

    def close(self, code: int = 1000) -> None:
        if not self.closed:
            self.closed = True
            try:
                self.send(OP_CLOSE, struct.pack("!H", code))
            except errors.AirlockError:
                pass
        try:
            self.sock.close()
        except OSError:
            pass


def _mask(data: bytes, key: bytes) -> bytes:
    n = len(data)
    k = (key * (n // 4 + 1))[:n]
    return (int.from_bytes(data, "big") ^ int.from_bytes(k, "big")).to_bytes(n, "big") if n else b""


def upgrade(t: Transport, path: str, protocol: Mapping[str, str], what: str) -> Tuple[socket.socket, Dict[str, str], bytes]:
    """GET path with an HTTP/1.1 Upgrade (protocol: its headers). Returns the
    connected socket, the 101 answer's headers (lower-case names) and the
    bytes that came after it; any other answer is raised as the API's error."""
    conn = t.new_connection(t.timeout)
    try:
        conn.connect()
    except OSError as e:
        raise errors.ConnectionFailed(f"airlock: cannot reach the daemon at {t.host}: {e}") from None
    sock = conn.sock
    host = "airlock" if t.spec.scheme == "unix" else f"{t.spec.host}:{t.spec.port}"
    lines = [f"GET {t.url_path(path)} HTTP/1.1", f"Host: {host}", "Connection: Upgrade"]
    lines += [f"{k}: {v}" for k, v in protocol.items()]
    for k, v in t.headers().items():
        lines.append(f"{k}: {v}")
    try:
        sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        buf = b""
        while b"\r\n\r\n" not in buf:
            b = sock.recv(65536)
            if not b:
                raise errors.ConnectionFailed(f"airlock: {what}: the daemon closed the connection")
            buf += b
            if len(buf) > 1 << 20:
                raise errors.StreamError(f"airlock: {what}: the handshake's answer is too long")
    except socket.timeout:
        sock.close()
        raise errors.Timeout(f"airlock: {what}: no answer from the daemon at {t.host} within {t.timeout} s") from None
    except OSError as e:
        sock.close()
        raise errors.ConnectionFailed(f"airlock: {what}: {e}") from None
    head, _, rest = buf.partition(b"\r\n\r\n")
    hlines = head.decode("latin-1").split("\r\n")
    try:
        status = int(hlines[0].split(" ")[1])
    except (IndexError, ValueError):
        sock.close()
        raise errors.StreamError(f"airlock: {what}: bad answer {hlines[0]!r}") from None
    hdrs = {}
    for l in hlines[1:]:
        k, _, v = l.partition(":")
        hdrs[k.strip().lower()] = v.strip()
    if status != 101:
        body = rest
        n = int(hdrs.get("content-length", "0") or 0)
        try:
            while len(body) < min(n, 65536):
                b = sock.recv(65536)
                if not b:
                    break
                body += b
        except OSError:
            pass
        sock.close()
        raise error_from(status, hdrs.get("retry-after"), body)
    sock.settimeout(None)
    return sock, hdrs, rest


def connect(t: Transport, path: str) -> WebSocket:
    """Open a WebSocket to path of the daemon (the handshake over HTTP/1.1)."""
    key = base64.b64encode(os.urandom(16)).decode()
    sock, hdrs, rest = upgrade(t, path, {"Upgrade": "websocket", "Sec-WebSocket-Key": key,
                                         "Sec-WebSocket-Version": "13"}, "pty")
    want = base64.b64encode(hashlib.sha1((key + _GUID).encode()).digest()).decode()
    if hdrs.get("sec-websocket-accept") != want:
        sock.close()
        raise errors.StreamError("airlock: pty: bad Sec-WebSocket-Accept in the handshake")
    return WebSocket(sock, rest)


class Tunnel:
    """A TCP stream to a port inside a sandbox (Client.port_tunnel): send,
    sendall, recv, shutdown and close as on a socket; a context manager."""

    def __init__(self, sock: socket.socket, buffered: bytes = b"") -> None:
        self.sock = sock
        self._buf = buffered

    def recv(self, n: int = 65536) -> bytes:
        if self._buf:
            b, self._buf = self._buf[:n], self._buf[n:]
            return b
        return self.sock.recv(n)

    def send(self, data: bytes) -> int:
        return self.sock.send(data)

    def sendall(self, data: bytes) -> None:
        self.sock.sendall(data)

    def shutdown(self, how: int = socket.SHUT_WR) -> None:
        self.sock.shutdown(how)

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> "Tunnel":
        return self

    def __exit__(self, *a: Any) -> None:
        self.close()


class PTYSession:
    """A process on a terminal: send() input, recv() output (None once
    it ended: then exit holds its PTYExit), resize(), signal(), close()."""

    def __init__(self, ws: WebSocket) -> None:
        self._ws = ws
        self.exit: Optional[models.PTYExit] = None

    @classmethod
    def _open(cls, t: Transport, path: str, start: models.PTYStart) -> "PTYSession":
        ws = connect(t, path)
        ws.send(OP_TEXT, json.dumps(start.to_dict()).encode())
        return cls(ws)

    def send(self, data: Any) -> None:
        """Terminal input (bytes, or str as UTF-8)."""
        if isinstance(data, str):
            data = data.encode()
        self._ws.send(OP_BIN, bytes(data))

    def resize(self, cols: int, rows: int) -> None:
        self._ws.send(OP_TEXT, json.dumps(models.PTYControl(resize=models.PTYSize(cols, rows)).to_dict()).encode())

    def signal(self, signal: str) -> None:
        self._ws.send(OP_TEXT, json.dumps(models.PTYControl(signal=signal).to_dict()).encode())

    def recv(self, timeout: Optional[float] = None) -> Optional[bytes]:
        """The next terminal output; None once the process ended. An error
        starting the command is raised as its exception."""
        if self.exit is not None or self._ws.closed:
            return None
        self._ws.sock.settimeout(timeout)
        while True:
            op, data = self._ws.recv()
            if op == OP_BIN:
                return data
            if op == OP_TEXT:
                try:
                    self.exit = models.PTYExit.from_dict(json.loads(data))
                except ValueError:
                    raise errors.StreamError(f"airlock: pty: bad message {data[:80]!r}") from None
                self._ws.close()
                if self.exit.error_code:
                    raise errors.make_error(self.exit.error_code, self.exit.error or "")
                return None
            if op == OP_CLOSE:
                if self.exit is None:
                    raise errors.ConnectionFailed("airlock: pty: closed before the process's exit")
                return None

    def read_all(self, timeout: Optional[float] = None) -> bytes:
        """All output until the process ends."""
        out = bytearray()
        for _ in range(1 << 30):
            b = self.recv(timeout)
            if b is None:
                break
            out += b
        return bytes(out)

    def close(self) -> None:
        self._ws.close()

    def __enter__(self) -> "PTYSession":
        return self

    def __exit__(self, *a: Any) -> None:
        self.close()
