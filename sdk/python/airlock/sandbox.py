"""Handles: Sandbox (a context manager that deletes it), Process, Files
(sb.files) and Network (sb.network)."""

from __future__ import annotations

import threading
import time
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

from . import errors, models
from ._tar import Extracted
from ._ws import PTYSession
from .client import Argv, Client, Data, check_seconds

_default: Optional[Client] = None
_default_lock = threading.Lock()


def default_client() -> Client:
    """The client of AIRLOCK_HOST / AIRLOCK_API_KEY, made once."""
    global _default
    with _default_lock:
        if _default is None:
            _default = Client.from_env()
        return _default


class Process:
    """A process of a sandbox (started in the background, or found by id).
    cursor is where its output was read up to: a new Process with it
    reattaches without reading anything twice. lost_bytes counts the
    output stream() skipped because the daemon had dropped it before it was
    read (it keeps the last MiB of each stream while nobody reads)."""

    def __init__(self, client: Client, sandbox_id: str, info: models.Process, cursor: Optional[str] = None) -> None:
        self.client = client
        self.sandbox_id = sandbox_id
        self.info = info
        self.cursor = cursor
        self.lost_bytes = 0

    @property
    def id(self) -> str:
        return self.info.id

    def refresh(self) -> models.Process:
        self.info = self.client.get_process(self.sandbox_id, self.id)
        return self.info

    def output(self, cursor: Optional[str] = None, follow: bool = True, sse: bool = False) -> Iterator[models.OutputEvent]:
        """Output events from cursor (default: where this handle left off)
        until the exit event."""

        def mark(c: str) -> None:
            self.cursor = c

        return self.client.process_output(self.sandbox_id, self.id, cursor if cursor is not None else self.cursor,
                                          follow=follow, sse=sse, on_cursor=mark)

    def stream(self, follow: bool = True) -> Iterator[Tuple[str, bytes]]:
        """(stream, bytes) pairs of its output ("stdout"/"stderr"). Output
        the daemon dropped before it was read is not among them: it is
        counted in lost_bytes (output() gives it as "lost" events)."""
        for ev in self.output(follow=follow):
            if ev.kind in ("stdout", "stderr") and ev.data:
                yield ev.kind, ev.data
            elif ev.kind == "lost":
                self.lost_bytes += ev.bytes or 0

    def write(self, data: Data, close: bool = False) -> None:
        """Append to its stdin (close=True closes stdin after)."""
        self.client.write_stdin(self.sandbox_id, self.id, data, close=close)

    def close_stdin(self) -> None:
        self.client.write_stdin(self.sandbox_id, self.id, b"", close=True)

    def signal(self, signal: str) -> None:
        self.client.signal_process(self.sandbox_id, self.id, signal)

    def kill(self) -> None:
        self.signal("KILL")

    def wait(self, timeout: Optional[float] = None) -> models.Process:
        """Wait until it exits (at most timeout seconds: then Timeout)."""
        check_seconds("timeout", timeout)
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = 300.0 if deadline is None else min(300.0, deadline - time.monotonic())
            self.info = self.client.wait_process(self.sandbox_id, self.id, max(int(left), 0))
            if self.info.state != "running":
                return self.info
            if deadline is not None and time.monotonic() >= deadline:
                raise errors.Timeout(f"airlock: process {self.id} still running after {timeout} s")


class Files:
    """The files of a sandbox (paths absolute, or relative to /workspace)."""

    def __init__(self, client: Client, sandbox_id: str) -> None:
        self.client, self.sandbox_id = client, sandbox_id

    def read(self, path: str, max_size: Optional[int] = None) -> bytes:
        return self.client.read_file(self.sandbox_id, path, max_size=max_size)

    def read_text(self, path: str, encoding: str = "utf-8") -> str:
        return self.read(path).decode(encoding)

    def write(self, path: str, data: Data, mode: Optional[int] = None) -> None:
        self.client.write_file(self.sandbox_id, path, data, mode=mode)

    def write_text(self, path: str, text: str, encoding: str = "utf-8", mode: Optional[int] = None) -> None:
        self.write(path, text.encode(encoding), mode=mode)

    def list(self, path: str = ".") -> List[models.FileInfo]:
        return self.client.list(self.sandbox_id, path).entries

    def stat(self, path: str) -> models.FileInfo:
        return self.client.stat(self.sandbox_id, path)

    def exists(self, path: str) -> bool:
        try:
            self.stat(path)
            return True
        except errors.NotFound:
            return False

    def mkdir(self, path: str, mode: Optional[int] = None) -> None:
        self.client.mkdir(self.sandbox_id, path, mode=mode)

    def remove(self, path: str, recursive: bool = False) -> None:
        self.client.remove(self.sandbox_id, path, recursive=recursive)

    def rename(self, from_: str, to: str) -> None:
        self.client.rename(self.sandbox_id, from_, to)

    def upload(self, src: str, path: str = ".") -> None:
        """Copy the local file or tree src into the directory path."""
        self.client.upload_tree(self.sandbox_id, src, path)

    def download(self, path: str, dst: str, max_size: Optional[int] = None, follow_links: bool = False) -> Extracted:
        """Copy the file or tree path to the local path dst (see Client.download_to)."""
        return self.client.download_to(self.sandbox_id, path, dst, max_size=max_size, follow_links=follow_links)


class Network:
    """The network of a sandbox: its audit and its live policy."""

    def __init__(self, client: Client, sandbox_id: str) -> None:
        self.client, self.sandbox_id = client, sandbox_id

    def events(self, allowed: Optional[bool] = None, host: Optional[str] = None, since: Optional[str] = None,
               cursor: Optional[str] = None, limit: Optional[int] = None,
               problems: Optional[bool] = None) -> models.NetworkEventsPage:
        return self.client.network_events(self.sandbox_id, allowed=allowed, host=host, since=since,
                                          cursor=cursor, limit=limit, problems=problems)

    def follow(self, allowed: Optional[bool] = None, host: Optional[str] = None, since: Optional[str] = None,
               cursor: Optional[str] = None, sse: bool = False,
               problems: Optional[bool] = None) -> Iterator[models.NetworkEvent]:
        return self.client.follow_network(self.sandbox_id, allowed=allowed, host=host, since=since,
                                          cursor=cursor, sse=sse, problems=problems)

    def policy(self) -> models.NetworkPolicy:
        return self.client.get_network_policy(self.sandbox_id)

    def set_policy(self, policy: Union[models.NetworkPolicy, Mapping[str, Any], None] = None, **fields: Any) -> models.NetworkPolicy:
        """Replace the policy (a NetworkPolicy, a dict, or its fields: mode, allow, deny, http)."""
        return self.client.set_network_policy(self.sandbox_id, policy if policy is not None else fields)


class Sandbox:
    """A sandbox of the daemon. ``with Sandbox.create() as sb:`` deletes it
    at the end of the block."""

    def __init__(self, client: Client, info: models.Sandbox) -> None:
        self.client = client
        self.info = info
        self.files = Files(client, info.id)
        self.network = Network(client, info.id)

    @property
    def id(self) -> str:
        return self.info.id

    @property
    def state(self) -> str:
        return self.info.state

    @classmethod
    def create(cls, image: Optional[str] = None, *, policy: Optional[str] = None, policy_name: Optional[str] = None,
               runtime: Optional[str] = None, labels: Optional[Mapping[str, str]] = None,
               timeout: Optional[float] = None, idle_timeout: Optional[float] = None,
               env: Optional[Mapping[str, str]] = None, resources: Optional[models.Resources] = None,
               files: Optional[Mapping[str, Union[bytes, str]]] = None, caches: Optional[Sequence[str]] = None,
               record: bool = False, client: Optional[Client] = None) -> "Sandbox":
        """Create a sandbox. policy is a policy document (YAML/JSON text),
        policy_name one of the daemon's named policies; timeout ends it
        that many seconds from now; files maps paths to initial content;
        caches names persistent caches (go, npm, pip, cargo or NAME:/path);
        record keeps an activity record (Client.record_events)."""
        c = client or default_client()
        req = models.CreateSandboxRequest(
            image=image, runtime=runtime, policy=policy, policy_name=policy_name,
            labels=dict(labels) if labels else None, timeout_seconds=timeout, idle_timeout_seconds=idle_timeout,
            env=dict(env) if env else None, resources=resources,
            files=[models.File(p, v.encode() if isinstance(v, str) else bytes(v)) for p, v in files.items()] if files else None,
            caches=list(caches) if caches else None, record=True if record else None)
        return cls(c, c.create_sandbox(req))

    @classmethod
    def get(cls, id: str, client: Optional[Client] = None) -> "Sandbox":
        c = client or default_client()
        return cls(c, c.get_sandbox(id))

    @classmethod
    def list(cls, label: Union[None, str, Mapping[str, str], Sequence[str]] = None, state: Optional[str] = None,
             client: Optional[Client] = None) -> List["Sandbox"]:
        """Every sandbox (with these labels, in this state)."""
        c = client or default_client()
        return [cls(c, s) for s in c.all_sandboxes(state=state, label=label)]

    def refresh(self) -> models.Sandbox:
        self.info = self.client.get_sandbox(self.id)
        return self.info

    def delete(self) -> None:
        """Kill and forget it (a sandbox already gone is not an error)."""
        try:
            self.client.delete_sandbox(self.id)
        except errors.NotFound:
            pass

    def pause(self) -> models.Sandbox:
        self.info = self.client.pause_sandbox(self.id)
        return self.info

    def resume(self) -> models.Sandbox:
        self.info = self.client.resume_sandbox(self.id)
        return self.info

    def set_timeout(self, seconds: float) -> models.Sandbox:
        self.info = self.client.set_timeout(self.id, seconds)
        return self.info

    # Snapshots of /workspace (processes are not captured).

    def snapshot(self, name: Optional[str] = None, labels: Optional[Mapping[str, str]] = None) -> models.Snapshot:
        """Snapshot /workspace, with the sandbox frozen during the copy."""
        return self.client.create_snapshot(self.id, name=name, labels=labels)

    def fork(self, count: int = 1, labels: Optional[Mapping[str, str]] = None) -> List["Sandbox"]:
        """count new sandboxes from a snapshot of this one's state, each with its own copy."""
        res = self.client.fork_sandbox(self.id, count=count, labels=labels)
        return [type(self)(self.client, s) for s in res.sandboxes]

    def restore(self, snapshot: str) -> models.Sandbox:
        """Put /workspace back to a snapshot, in place; every process of the sandbox is killed."""
        self.info = self.client.restore_sandbox(self.id, snapshot)
        return self.info

    def changes(self, since: Optional[str] = None, diff: bool = False) -> models.Changes:
        """/workspace's changes since a snapshot (or since the sandbox's creation)."""
        return self.client.sandbox_changes(self.id, since=since, diff=diff)

    def exec(self, cmd: Argv, *, env: Optional[Mapping[str, str]] = None, cwd: Optional[str] = None,
             timeout: Optional[float] = None, stdin: Optional[Data] = None,
             max_output_bytes: Optional[int] = None) -> models.ExecResult:
        """Run a command (argv, or a string run by sh -c) and wait for it."""
        return self.client.exec(self.id, cmd, env=env, cwd=cwd, timeout_seconds=timeout, stdin=stdin,
                                max_output_bytes=max_output_bytes)

    def spawn(self, cmd: Argv, *, env: Optional[Mapping[str, str]] = None, cwd: Optional[str] = None,
              timeout: Optional[float] = None, stdin: Optional[Data] = None) -> Process:
        """Start a command in the background."""
        info = self.client.start_process(self.id, cmd, env=env, cwd=cwd, timeout_seconds=timeout, stdin=stdin)
        return Process(self.client, self.id, info)

    def process(self, pid: str, cursor: Optional[str] = None) -> Process:
        """A process by id, to reattach to its output from cursor."""
        return Process(self.client, self.id, self.client.get_process(self.id, pid), cursor)

    def processes(self, state: Optional[str] = None) -> List[Process]:
        """The sandbox's processes; state "running" or "exited" keeps those only."""
        return [Process(self.client, self.id, p) for p in self.client.list_processes(self.id, state).processes]

    def pty(self, cmd: Argv = ("sh",), *, cols: int = 80, rows: int = 24, env: Optional[Mapping[str, str]] = None,
            cwd: Optional[str] = None, timeout: Optional[float] = None) -> PTYSession:
        """Run a command on a terminal."""
        return self.client.pty(self.id, cmd, cols=cols, rows=rows, env=env, cwd=cwd, timeout_seconds=timeout)

    def __enter__(self) -> "Sandbox":
        return self

    def __exit__(self, *a: Any) -> None:
        self.delete()

    def __repr__(self) -> str:
        return f"Sandbox({self.id!r}, state={self.info.state!r})"
