"""The documents ``Store.status``, ``Store.list``, ``Store.history``,
``Queue.get`` and ``Queue.list`` return, as ``TypedDict``s: the documents of
``leasehold --json`` (docs/JSON.md), with times as aware ``datetime``s in
UTC and durations as ``timedelta``s (``leasehold/_documents.py`` converts
them). The suite checks every key against what the module returns
(tests/test_types.py).
"""

from __future__ import annotations

import datetime
from typing import Any, Dict, List, Literal, Optional, TypedDict


class GrantInfo(TypedDict):
    """One grant of a lease (``status()['grants']``), as ``--json`` prints
    it (docs/JSON.md) with times as ``datetime`` and durations as
    ``timedelta``."""

    name: str
    token: int
    grant_id: str
    owner: str
    mode: Literal["exclusive", "shared"]
    shared_limit: Optional[int]
    expires: datetime.datetime
    expires_in: datetime.timedelta
    ttl: datetime.timedelta
    acquired: datetime.datetime
    #: ``"yes"``, ``"no"`` (provably gone), ``"?"`` or ``"ttl"`` (bound to no process).
    alive: str
    holder: Dict[str, Any]

class LeaseStatus(TypedDict):
    """A lease name's state (``store.status(name)``, each of ``store.list()``)."""

    name: str
    last_token: int
    waiters: int
    grants: List[GrantInfo]

class HistoryEntry(TypedDict):
    """One entry of ``store.history(name)``."""

    at: datetime.datetime
    event: str
    token: Optional[int]
    owner: Optional[str]
    detail: str

class Backup(TypedDict):
    """What ``store.backup(dest)`` took."""

    location: str
    path: str
    bytes: int
    taken_at: datetime.datetime

class TaskInfo(TypedDict):
    """A task (``queue.get(id)``, each of ``queue.list()``)."""

    queue: str
    id: str
    state: Literal["pending", "running", "done", "dead"]
    payload: Any
    priority: int
    attempts: int
    max_attempts: int
    token: int
    owner: Optional[str]
    available_at: datetime.datetime
    lease_remaining: Optional[datetime.timedelta]
    expirations: int
    failures: int
    last_error: Optional[str]
    result: Any
    created_at: datetime.datetime
    updated_at: datetime.datetime


class Leader(TypedDict):
    """Who leads a lease name (``LeaderChange['leader']``)."""

    owner: str
    token: int
    host: str
    pid: int
    since: datetime.datetime


class LeaderChange(TypedDict):
    """One change of leader (each item of ``store.observe(name)``)."""

    name: str
    leader: Optional[Leader]


__all__ = ["Backup", "GrantInfo", "HistoryEntry", "Leader", "LeaderChange", "LeaseStatus", "TaskInfo"]
