"""airlock: the Python SDK of the airlock sandbox daemon (``airlock serve``).

Standard library only. The daemon's address is AIRLOCK_HOST
(``unix:///path.sock``, ``http://host:port`` or ``https://host:port``; by
default its unix socket) and its API key AIRLOCK_API_KEY::

    import airlock

    with airlock.Sandbox.create() as sb:
        res = sb.exec(["python3", "-c", "print(6 * 7)"])
        print(res.exit_code, res.stdout)        # 0 b'42\\n'

``airlock.Client`` has one method per API operation; ``airlock.aio`` has
the same classes for asyncio.
"""

from . import models
from ._tar import Extracted, SkippedLink, untar_to
from ._ws import PTYSession
from .client import OPERATIONS, Client
from .errors import (AirlockError, AlreadyExists, APIError, CommandNotFound, ConnectionFailed,
                     DeadlineExceeded, ERROR_CLASSES, FailedPrecondition, Internal, InvalidArgument,
                     MethodNotAllowed, NotExecutable, NotFound, PermissionDenied, ResourceExhausted,
                     StreamError, Timeout, TooLarge, Unauthenticated, Unavailable, Unimplemented)
from .models import ExecResult, FileInfo, NetworkEvent, NetworkPolicy, OutputEvent, RecordEvent
from .sandbox import Files, Network, Process, Sandbox, default_client

__version__ = "0.1.0"

__all__ = [
    "models", "Client", "OPERATIONS", "Sandbox", "Process", "Files", "Network", "PTYSession",
    "Extracted", "SkippedLink", "untar_to", "default_client", "ExecResult", "FileInfo", "NetworkEvent", "RecordEvent",
    "NetworkPolicy", "OutputEvent", "AirlockError", "APIError", "ConnectionFailed", "Timeout",
    "StreamError", "ERROR_CLASSES", "InvalidArgument", "CommandNotFound", "NotExecutable",
    "Unauthenticated", "PermissionDenied", "NotFound", "FailedPrecondition", "AlreadyExists",
    "TooLarge", "ResourceExhausted", "Internal", "Unavailable", "Unimplemented", "DeadlineExceeded",
    "MethodNotAllowed",
]
