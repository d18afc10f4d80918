"""The API's types as dataclasses, one per schema of api/openapi.json.

Field names are the JSON names (``from`` is ``from_``). Fields the
document marks ``format: byte`` (output, file content, stdin) are ``bytes``
here, decoded from base64; times are RFC 3339 strings as the daemon sends
them. ``SCHEMAS`` maps each schema name to its class; a test checks both
ways that it matches the OpenAPI document.
"""

from __future__ import annotations

import base64
import dataclasses
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Type, TypeVar

T = TypeVar("T", bound="Model")


def _f(default: Any = None, *, json: Optional[str] = None, b64: bool = False,
       model: Optional[str] = None, many: bool = False, factory: Any = None) -> Any:
    meta = {"json": json, "b64": b64, "model": model, "many": many}
    if factory is not None:
        return field(default_factory=factory, metadata=meta)
    return field(default=default, metadata=meta)


class Model:
    """Conversion of a dataclass from and to its JSON form."""

    @classmethod
    def from_dict(cls: Type[T], d: Optional[Dict[str, Any]]) -> T:
        kw: Dict[str, Any] = {}
        d = d or {}
        for f in dataclasses.fields(cls):  # type: ignore[arg-type]
            name = f.metadata.get("json") or f.name
            if name not in d or d[name] is None:
                continue
            v = d[name]
            m = f.metadata.get("model")
            if f.metadata.get("b64"):
                v = base64.b64decode(v) if isinstance(v, str) else bytes(v)
            elif m is not None:
                mc = SCHEMAS[m]
                v = [mc.from_dict(x) for x in v] if f.metadata.get("many") else mc.from_dict(v)
            kw[f.name] = v
        return cls(**kw)

    def to_dict(self) -> Dict[str, Any]:
        out: Dict[str, Any] = {}
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            v = getattr(self, f.name)
            if v is None:
                continue
            name = f.metadata.get("json") or f.name
            if f.metadata.get("b64"):
                v = base64.b64encode(v).decode("ascii")
            elif isinstance(v, list):
                v = [x.to_dict() if isinstance(x, Model) else x for x in v]
            elif isinstance(v, Model):
                v = v.to_dict()
            out[name] = v
        return out


@dataclass
class Resources(Model):
    memory: Optional[str] = None
    disk: Optional[str] = None
    pids: Optional[int] = None
    cpu: Optional[float] = None


@dataclass
class Sandbox(Model):
    id: str = ""
    state: str = ""
    created_at: str = ""
    last_activity_at: str = ""
    resources: Resources = _f(factory=Resources, model="Resources")
    labels: Optional[Dict[str, str]] = None
    image: Optional[str] = None
    policy: Optional[str] = None
    reason: Optional[str] = None
    expires_at: Optional[str] = None
    idle_timeout_seconds: Optional[float] = None
    ended_at: Optional[str] = None
    tenant: Optional[str] = None
    record: Optional[bool] = None
    runtime: Optional[str] = None


@dataclass
class File(Model):
    path: str = ""
    content: bytes = _f(b"", b64=True)
    mode: Optional[int] = None


@dataclass
class CreateSandboxRequest(Model):
    image: Optional[str] = None
    runtime: Optional[str] = None
    policy_name: Optional[str] = None
    policy: Optional[str] = None
    resources: Optional[Resources] = _f(model="Resources")
    env: Optional[Dict[str, str]] = None
    labels: Optional[Dict[str, str]] = None
    timeout_seconds: Optional[float] = None
    idle_timeout_seconds: Optional[float] = None
    files: Optional[List[File]] = _f(model="File", many=True)
    caches: Optional[List[str]] = None
    record: Optional[bool] = None
    from_snapshot: Optional[str] = None


@dataclass
class SandboxList(Model):
    sandboxes: List[Sandbox] = _f(factory=list, model="Sandbox", many=True)
    next_cursor: Optional[str] = None


@dataclass
class TimeoutRequest(Model):
    timeout_seconds: float = 0.0


@dataclass
class ExecRequest(Model):
    argv: List[str] = _f(factory=list)
    env: Optional[Dict[str, str]] = None
    cwd: Optional[str] = None
    timeout_seconds: Optional[float] = None
    stdin: Optional[bytes] = _f(b64=True)
    max_output_bytes: Optional[int] = None


@dataclass
class ExecResult(Model):
    """The result of an exec: stdout and stderr are bytes (never decoded)."""

    process_id: str = ""
    exit_code: int = 0
    stdout: bytes = _f(b"", b64=True)
    stderr: bytes = _f(b"", b64=True)
    duration_ms: float = 0.0
    signal: Optional[int] = None
    timed_out: Optional[bool] = None
    stdout_truncated: Optional[bool] = None
    stderr_truncated: Optional[bool] = None

    @property
    def text(self) -> str:
        """stdout decoded as UTF-8, undecodable bytes replaced."""
        return self.stdout.decode("utf-8", "replace")

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out


@dataclass
class Process(Model):
    id: str = ""
    sandbox_id: str = ""
    argv: List[str] = _f(factory=list)
    state: str = ""
    started_at: str = ""
    cwd: Optional[str] = None
    tty: Optional[bool] = None
    exit_code: Optional[int] = None
    signal: Optional[int] = None
    timed_out: Optional[bool] = None
    ended_at: Optional[str] = None
    duration_ms: Optional[float] = None
    end_reason: Optional[str] = None


@dataclass
class ProcessList(Model):
    processes: List[Process] = _f(factory=list, model="Process", many=True)


@dataclass
class SignalRequest(Model):
    signal: str = ""


@dataclass
class OutputEvent(Model):
    """One event of a process's output; data is bytes."""

    kind: str = ""
    offset: int = 0
    cursor: str = ""
    stream: Optional[str] = None
    data: Optional[bytes] = _f(b64=True)
    bytes: Optional[int] = None
    exit_code: Optional[int] = None
    signal: Optional[int] = None


@dataclass
class HTTPRule(Model):
    hosts: List[str] = _f(factory=list)
    methods: Optional[List[str]] = None
    paths: Optional[List[str]] = None


@dataclass
class NetworkEvent(Model):
    cursor: str = ""
    time: str = ""
    proto: str = ""
    host: str = ""
    port: int = 0
    allowed: bool = False
    bytes_up: int = 0
    bytes_down: int = 0
    duration_ms: float = 0.0
    method: Optional[str] = None
    path: Optional[str] = None
    addr: Optional[str] = None
    rule: Optional[str] = None
    error_message: Optional[str] = None
    credential: Optional[str] = None


@dataclass
class NetworkEventsPage(Model):
    events: List[NetworkEvent] = _f(factory=list, model="NetworkEvent", many=True)
    next_cursor: Optional[str] = None


@dataclass
class RecordEvent(Model):
    """One event of a sandbox's activity record; fields that do not apply
    to its type are None."""
    cursor: str = ""
    type: str = ""
    time: str = ""
    sandbox: Optional[str] = None
    version: Optional[int] = None
    pid: Optional[int] = None
    host_pid: Optional[int] = None
    ppid: Optional[int] = None
    host_ppid: Optional[int] = None
    syscall: Optional[str] = None
    path: Optional[str] = None
    path_target: Optional[str] = None
    argv: Optional[List[str]] = None
    argv_truncated: Optional[bool] = None
    cwd: Optional[str] = None
    result: Optional[str] = None
    exited: Optional[bool] = None
    code: Optional[int] = None
    signal: Optional[int] = None
    core: Optional[bool] = None
    duration_ms: Optional[float] = None
    lost: Optional[bool] = None
    proto: Optional[str] = None
    method: Optional[str] = None
    host: Optional[str] = None
    port: Optional[int] = None
    addr: Optional[str] = None
    url_path: Optional[str] = None
    allowed: Optional[bool] = None
    rule: Optional[str] = None
    bytes_up: Optional[int] = None
    bytes_down: Optional[int] = None
    error_message: Optional[str] = None
    cpu_ns: Optional[int] = None
    memory_bytes: Optional[int] = None
    memory_peak_bytes: Optional[int] = None
    pids: Optional[int] = None
    reason: Optional[str] = None


@dataclass
class RecordEventsPage(Model):
    events: List[RecordEvent] = _f(factory=list, model="RecordEvent", many=True)
    next_cursor: Optional[str] = None


@dataclass
class NetworkPolicy(Model):
    mode: str = ""
    allow: Optional[List[str]] = None
    deny: Optional[List[str]] = None
    http: Optional[List[HTTPRule]] = _f(model="HTTPRule", many=True)


@dataclass
class FileInfo(Model):
    name: str = ""
    size: int = 0
    mode: int = 0
    mod_time: str = ""
    path: Optional[str] = None
    dir: Optional[bool] = None
    link: Optional[str] = None


@dataclass
class FileList(Model):
    entries: List[FileInfo] = _f(factory=list, model="FileInfo", many=True)


@dataclass
class MkdirRequest(Model):
    path: str = ""
    mode: Optional[int] = None


@dataclass
class RenameRequest(Model):
    from_: str = _f("", json="from")
    to: str = ""


@dataclass
class PTYStart(ExecRequest):
    """An ExecRequest and the terminal's size (the first PTY message)."""

    cols: Optional[int] = None
    rows: Optional[int] = None


@dataclass
class PTYSize(Model):
    cols: int = 0
    rows: int = 0


@dataclass
class PTYControl(Model):
    resize: Optional[PTYSize] = _f(model="PTYSize")
    signal: Optional[str] = None


@dataclass
class PTYExit(Model):
    process_id: str = ""
    exit_code: int = 0
    signal: Optional[int] = None
    error: Optional[str] = None
    error_code: Optional[str] = None


@dataclass
class APIKey(Model):
    id: str = ""
    created_at: str = ""
    name: Optional[str] = None
    tenant: Optional[str] = None
    key: Optional[str] = None
    revoked_at: Optional[str] = None
    last_used_at: Optional[str] = None


@dataclass
class CreateKeyRequest(Model):
    name: Optional[str] = None
    tenant: Optional[str] = None


@dataclass
class KeyList(Model):
    keys: List[APIKey] = _f(factory=list, model="APIKey", many=True)


@dataclass
class ErrorBody(Model):
    code: str = ""
    message: str = ""


@dataclass
class ErrorResponse(Model):
    """The body of an error answer (the schema Error)."""

    error: ErrorBody = _f(factory=ErrorBody, model="ErrorBody")


@dataclass
class CreateSnapshotRequest(Model):
    name: Optional[str] = None
    labels: Optional[Dict[str, str]] = None


@dataclass
class Snapshot(Model):
    """A snapshot of a sandbox's /workspace and, where root is True, of the
    copy-on-write layer over its root filesystem. Processes and memory are
    not captured (processes is always False). copy_on_write: the workspace
    is a clone of its volume's image (constant time), else a file-by-file
    copy."""

    id: str = ""
    name: str = ""
    sandbox_id: str = ""
    size: int = 0
    files: int = 0
    created_at: str = ""
    workspace: bool = True
    root: bool = False
    processes: bool = False
    copy_on_write: bool = False
    image: Optional[str] = None
    labels: Optional[Dict[str, str]] = None
    seconds: Optional[float] = None


@dataclass
class SnapshotList(Model):
    snapshots: List[Snapshot] = _f(factory=list, model="Snapshot", many=True)
    used: int = 0
    quota: Optional[int] = None


@dataclass
class ForkRequest(Model):
    count: Optional[int] = None
    labels: Optional[Dict[str, str]] = None


@dataclass
class ForkResult(Model):
    snapshot: Snapshot = _f(factory=Snapshot, model="Snapshot")
    sandboxes: List[Sandbox] = _f(factory=list, model="Sandbox", many=True)
    seconds: float = 0.0


@dataclass
class RestoreRequest(Model):
    snapshot: str = ""


@dataclass
class Change(Model):
    path: str = ""
    kind: str = ""
    type: str = ""
    old_mode: Optional[str] = None
    new_mode: Optional[str] = None
    old_target: Optional[str] = None
    new_target: Optional[str] = None
    old_size: Optional[int] = None
    size: Optional[int] = None
    binary: Optional[bool] = None
    diff: Optional[str] = None


@dataclass
class Changes(Model):
    changes: List[Change] = _f(factory=list, model="Change", many=True)
    since: Optional[str] = None
    diffs_truncated: Optional[bool] = None


#: Each schema of the OpenAPI document and its class.
SCHEMAS: Dict[str, Type[Model]] = {
    "Sandbox": Sandbox, "Resources": Resources, "CreateSandboxRequest": CreateSandboxRequest,
    "File": File, "SandboxList": SandboxList, "TimeoutRequest": TimeoutRequest,
    "ExecRequest": ExecRequest, "ExecResult": ExecResult, "Process": Process,
    "ProcessList": ProcessList, "SignalRequest": SignalRequest, "OutputEvent": OutputEvent,
    "NetworkEvent": NetworkEvent, "NetworkEventsPage": NetworkEventsPage,
    "NetworkPolicy": NetworkPolicy, "FileInfo": FileInfo, "FileList": FileList,
    "MkdirRequest": MkdirRequest, "RenameRequest": RenameRequest, "PTYStart": PTYStart,
    "PTYControl": PTYControl, "PTYSize": PTYSize, "PTYExit": PTYExit, "APIKey": APIKey,
    "CreateKeyRequest": CreateKeyRequest, "KeyList": KeyList, "Error": ErrorResponse,
    "ErrorBody": ErrorBody, "HTTPRule": HTTPRule, "RecordEvent": RecordEvent,
    "RecordEventsPage": RecordEventsPage, "CreateSnapshotRequest": CreateSnapshotRequest,
    "Snapshot": Snapshot, "SnapshotList": SnapshotList, "ForkRequest": ForkRequest, "ForkResult": ForkResult,
    "RestoreRequest": RestoreRequest, "Changes": Changes, "Change": Change,
}


def json_fields(cls: Type[Model]) -> List[str]:
    """The JSON names of a model's fields."""
    return [f.metadata.get("json") or f.name for f in dataclasses.fields(cls)]  # type: ignore[arg-type]
