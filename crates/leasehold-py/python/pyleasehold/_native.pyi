"""Types of the extension module (crates/leasehold-py/src/).

Kept true by the test suite: ``mypy.stubtest`` compares this file with the
module itself, and the documents' keys are checked against the TypedDicts
below (tests/test_types.py).
"""

import datetime
import os
import pathlib
import subprocess
from types import TracebackType
from typing import (
    Any,
    Awaitable,
    Callable,
    Dict,
    Iterable,
    List,
    Literal,
    Mapping,
    Optional,
    Sequence,
    Tuple,
    Type,
    Union,
    final,
    overload,
)

from ._aio import Pending
from ._errors import LeaseLost
from ._types import Backup, HistoryEntry, LeaderChange, LeaseStatus, TaskInfo

#: A duration: ``"90s"``, ``"5m"``, ``"1h30m"``, ``"250ms"``, a number of
#: seconds, or a ``datetime.timedelta``.
_Duration = Union[str, int, float, datetime.timedelta]
#: ``None``/``False``: do not wait; ``True``: wait as long as it takes; a
#: duration: wait up to that long.
_Wait = Union[_Duration, bool, None]
#: ``False``/``None``: exclusive; ``True``: shared; ``N``: shared by at most N.
_Shared = Union[bool, int, None]
#: What to do when a grant or claim is lost, besides ``lost``/``check()``:
#: call a callable (on a heartbeat thread, with the ``LeaseLost``), or
#: ``"interrupt"``: raise ``LeaseLost`` in the main thread.
_OnLost = Union[Callable[[LeaseLost], object], Literal["interrupt"], None]
_StrPath = Union[str, "os.PathLike[str]"]
#: A command: a list (or tuple) of arguments — never one str, which a type
#: checker would accept as a ``Sequence[str]``. ``List[str]`` and
#: ``List[pathlib.Path]`` are named as well as the list of either: a
#: list type is invariant, so a ``list[str]`` is not a
#: ``List[Union[str, os.PathLike[str]]]``.
_Argv = Union[List[str], List[pathlib.Path], List["os.PathLike[str]"], List[_StrPath], Tuple[_StrPath, ...]]
#: Anything ``json.dumps`` writes.
_Json = Any
_TaskState = Literal["pending", "running", "done", "dead"]

__all__ = [
    "Store",
    "Lease",
    "Leadership",
    "Observer",
    "Queue",
    "Task",
    "TaskIter",
    "FileLock",
    "lock",
    "alock",
    "write_atomic",
    "write_json",
    "update_json",
    "after_fork_in_child",
    "at_exit",
    "guard_main",
    "log_close",
    "log_pipe",
    "log_take",
    "ETCD",
    "__version__",
]

#: Whether this build includes the etcd store.
ETCD: bool
#: The version, the same as `leasehold --version` of the command a wheel installs.
__version__: str

@final
class Store:
    """An open store: ``sqlite:///path``, ``postgres://...``, ``etcd://host:port``,
    a path (SQLite), or by default ``$LEASEHOLD_STORE``, else the embedded
    SQLite store the CLI uses."""

    def __new__(cls, url: Optional[_StrPath] = None, *, allow_network_fs: bool = False) -> "Store": ...
    @property
    def url(self) -> str: ...
    def lease(
        self,
        name: str,
        *,
        ttl: Optional[_Duration] = None,
        wait: _Wait = None,
        shared: _Shared = None,
        owner: Optional[str] = None,
        heartbeat: Optional[_Duration] = None,
        margin: Optional[_Duration] = None,
        on_lost: _OnLost = None,
    ) -> "Lease": ...
    def campaign(
        self,
        name: str,
        *,
        id: str,
        ttl: Optional[_Duration] = None,
        wait: _Wait = None,
        on_lost: _OnLost = None,
    ) -> Optional["Leadership"]: ...
    def observe(self, name: str) -> "Observer": ...
    def queue(self, name: str) -> "Queue": ...
    @overload
    def run(
        self,
        name: str,
        argv: _Argv,
        *,
        ttl: Optional[_Duration] = None,
        heartbeat: Optional[_Duration] = None,
        grace: Optional[_Duration] = None,
        wait: _Wait = None,
        shared: _Shared = None,
        owner: Optional[str] = None,
        stall_timeout: Optional[_Duration] = None,
        progress_file: Optional[_StrPath] = None,
        env: Optional[Mapping[str, str]] = None,
        cwd: Optional[_StrPath] = None,
        input: Union[bytes, bytearray, str, None] = None,
        timeout: Optional[_Duration] = None,
        capture_output: Literal[False] = False,
        text: bool = False,
    ) -> int: ...
    @overload
    def run(
        self,
        name: str,
        argv: _Argv,
        *,
        ttl: Optional[_Duration] = None,
        heartbeat: Optional[_Duration] = None,
        grace: Optional[_Duration] = None,
        wait: _Wait = None,
        shared: _Shared = None,
        owner: Optional[str] = None,
        stall_timeout: Optional[_Duration] = None,
        progress_file: Optional[_StrPath] = None,
        env: Optional[Mapping[str, str]] = None,
        cwd: Optional[_StrPath] = None,
        input: Union[bytes, bytearray, str, None] = None,
        timeout: Optional[_Duration] = None,
        capture_output: Literal[True],
        text: Literal[False] = False,
    ) -> "subprocess.CompletedProcess[bytes]": ...
    @overload
    def run(
        self,
        name: str,
        argv: _Argv,
        *,
        ttl: Optional[_Duration] = None,
        heartbeat: Optional[_Duration] = None,
        grace: Optional[_Duration] = None,
        wait: _Wait = None,
        shared: _Shared = None,
        owner: Optional[str] = None,
        stall_timeout: Optional[_Duration] = None,
        progress_file: Optional[_StrPath] = None,
        env: Optional[Mapping[str, str]] = None,
        cwd: Optional[_StrPath] = None,
        input: Union[bytes, bytearray, str, None] = None,
        timeout: Optional[_Duration] = None,
        capture_output: Literal[True],
        text: Literal[True],
    ) -> "subprocess.CompletedProcess[str]": ...
    @overload
    def run(
        self,
        name: str,
        argv: _Argv,
        *,
        ttl: Optional[_Duration] = None,
        heartbeat: Optional[_Duration] = None,
        grace: Optional[_Duration] = None,
        wait: _Wait = None,
        shared: _Shared = None,
        owner: Optional[str] = None,
        stall_timeout: Optional[_Duration] = None,
        progress_file: Optional[_StrPath] = None,
        env: Optional[Mapping[str, str]] = None,
        cwd: Optional[_StrPath] = None,
        input: Union[bytes, bytearray, str, None] = None,
        timeout: Optional[_Duration] = None,
        capture_output: bool = False,
        text: bool = False,
    ) -> Union[int, "subprocess.CompletedProcess[Any]"]: ...
    def status(self, name: str) -> Optional[LeaseStatus]: ...
    def list(self, *, live: bool = False) -> List[LeaseStatus]: ...
    def history(self, name: str, *, limit: int = 100) -> List[HistoryEntry]: ...
    def fence(self, name: str, token: Union[int, "Lease", "Task"]) -> None: ...
    def backup(self, dest: _StrPath) -> Backup: ...
    def close(self) -> None: ...
    def __enter__(self) -> "Store": ...
    def __exit__(self, *_exc: object) -> None: ...

@final
class Leadership:
    """Leadership of a lease name, won by ``store.campaign()``; ``with`` resigns."""

    @property
    def name(self) -> str: ...
    @property
    def is_leader(self) -> bool: ...
    @property
    def token(self) -> int: ...
    @property
    def lost(self) -> Optional[str]: ...
    def resign(self) -> None: ...
    def __enter__(self) -> "Leadership": ...
    def __exit__(self, *_exc: object) -> None: ...

@final
class Observer:
    """The leader changes of a lease name (``store.observe()``): ``for`` or ``async for``."""

    def __iter__(self) -> "Observer": ...
    def __next__(self) -> LeaderChange: ...
    def __aiter__(self) -> "Observer": ...
    def __anext__(self) -> Awaitable[LeaderChange]: ...
    def close(self) -> None: ...

@final
class Lease:
    """A lease on a name; acquired by ``with``/``async with`` or ``acquire()``."""

    def acquire(self) -> "Lease": ...
    def release(self) -> None: ...
    def renew(self) -> None: ...
    def extend(self, ttl: _Duration) -> None: ...
    def check(self) -> None: ...
    def owned(self) -> bool: ...
    def locked(self) -> bool: ...
    @property
    def lost(self) -> bool: ...
    @property
    def held(self) -> bool: ...
    @property
    def expires_in(self) -> Optional[float]: ...
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
        _exc: Optional[BaseException] = None,
        _tb: Optional[TracebackType] = None,
    ) -> None: ...
    def __aenter__(self) -> Awaitable["Lease"]: ...
    def __aexit__(
        self,
        exc_type: Optional[Type[BaseException]],
        _exc: Optional[BaseException] = None,
        _tb: Optional[TracebackType] = None,
    ) -> Awaitable[None]: ...

@final
class Queue:
    """A task queue of a store (SQLite or PostgreSQL)."""

    @property
    def name(self) -> str: ...
    def add(
        self,
        payload: _Json,
        *,
        id: Optional[str] = None,
        priority: int = 0,
        delay: Optional[_Duration] = None,
        at: Optional[datetime.datetime] = None,
        max_attempts: int = 5,
    ) -> str: ...
    def add_many(
        self,
        payloads: Iterable[_Json],
        *,
        ids: Optional[Iterable[str]] = None,
        priority: int = 0,
        delay: Optional[_Duration] = None,
        at: Optional[datetime.datetime] = None,
        max_attempts: int = 5,
    ) -> List[str]: ...
    def claim(
        self,
        *,
        ttl: Optional[_Duration] = None,
        wait: _Wait = None,
        owner: Optional[str] = None,
        heartbeat: Optional[_Duration] = None,
        margin: Optional[_Duration] = None,
        on_lost: _OnLost = None,
    ) -> "Task": ...
    def aclaim(
        self,
        *,
        ttl: Optional[_Duration] = None,
        wait: _Wait = None,
        owner: Optional[str] = None,
        heartbeat: Optional[_Duration] = None,
        margin: Optional[_Duration] = None,
        on_lost: _OnLost = None,
    ) -> Pending["Task"]: ...
    def claim_iter(
        self,
        *,
        ttl: Optional[_Duration] = None,
        until_empty: bool = False,
        max_tasks: Optional[int] = None,
        owner: Optional[str] = None,
        heartbeat: Optional[_Duration] = None,
        margin: Optional[_Duration] = None,
        on_lost: _OnLost = None,
    ) -> "TaskIter": ...
    def list(self, *, state: Optional[_TaskState] = None, limit: int = 100) -> List[TaskInfo]: ...
    def purge(self, state: Literal["done", "dead"], *, older_than: _Duration) -> int: ...
    def stats(self) -> Dict[str, int]: ...
    def get(self, id: str) -> Optional[TaskInfo]: ...
    def retry(self, id: str) -> None: ...

@final
class TaskIter:
    def __iter__(self) -> "TaskIter": ...
    def __next__(self) -> "Task": ...

@final
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
    def done(self, result: _Json = None) -> None: ...
    def fail(self, error: object = None, *, retry_in: Optional[_Duration] = None, retry: bool = True) -> str: ...
    def release(self) -> None: ...
    def __enter__(self) -> "Task": ...
    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException] = None,
        tb: Optional[TracebackType] = None,
    ) -> bool: ...
    def __aenter__(self) -> Awaitable["Task"]: ...
    def __aexit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException] = None,
        tb: Optional[TracebackType] = None,
    ) -> Awaitable[bool]: ...

@final
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
        _exc: Optional[BaseException] = None,
        _tb: Optional[TracebackType] = None,
    ) -> None: ...
    def __aenter__(self) -> Awaitable["FileLock"]: ...
    def __aexit__(
        self,
        exc_type: Optional[Type[BaseException]],
        _exc: Optional[BaseException] = None,
        _tb: Optional[TracebackType] = None,
    ) -> Awaitable[None]: ...

def lock(
    path: _StrPath,
    *,
    wait: _Wait = None,
    shared: bool = False,
    dir: bool = False,
    allow_network_fs: bool = False,
) -> FileLock: ...
def alock(
    path: _StrPath,
    *,
    wait: _Wait = None,
    shared: bool = False,
    dir: bool = False,
    allow_network_fs: bool = False,
) -> Pending[FileLock]: ...
def write_atomic(
    path: _StrPath,
    data: Union[bytes, str],
    *,
    fence: Union[int, Lease, Task, None] = None,
    mode: Optional[int] = None,
    fence_lease: Optional[str] = None,
    fence_new_lease: bool = False,
) -> None: ...
def write_json(
    path: _StrPath,
    value: _Json,
    *,
    fence: Union[int, Lease, Task, None] = None,
    mode: Optional[int] = None,
    fence_lease: Optional[str] = None,
    fence_new_lease: bool = False,
) -> None: ...
def update_json(
    path: _StrPath,
    f: Callable[[Any], _Json],
    *,
    default: _Json = None,
    fence: Union[int, Lease, Task, None] = None,
    mode: Optional[int] = None,
    fence_lease: Optional[str] = None,
    fence_new_lease: bool = False,
) -> Any: ...
def after_fork_in_child() -> None: ...
def at_exit() -> None: ...
def log_close() -> None: ...
def log_pipe() -> int: ...
def log_take(level: int) -> List[Tuple[int, str, Dict[str, Any]]]: ...
def guard_main(args: Sequence[str]) -> int: ...
