"""Types of the extension module (crates/leasehold-py/src/)."""

import datetime
import os
import pathlib
from types import TracebackType
from typing import Any, Callable, Dict, List, Literal, Optional, Sequence, Type, Union

from ._errors import LeaseLost

#: A duration: ``"90s"``, ``"5m"``, ``"1h30m"``, ``"250ms"``, a number of
#: seconds, or a ``datetime.timedelta``.
Duration = Union[str, int, float, datetime.timedelta]
#: ``None``/``False``: do not wait; ``True``: wait as long as it takes; a
#: duration: wait up to that long.
Wait = Union[Duration, bool, None]
#: ``False``/``None``: exclusive; ``True``: shared; ``N``: shared by at most N.
Shared = Union[bool, int, None]
#: What to do when a grant or claim is lost, besides ``lost``/``check()``:
#: call a callable (on a heartbeat thread, with the ``LeaseLost``), or
#: ``"interrupt"``: raise ``LeaseLost`` in the main thread.
OnLost = Union[Callable[[LeaseLost], object], Literal["interrupt"], None]
StrPath = Union[str, "os.PathLike[str]"]
#: Anything ``json.dumps`` writes.
Json = Any

#: Whether this build includes the etcd store.
ETCD: bool

class Store:
    """An open store: ``sqlite:///path``, ``postgres://...``, ``etcd://host:port``,
    a path (SQLite), or by default ``$LEASEHOLD_STORE``, else the embedded
    SQLite store the CLI uses."""

    def __init__(self, url: Optional[StrPath] = None, *, allow_network_fs: bool = False) -> None: ...
    @property
    def url(self) -> str: ...
    def lease(
        self,
        name: str,
        *,
        ttl: Optional[Duration] = None,
        wait: Wait = None,
        shared: Shared = None,
        owner: Optional[str] = None,
        heartbeat: Optional[Duration] = None,
        margin: Optional[Duration] = None,
        on_lost: OnLost = None,
    ) -> "Lease": ...
    def queue(self, name: str) -> "Queue": ...
    def run(
        self,
        name: str,
        argv: Sequence[str],
        *,
        ttl: Optional[Duration] = None,
        heartbeat: Optional[Duration] = None,
        grace: Optional[Duration] = None,
        wait: Wait = None,
        shared: Shared = None,
        owner: Optional[str] = None,
        stall_timeout: Optional[Duration] = None,
        progress_file: Optional[StrPath] = None,
    ) -> int: ...
    def status(self, name: str) -> Optional[Dict[str, Any]]: ...
    def fence(self, name: str, token: Union[int, "Lease", "Task"]) -> None: ...
    def close(self) -> None: ...
    def __enter__(self) -> "Store": ...
    def __exit__(self, *exc: object) -> None: ...

class Lease:
    """A lease on a name; acquired by ``with``/``async with`` or ``acquire()``."""

    def acquire(self) -> "Lease": ...
    def release(self) -> None: ...
    def check(self) -> None: ...
    @property
    def lost(self) -> bool: ...
    @property
    def held(self) -> bool: ...
    @property
    def token(self) -> int: ...
    @property
    def grant(self) -> str: ...
    @property
    def owner(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def ttl(self) -> float: ...
    def __enter__(self) -> "Lease": ...
    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException] = None,
        tb: Optional[TracebackType] = None,
    ) -> None: ...
    async def __aenter__(self) -> "Lease": ...
    async def __aexit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None: ...

class Queue:
    """A task queue of a store (SQLite or PostgreSQL)."""

    @property
    def name(self) -> str: ...
    def add(
        self,
        payload: Json,
        *,
        id: Optional[str] = None,
        priority: int = 0,
        delay: Optional[Duration] = None,
        at: Optional[datetime.datetime] = None,
        max_attempts: int = 5,
    ) -> str: ...
    def claim(
        self,
        *,
        ttl: Optional[Duration] = None,
        wait: Wait = None,
        owner: Optional[str] = None,
        heartbeat: Optional[Duration] = None,
        margin: Optional[Duration] = None,
        on_lost: OnLost = None,
    ) -> "Task": ...
    def claim_iter(
        self,
        *,
        ttl: Optional[Duration] = None,
        until_empty: bool = False,
        max_tasks: Optional[int] = None,
        owner: Optional[str] = None,
        heartbeat: Optional[Duration] = None,
        margin: Optional[Duration] = None,
        on_lost: OnLost = None,
    ) -> "TaskIter": ...
    def stats(self) -> Dict[str, int]: ...
    def get(self, id: str) -> Optional[Dict[str, Any]]: ...
    def retry(self, id: str) -> None: ...

class TaskIter:
    def __iter__(self) -> "TaskIter": ...
    def __next__(self) -> "Task": ...

class Task:
    """A claimed task; ``with task:`` reports it."""

    @property
    def id(self) -> str: ...
    @property
    def queue(self) -> str: ...
    @property
    def payload(self) -> Any: ...
    @property
    def attempt(self) -> int: ...
    @property
    def max_attempts(self) -> int: ...
    @property
    def token(self) -> int: ...
    @property
    def lost(self) -> bool: ...
    @property
    def outcome(self) -> Optional[str]: ...
    def check(self) -> None: ...
    def done(self, result: Json = None) -> None: ...
    def fail(self, error: object = None, *, retry_in: Optional[Duration] = None, retry: bool = True) -> str: ...
    def release(self) -> None: ...
    def __enter__(self) -> "Task": ...
    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException] = None,
        tb: Optional[TracebackType] = None,
    ) -> bool: ...

class FileLock:
    """A held ``flock`` lock (``lh.lock``)."""

    @property
    def path(self) -> pathlib.Path: ...
    @property
    def shared(self) -> bool: ...
    @property
    def locked(self) -> bool: ...
    def release(self) -> None: ...
    def __enter__(self) -> "FileLock": ...
    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException] = None,
        tb: Optional[TracebackType] = None,
    ) -> None: ...

def lock(
    path: StrPath,
    *,
    wait: Wait = None,
    shared: bool = False,
    dir: bool = False,
    allow_network_fs: bool = False,
) -> FileLock: ...
def write_atomic(
    path: StrPath,
    data: Union[bytes, str],
    *,
    fence: Union[int, Lease, Task, None] = None,
    mode: Optional[int] = None,
) -> None: ...
def write_json(
    path: StrPath,
    value: Json,
    *,
    fence: Union[int, Lease, Task, None] = None,
    mode: Optional[int] = None,
) -> None: ...
def update_json(
    path: StrPath,
    f: Callable[[Any], Json],
    *,
    default: Json = None,
    fence: Union[int, Lease, Task, None] = None,
    mode: Optional[int] = None,
) -> Any: ...
def after_fork_in_child() -> None: ...
def guard_main(args: List[str]) -> int: ...
