"""leasehold: keep background jobs and agents from running twice, and keep
their state intact when they crash — the Rust library, from Python.

    import pyleasehold as lh
    store = lh.Store()                      # $LEASEHOLD_STORE, else the embedded SQLite store
    with store.lease("nightly-report", ttl="2m") as lease:
        lh.write_atomic("report.json", b"...", fence=lease)

docs/PYTHON.md has the whole API. Durations are strings (``"90s"``,
``"5m"``, ``"1h30m"``), numbers of seconds or ``datetime.timedelta``.
"""

from __future__ import annotations

import atexit
import os
import sys

from . import _interrupt, _logs
from ._errors import (
    AuthFailed,
    BadData,
    DiskFull,
    Error,
    Failed,
    Held,
    Holder,
    InvalidInput,
    InvalidName,
    LeaseLost,
    NoSuchTask,
    NothingToClaim,
    PermissionDenied,
    ReadOnly,
    RunTimeout,
    StaleToken,
    Stalled,
    StoreBusy,
    StoreUnavailable,
    Unsupported,
    WaitTimeout,
)
from ._native import (
    ETCD,
    __version__,
    FileLock,
    Lease,
    Leadership,
    Observer,
    Queue,
    Store,
    Task,
    TaskIter,
    alock,
    lock,
    update_json,
    write_atomic,
    write_json,
)
from ._native import after_fork_in_child as _native_after_fork
from ._native import at_exit as _native_at_exit
from ._aio import Pending
from ._types import Backup, GrantInfo, HistoryEntry, Leader, LeaderChange, LeaseStatus, TaskInfo


def _after_fork_in_child() -> None:
    # A child made by os.fork() holds none of its parent's grants, claims or
    # locks (crates/leasehold-py/src/fork.rs says why and how).
    _native_after_fork()
    _interrupt.after_fork_in_child()
    _logs.after_fork_in_child()


os.register_at_fork(after_in_child=_after_fork_in_child)

# The native layer's events reach logging.getLogger("pyleasehold") — not
# in store.run's guard (crates/leasehold-py/src/guard.rs), which must start
# before any other thread of its process.
if not getattr(sys, "_pyleasehold_guard", False):
    _logs.start()
    # atexit runs its hooks last first: the reader stops after the hook
    # below, so what that hook's cancelled waits log is logged.
    atexit.register(_logs.stop)

# From here until the process ends, no thread of the package's takes the
# GIL again: a daemon thread blocked in a call stays there, a wait in flight
# is cancelled (crates/leasehold-py/src/exiting.rs says why: a thread that
# takes the GIL while the interpreter finalizes crashes the process).
atexit.register(_native_at_exit)

__all__ = [
    "ETCD",
    "__version__",
    "AuthFailed",
    "Backup",
    "BadData",
    "DiskFull",
    "Error",
    "Failed",
    "FileLock",
    "GrantInfo",
    "Held",
    "HistoryEntry",
    "Holder",
    "InvalidInput",
    "InvalidName",
    "Leader",
    "LeaderChange",
    "Leadership",
    "Lease",
    "LeaseLost",
    "LeaseStatus",
    "NoSuchTask",
    "NothingToClaim",
    "Observer",
    "Pending",
    "PermissionDenied",
    "Queue",
    "ReadOnly",
    "RunTimeout",
    "StaleToken",
    "Stalled",
    "Store",
    "StoreBusy",
    "StoreUnavailable",
    "Task",
    "TaskInfo",
    "TaskIter",
    "Unsupported",
    "WaitTimeout",
    "alock",
    "lock",
    "update_json",
    "write_atomic",
    "write_json",
]
