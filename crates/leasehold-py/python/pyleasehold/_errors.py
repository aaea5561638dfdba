"""The exceptions of leasehold: one class per kind of failure of the
library (``leasehold::ErrorKind``), all under :class:`Error`.

Which class a failure raises is decided in one place, in Rust
(``crates/leasehold-py/src/errors.rs``); the classes live here so that
one can also be a ``ValueError`` and each carries its documentation.
Every message is the library's: what happened, to what, and what to do.
Refusals carry their facts as attributes too (``Held``: ``name``,
``holders``, ``token``, ``expires``, ``waiters``), so a program need not
parse the message. Every class here says it is ``pyleasehold.X``
(``__module__``), so tracebacks and ``repr`` show the name users import.
"""

from __future__ import annotations

import datetime
import subprocess
from typing import Any, Iterable, List, NamedTuple, Optional, Sequence


class Holder(NamedTuple):
    """One holder of a lease or lock, as the refusal saw it.

    ``owner``: the grant's owner label (``host:pid`` unless one was given),
    or ``pid N`` for a file lock. ``token``: the grant's fencing token
    (``None`` for a file lock). ``mode``: ``"exclusive"`` or ``"shared"``.
    ``expires``: when the store expires the grant unless it is renewed (an
    aware ``datetime`` in UTC; ``None`` for a file lock, which lives as long
    as its process). ``pid``: the holder's process id where it is known (a
    grant bound to its process; a lock as the kernel lists it)."""

    owner: str
    token: Optional[int]
    mode: str
    expires: Optional[datetime.datetime]
    pid: Optional[int]


class Error(Exception):
    """Any failure of leasehold. ``kind`` names the library's error kind."""

    kind = "failed"


class Held(Error):
    """The lease or lock is held by another holder (after waiting, if
    ``wait=`` was given). The CLI's exit 11.

    ``name``: the lease name (or the lock file's path); ``holders``: a list
    of :class:`Holder`, oldest grant first (empty when only waiters ahead
    keep you out, or the kernel did not say); ``waiters``: how many waiters
    are queued ahead; ``token`` and ``expires``: the first holder's token and
    expiry (``None`` when there is no holder or it is a file lock)."""

    kind = "held"

    def __init__(
        self, message: str = "", *, name: Optional[str] = None, holders: Iterable[Holder] = (), waiters: int = 0
    ) -> None:
        super().__init__(message)
        self.name = name
        self.holders: List[Holder] = list(holders)
        self.waiters = waiters

    @property
    def token(self) -> Optional[int]:
        """The first holder's fencing token."""
        return self.holders[0].token if self.holders else None

    @property
    def expires(self) -> Optional[datetime.datetime]:
        """When the first holder's grant expires unless renewed (UTC)."""
        return self.holders[0].expires if self.holders else None


class WaitTimeout(Held, TimeoutError):
    """A wait with ``wait=DURATION`` ended with the lease or lock still
    held: a :class:`Held` (same attributes) that is also a ``TimeoutError``,
    as ``filelock.Timeout`` is."""


class LeaseLost(Error):
    """The grant or claim is gone: a renewal was refused (released, expired,
    taken over), the holder-side deadline passed before a renewal, the
    store refused a report, or this process is a fork of the holder. Stop
    using what it protects. The CLI's exit 12 (75 for ``store.run``)."""

    kind = "lost"


class StaleToken(Error):
    """A fenced write was refused: a newer token has written. The CLI's
    exit 13."""

    kind = "stale"


class NothingToClaim(Error):
    """``Queue.claim()`` found no claimable task (within ``wait=``). The
    CLI's exit 10."""

    kind = "nothing to claim"


class NoSuchTask(Error, LookupError):
    """No task with that id in the queue. The CLI's exit 14."""

    kind = "no such task"


class StoreUnavailable(Error):
    """The store cannot be used now: down, unreachable, or a connection
    lost (the outcome of a write then unknown, never reported as done).
    Nothing was changed that you were told of; retry later. The CLI's
    exit 69."""

    kind = "unavailable"


class StoreBusy(StoreUnavailable):
    """The store stayed locked by another writer longer than it waits;
    nothing was changed — retry."""

    kind = "busy"


class BadData(Error):
    """Damaged data: a corrupt store (or not a leasehold store, or one from
    a newer leasehold), state file or fence record — left exactly as found.
    The CLI's exit 65."""

    kind = "corrupt"


class InvalidInput(Error, ValueError):
    """An argument refused before anything was done: a duration out of its
    limit, a malformed store URL, a path that cannot be used. The CLI's
    exit 2."""

    kind = "invalid input"


class InvalidName(InvalidInput):
    """A lease, queue or task name the library refuses (empty, longer than
    255 bytes, or with a control character)."""

    kind = "invalid input"


class DiskFull(Error):
    """The disk is full; nothing was changed."""

    kind = "disk full"


class ReadOnly(Error):
    """The store or file is on a read-only filesystem; nothing was changed."""

    kind = "read-only"


class PermissionDenied(Error):
    """The operating system denied access; nothing was changed."""

    kind = "permission denied"


class AuthFailed(Error):
    """The server refused the credentials or certificates, or they could
    not be verified."""

    kind = "authentication failed"


class Unsupported(Error):
    """This store (or this build) cannot do it: the task queue on etcd, or
    a store the package was built without."""

    kind = "unsupported"


class Failed(Error):
    """Something outside the store failed: a local I/O error, a helper
    process (the guard of ``store.run``), a command that could not start
    or stalled."""

    kind = "failed"


class Stalled(Failed):
    """``store.run`` stopped the command because it wrote nothing (and did
    not touch ``progress_file``) for ``stall_timeout``; the lease was not
    lost. Its work may be incomplete: run it again. The CLI's exit 75, as
    for every command leasehold stopped."""

    kind = "stalled"


class RunTimeout(Failed, subprocess.TimeoutExpired):
    """``store.run(timeout=...)``: the command ran past its timeout, so it
    was stopped as a lost lease stops it (SIGTERM to its whole tree, SIGKILL
    after the grace period); raised once every process of it was gone and
    the lease released. A ``subprocess.TimeoutExpired`` too, with its
    attributes: ``cmd``, ``timeout`` (seconds), ``output``/``stdout`` and
    ``stderr`` (what was captured with ``capture_output=True``, else
    ``None``). Its work may be incomplete."""

    def __init__(
        self, message: str = "", *, cmd: Sequence[str] = (), timeout: float = 0.0, output: Any = None, stderr: Any = None
    ) -> None:
        Exception.__init__(self, message)
        self.cmd = list(cmd)
        self.timeout = timeout
        self.output = output
        self.stderr = stderr

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""

    def __reduce__(self) -> Any:
        return (_run_timeout, (str(self), self.cmd, self.timeout, self.output, self.stderr))


def _run_timeout(message: str, cmd: Sequence[str], timeout: float, output: Any, stderr: Any) -> RunTimeout:
    return RunTimeout(message, cmd=cmd, timeout=timeout, output=output, stderr=stderr)


__all__ = [
    "AuthFailed",
    "BadData",
    "DiskFull",
    "Error",
    "Failed",
    "Held",
    "Holder",
    "InvalidInput",
    "InvalidName",
    "LeaseLost",
    "NoSuchTask",
    "NothingToClaim",
    "PermissionDenied",
    "ReadOnly",
    "RunTimeout",
    "StaleToken",
    "Stalled",
    "StoreBusy",
    "StoreUnavailable",
    "Unsupported",
    "WaitTimeout",
]

# Shown as `pyleasehold.Held`, not `pyleasehold._errors.Held` (and pickled by
# that name, which the package exports).
for _name in __all__:
    globals()[_name].__module__ = "pyleasehold"
del _name
