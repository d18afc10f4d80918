"""airlock.Client: one method per operation of the API."""

from __future__ import annotations

import io
import os
import ssl
import tempfile
import urllib.parse
from typing import IO, Any, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

from . import errors, models
from ._http import Response, Transport
from ._stream import follow
from . import _tar

#: The longest timeout a call takes (ten years, as the daemon).
MAX_SECONDS = 10 * 365 * 24 * 3600.0


def check_seconds(name: str, v: Optional[float]) -> Optional[float]:
    """v as a number of seconds (None: no bound), or InvalidArgument saying
    what is wrong with it, before anything is sent."""
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise errors.InvalidArgument(f"{name}: {v!r} is not a number of seconds")
    if v != v or v < 0 or v > MAX_SECONDS:
        raise errors.InvalidArgument(f"{name}: {v!r} is not between 0 and {MAX_SECONDS:.0f} seconds")
    return float(v)


def body_of(name: str, data: Any) -> Any:
    """data as a request body: bytes (str as UTF-8) or a binary file object."""
    if isinstance(data, str):
        return data.encode()
    if isinstance(data, (bytes, bytearray, memoryview)) or hasattr(data, "read"):
        return data
    raise TypeError(f"{name}: want str, bytes or a binary file object, not {type(data).__name__}")

#: Each operation of api/openapi.json: operationId -> (method of Client,
#: HTTP method, path, query parameters). Client builds every request from
#: this table; a test checks it against the OpenAPI document both ways.
OPERATIONS: Dict[str, Tuple[str, str, str, Tuple[str, ...]]] = {
    "health": ("health", "GET", "/healthz", ()),
    "ready": ("ready", "GET", "/readyz", ()),
    "metrics": ("metrics", "GET", "/metrics", ()),
    "openapi": ("openapi", "GET", "/v1/openapi.json", ()),
    "createSandbox": ("create_sandbox", "POST", "/v1/sandboxes", ()),
    "listSandboxes": ("list_sandboxes", "GET", "/v1/sandboxes", ("state", "label", "limit", "cursor")),
    "getSandbox": ("get_sandbox", "GET", "/v1/sandboxes/{id}", ()),
    "deleteSandbox": ("delete_sandbox", "DELETE", "/v1/sandboxes/{id}", ()),
    "setTimeout": ("set_timeout", "POST", "/v1/sandboxes/{id}/timeout", ()),
    "pauseSandbox": ("pause_sandbox", "POST", "/v1/sandboxes/{id}/pause", ()),
    "resumeSandbox": ("resume_sandbox", "POST", "/v1/sandboxes/{id}/resume", ()),
    "exec": ("exec", "POST", "/v1/sandboxes/{id}/exec", ()),
    "startProcess": ("start_process", "POST", "/v1/sandboxes/{id}/processes", ()),
    "listProcesses": ("list_processes", "GET", "/v1/sandboxes/{id}/processes", ("state",)),
    "getProcess": ("get_process", "GET", "/v1/sandboxes/{id}/processes/{pid}", ()),
    "waitProcess": ("wait_process", "GET", "/v1/sandboxes/{id}/processes/{pid}/wait", ("timeout_seconds",)),
    "processOutput": ("process_output", "GET", "/v1/sandboxes/{id}/processes/{pid}/output", ("cursor", "follow")),
    "writeStdin": ("write_stdin", "POST", "/v1/sandboxes/{id}/processes/{pid}/stdin", ("close",)),
    "signalProcess": ("signal_process", "POST", "/v1/sandboxes/{id}/processes/{pid}/signal", ()),
    "pty": ("pty", "GET", "/v1/sandboxes/{id}/pty", ()),
    "networkEvents": ("network_events", "GET", "/v1/sandboxes/{id}/network",
                      ("allowed", "problems", "host", "since", "cursor", "limit", "follow")),
    "getNetworkPolicy": ("get_network_policy", "GET", "/v1/sandboxes/{id}/network/policy", ()),
    "setNetworkPolicy": ("set_network_policy", "PUT", "/v1/sandboxes/{id}/network/policy", ()),
    "readFile": ("read_file", "GET", "/v1/sandboxes/{id}/files", ("path", "max_size")),
    "writeFile": ("write_file", "PUT", "/v1/sandboxes/{id}/files", ("path", "mode")),
    "remove": ("remove", "DELETE", "/v1/sandboxes/{id}/files", ("path", "recursive")),
    "stat": ("stat", "GET", "/v1/sandboxes/{id}/files/stat", ("path",)),
    "list": ("list", "GET", "/v1/sandboxes/{id}/files/list", ("path",)),
    "mkdir": ("mkdir", "POST", "/v1/sandboxes/{id}/files/mkdir", ()),
    "rename": ("rename", "POST", "/v1/sandboxes/{id}/files/rename", ()),
    "download": ("download", "GET", "/v1/sandboxes/{id}/archive", ("path", "max_size", "follow_links")),
    "upload": ("upload", "PUT", "/v1/sandboxes/{id}/archive", ("path",)),
    "createKey": ("create_key", "POST", "/v1/keys", ()),
    "listKeys": ("list_keys", "GET", "/v1/keys", ()),
    "revokeKey": ("revoke_key", "DELETE", "/v1/keys/{kid}", ()),
    "portTunnel": ("port_tunnel", "GET", "/v1/sandboxes/{id}/ports/{port}", ()),
    "recordEvents": ("record_events", "GET", "/v1/sandboxes/{id}/events", ("type", "since", "cursor", "limit", "follow")),
    "createSnapshot": ("create_snapshot", "POST", "/v1/sandboxes/{id}/snapshots", ()),
    "listSnapshots": ("list_snapshots", "GET", "/v1/snapshots", ()),
    "getSnapshot": ("get_snapshot", "GET", "/v1/snapshots/{snap}", ()),
    "deleteSnapshot": ("delete_snapshot", "DELETE", "/v1/snapshots/{snap}", ()),
    "forkSandbox": ("fork_sandbox", "POST", "/v1/sandboxes/{id}/fork", ()),
    "restoreSandbox": ("restore_sandbox", "POST", "/v1/sandboxes/{id}/restore", ()),
    "sandboxChanges": ("sandbox_changes", "GET", "/v1/sandboxes/{id}/changes", ("since", "diff")),
}

#: Methods that stream an operation beyond its plain method, by operationId.
FOLLOWERS: Dict[str, str] = {"networkEvents": "follow_network", "recordEvents": "follow_events",
                             "download": "download_to", "upload": "upload_tree"}

#: The daemon's default limit of a download (1 GiB).
DEFAULT_MAX_DOWNLOAD = 1 << 30
#: The daemon's default exec timeout, which bounds an exec without one.
DEFAULT_EXEC_TIMEOUT = 600.0

Argv = Union[str, Sequence[str]]
Data = Union[bytes, bytearray, memoryview, str, IO[bytes]]


def argv_of(cmd: Argv) -> List[str]:
    """A command as argv: a string is run by sh -c."""
    if isinstance(cmd, str):
        return ["sh", "-c", cmd]
    argv = [str(a) for a in cmd]
    if not argv:
        raise errors.InvalidArgument("empty command", status=0)
    return argv


def _labels(label: Union[None, str, Mapping[str, str], Sequence[str]]) -> Optional[List[str]]:
    if label is None:
        return None
    if isinstance(label, str):
        return [label]
    if isinstance(label, Mapping):
        return [f"{k}={v}" for k, v in label.items()]
    return list(label)


class Client:
    """A connection to an airlock daemon, safe for use by several threads.

    host is ``unix:///path.sock``, ``http://host:port`` or
    ``https://host:port`` (default: AIRLOCK_HOST, else the default socket);
    api_key is sent as a bearer token (default: AIRLOCK_API_KEY; the daemon
    needs one over TCP). timeout bounds each call's wait for an answer
    (seconds, None for no bound); a 429 is retried at most max_retries
    times after its Retry-After (capped at max_retry_wait seconds).
    """

    def __init__(self, host: Optional[str] = None, api_key: Optional[str] = None, *,
                 timeout: Optional[float] = 60.0, max_retries: int = 3, max_retry_wait: float = 30.0,
                 ssl_context: Optional[ssl.SSLContext] = None) -> None:
        if api_key is None:
            api_key = os.environ.get("AIRLOCK_API_KEY") or None
        check_seconds("timeout", timeout)
        self._t = Transport(host, api_key, timeout=timeout, max_retries=max_retries,
                            max_retry_wait=max_retry_wait, ssl_context=ssl_context)

    @classmethod
    def from_env(cls, **kw: Any) -> "Client":
        """A client of AIRLOCK_HOST with AIRLOCK_API_KEY."""
        return cls(os.environ.get("AIRLOCK_HOST") or None, os.environ.get("AIRLOCK_API_KEY") or None, **kw)

    @property
    def host(self) -> str:
        return self._t.host

    @property
    def timeout(self) -> Optional[float]:
        return self._t.timeout

    def close(self) -> None:
        """Close the idle connections."""
        self._t.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *a: Any) -> None:
        self.close()

    # Plumbing.

    @staticmethod
    def _path(op: str, **params: str) -> Tuple[str, str]:
        _, method, path, _ = OPERATIONS[op]
        for k, v in params.items():
            if not v:
                raise errors.InvalidArgument(f"empty {k}")
            path = path.replace("{" + k + "}", urllib.parse.quote(str(v), safe=""))
        return method, path

    def _json(self, op: str, params: Mapping[str, str], query: Optional[Mapping[str, Any]] = None,
              body: Any = None, timeout: Union[float, None, str] = "default") -> Any:
        method, path = self._path(op, **params)
        self._check_query(op, query)
        return self._t.json(method, path, query, body, timeout=timeout)

    @staticmethod
    def _check_query(op: str, query: Optional[Mapping[str, Any]]) -> None:
        if query:
            allowed = OPERATIONS[op][3]
            for k in query:
                if k not in allowed:  # a programming error of this package
                    raise AssertionError(f"{op}: query parameter {k} is not in OPERATIONS")

    def _raw(self, op: str, params: Mapping[str, str], query: Optional[Mapping[str, Any]] = None, *,
             body: Any = None, headers: Optional[Mapping[str, str]] = None, stream: bool = False,
             timeout: Union[float, None, str] = "default",
             stream_timeout: Union[float, None, str] = "default") -> Response:
        method, path = self._path(op, **params)
        self._check_query(op, query)
        return self._t.request(method, path, query, body=body, headers=headers, stream=stream,
                               timeout=timeout, stream_timeout=stream_timeout)

    def _plus(self, seconds: Optional[float]) -> Optional[float]:
        if self._t.timeout is None:
            return None
        return self._t.timeout + (seconds if seconds is not None else DEFAULT_EXEC_TIMEOUT)

    # Daemon.

    def health(self) -> None:
        """Returns when the daemon answers (GET /healthz)."""
        r = self._raw("health", {})
        r.read()
        r.release()

    def ready(self) -> None:
        """Returns once the daemon is ready; Unavailable before and while it drains."""
        r = self._raw("ready", {})
        r.read()
        r.release()

    def metrics(self) -> str:
        """The daemon's Prometheus metrics, as text."""
        r = self._raw("metrics", {})
        b = r.read()
        r.release()
        return b.decode("utf-8", "replace")

    def openapi(self) -> Dict[str, Any]:
        """The daemon's OpenAPI document."""
        return self._json("openapi", {})

    # Sandboxes.

    def create_sandbox(self, request: Optional[models.CreateSandboxRequest] = None, **fields: Any) -> models.Sandbox:
        """Create a sandbox (fields: those of CreateSandboxRequest)."""
        req = request or models.CreateSandboxRequest(**fields)
        # The daemon may wait for room in its admission queue.
        return models.Sandbox.from_dict(self._json("createSandbox", {}, None, req.to_dict(), timeout=self._plus(60.0)))

    def list_sandboxes(self, state: Optional[str] = None, label: Union[None, str, Mapping[str, str], Sequence[str]] = None,
                       limit: Optional[int] = None, cursor: Optional[str] = None) -> models.SandboxList:
        """One page of sandboxes; label filters by "k=v" (a dict, or a list of them)."""
        q = {"state": state, "label": _labels(label), "limit": limit, "cursor": cursor}
        return models.SandboxList.from_dict(self._json("listSandboxes", {}, q))

    def all_sandboxes(self, state: Optional[str] = None,
                      label: Union[None, str, Mapping[str, str], Sequence[str]] = None) -> List[models.Sandbox]:
        """Every sandbox, following the pages."""
        out: List[models.Sandbox] = []
        cursor = None
        for _ in range(100000):
            page = self.list_sandboxes(state=state, label=label, cursor=cursor)
            out.extend(page.sandboxes)
            if not page.next_cursor:
                break
            cursor = page.next_cursor
        return out

    def get_sandbox(self, id: str) -> models.Sandbox:
        return models.Sandbox.from_dict(self._json("getSandbox", {"id": id}))

    def delete_sandbox(self, id: str) -> None:
        """Kill the sandbox and forget it."""
        self._json("deleteSandbox", {"id": id})

    def set_timeout(self, id: str, timeout_seconds: float) -> models.Sandbox:
        """End the sandbox timeout_seconds from now."""
        return models.Sandbox.from_dict(self._json("setTimeout", {"id": id}, None,
                                                   models.TimeoutRequest(timeout_seconds).to_dict()))

    def pause_sandbox(self, id: str) -> models.Sandbox:
        return models.Sandbox.from_dict(self._json("pauseSandbox", {"id": id}))

    def resume_sandbox(self, id: str) -> models.Sandbox:
        return models.Sandbox.from_dict(self._json("resumeSandbox", {"id": id}))

    # Snapshots.

    def create_snapshot(self, id: str, name: Optional[str] = None,
                        labels: Optional[Mapping[str, str]] = None) -> models.Snapshot:
        """Snapshot the sandbox's /workspace (processes are not captured)."""
        req = models.CreateSnapshotRequest(name=name, labels=dict(labels) if labels else None)
        return models.Snapshot.from_dict(self._json("createSnapshot", {"id": id}, None, req.to_dict(),
                                                    timeout=self._plus(600.0)))

    def list_snapshots(self) -> models.SnapshotList:
        return models.SnapshotList.from_dict(self._json("listSnapshots", {}))

    def get_snapshot(self, snap: str) -> models.Snapshot:
        """A snapshot by id or name."""
        return models.Snapshot.from_dict(self._json("getSnapshot", {"snap": snap}))

    def delete_snapshot(self, snap: str) -> None:
        self._json("deleteSnapshot", {"snap": snap})

    def fork_sandbox(self, id: str, count: int = 1, labels: Optional[Mapping[str, str]] = None) -> models.ForkResult:
        """count sandboxes from a snapshot of the sandbox's state, all or none."""
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            # The API reads a count of 0 as "not given": one sandbox.
            raise errors.InvalidArgument(f"count: {count!r}: want 1 or more sandboxes")
        req = models.ForkRequest(count=count, labels=dict(labels) if labels else None)
        return models.ForkResult.from_dict(self._json("forkSandbox", {"id": id}, None, req.to_dict(),
                                                      timeout=self._plus(600.0)))

    def restore_sandbox(self, id: str, snapshot: str) -> models.Sandbox:
        """Put the sandbox's workspace back to a snapshot, in place; its processes are killed."""
        return models.Sandbox.from_dict(self._json("restoreSandbox", {"id": id}, None,
                                                   models.RestoreRequest(snapshot).to_dict(),
                                                   timeout=self._plus(600.0)))

    def sandbox_changes(self, id: str, since: Optional[str] = None, diff: bool = False) -> models.Changes:
        """The workspace's changes since a snapshot (or since the sandbox's creation)."""
        q = {"since": since, "diff": "true" if diff else None}
        return models.Changes.from_dict(self._json("sandboxChanges", {"id": id}, q))

    # Processes.

    @staticmethod
    def _exec_request(cmd: Argv, env: Optional[Mapping[str, str]], cwd: Optional[str],
                      timeout_seconds: Optional[float], stdin: Optional[Data],
                      max_output_bytes: Optional[int]) -> models.ExecRequest:
        check_seconds("timeout_seconds", timeout_seconds)
        if stdin is not None:
            stdin = body_of("stdin", stdin)
            if not isinstance(stdin, (bytes, bytearray, memoryview)):
                stdin = stdin.read()
        return models.ExecRequest(argv=argv_of(cmd), env=dict(env) if env else None, cwd=cwd,
                                  timeout_seconds=timeout_seconds,
                                  stdin=bytes(stdin) if stdin is not None else None,
                                  max_output_bytes=max_output_bytes)

    def exec(self, id: str, cmd: Argv, *, env: Optional[Mapping[str, str]] = None, cwd: Optional[str] = None,
             timeout_seconds: Optional[float] = None, stdin: Optional[Data] = None,
             max_output_bytes: Optional[int] = None) -> models.ExecResult:
        """Run a command and wait for it; stdout and stderr are bytes."""
        req = self._exec_request(cmd, env, cwd, timeout_seconds, stdin, max_output_bytes)
        return models.ExecResult.from_dict(self._json("exec", {"id": id}, None, req.to_dict(),
                                                      timeout=self._plus(timeout_seconds)))

    def start_process(self, id: str, cmd: Argv, *, env: Optional[Mapping[str, str]] = None,
                      cwd: Optional[str] = None, timeout_seconds: Optional[float] = None,
                      stdin: Optional[Data] = None, max_output_bytes: Optional[int] = None) -> models.Process:
        """Start a command in the background."""
        req = self._exec_request(cmd, env, cwd, timeout_seconds, stdin, max_output_bytes)
        return models.Process.from_dict(self._json("startProcess", {"id": id}, None, req.to_dict()))

    def list_processes(self, id: str, state: Optional[str] = None) -> models.ProcessList:
        """The sandbox's processes; state "running" or "exited" keeps those only
        (the running ones come from the daemon's memory, however many ended)."""
        return models.ProcessList.from_dict(self._json("listProcesses", {"id": id}, {"state": state}))

    def get_process(self, id: str, pid: str) -> models.Process:
        return models.Process.from_dict(self._json("getProcess", {"id": id, "pid": pid}))

    def wait_process(self, id: str, pid: str, timeout_seconds: Optional[float] = None) -> models.Process:
        """Wait (at most timeout_seconds, the daemon's default 30, max 300) for the process."""
        check_seconds("timeout_seconds", timeout_seconds)
        q = {"timeout_seconds": None if timeout_seconds is None else int(max(timeout_seconds, 0))}
        wait = 30.0 if timeout_seconds is None else timeout_seconds
        return models.Process.from_dict(self._json("waitProcess", {"id": id, "pid": pid}, q,
                                                   timeout=None if self.timeout is None else self.timeout + wait))

    def process_output(self, id: str, pid: str, cursor: Optional[str] = None, follow: bool = True,
                       sse: bool = False, on_cursor: Any = None) -> Iterator[models.OutputEvent]:
        """The process's output events from cursor (the start by default),
        until its "exit" event; with follow=False only what is there now.
        A cut stream is reopened from the last cursor."""

        def open_stream(c: Optional[str]) -> Tuple[Response, bool]:
            q = {"cursor": c, "follow": None if follow else False}
            h = {"Accept": "text/event-stream" if sse else "application/x-ndjson"}
            r = self._raw("processOutput", {"id": id, "pid": pid}, q, headers=h, stream=True, stream_timeout=None)
            return r, "event-stream" in (r.headers.get("Content-Type") or "")

        for ev in follow_stream(open_stream, cursor, lambda e: e.get("kind") == "exit", follow, on_cursor):
            yield models.OutputEvent.from_dict(ev)

    def write_stdin(self, id: str, pid: str, data: Data = b"", close: bool = False) -> None:
        """Append data to the process's stdin; close=True closes it after."""
        data = body_of("data", data)
        r = self._raw("writeStdin", {"id": id, "pid": pid}, {"close": True if close else None}, body=data,
                      headers={"Content-Type": "application/octet-stream"})
        r.read()
        r.release()

    def signal_process(self, id: str, pid: str, signal: str) -> None:
        """Send a signal ("TERM", "KILL", "INT", ...)."""
        self._json("signalProcess", {"id": id, "pid": pid}, None, models.SignalRequest(signal).to_dict())

    def pty(self, id: str, cmd: Argv = ("sh",), *, cols: int = 80, rows: int = 24,
            env: Optional[Mapping[str, str]] = None, cwd: Optional[str] = None,
            timeout_seconds: Optional[float] = None) -> "PTYSession":
        """Run a command on a terminal, over the daemon's WebSocket."""
        from ._ws import PTYSession
        start = models.PTYStart(argv=argv_of(cmd), env=dict(env) if env else None, cwd=cwd,
                                timeout_seconds=timeout_seconds, cols=cols, rows=rows)
        _, path = self._path("pty", id=id)
        return PTYSession._open(self._t, path, start)

    def port_tunnel(self, id: str, port: int) -> "Tunnel":
        """A TCP stream to 127.0.0.1:port inside the sandbox (a port
        preview): the daemon dials into the sandbox's network namespace, so
        its egress policy is unchanged. Close it when done."""
        from ._ws import Tunnel, upgrade
        if not isinstance(port, int) or not 1 <= port <= 65535:
            raise errors.InvalidArgument(f"port {port!r}: want 1 to 65535")
        _, path = self._path("portTunnel", id=id, port=str(port))
        sock, _, rest = upgrade(self._t, path, {"Upgrade": "tcp"}, f"port {port}")
        return Tunnel(sock, rest)

    # Network.

    def network_events(self, id: str, allowed: Optional[bool] = None, host: Optional[str] = None,
                       since: Optional[str] = None, cursor: Optional[str] = None,
                       limit: Optional[int] = None, problems: Optional[bool] = None) -> models.NetworkEventsPage:
        """One page of the sandbox's network audit. problems=True keeps the
        records a rule denied and those that failed before any byte moved."""
        q = {"allowed": allowed, "problems": problems or None, "host": host, "since": since, "cursor": cursor,
             "limit": limit}
        return models.NetworkEventsPage.from_dict(self._json("networkEvents", {"id": id}, q))

    def follow_network(self, id: str, allowed: Optional[bool] = None, host: Optional[str] = None,
                       since: Optional[str] = None, cursor: Optional[str] = None,
                       limit: Optional[int] = None, follow: bool = True, sse: bool = False,
                       on_cursor: Any = None, problems: Optional[bool] = None) -> Iterator[models.NetworkEvent]:
        """The network audit as a stream, until the sandbox ends; a cut
        stream is reopened from the last cursor."""

        def open_stream(c: Optional[str]) -> Tuple[Response, bool]:
            q = {"allowed": allowed, "problems": problems or None, "host": host, "since": since, "cursor": c,
                 "limit": limit, "follow": follow}
            h = {"Accept": "text/event-stream" if sse else "application/x-ndjson"}
            r = self._raw("networkEvents", {"id": id}, q, headers=h, stream=True, stream_timeout=None)
            return r, "event-stream" in (r.headers.get("Content-Type") or "")

        for ev in follow_stream(open_stream, cursor, lambda e: False, False, on_cursor):
            yield models.NetworkEvent.from_dict(ev)

    # Activity record (sandboxes made with record=True).

    @staticmethod
    def _types(type: Union[str, Sequence[str], None]) -> Optional[str]:
        if type is None or isinstance(type, str):
            return type
        return ",".join(type)

    def record_events(self, id: str, type: Union[str, Sequence[str], None] = None, since: Optional[str] = None,
                      cursor: Optional[str] = None, limit: Optional[int] = None) -> models.RecordEventsPage:
        """One page of the sandbox's activity record (every exec, exit,
        network request and usage sample, written by the daemon). type
        keeps only events of these types ("exec", or a list). A sandbox
        made without record raises Conflict."""
        q = {"type": self._types(type), "since": since, "cursor": cursor, "limit": limit}
        return models.RecordEventsPage.from_dict(self._json("recordEvents", {"id": id}, q))

    def follow_events(self, id: str, type: Union[str, Sequence[str], None] = None, since: Optional[str] = None,
                      cursor: Optional[str] = None, limit: Optional[int] = None, follow: bool = True,
                      sse: bool = False, on_cursor: Any = None) -> Iterator[models.RecordEvent]:
        """The activity record as a stream, until the sandbox ends; a cut
        stream is reopened from the last cursor."""

        def open_stream(c: Optional[str]) -> Tuple[Response, bool]:
            q = {"type": self._types(type), "since": since, "cursor": c, "limit": limit, "follow": follow}
            h = {"Accept": "text/event-stream" if sse else "application/x-ndjson"}
            r = self._raw("recordEvents", {"id": id}, q, headers=h, stream=True, stream_timeout=None)
            return r, "event-stream" in (r.headers.get("Content-Type") or "")

        for ev in follow_stream(open_stream, cursor, lambda e: False, False, on_cursor):
            yield models.RecordEvent.from_dict(ev)

    def get_network_policy(self, id: str) -> models.NetworkPolicy:
        return models.NetworkPolicy.from_dict(self._json("getNetworkPolicy", {"id": id}))

    def set_network_policy(self, id: str, policy: Union[models.NetworkPolicy, Mapping[str, Any]]) -> models.NetworkPolicy:
        """Replace the sandbox's network policy, live."""
        body = policy.to_dict() if isinstance(policy, models.NetworkPolicy) else dict(policy)
        return models.NetworkPolicy.from_dict(self._json("setNetworkPolicy", {"id": id}, None, body))

    # Files.

    def read_file(self, id: str, path: str, max_size: Optional[int] = None) -> bytes:
        """The content of a file (at most max_size bytes, the daemon's 1 GiB by default)."""
        r = self._raw("readFile", {"id": id}, {"path": path, "max_size": max_size}, stream=True)
        try:
            data = r.read()
        finally:
            r.close()
        want = r.headers.get("X-Airlock-File-Size")
        if want is not None and want.isdigit() and int(want) != len(data):
            raise errors.StreamError(f"airlock: read {path}: got {len(data)} bytes of {want}")
        return data

    def write_file(self, id: str, path: str, data: Data, mode: Optional[int] = None) -> None:
        """Write a file atomically (bytes, str as UTF-8, or a binary file object)."""
        data = body_of("data", data)
        r = self._raw("writeFile", {"id": id}, {"path": path, "mode": None if mode is None else format(mode, "o")},
                      body=data, headers={"Content-Type": "application/octet-stream"})
        r.read()
        r.release()

    def remove(self, id: str, path: str, recursive: bool = False) -> None:
        self._json("remove", {"id": id}, {"path": path, "recursive": True if recursive else None})

    def stat(self, id: str, path: str) -> models.FileInfo:
        return models.FileInfo.from_dict(self._json("stat", {"id": id}, {"path": path}))

    def list(self, id: str, path: str) -> models.FileList:
        return models.FileList.from_dict(self._json("list", {"id": id}, {"path": path}))

    def mkdir(self, id: str, path: str, mode: Optional[int] = None) -> None:
        """Make a directory and its missing parents."""
        self._json("mkdir", {"id": id}, None, models.MkdirRequest(path, mode).to_dict())

    def rename(self, id: str, from_: str, to: str) -> None:
        self._json("rename", {"id": id}, None, models.RenameRequest(from_, to).to_dict())

    def download(self, id: str, path: str, max_size: Optional[int] = None, follow_links: bool = False) -> Response:
        """A tar stream of a file or tree (close it when done)."""
        q = {"path": path, "max_size": max_size, "follow_links": True if follow_links else None}
        return self._raw("download", {"id": id}, q, stream=True, headers={"Accept": "application/x-tar"})

    def download_to(self, id: str, path: str, dst: str, max_size: Optional[int] = None,
                    follow_links: bool = False) -> "_tar.Extracted":
        """Copy the file or tree path of the sandbox to the local path dst,
        with the Go SDK's rules: links in the tree that lead out of it are
        left out and listed; nothing is written through a link; dst must
        not be a link; the archive may carry at most max_size bytes; a
        failure leaves nothing behind."""
        limit = max_size if max_size is not None else DEFAULT_MAX_DOWNLOAD
        _tar.check_destination(dst)
        r = self.download(id, path, max_size=max_size, follow_links=follow_links)
        try:
            return _tar.download_to(r, path, dst, limit)
        finally:
            r.close()

    def upload(self, id: str, path: str, tar: Union[bytes, IO[bytes]]) -> None:
        """Extract a tar stream into the directory path of the sandbox."""
        r = self._raw("upload", {"id": id}, {"path": path}, body=tar,
                      headers={"Content-Type": "application/x-tar"}, timeout=self._plus(0))
        r.read()
        r.release()

    def upload_tree(self, id: str, src: str, path: str) -> None:
        """Copy the local file or tree src into the directory path of the
        sandbox, under src's base name (links are sent as links); path is
        made if missing."""
        if not os.path.lexists(src):
            raise FileNotFoundError(src)
        self.mkdir(id, path)
        with tempfile.TemporaryFile() as f:
            _tar.tar_dir(f, src)
            f.seek(0)
            self.upload(id, path, f)

    # Keys (over the unix socket only).

    def create_key(self, name: Optional[str] = None, tenant: Optional[str] = None) -> models.APIKey:
        """Make an API key; its secret (key) is in this answer only. A key
        with a tenant reaches only the sandboxes made with keys of that
        tenant; without one it is an operator key that sees all."""
        return models.APIKey.from_dict(self._json("createKey", {}, None, models.CreateKeyRequest(name, tenant).to_dict()))

    def list_keys(self) -> models.KeyList:
        return models.KeyList.from_dict(self._json("listKeys", {}))

    def revoke_key(self, kid: str) -> None:
        self._json("revokeKey", {"kid": kid})


def follow_stream(open_stream: Any, cursor: Optional[str], done: Any, reconnect_on_end: bool,
                  on_cursor: Any) -> Iterator[Dict[str, Any]]:
    return follow(open_stream, cursor, done, reconnect_on_end, on_cursor or (lambda c: None))


from ._ws import PTYSession, Tunnel  # noqa: E402  (for the annotations above)
