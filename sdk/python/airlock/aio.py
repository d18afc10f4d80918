"""asyncio versions of Client, Sandbox, Process, Files, Network and
PTYSession, with the same methods: each call runs the blocking one in the
event loop's executor, and streams are async iterators::

    import airlock.aio

    async with airlock.aio.Sandbox.create() as sb:
        res = await sb.exec("echo hi")
        proc = await sb.spawn(["sh", "-c", "echo a; echo b >&2"])
        async for ev in proc.output():
            ...

A blocking call runs to its end in its worker thread even if the task
awaiting it is cancelled; a cancelled stream's thread ends at its next
event. The calls run in airlock's own threads (up to MAX_THREADS at once),
not the loop's default executor, so that open streams never starve other
calls.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import inspect
import threading
from typing import Any, AsyncIterator, Awaitable, Callable, Dict, Generator, Iterator, Optional, Type

from . import _ws, client as _client, sandbox as _sandbox

#: Methods that return a stream: async iterators here.
STREAMING = {"process_output", "follow_network", "follow_events", "output", "stream", "follow"}


#: The threads blocking calls and stream steps run in. Not the event loop's
#: default executor: that has min(32, CPUs + 4) threads, and each open
#: stream holds one while it waits for its next event, so a few streams
#: (6 on 2 CPUs) left no thread for any other call, which then waited for
#: good. Threads are made as calls need them, up to this many at once.
MAX_THREADS = 512

_pool: Optional[concurrent.futures.ThreadPoolExecutor] = None
_pool_lock = threading.Lock()


def _executor() -> concurrent.futures.ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = concurrent.futures.ThreadPoolExecutor(max_workers=MAX_THREADS, thread_name_prefix="airlock-aio")
        return _pool


async def _run(fn: Callable[..., Any], *a: Any, **kw: Any) -> Any:
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(_executor(), functools.partial(fn, *a, **kw))


_END = object()


def _next(it: Iterator[Any]) -> Any:
    return next(it, _END)


class _AsyncIter:
    """An async iterator over a blocking one (each step in the executor)."""

    def __init__(self, it: Iterator[Any]) -> None:
        self._it = it

    def __aiter__(self) -> "_AsyncIter":
        return self

    async def __anext__(self) -> Any:
        v = await _run(_next, self._it)
        if v is _END:
            raise StopAsyncIteration
        return v

    async def aclose(self) -> None:
        close = getattr(self._it, "close", None)
        if close is not None:
            await _run(close)


_WRAPS: Dict[type, type] = {}


def _wrap(v: Any) -> Any:
    cls = _WRAPS.get(type(v))
    if cls is not None:
        return cls._from_sync(v)
    if isinstance(v, list):
        return [_wrap(x) for x in v]
    return v


def _method(name: str) -> Callable[..., Any]:
    if name in STREAMING:
        def stream(self: Any, *a: Any, **kw: Any) -> AsyncIterator[Any]:
            return _AsyncIter(iter(getattr(self._sync, name)(*a, **kw)))
        stream.__name__ = name
        return stream

    async def call(self: Any, *a: Any, **kw: Any) -> Any:
        return _wrap(await _run(getattr(self._sync, name), *a, **kw))
    call.__name__ = name
    return call


def _public(cls: type) -> Dict[str, Any]:
    out = {}
    for name, v in inspect.getmembers(cls):
        if name.startswith("_") or isinstance(inspect.getattr_static(cls, name), (property, classmethod, staticmethod)):
            continue
        if callable(v):
            out[name] = v
    return out


class _Base:
    _sync: Any

    @classmethod
    def _from_sync(cls, s: Any) -> Any:
        o = cls.__new__(cls)
        o._sync = s
        return o

    def __getattr__(self, name: str) -> Any:
        # Data attributes (id, info, cursor, exit, ...) of the blocking object.
        if name.startswith("_"):
            raise AttributeError(name)
        return _wrap(getattr(self._sync, name))


def _make(sync_cls: type, name: str, extra: Optional[Dict[str, Any]] = None) -> type:
    ns: Dict[str, Any] = {"__doc__": f"The asyncio version of airlock.{sync_cls.__name__}."}
    for m in _public(sync_cls):
        ns[m] = _method(m)
    ns.update(extra or {})
    cls = type(name, (_Base,), ns)
    _WRAPS[sync_cls] = cls
    return cls


class _Creating:
    """What aio.Sandbox.create returns: await it, or use it in async with."""

    def __init__(self, coro: Awaitable[Any]) -> None:
        self._coro = coro
        self._sb: Any = None

    def __await__(self) -> Generator[Any, None, Any]:
        return self._coro.__await__()

    async def __aenter__(self) -> Any:
        self._sb = await self._coro
        return self._sb

    async def __aexit__(self, *a: Any) -> None:
        await self._sb.delete()


def _client_init(self: Any, *a: Any, **kw: Any) -> None:
    self._sync = _client.Client(*a, **kw)


async def _aenter_client(self: Any) -> Any:
    return self


async def _aexit_client(self: Any, *a: Any) -> None:
    self._sync.close()


Client = _make(_client.Client, "Client", {
    "__init__": _client_init, "__aenter__": _aenter_client, "__aexit__": _aexit_client,
    "from_env": classmethod(lambda cls, **kw: cls._from_sync(_client.Client.from_env(**kw))),
    "host": property(lambda self: self._sync.host),
    "timeout": property(lambda self: self._sync.timeout),
})
Process = _make(_sandbox.Process, "Process")
Files = _make(_sandbox.Files, "Files")
Network = _make(_sandbox.Network, "Network")
PTYSession = _make(_ws.PTYSession, "PTYSession", {
    "__aenter__": _aenter_client,
    "__aexit__": lambda self, *a: _run(self._sync.close),
})


def _sync_client(c: Any) -> Any:
    return c._sync if isinstance(c, _Base) else c


async def _aexit_sb(self: Any, *a: Any) -> None:
    await _run(self._sync.delete)


def _create(cls: Any, *a: Any, client: Any = None, **kw: Any) -> _Creating:
    return _Creating(_run_wrap(_sandbox.Sandbox.create, *a, client=_sync_client(client), **kw))


async def _run_wrap(fn: Callable[..., Any], *a: Any, **kw: Any) -> Any:
    return _wrap(await _run(fn, *a, **kw))


async def _get(cls: Any, id: str, client: Any = None) -> Any:
    return await _run_wrap(_sandbox.Sandbox.get, id, client=_sync_client(client))


async def _list(cls: Any, label: Any = None, state: Any = None, client: Any = None) -> Any:
    return await _run_wrap(_sandbox.Sandbox.list, label=label, state=state, client=_sync_client(client))


Sandbox = _make(_sandbox.Sandbox, "Sandbox", {
    "create": classmethod(_create), "get": classmethod(_get), "list": classmethod(_list),
    "__aenter__": _aenter_client, "__aexit__": _aexit_sb,
    "files": property(lambda self: Files._from_sync(self._sync.files)),
    "network": property(lambda self: Network._from_sync(self._sync.network)),
    "id": property(lambda self: self._sync.id),
    "state": property(lambda self: self._sync.state),
    "client": property(lambda self: Client._from_sync(self._sync.client)),
})

#: The async class of each blocking class (for the shape check).
CLASSES: Dict[Type[Any], Type[Any]] = dict(_WRAPS)

__all__ = ["Client", "Sandbox", "Process", "Files", "Network", "PTYSession", "STREAMING", "CLASSES"]
