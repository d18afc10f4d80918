"""The HTTP transport: a unix socket or TCP (TLS for https), persistent
connections, timeouts, bounded 429 retries and error mapping."""

from __future__ import annotations

import email.utils
import http.client
import io
import json
import os
import socket
import ssl
import threading
import time
import urllib.parse
from typing import Any, Dict, IO, Iterable, List, Mapping, Optional, Tuple, Union

from . import errors

#: The daemon's socket when it runs as root.
DEFAULT_SOCKET = "/run/airlock/airlock.sock"
#: The host name sent over a unix socket.
UNIX_HOST = "airlock"
#: How much of an error answer is read.
MAX_ERROR_BODY = 64 << 10

Body = Union[None, bytes, IO[bytes]]


def default_host() -> str:
    """AIRLOCK_HOST if set, else the root daemon's socket as root, else
    airlock.sock in XDG_RUNTIME_DIR (as the Go SDK and CLI do)."""
    h = os.environ.get("AIRLOCK_HOST", "")
    if h:
        return h
    if os.geteuid() == 0:
        return "unix://" + DEFAULT_SOCKET
    d = os.environ.get("XDG_RUNTIME_DIR", "")
    if not d:
        raise errors.AirlockError(
            "airlock: no daemon address: set AIRLOCK_HOST (unix:///path/to.sock or http://host:port); "
            "XDG_RUNTIME_DIR, where a user's daemon puts its socket, is not set either")
    return "unix://" + os.path.join(d, "airlock.sock")


class HostSpec:
    """A parsed daemon address."""

    def __init__(self, scheme: str, socket_path: str = "", host: str = "", port: int = 0, prefix: str = "") -> None:
        self.scheme, self.socket_path, self.host, self.port, self.prefix = scheme, socket_path, host, port, prefix


def parse_host(host: str) -> HostSpec:
    """Parse unix:///abs/path.sock, http://host[:port][/prefix] or https://..."""

    def bad(why: str) -> errors.AirlockError:
        return errors.AirlockError(
            f"airlock: daemon address {host!r}: {why} (want unix:///path/to.sock, http://host:port or https://host:port)")

    try:
        u = urllib.parse.urlsplit(host)
    except ValueError:
        raise bad("not a URL") from None
    if u.scheme == "":
        raise bad("no scheme")
    if u.scheme not in ("unix", "http", "https"):
        raise bad(f"unknown scheme {u.scheme!r}")
    if u.username is not None or u.password is not None or u.query or u.fragment:
        raise bad("no user, query or fragment allowed")
    if u.scheme == "unix":
        if u.netloc:
            raise bad("the socket path must be absolute (three slashes: unix:///path)")
        if not u.path or not u.path.startswith("/") or u.path.endswith("/"):
            raise bad("no socket path")
        return HostSpec("unix", socket_path=urllib.parse.unquote(u.path))
    try:
        port = u.port
    except ValueError:
        raise bad("bad port") from None
    if not u.hostname:
        raise bad("no host name")
    if port is not None and not (0 < port <= 65535):
        raise bad("bad port")
    if port is None:
        port = 443 if u.scheme == "https" else 80
    return HostSpec(u.scheme, host=u.hostname, port=port, prefix=u.path.rstrip("/"))


class _OneWrite:
    """Sends a small request's headers and body in one write (http.client
    sends them apart, which costs a round of the daemon's reads)."""

    def _send_output(self, message_body: Any = None, encode_chunked: bool = False) -> None:
        buf = getattr(self, "_buffer", None)
        if (isinstance(message_body, (bytes, bytearray)) and len(message_body) <= 64 << 10
                and not encode_chunked and isinstance(buf, list)):
            buf.extend((b"", b""))
            msg = b"\r\n".join(buf) + bytes(message_body)
            del buf[:]
            self.send(msg)  # type: ignore[attr-defined]
            return
        super()._send_output(message_body, encode_chunked)  # type: ignore[misc]


class _HTTPConnection(_OneWrite, http.client.HTTPConnection):
    pass


class _HTTPSConnection(_OneWrite, http.client.HTTPSConnection):
    pass


class _UnixConnection(_OneWrite, http.client.HTTPConnection):
    def __init__(self, path: str, timeout: Optional[float]) -> None:
        super().__init__(UNIX_HOST, timeout=timeout)
        self._path = path

    def connect(self) -> None:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.settimeout(self.timeout)
            s.connect(self._path)
        except BaseException:
            s.close()
            raise
        self.sock = s


def _retry_after(v: Optional[str]) -> Optional[float]:
    if not v:
        return None
    v = v.strip()
    try:
        n = int(v)
        return float(max(n, 0))
    except ValueError:
        pass
    try:
        t = email.utils.parsedate_to_datetime(v).timestamp()
    except (TypeError, ValueError, IndexError):
        return None
    return max(t - time.time(), 0.0)


def error_from(status: int, retry_after: Optional[str], body: bytes) -> errors.APIError:
    """The exception of an error answer."""
    code, message = "", ""
    try:
        d = json.loads(body)
        e = d.get("error") if isinstance(d, dict) else None
        if isinstance(e, dict):
            code, message = str(e.get("code") or ""), str(e.get("message") or "")
    except ValueError:
        pass
    if not code:
        code = errors.STATUS_CODES.get(status, "internal" if status >= 500 else "unknown")
    if not message:
        message = http.client.responses.get(status, f"HTTP status {status}")
    return errors.make_error(code, message, status=status, retry_after=_retry_after(retry_after))


class Response:
    """An answer whose status was 2xx; read it whole or stream it."""

    def __init__(self, transport: "Transport", conn: http.client.HTTPConnection,
                 resp: http.client.HTTPResponse, stream: bool) -> None:
        self._t, self._conn, self.raw, self._stream = transport, conn, resp, stream
        self.status = resp.status
        self.headers = resp.headers
        self.trailers: Dict[str, str] = {}
        if stream:
            # Keep the chunked answer's trailer (an archive's error) instead
            # of discarding it (a private hook of http.client, 3.9-3.13).
            if hasattr(resp, "_read_and_discard_trailer"):
                resp._read_and_discard_trailer = self._read_trailer  # type: ignore[attr-defined]

    def _read_trailer(self) -> None:
        fp = self.raw.fp
        for _ in range(100):
            line = fp.readline(65537) if fp else b""
            if line in (b"\r\n", b"\n", b""):
                break
            k, _, v = line.decode("latin-1").partition(":")
            self.trailers[k.strip().lower()] = v.strip()

    def read(self, n: int = -1) -> bytes:
        try:
            return self.raw.read(n) if n >= 0 else self.raw.read()
        except socket.timeout:
            self.close()
            raise errors.Timeout("airlock: no data from the daemon within the timeout") from None
        except (http.client.HTTPException, OSError) as e:
            self.close()
            raise errors.ConnectionFailed(f"airlock: the answer was cut: {e!r}") from None

    def readline(self, limit: int = -1) -> bytes:
        try:
            return self.raw.readline(limit)
        except socket.timeout:
            self.close()
            raise errors.Timeout("airlock: no data from the daemon within the timeout") from None
        except (http.client.HTTPException, OSError) as e:
            self.close()
            raise errors.ConnectionFailed(f"airlock: the stream was cut: {e!r}") from None

    def json(self) -> Any:
        b = self.read()
        self.release()
        try:
            return json.loads(b)
        except ValueError as e:
            raise errors.StreamError(f"airlock: bad answer from the daemon: {e}") from None

    def release(self) -> None:
        """Return the connection for reuse once the answer was read whole."""
        if self._conn is None:
            return
        conn, self._conn = self._conn, None
        if self.raw.isclosed() and not self.raw.will_close and not self._stream:
            self._t._put(conn)
        else:
            conn.close()

    def close(self) -> None:
        if self._conn is not None:
            conn, self._conn = self._conn, None
            self.raw.close()
            conn.close()

    def __enter__(self) -> "Response":
        return self

    def __exit__(self, *a: Any) -> None:
        self.close()


class Transport:
    """Sends requests to one daemon; safe for use by several threads."""

    def __init__(self, host: Optional[str] = None, api_key: Optional[str] = None, *,
                 timeout: Optional[float] = 60.0, max_retries: int = 3, max_retry_wait: float = 30.0,
                 ssl_context: Optional[ssl.SSLContext] = None) -> None:
        self.host = host or default_host()
        self.spec = parse_host(self.host)
        self.api_key = api_key or ""
        self.timeout = timeout
        self.max_retries = max_retries
        self.max_retry_wait = max_retry_wait
        self.ssl_context = ssl_context
        self._idle: List[http.client.HTTPConnection] = []
        self._lock = threading.Lock()

    # Connections.

    def new_connection(self, timeout: Optional[float]) -> http.client.HTTPConnection:
        s = self.spec
        if s.scheme == "unix":
            return _UnixConnection(s.socket_path, timeout)
        if s.scheme == "https":
            ctx = self.ssl_context or ssl.create_default_context()
            return _HTTPSConnection(s.host, s.port, timeout=timeout, context=ctx)
        return _HTTPConnection(s.host, s.port, timeout=timeout)

    def _get(self, timeout: Optional[float]) -> Tuple[http.client.HTTPConnection, bool]:
        with self._lock:
            if self._idle:
                c = self._idle.pop()
                c.timeout = timeout
                if c.sock is not None:
                    c.sock.settimeout(timeout)
                return c, True
        return self.new_connection(timeout), False

    def _put(self, c: http.client.HTTPConnection) -> None:
        with self._lock:
            if len(self._idle) < 16:
                self._idle.append(c)
                return
        c.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for c in idle:
            c.close()

    def url_path(self, path: str, query: Optional[Mapping[str, Any]] = None) -> str:
        p = self.spec.prefix + path
        if query:
            items = []
            for k, v in query.items():
                if v is None:
                    continue
                for x in (v if isinstance(v, (list, tuple)) else [v]):
                    if isinstance(x, bool):
                        x = "true" if x else "false"
                    items.append((k, str(x)))
            if items:
                p += "?" + urllib.parse.urlencode(items)
        return p

    def headers(self, extra: Optional[Mapping[str, str]] = None) -> Dict[str, str]:
        h = {"User-Agent": "airlock-python-client"}
        if self.api_key:
            h["Authorization"] = "Bearer " + self.api_key
        if extra:
            h.update(extra)
        return h

    def _where(self) -> str:
        return self.spec.socket_path if self.spec.scheme == "unix" else f"{self.spec.host}:{self.spec.port}"

    # Requests.

    def request(self, method: str, path: str, query: Optional[Mapping[str, Any]] = None, *,
                body: Body = None, headers: Optional[Mapping[str, str]] = None,
                timeout: Union[float, None, str] = "default", stream: bool = False,
                stream_timeout: Union[float, None, str] = "default") -> Response:
        """Send a request and return its 2xx answer, or raise its error.

        timeout bounds the connection and the wait for the answer's
        headers ("default": the client's); stream_timeout then bounds each
        read of a streamed answer. A 429 is retried at most max_retries
        times, after its Retry-After (at most max_retry_wait seconds), and
        only when the body can be sent again.
        """
        to = self.timeout if timeout == "default" else timeout
        sto = to if stream_timeout == "default" else stream_timeout
        url = self.url_path(path, query)
        hdrs = self.headers(headers)
        start = None
        resendable = body is None or isinstance(body, (bytes, bytearray, memoryview))
        if not resendable and hasattr(body, "seek") and hasattr(body, "tell"):
            try:
                start = body.tell()  # type: ignore[union-attr]
                resendable = True
            except (OSError, ValueError):
                start = None
        if body is not None and not isinstance(body, (bytes, bytearray, memoryview)):
            length = _length(body)
            if length is not None:
                hdrs.setdefault("Content-Length", str(length))
        attempt = 0
        while True:
            conn, reused = self._get(to)
            try:
                if start is not None:
                    body.seek(start)  # type: ignore[union-attr]
                chunked = body is not None and "Content-Length" not in hdrs and not isinstance(
                    body, (bytes, bytearray, memoryview))
                conn.request(method, url, body=_chunks(body) if chunked else body, headers=hdrs,
                             encode_chunked=chunked)
                resp = conn.getresponse()
            except socket.timeout:
                conn.close()
                raise errors.Timeout(
                    f"airlock: {method} {path}: no answer from the daemon at {self.host} within {to} s") from None
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError) as e:
                conn.close()
                if reused and resendable:
                    continue  # an idle connection the daemon had closed
                raise errors.ConnectionFailed(f"airlock: {method} {path}: the daemon at {self.host} closed the connection: {e}") from None
            except (OSError, http.client.HTTPException) as e:
                conn.close()
                raise errors.ConnectionFailed(
                    f"airlock: cannot reach the daemon at {self.host} ({self._where()}): {e}") from None
            if 200 <= resp.status <= 299:
                if stream and conn.sock is not None:
                    conn.sock.settimeout(sto)
                return Response(self, conn, resp, stream)
            try:
                data = resp.read(MAX_ERROR_BODY)
            except (OSError, http.client.HTTPException):
                data = b""
            err = error_from(resp.status, resp.getheader("Retry-After"), data)
            r = Response(self, conn, resp, False)
            r.release() if resp.isclosed() else r.close()
            if resp.status == 429 and attempt < self.max_retries and resendable:
                attempt += 1
                wait = err.retry_after if err.retry_after is not None else 1.0
                time.sleep(min(max(wait, 0.0), self.max_retry_wait))
                continue
            raise err

    def json(self, method: str, path: str, query: Optional[Mapping[str, Any]] = None,
             body: Any = None, timeout: Union[float, None, str] = "default") -> Any:
        data = None
        hdrs = {"Accept": "application/json"}
        if body is not None:
            data = json.dumps(body).encode()
            hdrs["Content-Type"] = "application/json"
        r = self.request(method, path, query, body=data, headers=hdrs, timeout=timeout)
        if r.status == 204:
            r.read()
            r.release()
            return None
        return r.json()


def _length(body: Any) -> Optional[int]:
    try:
        fd = body.fileno()
        st = os.fstat(fd)
        import stat as _st
        if _st.S_ISREG(st.st_mode):
            return st.st_size - body.tell()
    except (AttributeError, OSError, ValueError, io.UnsupportedOperation):
        pass
    if isinstance(body, io.BytesIO):
        return len(body.getbuffer()) - body.tell()
    return None


def _chunks(body: Any) -> Iterable[bytes]:
    while True:
        b = body.read(256 << 10)
        if not b:
            return
        yield b
