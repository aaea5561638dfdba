"""The documents of ``docs/JSON.md`` as Python values.

``store.status()``, ``store.list()``, ``store.history()``, ``store.backup()``, ``queue.get()``,
``queue.list()`` and ``store.observe()`` return the documents ``leasehold --json`` prints
(built once, by ``leasehold::json`` in Rust), with two changes made here
and nowhere else: a time (RFC 3339 text) becomes an aware
``datetime.datetime`` in UTC, and a duration in milliseconds (a field
ending in ``_ms``) becomes a ``datetime.timedelta`` under the name without
``_ms`` (``expires_in_ms`` → ``expires_in``). Only the document's own
fields are converted — never anything inside a task's ``payload`` or
``result``, which are the user's JSON.
"""

from __future__ import annotations

import datetime
from typing import Any, Dict

#: The fields of the documents that are times (RFC 3339, as
#: ``leasehold::json::rfc3339`` writes them).
TIMES = frozenset({"acquired", "expires", "at", "available_at", "created_at", "updated_at", "since", "taken_at"})
#: Fields holding a list of sub-documents converted the same way.
NESTED = frozenset({"grants"})
#: Fields holding one sub-document (or None) converted the same way.
NESTED_ONE = frozenset({"leader"})

_UTC = datetime.timezone.utc


def when(text: str) -> datetime.datetime:
    """An RFC 3339 time as ``leasehold::json`` writes it (``...T...Z`` with
    milliseconds), or one of its two out-of-range forms."""
    if text.startswith("after "):
        return datetime.datetime.max.replace(tzinfo=_UTC)
    if text.startswith("before "):
        return datetime.datetime(1970, 1, 1, tzinfo=_UTC)
    return datetime.datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%f%z")


def from_epoch(seconds: float) -> datetime.datetime:
    """Seconds since the Unix epoch as an aware UTC ``datetime``."""
    return datetime.datetime.fromtimestamp(seconds, _UTC)


def document(doc: Dict[str, Any]) -> Dict[str, Any]:
    """One document with its times and durations as Python values."""
    out: Dict[str, Any] = {}
    for key, value in doc.items():
        if key in TIMES and isinstance(value, str):
            out[key] = when(value)
        elif key.endswith("_ms") and (value is None or isinstance(value, int)):
            out[key[: -len("_ms")]] = None if value is None else datetime.timedelta(milliseconds=value)
        elif key in NESTED and isinstance(value, list):
            out[key] = [document(item) for item in value]
        elif key in NESTED_ONE and isinstance(value, dict):
            out[key] = document(value)
        else:
            out[key] = value
    return out
