"""NDJSON and Server-Sent Events readers, and the reconnecting follower."""

from __future__ import annotations

import json
import time
from typing import Any, Callable, Dict, Iterator, Optional, Tuple

from . import errors
from ._http import Response

#: The longest line of a stream.
MAX_LINE = 16 << 20
#: Bounds of reconnections: attempts in a row, and seconds without an event.
FOLLOW_ATTEMPTS = 30
FOLLOW_WINDOW = 60.0


def _line(r: Response) -> Optional[bytes]:
    """The next line without its end; None at a clean end. A last line
    without "\\n" is a cut stream."""
    b = r.readline(MAX_LINE + 1)
    if not b:
        return None
    if len(b) > MAX_LINE:
        raise errors.StreamError(f"airlock: stream: a line is longer than {MAX_LINE} bytes")
    if not b.endswith(b"\n"):
        raise errors.ConnectionFailed("airlock: stream: cut in the middle of a line")
    return b[:-1]


def events(r: Response, sse: bool) -> Iterator[Dict[str, Any]]:
    """The JSON events of a stream; an error event is raised as its exception."""
    if sse:
        it = _sse(r)
    else:
        it = _ndjson(r)
    for raw in it:
        try:
            d = json.loads(raw)
        except ValueError as e:
            raise errors.StreamError(f"airlock: stream: bad event {raw[:80]!r}: {e}") from None
        if isinstance(d, dict) and isinstance(d.get("error"), dict):
            e = d["error"]
            raise errors.make_error(str(e.get("code") or "unknown"), str(e.get("message") or ""))
        yield d


def _ndjson(r: Response) -> Iterator[bytes]:
    while True:
        line = _line(r)
        if line is None:
            return
        line = line.strip()
        if line:
            yield line


def _sse(r: Response) -> Iterator[bytes]:
    data: list = []
    pending = False
    while True:
        line = _line(r)
        if line is None:
            if pending:
                raise errors.ConnectionFailed("airlock: stream: cut in the middle of an event")
            return
        for part in line.rstrip(b"\r").split(b"\r"):
            if not part:
                if data:
                    yield b"\n".join(data)
                data, pending = [], False
                continue
            if part.startswith(b":"):
                continue
            name, _, value = part.partition(b":")
            if value.startswith(b" "):
                value = value[1:]
            pending = True
            if name == b"data":
                data.append(value)


def follow(open_stream: Callable[[Optional[str]], Tuple[Response, bool]], cursor: Optional[str],
           done: Callable[[Dict[str, Any]], bool], reconnect_on_end: bool,
           on_cursor: Callable[[str], None]) -> Iterator[Dict[str, Any]]:
    """Events of a stream opened by open_stream(cursor), reopened from the
    last cursor after a cut (or, with reconnect_on_end, after an end that
    done() did not mark), with a backoff: at most FOLLOW_ATTEMPTS attempts
    in a row and FOLLOW_WINDOW seconds without an event, also across a
    daemon restart (Unavailable). Other errors answered by the daemon (the
    sandbox is gone: NotFound) end it at once."""
    attempts = 0
    since = time.monotonic()
    while True:
        progressed = False
        try:
            r, sse = open_stream(cursor)
            try:
                for ev in events(r, sse):
                    progressed = True
                    c = ev.get("cursor")
                    if isinstance(c, str) and c:
                        cursor = c
                        on_cursor(c)
                    yield ev
                    if done(ev):
                        return
            finally:
                r.close()
            if not reconnect_on_end:
                return
            why: Exception = errors.ConnectionFailed("airlock: stream ended before its last event")
        except (errors.ConnectionFailed, errors.Timeout, errors.Unavailable) as e:
            # Unavailable: the daemon is shutting down, or answered 503 as
            # the next one starts; resumed from the cursor, as the Go and
            # TypeScript SDKs do.
            why = e
        if progressed:
            attempts, since = 0, time.monotonic()
        attempts += 1
        if attempts > FOLLOW_ATTEMPTS or time.monotonic() - since > FOLLOW_WINDOW:
            raise why
        time.sleep(min(0.05 * (2 ** min(attempts, 6)), 2.0))
