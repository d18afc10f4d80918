"""Exceptions: one class per error code of the API, plus transport errors.

Every error answered by the daemon is an :class:`APIError` subclass chosen
by the answer's code (``ERROR_CLASSES``); its message is the daemon's. A
daemon that cannot be reached is :class:`ConnectionFailed`, and a call that
gets no answer within the client's timeout is :class:`Timeout`.
"""

from __future__ import annotations

from typing import Dict, Optional, Type


class AirlockError(Exception):
    """The base of every error this package raises."""


class ConnectionFailed(AirlockError):
    """The daemon could not be reached, or the connection broke."""


class Timeout(AirlockError, TimeoutError):
    """No answer came within the configured timeout."""


class StreamError(AirlockError):
    """A stream or archive from the daemon was malformed or cut."""


class APIError(AirlockError):
    """An error answered by the daemon.

    ``status`` is the HTTP status (0 for an error reported inside a
    stream), ``code`` the API's error code, ``message`` the daemon's
    explanation and ``retry_after`` the seconds its Retry-After asked for.
    """

    code: str = "unknown"

    def __init__(self, message: str, *, code: Optional[str] = None, status: int = 0,
                 retry_after: Optional[float] = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        self.status = status
        self.retry_after = retry_after

    def __str__(self) -> str:
        if self.status:
            return f"airlock: {self.message} ({self.code}, HTTP {self.status})"
        return f"airlock: {self.message} ({self.code})"


class InvalidArgument(APIError):
    code = "invalid_argument"


class CommandNotFound(InvalidArgument):
    """The command does not exist in the sandbox (a shell's 127)."""

    code = "command_not_found"


class NotExecutable(InvalidArgument):
    """The command exists but cannot be executed (a shell's 126)."""

    code = "not_executable"


class Unauthenticated(APIError):
    code = "unauthenticated"


class PermissionDenied(APIError):
    code = "permission_denied"


class NotFound(APIError):
    code = "not_found"


class FailedPrecondition(APIError):
    """The sandbox or process is in the wrong state (409)."""

    code = "failed_precondition"


class AlreadyExists(APIError):
    code = "already_exists"


class TooLarge(APIError):
    code = "too_large"


class ResourceExhausted(APIError):
    """429: the daemon is at capacity; retry_after says when to try again."""

    code = "resource_exhausted"


class Internal(APIError):
    code = "internal"


class Unavailable(APIError):
    code = "unavailable"


class Unimplemented(APIError):
    code = "not_implemented"


class DeadlineExceeded(APIError):
    code = "deadline_exceeded"


class MethodNotAllowed(APIError):
    code = "method_not_allowed"


#: The exception class of each error code of the API.
ERROR_CLASSES: Dict[str, Type[APIError]] = {
    c.code: c
    for c in (InvalidArgument, CommandNotFound, NotExecutable, Unauthenticated, PermissionDenied,
              NotFound, FailedPrecondition, AlreadyExists, TooLarge, ResourceExhausted, Internal,
              Unavailable, Unimplemented, DeadlineExceeded, MethodNotAllowed)
}

#: The code of an error answer whose body is not an API error (a proxy's page).
STATUS_CODES: Dict[int, str] = {
    400: "invalid_argument", 401: "unauthenticated", 403: "permission_denied", 404: "not_found",
    405: "method_not_allowed", 409: "failed_precondition", 413: "too_large",
    429: "resource_exhausted", 500: "internal", 501: "not_implemented", 503: "unavailable",
    504: "deadline_exceeded",
}


def make_error(code: str, message: str, status: int = 0, retry_after: Optional[float] = None) -> APIError:
    """The exception of an error with this code (APIError for an unknown one)."""
    cls = ERROR_CLASSES.get(code, APIError)
    return cls(message, code=code, status=status, retry_after=retry_after)
